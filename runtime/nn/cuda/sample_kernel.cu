// Greedy and temperature sampling of one token per row, with its log-prob, on
// CUDA (kernels.hpp, sample_rows). One block of 1024 threads per row, every pass
// over the row coalesced: the maximum over a block-strided walk; the softmax mass
// per warp over 32 contiguous segments of the vocabulary, lanes on consecutive
// tokens; the draw's segment from a scan of those 32 sums; then one warp walks its
// segment 32 tokens at a time. Every sum is taken in one fixed order whatever the
// batch: the same row gives the same token and log-prob.
#include "nn/cuda/common.cuh"

namespace rl::nn::cuda {
namespace {

using detail::to_f;
using detail::warp_sum;

constexpr int kThreads = 1024, kWarps = kThreads / 32;

template <class T>
__global__ void __launch_bounds__(kThreads) sample_kernel(const T* logits, int64_t ld, int64_t V, const float* temps,
                                                         const float* u, int32_t* tokens, float* logprobs) {
  __shared__ float s_max[kWarps], s_seg[kWarps];
  __shared__ int64_t s_arg[kWarps];
  const int64_t r = blockIdx.x;
  const T* row = logits + r * ld;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const float temp = temps[r];
  const bool greedy = !(temp > 0.0f);
  const float t_div = greedy ? 1.0f : temp;  // z = logits / T (a division, as the CPU sampler)
  auto z = [&](int64_t i) { return greedy ? to_f(row[i]) : to_f(row[i]) / t_div; };

  // 1. maximum and the first index holding it
  float mx = -INFINITY;
  int64_t am = V;
  for (int64_t i = tid; i < V; i += kThreads) {
    const float v = z(i);
    if (v > mx || am == V) mx = v, am = i;
  }
  auto better = [](float om, int64_t oa, float m, int64_t a) { return om > m || (om == m && oa < a); };
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const float om = __shfl_xor_sync(0xffffffffu, mx, o);
    const int64_t oa = __shfl_xor_sync(0xffffffffu, am, o);
    if (better(om, oa, mx, am)) mx = om, am = oa;
  }
  if (lane == 0) s_max[warp] = mx, s_arg[warp] = am;
  __syncthreads();
  mx = lane < kWarps ? s_max[lane] : -INFINITY;
  am = lane < kWarps ? s_arg[lane] : V;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const float om = __shfl_xor_sync(0xffffffffu, mx, o);
    const int64_t oa = __shfl_xor_sync(0xffffffffu, am, o);
    if (better(om, oa, mx, am)) mx = om, am = oa;
  }
  const float M = mx;

  // 2. the mass of each warp's segment [warp seg, warp seg + seg): lane sums tokens
  // base + lane + 32 k in order, then the warp's tree
  const int64_t seg = ((V + kWarps - 1) / kWarps + 31) / 32 * 32;
  const int64_t b0 = min(V, warp * seg), b1 = min(V, b0 + seg);
  float part = 0.0f;
  for (int64_t i = b0 + lane; i < b1; i += 32) part += expf(z(i) - M);
  part = warp_sum(part);
  if (lane == 0) s_seg[warp] = part;
  __syncthreads();
  // segment prefix sums, in warp order
  float excl = 0.0f, total = 0.0f;
  for (int w = 0; w < kWarps; ++w) {
    if (w == warp) excl = total;
    total += s_seg[w];
  }
  const float lse = M + logf(total);

  if (greedy) {
    if (tid == 0) {
      tokens[r] = static_cast<int32_t>(am);
      logprobs[r] = z(am) - lse;
    }
    return;
  }
  // 3. the draw: the first segment whose share [excl, excl + mass) holds it (the
  // last one with mass if rounding leaves it past the end), then that warp walks it.
  const float target = u[r] * total;
  int win = -1, last = -1;
  {
    float acc = 0.0f;
    for (int w = 0; w < kWarps; ++w) {
      const float next = acc + s_seg[w];
      if (s_seg[w] > 0.0f) last = w;
      if (win < 0 && acc <= target && target < next) win = w;
      acc = next;
    }
    if (win < 0) win = last;
  }
  if (warp != win) return;
  float cum = excl;
  int64_t pick = -1, last_pos = -1;
  for (int64_t c = b0; c < b1 && pick < 0; c += 32) {
    const int64_t i = c + lane;
    const float p = i < b1 ? expf(z(i) - M) : 0.0f;
    float incl = p;  // inclusive scan of the chunk's 32 masses
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
      const float y = __shfl_up_sync(0xffffffffu, incl, o);
      if (lane >= o) incl += y;
    }
    const unsigned crossed = __ballot_sync(0xffffffffu, p > 0.0f && cum + incl > target);
    const unsigned positive = __ballot_sync(0xffffffffu, p > 0.0f);
    if (positive) last_pos = c + 31 - __clz(positive);
    if (crossed) pick = c + __ffs(crossed) - 1;
    cum += __shfl_sync(0xffffffffu, incl, 31);
  }
  if (lane == 0) {
    const int64_t tok = pick >= 0 ? pick : last_pos;
    tokens[r] = static_cast<int32_t>(tok);
    logprobs[r] = z(tok) - lse;
  }
}

__global__ void resolve_ids_kernel(int32_t* ids, int64_t n, const int32_t* prev) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i < n && ids[i] < 0) ids[i] = prev[-1 - ids[i]];
}

}  // namespace

cudaError_t resolve_ids(int32_t* ids, int64_t n, const int32_t* prev, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  resolve_ids_kernel<<<static_cast<unsigned>((n + 255) / 256), 256, 0, stream>>>(ids, n, prev);
  return cudaGetLastError();
}

cudaError_t sample_rows(DType t, const void* logits, int64_t ld, int64_t rows, int64_t V, const float* temps,
                        const float* u, int32_t* tokens, float* logprobs, cudaStream_t stream) {
  if (rows == 0) return cudaSuccess;
  if (V <= 0) return cudaErrorInvalidValue;
  return RL_CUDA_DISPATCH(t, [&] {
    sample_kernel<T><<<static_cast<unsigned>(rows), kThreads, 0, stream>>>(static_cast<const T*>(logits), ld, V, temps,
                                                                         u, tokens, logprobs);
    return cudaGetLastError();
  });
}

}  // namespace rl::nn::cuda
