// The engine's CUDA kernels (runtime/nn/cuda/kernels.hpp) over tensors: shapes,
// dtypes and devices checked, launched on the current CUDA stream. Every function
// throws on a build without CUDA; available() says which build this is.
#pragma once
#include <cstdint>

#include <torch/torch.h>

namespace rl::nn::gpu {

// True when this build has the kernels (a CUDA build) and `t` is a CUDA tensor of
// float32, bfloat16 or float16.
bool available(const torch::Tensor& t);

// x <- x + delta (delta may be undefined), out = w * rms_norm(x): [rows, n] each, in place.
void add_rms_norm(torch::Tensor& x, const torch::Tensor& delta, const torch::Tensor& w, double eps,
                  torch::Tensor& out);

// qkv [N, (H + 2 KV) * D]: per-head q/k RMSNorm (q_norm/k_norm may be undefined),
// RoPE from cos/sin [P, D] at `positions` [N] int32, k and v stored into the cache
// rows `slots` [N] int32 (negative: skipped). Returns q [N, H, D].
torch::Tensor qk_norm_rope_store(const torch::Tensor& qkv, int64_t H, int64_t KV, int64_t D,
                                 const torch::Tensor& q_norm, const torch::Tensor& k_norm, double eps,
                                 const torch::Tensor& cos, const torch::Tensor& sin, const torch::Tensor& positions,
                                 const torch::Tensor& slots, torch::Tensor& k_cache, torch::Tensor& v_cache);

// silu(gu[:, :I]) * gu[:, I:] for gu [rows, 2I] → [rows, I].
torch::Tensor silu_mul(const torch::Tensor& gu);

// q [Q, H, D] over the paged caches [slots, KV, D]: tables [S, W] int32 (block ids),
// seq/ctx [Q] int32 (the query's table row; how many keys it sees). → [Q, H, D].
torch::Tensor paged_attention(const torch::Tensor& q, const torch::Tensor& k_cache, const torch::Tensor& v_cache,
                              const torch::Tensor& tables, int64_t block_size, const torch::Tensor& seq,
                              const torch::Tensor& ctx, double scale);

// ids [N] int32: a negative id i becomes prev[-1 - i] (prev int32 on the device), in place.
void resolve_ids(torch::Tensor& ids, const torch::Tensor& prev);

// One token per row of logits [R, V]: temps [R] float32 (<= 0: greedy), u [R]
// float32 in [0, 1); writes tokens [>= R] int32 and logprobs [>= R] float32.
void sample(const torch::Tensor& logits, const torch::Tensor& temps, const torch::Tensor& u, torch::Tensor& tokens,
            torch::Tensor& logprobs);

}  // namespace rl::nn::gpu
