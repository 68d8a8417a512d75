#include <algorithm>
#include <cstdlib>
#include <stdexcept>

#include "base/errors.hpp"
#include "base/log_text.hpp"
#include "engine/engine_impl.hpp"
#include "engine/engine_weights.hpp"
#include "model/tensor_files.hpp"
#include "nn/weights.hpp"

namespace rl::engine {

namespace fs = std::filesystem;

namespace {

torch::Device parse_device(const std::string& s) {
  try {
    return torch::Device(s);
  } catch (const std::exception&) {
    throw Error("engine: device '" + s + "' is not a device", "use cpu, cuda or cuda:N");
  }
}

torch::ScalarType pick_dtype(const std::string& name, const model::ModelConfig& cfg, const torch::Device& dev) {
  if (name == "auto") {
    if (dev.is_cpu()) return torch::kFloat32;  // bf16 matmuls are slow on most CPUs
    return nn::parse_dtype(cfg.torch_dtype);
  }
  try {
    return nn::parse_dtype(name);
  } catch (const std::exception&) {
    throw Error("engine: dtype '" + name + "' is not known", "use auto, float32, bfloat16 or float16");
  }
}

}  // namespace

ModelRunner::ModelRunner(const EngineOptions& opts)
    : opts_(opts),
      config_(fs::is_directory(opts.model) ? model::ModelConfig::load(opts.model) : model::ModelConfig{}),
      dtype_(torch::kFloat32),
      device_(parse_device(opts.device)) {
  if (device_.is_cuda() && !torch::cuda::is_available())
    throw Error("engine: device " + opts.device + " asked for but CUDA is not available",
                "this LibTorch build or machine has no GPU; use --device cpu");
  if (fs::is_directory(opts.model)) {
    dtype_ = pick_dtype(opts.dtype, config_, device_);
    model_ = nn::Transformer::from_pretrained(opts.model, nn::ModelOptions{dtype_, device_, true});
  } else {
    model_ = nn::Transformer::from_pretrained(opts.model, nn::ModelOptions{torch::kFloat32, device_, true});
    config_ = model_->config();
    dtype_ = pick_dtype(opts.dtype, config_, device_);
    if (dtype_ != torch::kFloat32)
      model_ = nn::Transformer::from_pretrained(opts.model, nn::ModelOptions{dtype_, device_, true});
  }
  model_->set_requires_grad(false);
}

int64_t ModelRunner::kv_bytes_per_token() const {
  return 2 * config_.num_hidden_layers * config_.num_key_value_heads * config_.head_dim *
         static_cast<int64_t>(c10::elementSize(dtype_));
}

std::string ModelRunner::dtype_name() const { return nn::dtype_config_name(dtype_); }
std::string ModelRunner::device_name() const { return device_.str(); }

void ModelRunner::configure_steps(int64_t context_length) {
  const char* env = std::getenv("RLHOST_GPU_KERNELS");
  if (!device_.is_cuda() || !gpu_step_built() || (env && std::string(env) == "0")) return;
  const int64_t max_bs = opts_.disable_cuda_graph ? 0 : std::min(opts_.cuda_graph_max_bs, opts_.max_running_requests);
  gpu_ = std::make_unique<GpuStepper>(max_bs, opts_.max_running_requests, context_length, opts_.block_size);
  log::info("engine: CUDA steps with rlhost's kernels and on-device sampling; " +
            (max_bs > 0 ? "decode batches up to " + std::to_string(max_bs) + " replay CUDA graphs"
                        : std::string("no CUDA graphs (disable_cuda_graph or cuda_graph_max_bs 0)")));
}

void ModelRunner::launch(const std::vector<Sequence*>& batch, const std::vector<SampleRow>& rows,
                         const std::vector<int32_t>* ahead) {
  // Prompt log-probs need logits at prompt positions, which GpuStepper does not
  // compute: such a step runs here, synchronously (the engine launches it with no
  // step in flight and none ahead of it, EngineImpl::launch).
  // Likewise a step with LoRA rows: GpuStepper's kernels know no adapters.
  const bool scores = !ahead && std::any_of(batch.begin(), batch.end(),
                                            [](const Sequence* s) { return s->wants_input_logprobs(); });
  const bool lora = std::any_of(batch.begin(), batch.end(), [](const Sequence* s) { return s->lora != nullptr; });
  if (gpu_ && !scores && !lora) {
    gpu_->launch(*model_, cache_, batch, rows, ahead);
    return;
  }
  // The CPU computes now; the step in flight (if any) already has its tokens.
  std::vector<int32_t> next;
  if (ahead) {
    if (done_.empty()) throw std::logic_error("engine: a step ahead with no step in flight");
    for (int32_t r : *ahead) next.push_back(done_.back().tokens[static_cast<size_t>(r)]);
  }
  std::vector<ScoreRow> scored;
  torch::Tensor logits = forward(batch, ahead ? &next : nullptr, &scored);
  const auto S = static_cast<int64_t>(batch.size());
  SampleOutput out = sample_tokens(scored.empty() ? logits : logits.narrow(0, 0, S), rows);
  out.input_logprobs.resize(batch.size());
  out.input_top_logprobs.resize(batch.size());
  if (!scored.empty()) score_tokens(logits.narrow(0, S, static_cast<int64_t>(scored.size())), scored, out);
  done_.push_back(std::move(out));
}

SampleOutput ModelRunner::collect() {
  if (gpu_ && done_.empty()) return gpu_->collect();
  if (done_.empty()) throw std::logic_error("engine: no step to collect");
  SampleOutput out = std::move(done_.front());
  done_.pop_front();
  return out;
}

void ModelRunner::allocate_cache(int64_t num_blocks, int64_t block_size) {
  if (gpu_) gpu_->invalidate();
  if (!model_) {
    // The cache only needs the shapes: build it from a throwaway description.
    cache_ = nn::KVCache{};
    cache_.num_blocks = num_blocks;
    cache_.block_size = block_size;
    auto opts = torch::TensorOptions().dtype(dtype_).device(device_);
    for (int64_t l = 0; l < config_.num_hidden_layers; ++l) {
      cache_.k.push_back(torch::empty({num_blocks * block_size, config_.num_key_value_heads, config_.head_dim}, opts));
      cache_.v.push_back(torch::empty({num_blocks * block_size, config_.num_key_value_heads, config_.head_dim}, opts));
    }
    return;
  }
  cache_ = model_->new_kv_cache(num_blocks, block_size);
}

void ModelRunner::free_cache() {
  if (gpu_) gpu_->invalidate();
  const int64_t nb = cache_.num_blocks, bs = cache_.block_size;
  cache_ = nn::KVCache{};
  cache_.num_blocks = nb;
  cache_.block_size = bs;
}

void ModelRunner::free_weights() {
  if (gpu_) gpu_->invalidate();
  merged_heads_.clear();
  shared_.reset();
  model_.reset();
}

bool ModelRunner::restore_weights() {
  if (gpu_) gpu_->invalidate();
  merged_heads_.clear();
  model_ = nn::Transformer::from_pretrained(opts_.model, nn::ModelOptions{dtype_, device_, true});
  const bool same = !updated_in_memory_ && (weights_dir_.empty() || fs::is_directory(weights_dir_));
  if (same && !weights_dir_.empty()) model_->load(model::read_safetensors_dir(weights_dir_));
  if (!same) weights_dir_.clear();
  updated_in_memory_ = false;
  model_->set_requires_grad(false);
  return same;
}

void ModelRunner::load_weights_from(const fs::path& dir) {
  if (!fs::is_directory(dir))
    throw Error("update_weights_from_disk: " + dir.string() + " is not a directory",
                "give a directory with *.safetensors (and model.safetensors.index.json when sharded)");
  model::TensorSet tensors = model::read_safetensors_dir(dir);
  model_->load(tensors);  // validates names, shapes and dtypes against the config first
  weights_dir_ = dir;
  updated_in_memory_ = false;
}

void ModelRunner::copy_weights(const std::vector<std::pair<std::string, torch::Tensor>>& tensors) {
  torch::NoGradGuard no_grad;
  for (const auto& [name, t] : tensors) {
    torch::Tensor dst = model_->parameter(name);  // throws naming unknown names
    if (dst.sizes() != t.sizes()) {
      std::ostringstream os;
      os << "update_weights: " << name << " has shape " << t.sizes() << " but the engine's is " << dst.sizes();
      throw Error(os.str());
    }
    nn::copy_weight(dst, t);
  }
  model_->weights_changed();
  updated_in_memory_ = true;
}

std::unique_ptr<nn::WeightStage> ModelRunner::plan_stage(const std::vector<std::string>& names,
                                                        const std::vector<std::vector<int64_t>>& shapes) {
  if (!model_) throw Error("update_weights: weights are released", "resume them first");
  if (shared_) return nullptr;
  auto stage = std::make_unique<nn::WeightStage>(model_->named_parameters(), names, shapes);
  if (!gpu_) stage->set_panel_sources(model_->panel_sources());
  return stage;
}

void ModelRunner::install_stage(nn::WeightStage& stage) {
  if (!model_ || shared_ || !stage.matches(model_->named_parameters()))
    throw Error("update_weights: the engine's weights were released, reloaded or shared while this update arrived",
                "send the update again");
  if (gpu_) gpu_->invalidate();
  stage.swap_in();
  model_->weights_changed(stage.take_panels());
  updated_in_memory_ = true;
}

const nn::SharedLayout& ModelRunner::share_weights(const std::string& dir) {
  if (gpu_) gpu_->invalidate();
  shared_ = std::make_unique<nn::SharedWeights>(model_->named_parameters(), dir);
  return shared_->layout();
}

namespace {
void check_shared(const nn::SharedWeights* shared, const std::string& id, int k) {
  if (!shared || shared->layout().id != id)
    throw Error("update_weights_from_shm: the engine has no shared weights '" + id + "'" +
                    (shared ? " (it shares '" + shared->layout().id + "' now)" : ""),
                "its weights were released or shared anew: POST /init_weights_shm again");
  if (k == shared->layout().active)
    throw Error("update_weights_from_shm: buffer " + std::to_string(k) + " is the one the engine reads",
                "write the other buffer (the reply's next_buffer)");
}
}  // namespace

std::vector<torch::Tensor> ModelRunner::shared_panel_sources(const std::string& id, int k) const {
  check_shared(shared_.get(), id, k);
  std::vector<torch::Tensor> out;
  if (gpu_) return out;
  for (const auto& w : model_->panel_sources()) out.push_back(shared_->view_in(k, w));
  return out;
}

void ModelRunner::use_shared_buffer(const std::string& id, int k, std::vector<nn::bi::PackedWeight> panels) {
  check_shared(shared_.get(), id, k);
  if (gpu_) gpu_->invalidate();
  shared_->activate(k);
  model_->weights_changed(std::move(panels));
  updated_in_memory_ = true;
}

const torch::Tensor& ModelRunner::merged_lm_head(const std::shared_ptr<const nn::LoraAdapter>& adapter) {
  const uint64_t version = adapter->version(), generation = model_->weights_generation();
  // forget adapters nobody else holds any more (unloaded, replaced)
  std::erase_if(merged_heads_, [](const MergedHead& m) { return m.adapter.use_count() == 1; });
  for (auto& m : merged_heads_)
    if (m.adapter == adapter) {
      if (m.adapter_version != version || m.weights_generation != generation) {
        m.weight = adapter->merged_lm_head(model_->lm_head_weight());
        m.adapter_version = version;
        m.weights_generation = generation;
      }
      return m.weight;
    }
  if (merged_heads_.size() >= 8) merged_heads_.erase(merged_heads_.begin());
  merged_heads_.push_back(MergedHead{adapter, version, generation, adapter->merged_lm_head(model_->lm_head_weight())});
  return merged_heads_.back().weight;
}

torch::Tensor ModelRunner::forward(const std::vector<Sequence*>& batch, const std::vector<int32_t>* next,
                                   std::vector<ScoreRow>* scored) {
  torch::NoGradGuard no_grad;
  const int64_t bs = cache_.block_size;
  std::vector<int64_t> ids, pos, slots, last, extra;
  std::vector<size_t> extra_seq;  // the sequence of each extra (scored) row
  nn::CachedBatch b;
  std::vector<std::vector<int64_t>> tables;
  // LoRA: the rows of each adapter's sequences (CachedBatch::lora), in order of first appearance.
  std::vector<const LoraSlot*> lora_slots;
  std::vector<std::vector<int64_t>> lora_rows;
  int64_t n = 0;
  for (size_t i = 0; i < batch.size(); ++i) {
    const Sequence* s = batch[i];
    // With `next`, the sequence's input is that token, after all of its own.
    const int64_t have = static_cast<int64_t>(s->tokens.size());
    const int64_t L = next ? have + 1 : have, from = next ? have : s->num_computed;
    for (int64_t j = from; j < L; ++j) {
      ids.push_back(j < have ? s->tokens[static_cast<size_t>(j)] : (*next)[i]);
      pos.push_back(j);
      slots.push_back(static_cast<int64_t>(s->blocks[static_cast<size_t>(j / bs)]) * bs + j % bs);
    }
    // Prompt log-probs: position j's logits score prompt token j + 1, for the
    // pending ones (from input_logprob_next) among this step's positions.
    if (scored && !next && s->wants_input_logprobs() && from > s->input_logprob_next - 1)
      throw std::logic_error("engine: prompt position " + std::to_string(s->input_logprob_next - 1) +
                             " should be scored but its K/V is cached (Sequence::cacheable_prefix)");
    if (scored && !next)
      for (int64_t j = std::max(from, s->input_logprob_next - 1); j + 1 < s->prompt_len && j < L; ++j) {
        extra.push_back(n + j - from);
        extra_seq.push_back(i);
        scored->push_back(ScoreRow{i, &s->req.params, s->tokens[static_cast<size_t>(j + 1)], s->req.top_logprobs_num});
      }
    if (s->lora) {
      auto at = std::find(lora_slots.begin(), lora_slots.end(), s->lora.get());
      if (at == lora_slots.end()) {
        lora_slots.push_back(s->lora.get());
        lora_rows.emplace_back();
        at = lora_slots.end() - 1;
      }
      auto& rows = lora_rows[static_cast<size_t>(at - lora_slots.begin())];
      for (int64_t r = n; r < n + L - from; ++r) rows.push_back(r);
    }
    n += L - from;
    last.push_back(n - 1);
    b.query_lens.push_back(L - from);
    b.context_lens.push_back(L);
    tables.emplace_back(s->blocks.begin(), s->blocks.end());
  }
  auto i64 = torch::TensorOptions().dtype(torch::kInt64);
  b.input_ids = torch::tensor(ids, i64).to(device_);
  b.positions = torch::tensor(pos, i64).to(device_);
  b.slot_mapping = torch::tensor(slots, i64).to(device_);
  b.context_slots = nn::CachedBatch::slots_from_blocks(tables, b.context_lens, bs).to(device_);
  for (size_t g = 0; g < lora_slots.size(); ++g) {
    b.lora.adapters.push_back(lora_slots[g]->adapter);
    b.lora.rows.push_back(torch::tensor(lora_rows[g], i64).to(device_));
  }
  torch::Tensor hidden = model_->forward_cached(b, cache_);
  // One lm_head GEMM for the last positions and any scored ones after them (the
  // kernels are batch-invariant: each row's logits are those it has alone).
  last.insert(last.end(), extra.begin(), extra.end());
  torch::Tensor h_last = hidden.index_select(0, torch::tensor(last, i64).to(device_));
  torch::Tensor logits = model_->logits(h_last);
  // Rows under an adapter on lm_head: their logits with its merged unembedding (the
  // trainer's effective_lm_head), row groups as in the layers (batch-invariant kernels).
  for (const LoraSlot* slot : lora_slots) {
    if (!slot->adapter->config().lm_head) continue;
    std::vector<int64_t> rows;
    for (size_t r = 0; r < last.size(); ++r) {
      const size_t seq = r < batch.size() ? r : extra_seq[r - batch.size()];
      if (batch[seq]->lora.get() == slot) rows.push_back(static_cast<int64_t>(r));
    }
    auto idx = torch::tensor(rows, i64).to(device_);
    logits.index_copy_(0, idx, model_->logits_with(h_last.index_select(0, idx), merged_lm_head(slot->adapter)));
  }
  return logits.to(torch::kFloat32);
}

void update_weights(Engine& engine, const std::vector<std::pair<std::string, torch::Tensor>>& tensors,
                    const std::optional<std::string>& weight_version) {
  auto* impl = dynamic_cast<EngineImpl*>(&engine);
  if (!impl) throw std::invalid_argument("update_weights: not an rlhost engine");
  impl->update_weights_in_memory(tensors, weight_version);
}

}  // namespace rl::engine
