// The LibTorch trainer of one policy: a rollout's train batch in, one or more
// optimiser steps out (slime's actor: log-prob recomputation, advantages, the
// GRPO-family loss over micro-batches with gradient accumulation, global-norm
// clipping, AdamW, a learning-rate schedule; with use_critic, slime's critic too:
// critic.hpp) and train/ + perf/ metrics back. Knows nothing of Lua;
// bindings/torch_trainer.cpp wraps it.
#pragma once
#include <atomic>
#include <functional>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "nn/transformer.hpp"
#include "trainer/critic.hpp"
#include "trainer/fsdp.hpp"
#include "trainer/optim_fused.hpp"
#include "trainer/losses.hpp"

namespace rl::dist {
class ProcessGroup;
}

namespace rl::trainer {

struct OptimizerOptions {
  double lr = 1e-6;
  double min_lr = 0.0;
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8;
  double weight_decay = 0.0;
  std::string schedule = "constant";  // constant | linear | cosine (decay to min_lr over total_steps)
  int64_t warmup_steps = 0;           // linear warm-up from 0 (all schedules)
  int64_t total_steps = 0;            // for linear / cosine decay
  double clip_grad = 1.0;             // global-norm clipping; <= 0 disables
};

// Where the behaviour ("old") log-probs of a multi-step train() come from.
enum class OldLogprobs {
  automatic,  // the rollout's, for each sample whose engine proved them this policy's (logprob_digests); else recomputed
  recompute,  // always a no-grad pass of the policy (slime's default)
  check,      // as automatic, but recompute those too and throw unless they are equal bit for bit
};

struct TrainerOptions {
  LossOptions loss;
  OptimizerOptions optim;
  double temperature = 1.0;            // the rollout's: log-probs are of softmax(logits / T)
  bool use_rollout_logprobs = false;   // old log-probs = the engine's, unconditionally (else old_logprobs)
  OldLogprobs old_logprobs = OldLogprobs::automatic;
  double kl_coef = 0.0;                // KL as reward shaping (reinforce++ family)
  KlType kl_type = KlType::k1;        // slime's --kl-loss-type default, also for kl_coef
  double gamma = 1.0;
  bool normalize_advantages = false;
  // PPO with a critic (advantage_estimator = ppo; slime's critic role, docs/trainer.md):
  // a value model trained beside the policy on the clipped value loss, its values the
  // GAE baseline.
  bool use_critic = false;
  std::optional<double> critic_lr;     // default: optim.lr (the same schedule, scaled)
  double value_clip = 0.2;             // slime's --value-clip
  double lambd = 1.0;                  // GAE's λ (slime's --lambd)
  int64_t num_critic_only_steps = 0;   // the first N train() calls (rollouts) update the critic only
  // On-policy distillation (slime's --use-opd): A -= opd_kl_coef · (logp_old − logp_teacher)
  // per token, before any whitening; needs TrainBatch::teacher_log_probs.
  bool use_opd = false;
  double opd_kl_coef = 1.0;
  int64_t global_batch_size = 0;       // samples per optimiser step; 0 = the whole batch
  int64_t micro_batch_size = 1;        // samples per micro-batch (when max_tokens_per_micro_batch == 0)
  int64_t max_tokens_per_micro_batch = 0;  // dynamic micro-batching by a token budget
  // Megatron's --bf16: mixed precision. Parameters, gradients and AdamW state stay
  // float32 (the master weights); forward passes run under autocast, so matmuls and
  // attention compute in bfloat16 (RMSNorm, softmax and the loss in float32).
  bool bf16 = false;
  // slime's --train-backend fsdp: parameters, gradients and AdamW state sharded over
  // the data-parallel group (trainer/fsdp.hpp; the reference model's parameters too).
  bool sharded = false;
  // Megatron's --recompute-granularity full, --recompute-method, --recompute-num-layers:
  // the policy's and the critic's decoder layers (those `recompute` names) keep only their input for the
  // backward pass and run their forward again there (nn/recompute.hpp). Off by default.
  nn::Recompute recompute;
  // recompute_granularity = "selective" (Megatron's: the attention core alone): what the
  // trainer's attention does in every backward pass anyway (it keeps q, k, v, its output
  // and the log-sum-exp, and recomputes the probabilities from them, flash-style), so it
  // changes nothing but a log line.
  bool recompute_selective = false;
  // LoRA (slime's --lora-rank, --lora-alpha, --target-modules; docs/trainer.md, "LoRA"):
  // with lora_rank > 0 the policy's base weights stay frozen and an adapter
  // (nn/lora.hpp, float32, seeded with lora_seed) is all the optimiser trains. target_modules:
  // {"all-linear"} (the seven projections) or names among q_proj ... down_proj and lm_head.
  int64_t lora_rank = 0;
  double lora_alpha = 16;
  std::vector<std::string> target_modules{"all-linear"};
  uint64_t lora_seed = 0;
};

// The adapter's config TrainerOptions asks for (throws std::invalid_argument naming
// lora_rank, lora_alpha or target_modules).
nn::LoraConfig lora_config(const TrainerOptions& o);

// One rollout's train data (rl.rollout.train_data.convert): per sample, the token ids
// (prompt + response), the response length, the reward for the loss, the loss mask
// over the response, and optionally the engine's log-probs of the response.
struct TrainBatch {
  std::vector<std::vector<int64_t>> tokens;
  std::vector<int64_t> response_lengths;
  std::vector<double> rewards;
  std::vector<std::vector<float>> loss_masks;
  std::vector<std::vector<float>> rollout_log_probs;  // empty, or one per sample
  // Empty, or one per sample: a teacher's log-prob of each response token (on-policy
  // distillation, TrainerOptions::use_opd).
  std::vector<std::vector<float>> teacher_log_probs;
  // Empty, or one per sample: the logprob_digest its engine reported with the log-probs
  // (nn/weights_digest.hpp; "" when none, or when its requests disagreed).
  std::vector<std::string> logprob_digests;
};

using Metrics = std::map<std::string, double>;

// The trainer's view of one sample in its last optimiser step (for the sample's trace).
struct SampleStats {
  double advantage = 0;      // mean advantage over the loss mask
  double loss_weight = 0;    // the sample's share of the step's loss normaliser
  double clipped_frac = 0;   // fraction of its masked tokens whose ratio was clipped
  double logp_mean = 0;      // mean log-prob of its response tokens before the update
  int64_t step = 0;          // the optimiser step (1-based) that used it
};

// Sharded training: model directories whose files each rank reads its own slices from
// (the models handed to the trainer are then skeletons, never filled). Empty: the
// shards are cut from the models' values, rank 0's broadcast.
struct ShardSources {
  std::string policy, ref;
};

// The checkpointed counters of the critic (use_critic).
struct CriticProgress {
  int64_t step = 0;      // the critic's optimiser steps (its learning-rate schedule)
  int64_t rollouts = 0;  // train() calls it trained on (num_critic_only_steps counts these)
};

class Trainer {
 public:
  // The policy's weights digest (nn/weights_digest.hpp), "" unless it computes with the
  // exact kernels: data-parallel replicas compare theirs after each step. Not for a
  // sharded trainer (its ranks hold shards, and its digest is a collective).
  std::string replica_digest();
  // ref may be null (needed for use_kl_loss or kl_coef != 0); critic is the value
  // model's decoder, needed exactly when opts.use_critic. The policy's (and critic's)
  // parameters are trained in place.
  Trainer(std::shared_ptr<nn::Transformer> policy, std::shared_ptr<nn::Transformer> ref, TrainerOptions opts,
          const ShardSources& sources = {}, std::shared_ptr<nn::Transformer> critic = nullptr);

  // Trains on the batch: ceil(n / global_batch_size) optimiser steps. With a
  // data-parallel group (dist::default_group(), world_size W > 1) the batch is this
  // rank's part, each step takes global_batch_size / W of it, and gradients and
  // metrics are averaged over the ranks (docs/trainer.md, "Data parallel"). Returns
  // the train/ metrics of the last step plus perf/ (averaged over steps where
  // slime reports per step: see docs/trainer.md), and train/step.
  Metrics train(const TrainBatch& batch);
  // Per sample of the last train() call, in batch order.
  const std::vector<SampleStats>& sample_stats() const { return sample_stats_; }
  // Throws std::invalid_argument naming the first bad field (train() calls it too).
  void validate(const TrainBatch& batch) const;

  // Log-probs of each sample's response tokens under the current policy (no grad):
  // [B] vectors, for engine/trainer agreement checks.
  std::vector<std::vector<float>> response_logprobs(const TrainBatch& batch);
  // The same for the samples `idx` only (the others' lists stay empty).
  std::vector<std::vector<float>> response_logprobs(const TrainBatch& batch, const std::vector<int64_t>& idx);
  // The critic's value of each response position (no grad): [B] vectors. Throws
  // without use_critic.
  std::vector<std::vector<float>> response_values(const TrainBatch& batch);

  // use_critic: the value model; null otherwise.
  Critic* critic() { return critic_.get(); }
  const CriticProgress& critic_progress() const { return critic_progress_; }
  void set_critic_progress(const CriticProgress& p) { critic_progress_ = p; }

  nn::Transformer& policy() { return *policy_; }
  // LoRA (lora_rank > 0): the adapter being trained (set on the policy; its tensors,
  // under PEFT's names, are what a weight sync sends); null otherwise.
  const std::shared_ptr<nn::LoraAdapter>& lora() const { return lora_; }
  // Sharded (train_backend = fsdp): the policy's shards; null when replicated.
  ShardedModel* sharded() { return fsdp_.get(); }
  // The policy's parameters, whole, to fn: one call with all of them (replicated), or
  // one per unit, gathered (sharded: a collective, every rank must call it).
  void for_each_parameter_group(const std::function<void(const nn::NamedTensors&)>& fn);
  const std::shared_ptr<nn::Transformer>& policy_ptr() const { return policy_; }
  int64_t step() const { return step_; }
  double current_lr() const;
  torch::optim::AdamW& optimizer() { return *optim_; }
  const TrainerOptions& options() const { return opts_; }
  void set_step(int64_t s);  // after loading a checkpoint
  // This rank's parameters, gradients and AdamW state in bytes (sharded: its shards).
  double state_bytes() const;
  // Micro-batches trained (forward + backward) so far in the current train() call
  // and their total: safe to read from another thread while train() runs.
  std::pair<int64_t, int64_t> progress() const { return {micro_done_.load(), micro_total_.load()}; }

 private:
  struct Packed;  // a micro-batch's tensors, end to end or padded
  Packed pack(const TrainBatch& b, const std::vector<int64_t>& idx) const;
  // On the CPU a micro-batch's sequences go end to end, no padding (Packed); elsewhere padded.
  bool packs_sequences() const;
  std::vector<std::vector<int64_t>> micro_batches(const TrainBatch& b, const std::vector<int64_t>& idx) const;
  torch::Tensor response_logp(nn::Transformer& m, const Packed& p, bool with_entropy, torch::Tensor* entropy);
  torch::Tensor critic_values(const Packed& p);  // [B, R], zero past each response
  // One optimiser step over the samples `idx`, in its four parts (trainer.cpp).
  struct StepNorm;   // the step's loss normaliser and data-parallel group
  struct Prepared;   // a micro-batch with its behaviour / reference log-probs and advantages
  Metrics optimizer_step(const TrainBatch& b, const std::vector<int64_t>& idx);
  StepNorm step_normaliser(const TrainBatch& b, const std::vector<int64_t>& idx) const;
  std::vector<Prepared> prepare_micro_batches(const TrainBatch& b, const std::vector<std::vector<int64_t>>& mbs,
                                              const StepNorm& norm);
  Metrics accumulate_gradients(std::vector<Prepared>& prep, const StepNorm& norm, bool policy);
  void accumulate_critic(const Prepared& x, const StepNorm& norm, Metrics& m);
  double clip_and_step(const StepNorm& norm, Metrics& m);
  void critic_step(const StepNorm& norm, Metrics& m);
  double clip_and_step_sharded(const StepNorm& norm);
  // Per sample: 1 when its rollout log-probs are provably this policy's own.
  std::vector<char> rollout_is_policy(const TrainBatch& b);
  // The policy's log-probs of every sample before this train() call (old_logprobs);
  // *from_rollout: the share of samples that took the rollout's.
  std::vector<std::vector<float>> behaviour_logprobs(const TrainBatch& b, double* from_rollout);
  double lr_at(int64_t step) const { return lr_at(step, opts_.optim.lr); }
  double lr_at(int64_t step, double base) const;  // the schedule, peaking at `base`
  int64_t prepare_data_parallel(dist::ProcessGroup& g, int64_t n);  // -> samples per step on this rank
  // The step's Σ (logp_old − logp_teacher)·mask and Σ mask, kept on the device (read once a step).
  torch::Tensor opd_kl_sum_, opd_tokens_;
  void record_sample_stats(const Packed& p, const torch::Tensor& adv, const torch::Tensor& logp,
                           const torch::Tensor& clipped, double divisor, bool token_mean,
                           const std::vector<int64_t>& rows);

  std::shared_ptr<nn::Transformer> policy_, ref_;
  TrainerOptions opts_;
  std::shared_ptr<nn::LoraAdapter> lora_;  // lora_rank > 0
  std::unique_ptr<ShardedModel> fsdp_, ref_fsdp_;  // train_backend = fsdp
  // Sharded: every rank runs the same number of passes; a rank with fewer micro-batches
  // pads with passes over `pad` whose results it drops (they contribute zero gradient).
  int64_t agree_passes(int64_t mine) const;
  ShardedModel* sharded_of(const nn::Transformer& m) const;
  std::string sharded_digest();
  std::string digest_;          // sharded_digest's, as of optimiser step digest_step_
  int64_t digest_step_ = -1;
  std::vector<torch::Tensor> params_;
  std::unique_ptr<torch::optim::AdamW> optim_;
  FusedAdamW fused_;  // torch::optim::AdamW's step in ATen's multi-tensor kernels
  FusedAdamW critic_fused_;
  int64_t step_ = 0;
  bool params_broadcast_ = false;  // data parallel: rank 0's weights taken once
  std::vector<SampleStats> sample_stats_;
  std::atomic<int64_t> micro_done_{0}, micro_total_{0};
  std::vector<std::vector<float>> behaviour_logp_;  // per sample, during a multi-step train()
  std::unique_ptr<Critic> critic_;                  // use_critic
  CriticProgress critic_progress_;
  std::vector<std::vector<float>> old_values_;      // per sample, V_old of the running train()
};

}  // namespace rl::trainer
