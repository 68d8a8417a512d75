// Greedy and temperature sampling of one token per row, with its log-prob, on
// CUDA (kernels.hpp, sample_rows). One block of 1024 threads per row; thread k
// owns a contiguous chunk of the vocabulary, so every sum is taken in one fixed
// order whatever the batch: the same row gives the same token and log-prob.
#include "nn/cuda/common.cuh"

namespace rl::nn::cuda {
namespace {

using detail::to_f;

constexpr int kThreads = 1024;

template <class T>
__global__ void __launch_bounds__(kThreads) sample_kernel(const T* logits, int64_t ld, int64_t V, const float* temps,
                                                         const float* u, int32_t* tokens, float* logprobs) {
  __shared__ float s_incl[kThreads];
  __shared__ float s_max[32];
  __shared__ int64_t s_arg[32];
  __shared__ float s_warp[32];
  __shared__ int s_winner, s_last;
  const int64_t r = blockIdx.x;
  const T* row = logits + r * ld;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const float temp = temps[r];
  const bool greedy = !(temp > 0.0f);
  const float t_div = greedy ? 1.0f : temp;  // z = logits / T (a division, as the CPU sampler)
  const int64_t chunk = (V + kThreads - 1) / kThreads;
  const int64_t b0 = min(V, tid * chunk), b1 = min(V, b0 + chunk);
  auto z = [&](int64_t i) { return greedy ? to_f(row[i]) : to_f(row[i]) / t_div; };

  // 1. maximum and the first index holding it
  float mx = -INFINITY;
  int64_t am = V;
  for (int64_t i = b0; i < b1; ++i) {
    const float v = z(i);
    if (v > mx || am == V) mx = v, am = i;
  }
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const float om = __shfl_xor_sync(0xffffffffu, mx, o);
    const int64_t oa = __shfl_xor_sync(0xffffffffu, am, o);
    if (om > mx || (om == mx && oa < am)) mx = om, am = oa;
  }
  if (lane == 0) s_max[warp] = mx, s_arg[warp] = am;
  if (tid == 0) s_winner = kThreads, s_last = -1;
  __syncthreads();
  mx = s_max[lane];
  am = s_arg[lane];
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const float om = __shfl_xor_sync(0xffffffffu, mx, o);
    const int64_t oa = __shfl_xor_sync(0xffffffffu, am, o);
    if (om > mx || (om == mx && oa < am)) mx = om, am = oa;
  }
  const float M = mx;
  const int64_t argmax = am;

  // 2. each chunk's sum of exp(z - M), then an inclusive scan over the chunks
  float cs = 0.0f;
  for (int64_t i = b0; i < b1; ++i) cs += expf(z(i) - M);
  float v = cs;
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const float y = __shfl_up_sync(0xffffffffu, v, o);
    if (lane >= o) v += y;
  }
  if (lane == 31) s_warp[warp] = v;
  __syncthreads();
  if (warp == 0) {
    float w = s_warp[lane];
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
      const float y = __shfl_up_sync(0xffffffffu, w, o);
      if (lane >= o) w += y;
    }
    s_warp[lane] = w;
  }
  __syncthreads();
  s_incl[tid] = v + (warp > 0 ? s_warp[warp - 1] : 0.0f);
  __syncthreads();
  const float total = s_incl[kThreads - 1];
  const float lse = M + logf(total);

  int64_t tok = argmax;
  if (!greedy) {
    // Thread k's share of [0, total) is [incl[k-1], incl[k]); the draw lands in one.
    const float excl = tid > 0 ? s_incl[tid - 1] : 0.0f, incl = s_incl[tid];
    const float target = u[r] * total;
    if (excl <= target && target < incl) atomicMin(&s_winner, tid);
    if (cs > 0.0f) atomicMax(&s_last, tid);
    __syncthreads();
    // Rounding can leave the draw past the last share: the last token with mass.
    const bool mine = s_winner == tid || (s_winner == kThreads && s_last == tid);
    if (mine) {
      float cum = excl;
      int64_t pick = -1, last_pos = -1;
      for (int64_t i = b0; i < b1; ++i) {
        const float p = expf(z(i) - M);
        if (p > 0.0f) last_pos = i;
        cum += p;
        if (s_winner == tid && cum > target && p > 0.0f) {
          pick = i;
          break;
        }
      }
      tokens[r] = static_cast<int32_t>(pick >= 0 ? pick : last_pos);
      logprobs[r] = z(pick >= 0 ? pick : last_pos) - lse;
    }
    return;
  }
  if (tid == 0) {
    tokens[r] = static_cast<int32_t>(tok);
    logprobs[r] = z(tok) - lse;
  }
}

}  // namespace

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
