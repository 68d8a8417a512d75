#include "trainer/trainer.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <numeric>
#include <optional>
#include <stdexcept>

#include <ATen/autocast_mode.h>

#include "base/log_text.hpp"
#include "dist/dist.hpp"
#include "nn/batch_invariant_ops.hpp"
#include "nn/logprobs_blocked.hpp"
#include "nn/weights_digest.hpp"
#include "tensor/block_cache.hpp"
#include "trainer/state_bytes.hpp"

namespace rl::trainer {

namespace {
constexpr double kPi = 3.14159265358979323846;
double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// torch.autocast(device, dtype) for one forward pass, on this thread: ops on the
// autocast lists run in `dtype`, everything else as before; restored (and the
// cast-weight cache dropped) on exit. The backward pass runs outside it, as in PyTorch.
class AutocastScope {
 public:
  AutocastScope(c10::DeviceType dev, bool on, torch::ScalarType dtype) : dev_(dev), on_(on) {
    if (!on_) return;
    prev_enabled_ = at::autocast::is_autocast_enabled(dev_);
    prev_dtype_ = at::autocast::get_autocast_dtype(dev_);
    at::autocast::set_autocast_enabled(dev_, true);
    at::autocast::set_autocast_dtype(dev_, dtype);
    at::autocast::increment_nesting();
  }
  ~AutocastScope() {
    if (!on_) return;
    if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
    at::autocast::set_autocast_enabled(dev_, prev_enabled_);
    at::autocast::set_autocast_dtype(dev_, prev_dtype_);
  }
  AutocastScope(const AutocastScope&) = delete;
  AutocastScope& operator=(const AutocastScope&) = delete;

 private:
  c10::DeviceType dev_;
  bool on_, prev_enabled_ = false;
  torch::ScalarType prev_dtype_ = torch::kBFloat16;
};
}  // namespace

// A micro-batch. On the CPU its sequences go end to end with no padding, elsewhere
// right-padded (`seqs`, nn::lay_out). Per response token (R = longest response): mask,
// rewards broadcast later, old/rollout log-probs [B, R]. The tensors live on the
// policy's device; the index lists stay on the host (nothing in a step reads a device
// tensor back element by element).
struct Trainer::Packed {
  nn::SequenceBatch seqs;       // the token ids laid out for the forward pass
  torch::Tensor mask;           // [B, R] float32
  torch::Tensor rollout_logp;   // [B, R] float32 or undefined
  torch::Tensor behaviour_logp; // [B, R] float32: the policy's before this train() call, or undefined
  torch::Tensor old_values;     // [B, R] float32: the critic's before this train() call (use_critic), or undefined
  torch::Tensor teacher_logp;   // [B, R] float32: a teacher's (on-policy distillation), or undefined
  torch::Tensor rewards;        // [B] float32
  std::vector<int64_t> prompt_lens, resp_lens;
  // Response tokens in order: row of the flattened [B*L] hidden states that predicts
  // each, its column in the flattened [B*R] mask, and its id.
  std::vector<int64_t> rows, cols, targets;
  int64_t tokens = 0;           // real tokens (prompt + response)
};

Trainer::Trainer(std::shared_ptr<nn::Transformer> policy, std::shared_ptr<nn::Transformer> ref, TrainerOptions opts,
                 const ShardSources& sources, std::shared_ptr<nn::Transformer> critic)
    : policy_(std::move(policy)), ref_(std::move(ref)), opts_(std::move(opts)) {
  const bool ppo = opts_.loss.estimator == Estimator::ppo;
  if (ppo && !opts_.use_critic)
    throw std::invalid_argument("trainer: advantage_estimator = ppo needs a critic: set use_critic = true "
                                "(--use-critic); or use grpo, gspo, cispo, reinforce_plus_plus or "
                                "reinforce_plus_plus_baseline, which need none");
  if (opts_.use_critic && !ppo)
    throw std::invalid_argument(std::string("trainer: use_critic trains a value model for advantage_estimator = ppo, "
                                            "but the estimator is ") + estimator_name(opts_.loss.estimator) +
                                "; set --advantage-estimator ppo or drop --use-critic");
  if (opts_.use_critic && opts_.loss.sft)
    throw std::invalid_argument("trainer: use_critic with loss_type = sft_loss: SFT has no advantages; drop --use-critic");
  if (opts_.use_critic && opts_.sharded)
    throw std::invalid_argument("trainer: use_critic is not supported with train_backend = fsdp yet (the critic is "
                                "not sharded); use --train-backend replicated with --use-critic");
  if (opts_.use_critic && !critic) throw std::invalid_argument("trainer: use_critic needs a critic model (critic = ...)");
  if (!opts_.use_critic && critic)
    throw std::invalid_argument("trainer: a critic model without use_critic (set use_critic = true)");
  if (!(opts_.value_clip >= 0) || !std::isfinite(opts_.value_clip))
    throw std::invalid_argument("trainer: value_clip must be a finite number >= 0");
  if (!std::isfinite(opts_.lambd) || opts_.lambd < 0 || opts_.lambd > 1)
    throw std::invalid_argument("trainer: lambd (GAE's lambda) must be in [0, 1]");
  if (opts_.critic_lr && (!(*opts_.critic_lr >= 0) || !std::isfinite(*opts_.critic_lr)))
    throw std::invalid_argument("trainer: critic_lr must be >= 0");
  if (opts_.num_critic_only_steps < 0) throw std::invalid_argument("trainer: num_critic_only_steps must be >= 0");
  if (!opts_.sharded && (!sources.policy.empty() || !sources.ref.empty()))
    throw std::invalid_argument("trainer: weights from files are for a sharded trainer (train_backend = fsdp)");
  if (!policy_) throw std::invalid_argument("trainer: no policy model");
  if (policy_->options().inference_layout)
    throw std::invalid_argument("trainer: the policy uses the engine's inference layout; load it for training");
  if ((opts_.loss.use_kl_loss || opts_.kl_coef != 0.0) && !ref_)
    throw std::invalid_argument("trainer: use_kl_loss / kl_coef need a reference model (ref = ...)");
  if (opts_.kl_coef != 0.0 && opts_.loss.use_kl_loss && opts_.loss.kl_loss_coef != 0.0)
    throw std::invalid_argument("trainer: kl_coef (reward shaping) and kl_loss_coef (loss) are exclusive; set one");
  if (opts_.micro_batch_size < 1) throw std::invalid_argument("trainer: micro_batch_size must be >= 1");
  if (opts_.optim.lr < 0 || !std::isfinite(opts_.optim.lr)) throw std::invalid_argument("trainer: lr must be >= 0");
  if (opts_.lora_rank != 0) {
    const auto cfg = lora_config(opts_);  // checks rank, alpha and target_modules
    if (opts_.use_critic)
      throw std::invalid_argument("trainer: lora_rank with use_critic is not supported (the critic would be a full "
                                  "model); drop --use-critic or --lora-rank");
    if (policy_->lora())
      throw std::invalid_argument("trainer: the policy model already has a LoRA adapter set; the trainer makes its own "
                                  "(lora_rank); pass the base model");
    lora_ = std::make_shared<nn::LoraAdapter>(policy_->config(), cfg,
                                              torch::TensorOptions().dtype(torch::kFloat32).device(
                                                  policy_->options().device));
    lora_->init(opts_.lora_seed);
  }
  if (opts_.bf16 && !lora_ && policy_->options().dtype != torch::kFloat32)
    throw std::invalid_argument(std::string("trainer: bf16 mixed precision keeps float32 master weights, but the policy "
                                            "was loaded as ") + c10::toString(policy_->options().dtype) +
                                "; load it with dtype = \"float32\", or drop bf16 to train in the model's dtype");
  policy_->set_requires_grad(!lora_);
  policy_->set_recompute(opts_.recompute);
  if (const auto& r = opts_.recompute; r.method != nn::Recompute::Method::none)
    log::info(std::string("trainer: activation recomputation (recompute_granularity full): ") +
              (r.method == nn::Recompute::Method::uniform
                   ? "every layer, in groups of " + std::to_string(r.num_layers)
                   : "the first " + std::to_string(r.num_layers) + " layer(s), each alone") +
              "; their forward runs again in the backward pass");
  else if (opts_.recompute_selective)
    log::info("trainer: recompute_granularity selective: the attention core is recomputed in every backward pass "
              "already (its probabilities from the saved log-sum-exp, flash-style; no [T, T] matrix is kept), so "
              "nothing changes; full recomputes whole layers");
  if (ref_) ref_->set_requires_grad(false);
  if (lora_) {
    // The base stays frozen: the adapter's tensors are the only parameters (the
    // reference model, when there is one, is the base alone: KL against the base).
    for (auto& t : lora_->parameters()) {
      t.requires_grad_(true);
      params_.push_back(t);
    }
    policy_->set_lora(lora_);
    log::info("trainer: LoRA rank " + std::to_string(opts_.lora_rank) + ", alpha " + std::to_string(opts_.lora_alpha) +
              ": " + std::to_string(params_.size()) + " adapter tensors trained, the base frozen");
  }
  if (opts_.sharded) {
    // Every rank of the data-parallel group constructs its trainer: the shards are
    // rank 0's values (a collective).
    const auto group = dist::default_group();
    const auto files = [](const std::string& dir) {
      return dir.empty() ? std::optional<model::TensorSet>() : model::read_safetensors_dir(dir);
    };
    {
      const auto src = files(sources.policy);  // mapped while the slices are copied
      // LoRA: the base is sharded and frozen; the adapter is replicated (params_ already),
      // its gradients all-reduced as a replicated trainer's.
      fsdp_ = std::make_unique<ShardedModel>(policy_, group, !lora_, src ? &*src : nullptr);
    }
    if (!lora_) params_ = fsdp_->shards();
    if (ref_ && (opts_.loss.use_kl_loss || opts_.kl_coef != 0.0)) {
      const auto src = files(sources.ref);
      ref_fsdp_ = std::make_unique<ShardedModel>(ref_, group, false, src ? &*src : nullptr);
    } else if (!sources.ref.empty()) {
      throw std::invalid_argument("trainer: a reference skeleton without use_kl_loss or kl_coef");
    }
    int64_t mine = 0, all = 0;
    for (size_t u = 0; u < fsdp_->units().size(); ++u) {
      const auto [b, e] = fsdp_->range(u);
      mine += e - b;
      all += fsdp_->units()[u].numel;
    }
    log::info("trainer: sharded (train_backend fsdp) over " + std::to_string(fsdp_->world()) + " rank(s), " +
              std::to_string(fsdp_->units().size()) + " units: rank " + std::to_string(fsdp_->rank()) + " holds " +
              std::to_string(mine) + " of " + std::to_string(all) + " parameters" +
              (fsdp_->world() == 1 ? " (one rank: no smaller than replicated; launch with --nproc N or torchrun)" : ""));
  } else if (!lora_) {
    for (auto& [name, t] : policy_->named_parameters()) params_.push_back(t);
  }
  torch::optim::AdamWOptions ao(opts_.optim.lr);
  ao.betas({opts_.optim.beta1, opts_.optim.beta2}).eps(opts_.optim.eps).weight_decay(opts_.optim.weight_decay);
  optim_ = std::make_unique<torch::optim::AdamW>(params_, ao);
  if (opts_.use_critic) {
    if (critic->config().hidden_size <= 0) throw std::invalid_argument("trainer: the critic model has no hidden size");
    if (opts_.bf16 && critic->options().dtype != torch::kFloat32)
      throw std::invalid_argument("trainer: bf16 mixed precision keeps float32 master weights; load the critic with "
                                  "dtype = \"float32\"");
    const auto& o = opts_.optim;
    critic_ = std::make_unique<Critic>(std::move(critic), opts_.critic_lr.value_or(o.lr), o.beta1, o.beta2, o.eps,
                                       o.weight_decay);
    critic_->model().set_recompute(opts_.recompute);  // its decoder recomputes as the policy's does
  }
}

double Trainer::lr_at(int64_t step, double base) const {
  const auto& o = opts_.optim;
  if (o.warmup_steps > 0 && step < o.warmup_steps) return base * double(step + 1) / double(o.warmup_steps);
  if (o.schedule == "constant" || o.total_steps <= o.warmup_steps) return base;
  const double progress =
      std::clamp(double(step - o.warmup_steps) / double(o.total_steps - o.warmup_steps), 0.0, 1.0);
  if (o.schedule == "linear") return o.min_lr + (base - o.min_lr) * (1.0 - progress);
  if (o.schedule == "cosine") return o.min_lr + (base - o.min_lr) * 0.5 * (1.0 + std::cos(kPi * progress));
  throw std::invalid_argument("trainer: unknown lr schedule '" + o.schedule + "' (constant, linear, cosine)");
}

namespace {
// The estimator's advantages without whitening (the trainer whitens over the step).
torch::Tensor compute_advantages_unnormalized(Estimator est, const AdvantageInputs& in) {
  return compute_advantages(est, in).first;
}

// whiten() over the masked tokens of every rank's part of the step (flat a, mask).
torch::Tensor whiten_across_ranks(dist::ProcessGroup& g, const torch::Tensor& a, const torch::Tensor& mask) {
  torch::NoGradGuard ng;
  const auto a64 = a.to(torch::kFloat64), m64 = mask.to(torch::kFloat64);
  std::vector<torch::Tensor> s{torch::stack({(a64 * m64).sum(), (a64.square() * m64).sum(), m64.sum()})};
  g.allreduce_sum(s, "the advantage statistics");
  const double s1 = s[0][0].item<double>(), s2 = s[0][1].item<double>(), n = s[0][2].item<double>();
  if (!(n > 1))
    throw std::invalid_argument("trainer: whitening needs more than one masked token over all ranks; "
                                "check the loss masks or disable normalize_advantages");
  const double mean = s1 / n, var = (s2 / n - mean * mean) * (n / (n - 1));
  const auto out = (a64 - mean) / std::sqrt(var + 1e-8);
  return torch::where(mask.ne(0), out, torch::zeros({}, out.options())).to(a.scalar_type());
}

// Each rank's train/ metrics are its share of the step times world_size: their
// mean over ranks is the whole step's value.
void average_metrics(dist::ProcessGroup& g, Metrics& m) {
  if (m.empty()) return;
  std::vector<double> v;
  for (const auto& [k, x] : m) v.push_back(x);
  std::vector<torch::Tensor> t{torch::tensor(v, torch::kFloat64)};
  g.allreduce_sum(t, "the step's metrics (" + std::to_string(m.size()) + " values)");
  size_t i = 0;
  for (auto& [k, x] : m) x = t[0][static_cast<int64_t>(i++)].item<double>() / g.world_size();
}
}  // namespace

double Trainer::current_lr() const { return lr_at(step_); }

double Trainer::state_bytes() const {
  double n = adamw_state_bytes(params_, *optim_);
  if (critic_) n += critic_->state_bytes();
  return n;
}

ShardedModel* Trainer::sharded_of(const nn::Transformer& m) const {
  if (fsdp_ && &m == policy_.get()) return fsdp_.get();
  if (ref_fsdp_ && &m == ref_.get()) return ref_fsdp_.get();
  return nullptr;
}

int64_t Trainer::agree_passes(int64_t mine) const {
  if (!fsdp_ || fsdp_->world() == 1) return mine;
  auto g = dist::default_group();
  std::vector<torch::Tensor> t{torch::zeros({g->world_size()}, torch::kFloat64)};
  t[0][g->rank()] = static_cast<double>(mine);
  g->allreduce_sum(t, "the pass counts");
  return static_cast<int64_t>(t[0].max().item<double>());
}

void Trainer::for_each_parameter_group(const std::function<void(const nn::NamedTensors&)>& fn) {
  torch::NoGradGuard ng;
  if (fsdp_) fsdp_->for_each_unit(fn);
  else fn(policy_->named_parameters());
}
void Trainer::set_step(int64_t s) {
  step_ = s;
  digest_step_ = -1;  // the weights may have changed with it (a checkpoint)
}

Trainer::Packed Trainer::pack(const TrainBatch& b, const std::vector<int64_t>& idx) const {
  Packed p;
  const int64_t B = static_cast<int64_t>(idx.size());
  int64_t R = 1;
  std::vector<const std::vector<int64_t>*> seqs;
  for (int64_t i : idx) {
    R = std::max<int64_t>(R, b.response_lengths[i]);
    seqs.push_back(&b.tokens[i]);
  }
  p.seqs = nn::lay_out(seqs, packs_sequences(), /*min_len=*/2);
  p.mask = torch::zeros({B, R}, torch::kFloat32);
  p.rewards = torch::empty({B}, torch::kFloat32);
  const bool has_rollout = !b.rollout_log_probs.empty();
  if (has_rollout) p.rollout_logp = torch::zeros({B, R}, torch::kFloat32);
  const bool has_behaviour = !behaviour_logp_.empty();
  if (has_behaviour) p.behaviour_logp = torch::zeros({B, R}, torch::kFloat32);
  const bool has_values = !old_values_.empty();
  if (has_values) p.old_values = torch::zeros({B, R}, torch::kFloat32);
  const bool has_teacher = !b.teacher_log_probs.empty();
  if (has_teacher) p.teacher_logp = torch::zeros({B, R}, torch::kFloat32);
  auto mask = p.mask.accessor<float, 2>();
  for (int64_t r = 0; r < B; ++r) {
    const int64_t i = idx[r];
    const auto& t = b.tokens[i];
    const int64_t n = static_cast<int64_t>(t.size()), resp = b.response_lengths[i];
    const int64_t start = p.seqs.starts[r];  // the sequence's first row in the flattened ids
    p.prompt_lens.push_back(n - resp);
    p.resp_lens.push_back(resp);
    p.tokens += n;
    for (int64_t j = 0; j < resp; ++j) mask[r][j] = b.loss_masks[i][j];
    p.rewards[r] = static_cast<float>(b.rewards[i]);
    if (has_rollout) {
      auto acc = p.rollout_logp.accessor<float, 2>();
      for (int64_t j = 0; j < resp; ++j) acc[r][j] = b.rollout_log_probs[i][j];
    }
    if (has_behaviour) {
      auto acc = p.behaviour_logp.accessor<float, 2>();
      for (int64_t j = 0; j < resp; ++j) acc[r][j] = behaviour_logp_[i][j];
    }
    if (has_values) {
      auto acc = p.old_values.accessor<float, 2>();
      for (int64_t j = 0; j < resp; ++j) acc[r][j] = old_values_[i][j];
    }
    if (has_teacher) {
      auto acc = p.teacher_logp.accessor<float, 2>();
      for (int64_t j = 0; j < resp; ++j) acc[r][j] = b.teacher_log_probs[i][j];
    }
    for (int64_t j = 0; j < resp; ++j) {
      const int64_t pos = n - resp + j;  // position of the response token
      p.rows.push_back(start + pos - 1);
      p.cols.push_back(r * R + j);
      p.targets.push_back(t[pos]);
    }
  }
  // Built on the host, then moved once to where the policy lives.
  const auto dev = policy_->options().device;
  if (dev != torch::kCPU) {
    for (auto* t : {&p.seqs.ids, &p.mask, &p.rewards, &p.rollout_logp, &p.behaviour_logp, &p.old_values,
                    &p.teacher_logp})
      if (t->defined()) *t = t->to(dev);
  }
  return p;
}

bool Trainer::packs_sequences() const { return policy_->options().device.is_cpu(); }

// log p of each response token: hidden states of the positions that predict
// response tokens only (prompt positions never reach the lm_head), packed,
// through the chunked log-softmax, then scattered into [B, R].
torch::Tensor Trainer::response_logp(nn::Transformer& m, const Packed& p, bool with_entropy, torch::Tensor* entropy) {
  const int64_t B = p.mask.size(0), R = p.mask.size(1);
  AutocastScope autocast(m.options().device.type(), opts_.bf16, torch::kBFloat16);
  auto hidden = m.forward(p.seqs);  // [1, T, H] end to end, [B, L, H] padded
  const auto on_device = [&](const std::vector<int64_t>& v) { return torch::tensor(v, torch::kInt64).to(hidden.device()); };
  auto flat = hidden.reshape({-1, hidden.size(2)}).index_select(0, on_device(p.rows));
  // Sharded: the lm_head goes by row blocks, each rank's in turn, never whole; with a
  // LoRA adapter on it, it is gathered whole for this use (and again for its backward).
  ShardedModel* sm = sharded_of(m);
  const bool merged = m.lora_lm_head();  // LoRA on lm_head: the adapter merged into the weight
  nn::TokenLogprobs out;
  if (sm && sm->blocked_head()) {
    out = nn::token_logprobs_blocked(flat, sm->head_blocks(), on_device(p.targets), opts_.temperature, with_entropy);
  } else {
    auto weight = sm ? sm->lm_head() : merged ? m.effective_lm_head() : m.lm_head_weight();
    if (sm && merged) weight = m.lora()->merged_lm_head(weight);
    out = nn::token_logprobs(flat, weight, on_device(p.targets), opts_.temperature, with_entropy, 0, -1,
                             sm || merged ? nullptr : &m.lm_head_packed());
    if (sm) out.logprobs = sm->lm_head_done(out.logprobs);
  }
  auto index = on_device(p.cols);
  auto logp = torch::zeros({B * R}, out.logprobs.options()).index_put({index}, out.logprobs).view({B, R});
  if (entropy && with_entropy)
    *entropy = torch::zeros({B * R}, out.entropy.options()).index_put({index}, out.entropy).view({B, R});
  return logp;
}

// The critic's value at each position that predicts a response token (the state
// before that token, as slime's get_values), scattered into [B, R] float32.
torch::Tensor Trainer::critic_values(const Packed& p) {
  auto& m = critic_->model();
  const int64_t B = p.mask.size(0), R = p.mask.size(1);
  AutocastScope autocast(m.options().device.type(), opts_.bf16, torch::kBFloat16);
  auto hidden = m.forward(p.seqs);  // [1, T, H] end to end, [B, L, H] padded
  const auto on_device = [&](const std::vector<int64_t>& v) { return torch::tensor(v, torch::kInt64).to(hidden.device()); };
  auto flat = hidden.reshape({-1, hidden.size(2)}).index_select(0, on_device(p.rows));
  auto v = critic_->head(flat);
  return torch::zeros({B * R}, v.options()).index_put({on_device(p.cols)}, v).view({B, R});
}

std::vector<std::vector<float>> Trainer::response_values(const TrainBatch& b) {
  if (!critic_) throw std::invalid_argument("trainer: values need a critic (use_critic = true)");
  torch::NoGradGuard ng;
  std::vector<std::vector<float>> out(b.tokens.size());
  std::vector<int64_t> all(b.tokens.size());
  std::iota(all.begin(), all.end(), 0);
  for (const auto& mb : micro_batches(b, all)) {
    Packed p = pack(b, mb);
    auto v = critic_values(p).to(torch::kCPU).contiguous();
    const auto acc = v.accessor<float, 2>();
    for (size_t r = 0; r < mb.size(); ++r)
      for (int64_t j = 0; j < p.resp_lens[r]; ++j) out[mb[r]].push_back(acc[r][j]);
  }
  return out;
}

// Micro-batches of a step: fixed size, or greedily filled up to a token budget
// (a sample longer than the budget gets one of its own): the tokens themselves when
// sequences go end to end, rows × the longest when padded.
std::vector<std::vector<int64_t>> Trainer::micro_batches(const TrainBatch& b, const std::vector<int64_t>& idx) const {
  std::vector<std::vector<int64_t>> out;
  if (opts_.max_tokens_per_micro_batch <= 0) {
    for (size_t s = 0; s < idx.size(); s += opts_.micro_batch_size)
      out.emplace_back(idx.begin() + s, idx.begin() + std::min(idx.size(), s + opts_.micro_batch_size));
    return out;
  }
  const bool end_to_end = packs_sequences();
  std::vector<int64_t> cur;
  int64_t longest = 0, sum = 0;
  for (int64_t i : idx) {
    const int64_t n = static_cast<int64_t>(b.tokens[i].size());
    const int64_t cost = end_to_end ? sum + n : std::max(longest, n) * static_cast<int64_t>(cur.size() + 1);
    if (!cur.empty() && cost > opts_.max_tokens_per_micro_batch) {
      out.push_back(std::move(cur));
      cur.clear();
      longest = sum = 0;
    }
    cur.push_back(i);
    longest = std::max(longest, n);
    sum += n;
  }
  if (!cur.empty()) out.push_back(std::move(cur));
  return out;
}

// The step's loss normaliser (losses.hpp): samples, or Σ_i max(Σ_t m, 1) tokens. Data
// parallel: every rank normalises by the whole step's count (all ranks' samples or
// tokens) over world_size, so that the averaged gradients equal one process's on the
// global batch.
struct Trainer::StepNorm {
  std::shared_ptr<dist::ProcessGroup> group;  // null: one process
  int world = 1;
  bool token_mean = false;
  double global_divisor = 0;  // the whole step's samples or tokens
  double global_count = 0;    // the whole step's samples
  double loss_divisor = 0;    // global_divisor / world: what each rank's losses are divided by
  int64_t tokens = 0;         // this rank's tokens (throughput)
  int64_t passes = 0;         // sharded: forward/backward passes per rank this step (agree_passes)
};

Trainer::StepNorm Trainer::step_normaliser(const TrainBatch& b, const std::vector<int64_t>& idx) const {
  StepNorm n;
  n.token_mean = opts_.loss.aggregation == Aggregation::token_mean;
  double divisor = 0;
  for (int64_t i : idx) {
    n.tokens += static_cast<int64_t>(b.tokens[i].size());
    double m = 0;
    for (float x : b.loss_masks[i]) m += x;
    divisor += std::max(m, 1.0);
  }
  if (!n.token_mean) divisor = static_cast<double>(idx.size());
  n.group = dist::default_group();
  n.world = n.group ? n.group->world_size() : 1;
  n.global_divisor = divisor;
  n.global_count = static_cast<double>(idx.size());
  if (n.world > 1) {
    std::vector<torch::Tensor> t{torch::tensor({divisor, n.global_count}, torch::kFloat64)};
    n.group->allreduce_sum(t, "the step's loss normaliser");
    n.global_divisor = t[0][0].item<double>();
    n.global_count = t[0][1].item<double>();
  }
  n.loss_divisor = n.global_divisor / n.world;
  return n;
}

struct Trainer::Prepared {
  Packed p;
  torch::Tensor old_logp, ref_logp, adv;
  torch::Tensor returns;  // ppo: the critic's targets (GAE returns)
  std::vector<int64_t> rows;  // batch indices of the micro-batch's samples
};

// Pass 1, no gradients: behaviour and reference log-probs and the advantages of every
// micro-batch, whitened over the whole step when asked (slime whitens over the
// data-parallel batch).
std::vector<Trainer::Prepared> Trainer::prepare_micro_batches(const TrainBatch& b,
                                                              const std::vector<std::vector<int64_t>>& mbs,
                                                              const StepNorm& norm) {
  std::vector<Prepared> prep;
  const bool need_ref = ref_ && (opts_.loss.use_kl_loss || opts_.kl_coef != 0.0);
  for (const auto& mb : mbs) {
    Prepared x{pack(b, mb), {}, {}, {}, {}, mb};
    torch::NoGradGuard ng;
    if (opts_.use_rollout_logprobs) {
      if (!x.p.rollout_logp.defined())
        throw std::invalid_argument("trainer: use_rollout_logprobs needs rollout_log_probs in the batch");
      x.old_logp = x.p.rollout_logp;
    } else if (x.p.behaviour_logp.defined()) {
      x.old_logp = x.p.behaviour_logp;
    } else if (opts_.kl_coef != 0.0 || opts_.use_opd) {
      x.old_logp = response_logp(*policy_, x.p, false, nullptr);
    }
    if (need_ref) x.ref_logp = response_logp(*ref_, x.p, false, nullptr);
    AdvantageInputs ai;
    ai.rewards = x.p.rewards;
    ai.mask = x.p.mask;
    ai.kl_coef = opts_.kl_coef;
    ai.gamma = opts_.gamma;
    ai.normalize = false;
    if (opts_.kl_coef != 0.0) ai.kl = approx_kl(x.old_logp, x.ref_logp, opts_.kl_type);
    if (opts_.loss.estimator == Estimator::ppo) {
      ai.values = x.p.old_values;
      ai.response_lengths = torch::tensor(x.p.resp_lens, torch::kInt64);
      ai.lambd = opts_.lambd;
      auto [adv, ret] = compute_advantages(Estimator::ppo, ai);
      x.adv = adv;
      x.returns = ret;
    } else {
      x.adv = compute_advantages_unnormalized(opts_.loss.estimator, ai);
    }
    if (opts_.use_opd) {  // the teacher's signal, token by token: the reverse KL's sample estimate
      const torch::Tensor rkl = (x.old_logp - x.p.teacher_logp) * x.p.mask;
      x.adv = x.adv - opts_.opd_kl_coef * rkl;
      opd_kl_sum_ = opd_kl_sum_.defined() ? opd_kl_sum_ + rkl.sum() : rkl.sum();
      opd_tokens_ = opd_tokens_.defined() ? opd_tokens_ + x.p.mask.sum() : x.p.mask.sum();
    }
    prep.push_back(std::move(x));
  }
  // Sharded: as many no-grad passes as the rank with the most micro-batches.
  if (fsdp_ && norm.passes > static_cast<int64_t>(mbs.size()) &&
      (need_ref || (!opts_.use_rollout_logprobs && (opts_.kl_coef != 0.0 || opts_.use_opd)))) {
    torch::NoGradGuard ng;
    const Packed pad = pack(b, mbs.front());
    for (int64_t k = static_cast<int64_t>(mbs.size()); k < norm.passes; ++k) {
      if ((opts_.kl_coef != 0.0 || opts_.use_opd) && !opts_.use_rollout_logprobs && !pad.behaviour_logp.defined())
        response_logp(*policy_, pad, false, nullptr);
      if (need_ref) response_logp(*ref_, pad, false, nullptr);
    }
  }
  if (opts_.normalize_advantages) {
    std::vector<torch::Tensor> a, m;
    for (auto& x : prep) {
      a.push_back(x.adv.reshape({-1}));
      m.push_back(x.p.mask.reshape({-1}));
    }
    auto white = norm.world > 1 ? whiten_across_ranks(*norm.group, torch::cat(a), torch::cat(m))
                                : whiten(torch::cat(a).unsqueeze(0), torch::cat(m).unsqueeze(0)).reshape({-1});
    int64_t off = 0;
    for (auto& x : prep) {
      const int64_t n = x.adv.numel();
      x.adv = white.narrow(0, off, n).view_as(x.adv);
      off += n;
    }
  }
  return prep;
}

// Pass 2: forward, loss and backward per micro-batch (gradients accumulate); the
// loss metrics summed over micro-batches.
Metrics Trainer::accumulate_gradients(std::vector<Prepared>& prep, const StepNorm& norm, bool policy) {
  Metrics m;
  const bool need_entropy = opts_.loss.entropy_coef != 0.0;
  for (auto& x : prep) {
    if (critic_) accumulate_critic(x, norm, m);
    if (!policy) {  // the critic's warm-up (num_critic_only_steps): the policy stays as it is
      ++micro_done_;
      continue;
    }
    torch::Tensor entropy;
    auto logp = response_logp(*policy_, x.p, need_entropy, &entropy);
    LossInputs li;
    li.logp = logp;
    li.old_logp = x.old_logp;
    li.advantages = x.adv;
    li.mask = x.p.mask;
    li.entropy = entropy;
    li.ref_logp = x.ref_logp;
    li.rollout_logp = x.p.rollout_logp;
    li.divisor = norm.loss_divisor;
    auto res = policy_loss(opts_.loss, li);
    res.loss.backward();
    record_sample_stats(x.p, x.adv, logp.detach(), res.clipped, norm.global_divisor, norm.token_mean, x.rows);
    ++micro_done_;
    for (auto& [k, v] : res.metrics) m["train/" + k] += v.item<double>();
  }
  // Sharded: every rank runs as many forward/backward passes as the one with the most
  // micro-batches (each is a collective); the padding passes add zero gradient.
  if (fsdp_ && !prep.empty()) {
    for (int64_t k = static_cast<int64_t>(prep.size()); k < norm.passes; ++k)
      (response_logp(*policy_, prep.front().p, false, nullptr) * 0.0).sum().backward();
  }
  return m;
}

// The critic's forward, value loss and backward for one micro-batch; its metrics (and
// the means of V_old and the returns, reduced like the loss) added into m.
void Trainer::accumulate_critic(const Prepared& x, const StepNorm& norm, Metrics& m) {
  ValueLossInputs vi;
  vi.values = critic_values(x.p);
  vi.old_values = x.p.old_values;
  vi.returns = x.returns;
  vi.mask = x.p.mask;
  vi.divisor = norm.loss_divisor;
  auto res = value_loss(opts_.value_clip, opts_.loss.aggregation, vi);
  res.loss.backward();
  for (auto& [k, v] : res.metrics) m["train/" + k] += v.item<double>();
  torch::NoGradGuard ng;
  m["train/values"] += reduce(x.p.old_values, x.p.mask, opts_.loss.aggregation, {}, norm.loss_divisor).item<double>();
  m["train/returns"] += reduce(x.returns, x.p.mask, opts_.loss.aggregation, {}, norm.loss_divisor).item<double>();
}

// The critic's AdamW step: gradients averaged over the data-parallel ranks like the
// policy's, clipped by their own global norm (clip_grad), the policy's schedule
// peaking at critic_lr.
void Trainer::critic_step(const StepNorm& norm, Metrics& m) {
  auto& params = critic_->parameters();
  if (norm.world > 1) norm.group->allreduce_mean_grads(params, "the critic's gradients");
  const double grad_norm = clip_grad_norm_foreach(params, opts_.optim.clip_grad);
  const double lr = lr_at(critic_progress_.step, opts_.critic_lr.value_or(opts_.optim.lr));
  auto& optim = critic_->optimizer();
  for (auto& g : optim.param_groups()) static_cast<torch::optim::AdamWOptions&>(g.options()).lr(lr);
  critic_fused_.step(optim);
  critic_->weights_changed();
  ++critic_progress_.step;
  m["train/critic_grad_norm"] = grad_norm;
  m["train/critic_lr"] = lr;
}

// Data parallel: gradients and metrics averaged over the ranks (before clipping, so
// every rank sees the same gradients and norm); then clipping and the AdamW step.
// Returns the gradient norm before clipping.
double Trainer::clip_and_step(const StepNorm& norm, Metrics& m) {
  if (norm.world > 1) {
    // sharded: reduce-scattered in backward (a LoRA adapter over a sharded base is replicated)
    if (!fsdp_ || lora_) norm.group->allreduce_mean_grads(params_, "gradients");
    average_metrics(*norm.group, m);
  }
  if (fsdp_ && !lora_) return clip_and_step_sharded(norm);
  if (fsdp_) fsdp_->settle();  // the frozen base's last gathered unit, released
  // The norm, clip and AdamW step in ATen's multi-tensor kernels (optim_fused.hpp).
  const double grad_norm = clip_grad_norm_foreach(params_, opts_.optim.clip_grad);
  fused_.step(*optim_);
  if (!lora_) policy_->weights_changed();  // LoRA: the base did not change (the adapter is read as it is)
  ++step_;
  return grad_norm;
}

// Sharded: the global norm from every rank's shards (sum of squares, all-reduced),
// torch's clip_grad_norm_ rule, and the AdamW step on the shards.
double Trainer::clip_and_step_sharded(const StepNorm& norm) {
  fsdp_->settle();
  std::vector<torch::Tensor> sq{torch::tensor({fsdp_->local_grad_sq()}, torch::kFloat64)};
  if (norm.world > 1) norm.group->allreduce_sum(sq, "the gradient norm");
  const double grad_norm = std::sqrt(sq[0].item<double>());
  if (opts_.optim.clip_grad > 0) {
    const double coef = opts_.optim.clip_grad / (grad_norm + 1e-6);
    if (coef < 1) {
      torch::NoGradGuard ng;
      for (auto& p : params_)
        if (p.grad().defined()) p.grad().mul_(coef);
    }
  }
  fused_.step(*optim_);
  ++step_;
  return grad_norm;
}

Metrics Trainer::optimizer_step(const TrainBatch& b, const std::vector<int64_t>& idx) {
  const auto t0 = std::chrono::steady_clock::now();
  const auto mbs = micro_batches(b, idx);
  StepNorm norm = step_normaliser(b, idx);
  // Sharded: the micro-batch passes every rank runs (the most any rank has), agreed once.
  norm.passes = agree_passes(static_cast<int64_t>(mbs.size()));
  opd_kl_sum_ = opd_tokens_ = torch::Tensor();
  auto prep = prepare_micro_batches(b, mbs, norm);
  const double lr = lr_at(step_);
  for (auto& g : optim_->param_groups()) static_cast<torch::optim::AdamWOptions&>(g.options()).lr(lr);
  optim_->zero_grad();
  if (critic_) critic_->optimizer().zero_grad();
  // The critic's warm-up (num_critic_only_steps): only the critic learns.
  const bool policy = !(critic_ && critic_progress_.rollouts < opts_.num_critic_only_steps);
  Metrics m = accumulate_gradients(prep, norm, policy);
  if (opts_.use_opd) {  // summed over ranks with the other metrics (their ratio is the step's mean)
    m["train/opd_kl_sum"] = opd_kl_sum_.defined() ? opd_kl_sum_.item<double>() : 0.0;
    m["train/opd_kl_tokens"] = opd_tokens_.defined() ? opd_tokens_.item<double>() : 0.0;
  }
  double grad_norm = 0;
  if (policy) grad_norm = clip_and_step(norm, m);
  else if (norm.world > 1) average_metrics(*norm.group, m);
  if (critic_) {
    critic_step(norm, m);
    m["train/critic_only"] = policy ? 0.0 : 1.0;
  }
  const double dt = seconds_since(t0);
  // TIS: the effective sample size of the applied weights as a share of the tokens,
  // (E w)^2 / E[w^2] in (0, 1]: 1 when the behaviour policy is the proximal one; an
  // off-policy collapse shows here first (docs/trainer.md, "Losses").
  if (auto w = m.find("train/tis_weight"), w2 = m.find("train/tis_weight_sq"); w != m.end() && w2 != m.end())
    m["train/tis_ess"] = w2->second > 0 ? w->second * w->second / w2->second : 0.0;
  if (policy) {
    m["train/grad_norm"] = grad_norm;
    m["train/lr"] = lr;
  }
  if (opts_.use_opd) {  // slime's opd_reverse_kl: mean of logp_old − logp_teacher over the step's masked tokens
    const double sum = m["train/opd_kl_sum"], tokens = m["train/opd_kl_tokens"];
    m.erase("train/opd_kl_sum");
    m.erase("train/opd_kl_tokens");
    m["train/opd_reverse_kl"] = tokens > 0 ? sum / tokens : 0.0;
  }
  m["train/global_batch_size"] = norm.global_count;
  m["train/num_microbatches"] = static_cast<double>(mbs.size());
  if (fsdp_) {
    // The step's freed memory back to the system (the CPU block cache's blocks too: a
    // sharded rank is sized by its memory): glibc keeps it otherwise, and the persistent
    // shards' gradients among it fragment the heap, so each step's peak would stand a
    // little higher than the last.
    tensor::return_free_memory();
    const auto st = fsdp_->take_stats();
    m["perf/fsdp_gather_wait_time"] = st.gather_wait_s;
    m["perf/fsdp_reduce_scatter_time"] = st.reduce_scatter_s;
    m["perf/fsdp_gathers"] = static_cast<double>(st.gathers);
    m["perf/fsdp_gathered_bytes"] = st.gathered_bytes;
  }
  m["perf/trainer_state_bytes"] = state_bytes();
  m["perf/actor_train_time"] = dt;
  m["perf/actor_train_tok_per_s"] = dt > 0 ? norm.tokens / dt : 0.0;
  return m;
}

void Trainer::validate(const TrainBatch& b) const {
  const int64_t n = static_cast<int64_t>(b.tokens.size());
  if (n == 0) throw std::invalid_argument("trainer: empty batch");
  const auto fail = [](const std::string& field, int64_t i, const std::string& what) {
    throw std::invalid_argument("trainer: batch." + field + "[" + std::to_string(i + 1) + "] " + what);
  };
  if (static_cast<int64_t>(b.response_lengths.size()) != n || static_cast<int64_t>(b.rewards.size()) != n ||
      static_cast<int64_t>(b.loss_masks.size()) != n)
    throw std::invalid_argument("trainer: batch fields disagree on the sample count (tokens, response_lengths, "
                                "rewards, loss_masks)");
  if (!b.rollout_log_probs.empty() && static_cast<int64_t>(b.rollout_log_probs.size()) != n)
    throw std::invalid_argument("trainer: batch.rollout_log_probs has a different sample count");
  if (!b.logprob_digests.empty() && static_cast<int64_t>(b.logprob_digests.size()) != n)
    throw std::invalid_argument("trainer: batch.logprob_digests has a different sample count");
  if (opts_.use_opd && b.teacher_log_probs.empty())
    throw std::invalid_argument("trainer: use_opd needs batch.teacher_log_probs (a teacher's log-prob of every response "
                                "token, per sample)");
  if (!b.teacher_log_probs.empty() && static_cast<int64_t>(b.teacher_log_probs.size()) != n)
    throw std::invalid_argument("trainer: batch.teacher_log_probs has a different sample count");
  const int64_t vocab = policy_->config().vocab_size;
  for (int64_t i = 0; i < n; ++i) {
    const int64_t len = static_cast<int64_t>(b.tokens[i].size()), r = b.response_lengths[i];
    if (r < 1 || r >= len) fail("response_lengths", i, "must be in [1, #tokens - 1] (got " + std::to_string(r) + ")");
    if (static_cast<int64_t>(b.loss_masks[i].size()) != r) fail("loss_masks", i, "length differs from response_length");
    if (!b.rollout_log_probs.empty() && static_cast<int64_t>(b.rollout_log_probs[i].size()) != r)
      fail("rollout_log_probs", i, "length differs from response_length");
    if (!b.teacher_log_probs.empty()) {
      if (static_cast<int64_t>(b.teacher_log_probs[i].size()) != r)
        fail("teacher_log_probs", i, "length differs from response_length");
      for (float v : b.teacher_log_probs[i])
        if (!std::isfinite(v) || v > 0) fail("teacher_log_probs", i, "holds a value that is not a log-probability");
    }
    for (int64_t t : b.tokens[i])
      if (t < 0 || t >= vocab) fail("tokens", i, "holds id " + std::to_string(t) + " outside the vocabulary");
    if (!std::isfinite(b.rewards[i])) fail("rewards", i, "is not finite");
  }
}

void Trainer::record_sample_stats(const Packed& p, const torch::Tensor& adv, const torch::Tensor& logp,
                                  const torch::Tensor& clipped, double divisor, bool token_mean,
                                  const std::vector<int64_t>& rows) {
  torch::NoGradGuard ng;
  const auto m = p.mask;
  const auto msum = m.sum(1).clamp_min(1.0);
  const auto a = (adv * m).sum(1) / msum;
  const auto lp = (logp * m).sum(1) / msum;
  const auto c = clipped.defined() ? (clipped * m).sum(1) / msum : torch::zeros_like(a);
  // One copy to the host for the four per-sample columns (not one sync per value).
  const auto host = torch::stack({a.to(torch::kFloat64), lp.to(torch::kFloat64), c.to(torch::kFloat64),
                                  msum.to(torch::kFloat64)}).to(torch::kCPU).contiguous();
  const auto h = host.accessor<double, 2>();
  for (size_t r = 0; r < rows.size(); ++r) {
    const auto i = static_cast<int64_t>(r);
    SampleStats st;
    st.advantage = h[0][i];
    st.logp_mean = h[1][i];
    st.clipped_frac = h[2][i];
    st.loss_weight = token_mean ? h[3][i] / divisor : 1.0 / divisor;
    st.step = step_ + 1;
    sample_stats_[rows[r]] = st;
  }
}

Metrics Trainer::train(const TrainBatch& b) {
  validate(b);
  tensor::MemoryInUse busy;  // an idle engine server in this process leaves the freed memory to the step
  const int64_t n = static_cast<int64_t>(b.tokens.size());
  sample_stats_.assign(static_cast<size_t>(n), SampleStats{});
  int64_t gbs = opts_.global_batch_size > 0 ? opts_.global_batch_size : n;
  if (auto group = dist::default_group(); group && group->world_size() > 1) gbs = prepare_data_parallel(*group, n);
  const auto t0 = std::chrono::steady_clock::now();
  int64_t micro_total = 0;
  for (int64_t s = 0; s < n; s += gbs) {
    std::vector<int64_t> idx(std::min(gbs, n - s));
    std::iota(idx.begin(), idx.end(), s);
    micro_total += static_cast<int64_t>(micro_batches(b, idx).size());
  }
  micro_done_ = 0;
  micro_total_ = micro_total;
  // Several optimiser steps on one rollout: the behaviour log-probs are the policy's
  // before the first of them (slime computes them once per rollout), so later steps
  // are off-policy and PPO's ratio and clipping apply. One step needs none: its
  // ratio is exp(logp - logp.detach()).
  behaviour_logp_.clear();
  double old_s = 0, from_rollout = -1;
  if (n > gbs && !opts_.use_rollout_logprobs) {
    const auto t_old = std::chrono::steady_clock::now();
    behaviour_logp_ = behaviour_logprobs(b, &from_rollout);
    old_s = seconds_since(t_old);
  }
  // The critic's values before any update (slime's critic computes them once per
  // rollout, like the old log-probs): the GAE baseline and the value clip's centre.
  old_values_.clear();
  double values_s = 0;
  if (critic_) {
    const auto t_v = std::chrono::steady_clock::now();
    old_values_ = response_values(b);
    values_s = seconds_since(t_v);
  }
  Metrics last;
  int64_t steps = 0;
  for (int64_t s = 0; s < n; s += gbs) {
    std::vector<int64_t> idx(std::min(gbs, n - s));
    std::iota(idx.begin(), idx.end(), s);
    last = optimizer_step(b, idx);
    ++steps;
  }
  behaviour_logp_.clear();
  old_values_.clear();
  if (critic_) {
    ++critic_progress_.rollouts;
    last["perf/critic_values_time"] = values_s;
  }
  last["train/step"] = static_cast<double>(step_);
  last["perf/step_time"] = seconds_since(t0);
  last["perf/train_steps"] = static_cast<double>(steps);
  last["perf/old_logprob_time"] = old_s;
  if (from_rollout >= 0) last["train/old_logprobs_from_rollout"] = from_rollout;
  return last;
}

// A sharded policy's weights digest: each gathered unit's, added (the digest is a sum
// over elements); a collective, cached until the next optimiser step.
std::string Trainer::sharded_digest() {
  // LoRA: the sharded base never changes (rollout_is_policy adds the adapter's part)
  if (digest_step_ == step_ || (lora_ && digest_step_ >= 0)) return digest_;
  std::string d;
  bool exact = true;
  fsdp_->for_each_unit([&](const nn::NamedTensors& unit) {
    for (const auto& [name, t] : unit) exact = exact && t.device().is_cpu() && nn::bi::active(t);
    if (exact) d = d.empty() ? nn::weights_digest(unit) : nn::add_digests(d, nn::weights_digest(unit));
  });
  digest_ = exact ? d : std::string();
  digest_step_ = step_;
  return digest_;
}

// Sharded: "" (the shards differ by design), but a LoRA adapter over a sharded base is
// replicated: its own digest.
std::string Trainer::replica_digest() {
  if (fsdp_) return lora_ ? nn::lora_adapter_digest(*lora_) : std::string();
  return policy_->exact_weights_digest();
}

std::vector<char> Trainer::rollout_is_policy(const TrainBatch& b) {
  std::vector<char> out(b.tokens.size(), 0);
  // Sharded: the digest is a collective, so every rank takes it whatever its batch holds.
  if (fsdp_ && opts_.old_logprobs != OldLogprobs::recompute && !opts_.bf16) sharded_digest();
  if (opts_.old_logprobs == OldLogprobs::recompute || b.logprob_digests.empty() || b.rollout_log_probs.empty() ||
      opts_.bf16)
    return out;
  // "" unless the policy computes with the batch-invariant kernels (float32 on the CPU).
  std::string mine = fsdp_ ? sharded_digest() : policy_->exact_weights_digest();
  if (fsdp_ && lora_) mine = nn::lora_weights_digest(mine, *lora_);
  if (mine.empty()) return out;
  const std::string want = nn::logprob_digest(mine, opts_.temperature);
  for (size_t i = 0; i < out.size(); ++i) out[i] = b.logprob_digests[i] == want;
  return out;
}

// A sample whose engine reported the digest of these very weights at this temperature
// from the batch-invariant kernels holds this policy's log-probs already, bit for bit:
// the engine computed them with the kernels the trainer's forward uses. The others are
// recomputed (all of them under old_logprobs = recompute).
std::vector<std::vector<float>> Trainer::behaviour_logprobs(const TrainBatch& b, double* from_rollout) {
  const auto exact = rollout_is_policy(b);
  const bool check = opts_.old_logprobs == OldLogprobs::check;
  std::vector<int64_t> redo;
  int64_t taken = 0;
  for (size_t i = 0; i < exact.size(); ++i) {
    if (!exact[i] || check) redo.push_back(static_cast<int64_t>(i));
    taken += exact[i];
  }
  auto out = response_logprobs(b, redo);
  for (size_t i = 0; i < exact.size(); ++i) {
    if (!exact[i]) continue;
    const auto& roll = b.rollout_log_probs[i];
    if (check) {
      for (size_t j = 0; j < roll.size(); ++j)
        if (b.loss_masks[i][j] != 0 && !(out[i][j] == roll[j]))
          throw std::runtime_error("trainer: old_logprobs = check: sample " + std::to_string(i + 1) + ", response token " +
                                   std::to_string(j + 1) + ": the rollout's log-prob " + std::to_string(roll[j]) +
                                   " differs from the policy's " + std::to_string(out[i][j]) +
                                   " although its engine reported this policy's weights digest");
    }
    out[i] = roll;
  }
  *from_rollout = exact.empty() ? 0.0 : static_cast<double>(taken) / static_cast<double>(exact.size());
  return out;
}

// Data parallel, before the first step: rank 0's weights everywhere. Every call:
// the per-rank step size (global_batch_size / world_size) and a check that all
// ranks take the same number of steps (else they would wait on each other).
int64_t Trainer::prepare_data_parallel(dist::ProcessGroup& g, int64_t n) {
  const int world = g.world_size();
  if (!params_broadcast_ && (!fsdp_ || lora_)) {  // sharded: the shards were rank 0's from the start
    torch::NoGradGuard ng;
    g.broadcast(params_, 0, lora_ ? "the initial LoRA adapter" : "the initial parameters");
    policy_->weights_changed();
    if (critic_) {
      g.broadcast(critic_->parameters(), 0, "the critic's initial parameters");
      critic_->weights_changed();
    }
    params_broadcast_ = true;
  }
  int64_t gbs = n;
  if (opts_.global_batch_size > 0) {
    if (opts_.global_batch_size % world != 0)
      throw std::invalid_argument("trainer: global_batch_size " + std::to_string(opts_.global_batch_size) +
                                  " is not divisible by world_size " + std::to_string(world) +
                                  " (each rank takes global_batch_size / world_size samples per step)");
    gbs = opts_.global_batch_size / world;
  }
  const double steps = static_cast<double>((n + gbs - 1) / gbs);
  std::vector<torch::Tensor> t{torch::tensor({steps, steps * steps}, torch::kFloat64)};
  g.allreduce_sum(t, "the step counts");
  const double s1 = t[0][0].item<double>(), s2 = t[0][1].item<double>();
  if (std::abs(s1 * s1 - world * s2) > 0.5)
    throw std::invalid_argument("trainer: data-parallel ranks would take different numbers of optimiser steps "
                                "(this rank: " + std::to_string(static_cast<int64_t>(steps)) + ", mean " +
                                std::to_string(s1 / world) + "); give every rank an equal share of the batch "
                                "(rl.rollout.train_data.split) and a global_batch_size that divides it");
  return gbs;
}

std::vector<std::vector<float>> Trainer::response_logprobs(const TrainBatch& b) {
  std::vector<int64_t> all(b.tokens.size());
  std::iota(all.begin(), all.end(), 0);
  return response_logprobs(b, all);
}

std::vector<std::vector<float>> Trainer::response_logprobs(const TrainBatch& b, const std::vector<int64_t>& idx) {
  torch::NoGradGuard ng;
  std::vector<std::vector<float>> out(b.tokens.size());
  const auto mbs = idx.empty() ? std::vector<std::vector<int64_t>>{} : micro_batches(b, idx);
  // Sharded: a collective; a rank with fewer micro-batches (or none) pads with passes
  // over its first sample.
  const int64_t passes = agree_passes(static_cast<int64_t>(mbs.size()));
  for (int64_t k = static_cast<int64_t>(mbs.size()); k < passes; ++k) response_logp(*policy_, pack(b, {0}), false, nullptr);
  for (const auto& mb : mbs) {
    Packed p = pack(b, mb);
    auto lp = response_logp(*policy_, p, false, nullptr).to(torch::kCPU).contiguous();
    const auto acc = lp.accessor<float, 2>();
    for (size_t r = 0; r < mb.size(); ++r)
      for (int64_t j = 0; j < p.resp_lens[r]; ++j) out[mb[r]].push_back(acc[r][j]);
  }
  return out;
}

}  // namespace rl::trainer
