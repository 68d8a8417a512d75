// The decoder-only transformer of the Llama / Qwen2 / Qwen3 families in LibTorch:
// embeddings, RMSNorm, rotate_half RoPE, grouped-query attention (optional q/k/v/o
// bias, optional per-head q/k RMSNorm), SwiGLU MLP, tied or separate lm_head.
// One set of weights, two paths: full-sequence forward for training, and cached
// incremental forward over a paged KV cache for the engine.
#pragma once
#include <filesystem>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include <torch/torch.h>

#include "model/tensor_files.hpp"
#include "model/config.hpp"
#include "nn/batch_invariant.hpp"
#include "nn/kv_cache.hpp"
#include "nn/logprobs.hpp"
#include "nn/lora.hpp"
#include "nn/rope.hpp"

namespace rl::nn {

struct ModelOptions {
  torch::ScalarType dtype = torch::kFloat32;  // float32 | bfloat16 | float16 (fp16 on CUDA)
  torch::Device device = torch::kCPU;
  // Inference (the engine): q/k/v and gate/up each share one matrix so they run as
  // one matmul (one GEMM launch instead of three on CUDA). Where the exact float32 CPU
  // path has packed panels (AVX-512, AVX2), matrices are packed once per weight update, the
  // panels are what the matmuls read, and the matrices keep the HF [out, in] layout
  // (fused ones as blocks of rows), so an update is written or received into them as
  // sent. Elsewhere projection weights are stored
  // [in, out] (exposed as transposed [out, in] views under their HF names), so
  // small-batch matmuls stream them without MKL repacking them every call (1.4x at
  // batch 1); a tied embedding is stored that way too ([hidden, vocab], the
  // lm_head's layout; the embedding lookup gathers its columns). Training keeps the
  // default layout.
  bool inference_layout = false;
};

// A weight's packed GEMM panels for the training layout, packed on first use and again
// whenever the weight changed since (its version counter moved: the optimiser's and
// every other in-place write bump it), so stale panels are never read. Keeps the
// trainer from packing each weight once per GEMM call (per micro-batch, per chunk).
class PackedCache {
 public:
  // The panels of w [out, in] (empty where packing does not pay: see bi::packed_available).
  const bi::PackedWeight& get(const torch::Tensor& w);

 private:
  bi::PackedWeight packed_;
  const void* data_ = nullptr;
  int64_t version_ = -1;
};

// Sharded training (trainer/fsdp.hpp): the parameters live elsewhere, in shards, and
// each unit's are brought in just before it runs. Units (Transformer::parameter_units):
// 0 the embedding, 1..L the decoder layers, L+1 the final norm, L+2 the lm_head
// when it is not tied to the embedding.
class UnitHooks {
 public:
  virtual ~UnitHooks() = default;
  // Unit u's parameters for one use: the shapes and order parameter_units() gives.
  virtual std::vector<torch::Tensor> enter(int unit) = 0;
  // That use produced `out`; the forward goes on with the returned tensor.
  virtual torch::Tensor leave(int unit, const torch::Tensor& out) = 0;
  // The embeddings of `ids` [batch, seq] (unit 0's rows): by default unit 0 entered
  // whole around the lookup.
  virtual torch::Tensor embed(const torch::Tensor& ids) { return leave(0, torch::embedding(enter(0).at(0), ids)); }
  // Recomputed layers (Transformer::set_recompute): during the backward pass, units
  // first..last run their forward again under autograd, and their backward follows at
  // once. Between the two calls, what enter() brings in is kept for that backward (it
  // is not released at leave()); `next` is the unit whose forward the backward pass
  // runs again after these (-1: none), worth fetching while these compute.
  virtual void recompute_begin(int first, int last, int next) {
    (void)first, (void)last, (void)next;
  }
  virtual void recompute_end() {}
};

// Activation recomputation in the training forward (Megatron's --recompute-granularity
// full, --recompute-method, --recompute-num-layers; nn/recompute.hpp): the decoder
// layers it names keep only their input hidden state for the backward pass and run
// their forward again there.
struct Recompute {
  enum class Method { none, uniform, block };
  Method method = Method::none;
  // uniform: the layers in groups of num_layers, each group recomputed as one block
  // (its input kept); block: the first num_layers layers, each alone, the rest kept.
  int64_t num_layers = 1;
};

// A batch of sequences laid out for one training forward pass (Transformer::forward of
// it): end to end in one row with no padding (`end_to_end`, the trainer's layout on the
// CPU: forward_packed), else right-padded rows [B, L], L the longest (at least
// min_len). Position j of sequence i is row starts[i] + j of the flattened ids and of
// the hidden states.
struct SequenceBatch {
  torch::Tensor ids;            // [1, total] or [B, L] int64 (made on the CPU)
  std::vector<int64_t> lens;    // each sequence's length end to end; empty when padded
  std::vector<int64_t> starts;  // each sequence's first row
};
SequenceBatch lay_out(const std::vector<const std::vector<int64_t>*>& seqs, bool end_to_end, int64_t min_len = 1);

class Transformer {
 public:
  // Weights are allocated (uninitialised); fill them with load() or init_random().
  Transformer(model::ModelConfig config, ModelOptions opts = {});

  // A model directory (config.json + safetensors) or a .gguf file.
  static std::unique_ptr<Transformer> from_pretrained(const std::filesystem::path& path, ModelOptions opts = {});

  // Validates the set against the config, then copies (converting dtype).
  void load(const model::TensorSet& tensors);
  // Hugging Face's initialisation: normal(0, initializer_range) for matrices, ones
  // for norms, zeros for biases. Deterministic for a seed.
  void init_random(uint64_t seed);

  const model::ModelConfig& config() const { return config_; }
  const ModelOptions& options() const { return opts_; }
  // Parameters under their Hugging Face names, in checkpoint order; lm_head is
  // absent when tied. Updating weights in place (copy_) keeps the model's views.
  const std::vector<std::pair<std::string, torch::Tensor>>& named_parameters() const { return params_; }
  torch::Tensor parameter(const std::string& name) const;  // throws naming unknown names
  void set_requires_grad(bool on);
  // After writing parameters in place from outside (copy_ into named_parameters()):
  // refreshes anything derived from them (the tied lm_head copy, the packed GEMM
  // panels of the inference layout); the one place to do it, called by every writer.
  void weights_changed();
  // The matrices weights_changed() packs into panels, in its order (views on the live
  // weights; empty where it packs none). A staged update packs the same views of its
  // new memory ahead (WeightStage::pack_panels), and hands them to the overload below.
  std::vector<torch::Tensor> panel_sources() const;
  // weights_changed() with the panels of panel_sources() already packed from the new
  // values (same order; an undefined one is packed here).
  void weights_changed(std::vector<bi::PackedWeight> packed);
  // Counts weights_changed() calls: what was derived from the weights at one value is
  // stale at another (the engine's merged LoRA unembeddings).
  uint64_t weights_generation() const { return weights_generation_; }
  const torch::Tensor& lm_head_weight() const { return lm_head_; }
  // lm_head's packed panels when the float32 CPU kernels use them (else empty): the
  // engine's packed copy, or the training layout's cache.
  const bi::PackedWeight& lm_head_packed();
  // nn::weights_digest of the parameters when this model's log-probs come from the
  // batch-invariant kernels (float32 on the CPU, RLHOST_BATCH_INVARIANT not 0), else
  // "": equal digests mean equal log-probs, bit for bit. Computed on first use after
  // each weights_changed() (one pass over the weights), then cached.
  std::string exact_weights_digest();

  // Per unit (see UnitHooks), the indices into named_parameters() of its parameters.
  std::vector<std::vector<size_t>> parameter_units() const;
  int lm_head_unit() const;  // 0 when tied, else L + 2
  // Sharded training: while hooks are set, forward() takes every unit's parameters
  // from them, and the model's own parameter storage (released by the hooks' owner)
  // must not be read: whatever would read it throws (check_whole).
  void set_unit_hooks(UnitHooks* hooks) { hooks_ = hooks; }
  UnitHooks* unit_hooks() const { return hooks_; }
  // Throws std::logic_error naming `what` when the parameters are sharded.
  void check_whole(const char* what) const;

  // Which layers forward() recomputes in the backward pass (default: none). Throws
  // std::invalid_argument for num_layers < 1.
  void set_recompute(Recompute r);
  const Recompute& recompute() const { return recompute_; }

  // LoRA (nn/lora.hpp): forward() and sequence_logprobs() apply `adapter` unmerged
  // (null: the base alone). The engine's forward_cached takes its adapters per row
  // from CachedBatch::lora instead.
  // Throws std::invalid_argument when the adapter was made for another model shape.
  void set_lora(std::shared_ptr<const LoraAdapter> adapter);
  const std::shared_ptr<const LoraAdapter>& lora() const { return lora_; }
  // True when the set adapter targets lm_head: log-probs then take effective_lm_head()
  // (lm_head_weight() + s · B A, differentiable) and not lm_head_packed(). The engine's
  // forward_cached returns hidden states only: for rows under such an adapter its runner
  // takes logits_with(hidden, adapter.merged_lm_head(lm_head_weight())).
  bool lora_lm_head() const { return lora_ && lora_->config().lm_head; }
  torch::Tensor effective_lm_head() const;

  // Training path. input_ids [B, T] (right-padded), positions default arange(T).
  // Returns final-norm hidden states [B, T, H].
  torch::Tensor forward(const torch::Tensor& input_ids, const torch::Tensor& positions = {});
  // The same over sequences packed end to end with no padding: input_ids [1, total]
  // holds them in order (total = the sum of lens), positions restart at 0 for each,
  // and each attends within itself. Returns [1, total, H]; every token's hidden state
  // has the padded forward's bits under the batch-invariant kernels. Throws
  // std::invalid_argument when lens do not fill input_ids.
  torch::Tensor forward_packed(const torch::Tensor& input_ids, const std::vector<int64_t>& lens);
  // forward() or forward_packed() as the batch is laid out, its ids moved to the model's device.
  torch::Tensor forward(const SequenceBatch& batch);
  torch::Tensor logits(const torch::Tensor& hidden) const;  // [..., V] in the model dtype
  // The logits under another unembedding [V, H] (an adapter's merged lm_head), with the
  // kernel logits() and the training path's log-probs use for it.
  torch::Tensor logits_with(const torch::Tensor& hidden, const torch::Tensor& lm_head) const;
  // log p(input_ids[b, t+1] | input_ids[b, :t+1]) for t < T-1 → [B, T-1] (float32),
  // chunked over the vocabulary (see token_logprobs).
  TokenLogprobs sequence_logprobs(const torch::Tensor& input_ids, double temperature = 1.0,
                                  bool with_entropy = false);

  // Engine path: writes the new tokens' keys/values into `cache` at batch.slot_mapping
  // and attends over each sequence's context. Returns final-norm hidden states [N, H]
  // for the N new tokens, in batch order.
  torch::Tensor forward_cached(const CachedBatch& batch, KVCache& cache);
  // The same on CUDA with the engine's own kernels (nn/gpu_ops.hpp; inference
  // layout only): no host synchronisation, so it can run inside a CUDA graph
  // capture. Returns [N, H] (transformer_gpu.cpp).
  torch::Tensor forward_paged(const PagedBatch& batch, KVCache& cache);
  KVCache new_kv_cache(int64_t num_blocks, int64_t block_size) const;

  // Writes config.json and safetensors (sharded past max_shard_bytes) into `dir`.
  void save(const std::filesystem::path& dir, size_t max_shard_bytes = size_t(5) << 30) const;

 private:
  struct Layer {
    torch::Tensor input_norm, post_norm;
    torch::Tensor q_w, k_w, v_w, o_w, q_b, k_b, v_b, o_b;
    torch::Tensor q_norm, k_norm;
    torch::Tensor gate_w, up_w, down_w, gate_b, up_b, down_b;
    // Inference layout: q/k/v and gate/up live in one [in, out] matrix each (the
    // per-projection weights above are views into them), so each runs as one matmul.
    torch::Tensor qkv_w, qkv_b, gate_up_w, gate_up_b;
    // The same matrices packed for the float32 CPU GEMM (inference layout on
    // AVX-512 and AVX2 CPUs; refreshed by weights_changed()).
    bi::PackedWeight qkv_p, o_p, gate_up_p, down_p;
    // The training layout's panels, packed on use (PackedCache).
    mutable PackedCache q_c, k_c, v_c, o_c, gate_c, up_c, down_c;
  };
  // `w`'s panels for a float32 CPU forward: `p` (inference layout) or the cache.
  const bi::PackedWeight& panels(const bi::PackedWeight& p, PackedCache& cache, const torch::Tensor& w,
                                 const torch::Tensor& x) const;
  void fuse_projections();
  bool rows_layout_ = false;  // inference layout with [out, in] matrices (the constructor says when)
  bool packs_panels() const;  // the inference layout's matrices have packed panels (weights_changed)
  // Layer i's tensors, each found by its checkpoint name through `get`.
  Layer make_layer(int64_t i, const std::function<torch::Tensor(const std::string&)>& get) const;
  // The adapters one forward applies: adapters[g] to the rows rows[g] of its
  // [N, ...] activations (undefined rows: every row; the training path).
  struct LoraRun {
    std::vector<const LoraAdapter*> adapters;
    std::vector<torch::Tensor> rows;
  };
  LoraRun lora_run(const LoraBatch& lb, int64_t n) const;  // checks CachedBatch::lora
  // y + the adapters' deltas of target t for input x (y itself when none targets t).
  torch::Tensor add_lora(const LoraRun* run, torch::Tensor y, const torch::Tensor& x, int64_t layer,
                         LoraTarget t) const;
  // forward() and forward_packed(): positions [B, T]; lens as forward_packed's (empty: padded rows).
  torch::Tensor forward_rows(const torch::Tensor& input_ids, const torch::Tensor& positions,
                             const std::vector<int64_t>& lens);
  // The decoder layers, then the final norm. `recomputable` (the training forward, whose
  // attend owns what it captures): the layers recompute_ names go through nn::recompute.
  template <class Attend>
  torch::Tensor run_layers(torch::Tensor x, const torch::Tensor& positions, Attend&& attend,
                           const LoraRun* lora = nullptr, bool recomputable = false);
  template <class Attend>
  torch::Tensor run_layer(int64_t i, torch::Tensor x, const torch::Tensor& cos, const torch::Tensor& sin,
                          Attend& attend, const LoraRun* lora, const std::vector<std::vector<size_t>>& units);
  // [first, end) layer ranges recompute_ recomputes, in order.
  std::vector<std::pair<int64_t, int64_t>> recomputed_groups() const;
  torch::Tensor attention_inputs(const Layer& l, const torch::Tensor& x, const torch::Tensor& cos,
                                 const torch::Tensor& sin, torch::Tensor& k, torch::Tensor& v, int64_t layer,
                                 const LoraRun* lora) const;
  torch::Tensor mlp(const Layer& l, const torch::Tensor& x, int64_t layer, const LoraRun* lora) const;
  torch::Tensor rms_norm(const torch::Tensor& x, const torch::Tensor& w) const;
  torch::Tensor embed_tokens(const torch::Tensor& ids) const;

  model::ModelConfig config_;
  ModelOptions opts_;
  std::vector<std::pair<std::string, torch::Tensor>> params_;
  torch::Tensor embed_, final_norm_, lm_head_;
  bi::PackedWeight lm_head_p_;
  PackedCache lm_head_c_;
  std::vector<Layer> layers_;
  std::mutex digest_mu_;
  uint64_t weights_generation_ = 0, digest_generation_ = ~uint64_t(0);
  std::string digest_;
  RopeTable rope_;
  UnitHooks* hooks_ = nullptr;
  std::shared_ptr<const LoraAdapter> lora_;
  Recompute recompute_;
};

}  // namespace rl::nn
