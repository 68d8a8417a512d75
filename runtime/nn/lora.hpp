// LoRA adapters (PEFT's layout and names) for the decoder of nn/transformer.hpp.
// For a target projection W [out, in]: y = W x + s · B (A x), A [r, in], B [out, r],
// s = alpha / r, applied unmerged in both the trainer's forward and the engine's
// cached forward, with the same kernels in the same order, so engine log-probs equal
// the trainer's bit for bit (float32 on the CPU). The base stays frozen; an adapter's
// tensors are its only trainable parameters and are float32 even over a bf16 base.
#pragma once
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <torch/torch.h>

#include "model/config.hpp"

namespace rl::nn {

// PEFT's module names, in the order an adapter stores them within a layer.
enum class LoraTarget { q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj };
const char* lora_target_name(LoraTarget t);
// "q_proj" → LoraTarget::q_proj; throws std::invalid_argument naming the bad name and the valid ones.
LoraTarget parse_lora_target(const std::string& name);

struct LoraConfig {
  int64_t rank = 8;
  double alpha = 16;  // scale = alpha / rank
  std::vector<LoraTarget> targets{LoraTarget::q_proj,    LoraTarget::k_proj,  LoraTarget::v_proj,
                                  LoraTarget::o_proj,    LoraTarget::gate_proj, LoraTarget::up_proj,
                                  LoraTarget::down_proj};
  bool lm_head = false;  // also adapt the unembedding (PEFT's "lm_head" target)
  double scale() const { return alpha / static_cast<double>(rank); }
  // Throws std::invalid_argument naming the field (rank < 1, alpha <= 0, no target).
  void validate() const;
};

// The config for PEFT-style target_modules names: "all-linear" (the seven
// projections), q_proj ... down_proj, "lm_head"; validated (std::invalid_argument
// naming lora_rank, lora_alpha or target_modules).
LoraConfig make_lora_config(int64_t rank, double alpha, const std::vector<std::string>& target_modules);

// One adapter for one model shape.
class LoraAdapter {
 public:
  // Tensors allocated (uninitialised) with `opts` (default float32 on the CPU).
  LoraAdapter(const model::ModelConfig& model, LoraConfig cfg, torch::TensorOptions opts = torch::kFloat32);
  // PEFT's initialisation: A kaiming-uniform (a = √5) from a generator seeded with
  // `seed`, B = 0, so a fresh adapter leaves the model's outputs unchanged.
  // identity = false: B kaiming-uniform too (PEFT's init_lora_weights=False), for tests.
  void init(uint64_t seed, bool identity = true);
  const LoraConfig& config() const { return cfg_; }
  const model::ModelConfig& model_config() const { return model_; }
  // Every A and B under PEFT's names
  // (base_model.model.model.layers.{i}.self_attn.q_proj.lora_A.weight, ...), in a
  // fixed order (layer, target, A before B; lm_head last). Writing into them in place
  // (copy_) is how loads and syncs update the adapter.
  const std::vector<std::pair<std::string, torch::Tensor>>& named_parameters() const { return params_; }
  std::vector<torch::Tensor> parameters() const;
  // Layer `layer`'s A and B for `t`; both undefined when `t` is not a target.
  std::pair<torch::Tensor, torch::Tensor> get(int64_t layer, LoraTarget t) const;
  std::pair<torch::Tensor, torch::Tensor> lm_head() const;  // undefined unless cfg.lm_head
  // s · B (A x) for x [..., in] → [..., out] (the batch-invariant kernels when x is
  // float32 on the CPU, computed in the adapter's dtype); undefined when `t` is not a target.
  torch::Tensor delta(const torch::Tensor& x, int64_t layer, LoraTarget t) const;
  torch::Tensor lm_head_delta(const torch::Tensor& x) const;
  // base + s · B A (differentiable; in base's dtype): the lm_head with the adapter
  // merged, which the chunked log-softmax (nn/logprobs.hpp) takes as its weight.
  // `base` itself when the adapter does not target lm_head.
  torch::Tensor merged_lm_head(const torch::Tensor& base) const;
  // Bumped by every writer after an in-place update (loads, syncs, optimiser steps read it lazily).
  uint64_t version() const;

 private:
  model::ModelConfig model_;
  LoraConfig cfg_;
  std::vector<std::pair<std::string, torch::Tensor>> params_;
  // per layer, per LoraTarget: index into params_ of A (B is the next), or -1
  std::vector<std::vector<int64_t>> index_;
  int64_t lm_head_index_ = -1;
};

// PEFT's target_modules names of `cfg` (its targets in its order, then lm_head): what make_lora_config takes back, and what adapter_config.json lists.
std::vector<std::string> lora_target_modules(const LoraConfig& cfg);

// Copies `src` into `dst` in place (an adapter sync that arrives as named tensors: shared
// memory, a c10d broadcast): every one of dst's tensors must be in src under its PEFT name
// with its shape, and src may hold nothing else; dtypes are converted. Throws
// std::invalid_argument naming the first missing, unexpected or misshapen tensor (dst may
// then be partly written: copy into a fresh adapter).
void copy_adapter_tensors(LoraAdapter& dst, const std::vector<std::pair<std::string, torch::Tensor>>& src);

// The weights digest (nn/weights_digest.hpp) of a base model with `adapter` applied:
// add_digests(base, the adapter's tensors' digest); "" when base is "" (not the exact
// kernels) or the adapter is not float32 on the CPU. Transformer::exact_weights_digest
// returns it while an adapter is set; an engine reports it for requests under an adapter.
std::string lora_weights_digest(const std::string& base, const LoraAdapter& adapter);
// The adapter's own part of it: its tensors' digest by value, "" unless all are float32
// on the CPU (an engine computes it once per loaded adapter and adds it to its base's).
std::string lora_adapter_digest(const LoraAdapter& adapter);

// PEFT's on-disk adapter: adapter_config.json (peft_type LORA, r, lora_alpha,
// target_modules, base_model_name_or_path) + adapter_model.safetensors, which
// peft.PeftModel.from_pretrained loads.
void save_peft_adapter(const LoraAdapter& adapter, const std::filesystem::path& dir, const std::string& base_model);
// Reads a PEFT adapter for `model`'s shape; throws std::runtime_error naming the file
// and field on anything it cannot take (another peft_type, a shape mismatch, DoRA, ...).
std::shared_ptr<LoraAdapter> load_peft_adapter(const std::filesystem::path& dir, const model::ModelConfig& model,
                                               torch::TensorOptions opts = torch::kFloat32);

// The engine: each new token (row of a CachedBatch) runs under at most one adapter.
// Group g's adapter applies to the rows `rows[g]` ([n_g] int64 indices into the N
// new tokens); rows in no group run the base model alone.
struct LoraBatch {
  std::vector<std::shared_ptr<const LoraAdapter>> adapters;
  std::vector<torch::Tensor> rows;
  bool empty() const { return adapters.empty(); }
};

}  // namespace rl::nn
