// The engine's decode kernels on CUDA, as plain launchers over raw pointers (no
// LibTorch here: nvcc never sees ATen). runtime/nn/cuda_ops.cpp wraps them for
// tensors. Every launcher enqueues on `stream` and returns the launch's error.
//
// Each kernel reproduces the rounding of the LibTorch ops it replaces in the
// trainer's forward (transformers' order: RMSNorm in float32 then cast, products
// and sums rounded to the model dtype one by one), so the engine's log-probs stay
// next to the trainer's on the GPU; none reads a host value, so a decode step
// built from them can be captured in a CUDA graph.
#pragma once
#include <cstdint>

#include <cuda_runtime_api.h>

namespace rl::nn::cuda {

enum class DType { kFloat32, kBFloat16, kFloat16 };

// x <- x + delta (when delta is not null), then out = w * rms_norm(x), rows of n.
cudaError_t add_rms_norm(DType t, void* x, const void* delta, const void* w, void* out, int64_t rows, int64_t n,
                         float eps, cudaStream_t stream);

// For each of N tokens, a row of the fused q|k|v projection (row stride ld):
// q and k heads get the per-head RMSNorm (when q_norm/k_norm are given) and RoPE
// (cos/sin tables [positions, D] in the model dtype, row = the token's position),
// q goes to q_out [N, H, D], k and v to the cache rows [slot, KV, D] (a negative
// slot writes nothing: a padding row).
struct QkvArgs {
  const void* qkv;
  int64_t ld;
  int64_t N, H, KV, D;
  const void* q_norm;  // [D] or null
  const void* k_norm;
  float eps;
  const void* cos;  // [P, D]
  const void* sin;
  const int32_t* positions;  // [N]
  const int32_t* slots;      // [N]
  void* k_cache;
  void* v_cache;
  void* q_out;
};
cudaError_t qk_norm_rope_store(DType t, const QkvArgs& a, cudaStream_t stream);

// out[r, i] = silu(gu[r, i]) * gu[r, I + i] for r < rows, i < I (gu rows of 2I).
cudaError_t silu_mul(DType t, const void* gu, void* out, int64_t rows, int64_t I, cudaStream_t stream);

// Query i (of q [Q, H, D]) attends over the first ctx[i] keys of sequence seq[i],
// whose key j sits in cache slot tables[seq[i] * table_stride + j / block_size] *
// block_size + j % block_size (caches [slots, KV, D], head h reads KV head
// h / (H / KV)). A query with ctx 0 gets zeros. out [Q, H, D].
struct AttentionArgs {
  const void* q;
  const void* k_cache;
  const void* v_cache;
  const int32_t* tables;
  int64_t table_stride;
  int64_t block_size;
  const int32_t* seq;
  const int32_t* ctx;
  int64_t Q, H, KV, D;
  float scale;
  void* out;
  int sm_count;  // the device's multiprocessors (picks the block shape)
};
cudaError_t paged_attention(DType t, const AttentionArgs& a, cudaStream_t stream);

// ids[i] < 0 becomes prev[-1 - ids[i]]: a step launched before the one in flight
// reached the host takes that step's sampled tokens from the device.
cudaError_t resolve_ids(int32_t* ids, int64_t n, const int32_t* prev, cudaStream_t stream);

// One token per row of logits [rows, V] (row stride ld), in the sampler's
// arithmetic (runtime/engine/sampler.cpp): z = logits / T; temps[r] <= 0 is greedy
// (argmax, T = 1, the first index of the maximum); otherwise the inverse CDF of
// softmax(z) at u[r] in [0, 1), summed in a fixed order. logprobs[r] = z[token] -
// logsumexp(z). Deterministic, and independent of the other rows.
cudaError_t sample_rows(DType t, const void* logits, int64_t ld, int64_t rows, int64_t V, const float* temps,
                        const float* u, int32_t* tokens, float* logprobs, cudaStream_t stream);

}  // namespace rl::nn::cuda
