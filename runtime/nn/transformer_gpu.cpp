// Transformer::forward_paged: the engine's forward on CUDA. Per layer: residual add
// + RMSNorm (one kernel), the fused qkv GEMM, q/k norm + RoPE + KV store (one
// kernel), paged attention (one kernel), o_proj, add + RMSNorm, the fused gate/up
// GEMM, SiLU * up (one kernel), down_proj: nine launches where the LibTorch ops
// take about fifty, none of which reads a value back to the host.
#include "nn/transformer.hpp"

#include <cmath>
#include <stdexcept>

#include "nn/gpu_ops.hpp"

namespace rl::nn {

namespace {

torch::Tensor gemm(const torch::Tensor& x, const torch::Tensor& w_in_out, const torch::Tensor& bias) {
  return bias.defined() ? torch::addmm(bias, x, w_in_out) : torch::mm(x, w_in_out);
}

}  // namespace

torch::Tensor Transformer::forward_paged(const PagedBatch& b, KVCache& cache) {
  check_whole("Transformer::forward_paged");
  torch::NoGradGuard no_grad;
  if (!gpu::available(embed_))
    throw std::invalid_argument("forward_paged: needs a CUDA build and a model on a CUDA device");
  if (layers_.empty() || !layers_[0].qkv_w.defined() || !layers_[0].gate_up_w.defined())
    throw std::invalid_argument("forward_paged: needs the inference layout (fused qkv and gate/up)");
  if (static_cast<int64_t>(cache.k.size()) != config_.num_hidden_layers)
    throw std::invalid_argument("forward_paged: the KV cache was made for another model");
  const int64_t H = config_.num_attention_heads, KV = config_.num_key_value_heads, D = config_.head_dim;
  const double eps = config_.rms_norm_eps, scale = 1.0 / std::sqrt(static_cast<double>(D));
  auto [cos, sin] = rope_.tables(b.max_position + 1, embed_.device(), opts_.dtype);

  auto x = torch::embedding(embed_, b.input_ids).contiguous();  // the residual stream, updated in place
  const int64_t N = x.size(0);
  auto h = torch::empty_like(x);
  torch::Tensor delta;  // what the last block adds to x (none before the first)
  for (size_t i = 0; i < layers_.size(); ++i) {
    const Layer& l = layers_[i];
    gpu::add_rms_norm(x, delta, l.input_norm, eps, h);
    auto qkv = gemm(h, l.qkv_w, l.qkv_b);
    auto q = gpu::qk_norm_rope_store(qkv, H, KV, D, config_.qk_norm ? l.q_norm : torch::Tensor(),
                                     config_.qk_norm ? l.k_norm : torch::Tensor(), eps, cos, sin, b.positions,
                                     b.slot_mapping, cache.k[i], cache.v[i]);
    auto attn = gpu::paged_attention(q, cache.k[i], cache.v[i], b.block_tables, cache.block_size, b.query_seq,
                                     b.query_ctx, scale);
    delta = gemm(attn.view({N, H * D}), l.o_w.t(), l.o_b);
    gpu::add_rms_norm(x, delta, l.post_norm, eps, h);
    auto act = gpu::silu_mul(gemm(h, l.gate_up_w, l.gate_up_b));
    delta = gemm(act, l.down_w.t(), l.down_b);
  }
  gpu::add_rms_norm(x, delta, final_norm_, eps, h);
  return h;
}

}  // namespace rl::nn
