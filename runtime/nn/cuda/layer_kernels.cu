// A decoder layer's small kernels on CUDA: residual add + RMSNorm, the q/k norm +
// RoPE + KV-cache store of the fused qkv projection, and SiLU * up. See kernels.hpp.
#include <algorithm>

#include "nn/cuda/common.cuh"

namespace rl::nn::cuda {
namespace {

using detail::block_sum;
using detail::from_f;
using detail::round_to;
using detail::to_f;
using detail::warp_sum;

constexpr int kNormThreads = 256;

template <class T>
__global__ void __launch_bounds__(kNormThreads)
    add_rms_norm_kernel(T* x, const T* delta, const T* w, T* out, int64_t n, float eps) {
  const int64_t row = blockIdx.x;
  T* xr = x + row * n;
  const T* dr = delta ? delta + row * n : nullptr;
  T* yr = out + row * n;
  float ss = 0.0f;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
    float v = to_f(xr[i]);
    if (dr) {
      v = round_to<T>(v + to_f(dr[i]));  // the residual add, in T
      xr[i] = from_f<T>(v);
    }
    ss = fmaf(v, v, ss);
  }
  ss = block_sum(ss);
  const float inv = rsqrtf(ss / static_cast<float>(n) + eps);
  // transformers: (x.float() * rsqrt(mean + eps)).to(T), then weight * that, in T.
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x)
    yr[i] = from_f<T>(__fmul_rn(to_f(w[i]), round_to<T>(__fmul_rn(to_f(xr[i]), inv))));
}

constexpr int kQkvWarps = 4;
constexpr int kMaxD = 256;

// One block per token; each warp takes whole heads: lane handles d = lane + 32e.
template <class T>
__global__ void __launch_bounds__(kQkvWarps * 32) qk_norm_rope_kernel(QkvArgs a) {
  __shared__ float row[kQkvWarps][kMaxD];
  const int64_t t = blockIdx.x;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t D = a.D, H = a.H, KV = a.KV, half = D / 2;
  const T* src_row = static_cast<const T*>(a.qkv) + t * a.ld;
  const int32_t slot = a.slots[t];
  const int64_t pos = a.positions[t];
  const T* cs = static_cast<const T*>(a.cos) + pos * D;
  const T* sn = static_cast<const T*>(a.sin) + pos * D;
  for (int64_t hh = warp; hh < H + 2 * KV; hh += kQkvWarps) {
    const bool is_q = hh < H, is_k = !is_q && hh < H + KV;
    T* dst;
    const T* norm_w;
    if (is_q) {
      dst = static_cast<T*>(a.q_out) + (t * H + hh) * D;
      norm_w = static_cast<const T*>(a.q_norm);
    } else if (slot < 0) {
      continue;  // a padding row: no cache write
    } else if (is_k) {
      dst = static_cast<T*>(a.k_cache) + (static_cast<int64_t>(slot) * KV + (hh - H)) * D;
      norm_w = static_cast<const T*>(a.k_norm);
    } else {
      dst = static_cast<T*>(a.v_cache) + (static_cast<int64_t>(slot) * KV + (hh - H - KV)) * D;
      norm_w = nullptr;
    }
    const T* src = src_row + hh * D;
    float v[kMaxD / 32];
#pragma unroll
    for (int e = 0; e < kMaxD / 32; ++e) {
      const int64_t d = lane + 32 * e;
      v[e] = d < D ? to_f(src[d]) : 0.0f;
    }
    if (is_q || is_k) {
      if (norm_w) {  // per-head RMSNorm (Qwen3's q_norm / k_norm)
        float ss = 0.0f;
#pragma unroll
        for (int e = 0; e < kMaxD / 32; ++e) ss = fmaf(v[e], v[e], ss);
        const float inv = rsqrtf(warp_sum(ss) / static_cast<float>(D) + a.eps);
#pragma unroll
        for (int e = 0; e < kMaxD / 32; ++e) {
          const int64_t d = lane + 32 * e;
          if (d < D) v[e] = round_to<T>(__fmul_rn(to_f(norm_w[d]), round_to<T>(__fmul_rn(v[e], inv))));
        }
      }
#pragma unroll
      for (int e = 0; e < kMaxD / 32; ++e) {
        const int64_t d = lane + 32 * e;
        if (d < D) row[warp][d] = v[e];
      }
      __syncwarp();
      // x * cos + rotate_half(x) * sin, each product and the sum rounded to T.
#pragma unroll
      for (int e = 0; e < kMaxD / 32; ++e) {
        const int64_t d = lane + 32 * e;
        if (d >= D) continue;
        const float rot = d < half ? -row[warp][d + half] : row[warp][d - half];
        const float p = round_to<T>(__fmul_rn(v[e], to_f(cs[d])));
        const float q = round_to<T>(__fmul_rn(rot, to_f(sn[d])));
        v[e] = __fadd_rn(p, q);
      }
      __syncwarp();  // row[warp] is reused by the warp's next head
    }
#pragma unroll
    for (int e = 0; e < kMaxD / 32; ++e) {
      const int64_t d = lane + 32 * e;
      if (d < D) dst[d] = from_f<T>(v[e]);
    }
  }
}

template <class T>
__global__ void silu_mul_kernel(const T* gu, T* out, int64_t rows, int64_t I) {
  const int64_t total = rows * I;
  for (int64_t k = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; k < total;
       k += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = k / I, i = k - r * I;
    const float g = to_f(gu[r * 2 * I + i]), u = to_f(gu[r * 2 * I + I + i]);
    const float s = round_to<T>(g / (1.0f + expf(-g)));  // torch.silu, in T
    out[k] = from_f<T>(__fmul_rn(s, u));
  }
}

// ---- paged attention --------------------------------------------------------

template <class T, int E, int WARPS>
__global__ void __launch_bounds__(WARPS * 32) attention_kernel(AttentionArgs a) {
  __shared__ float s_m[WARPS], s_l[WARPS];
  __shared__ float s_acc[WARPS][E * 32];
  const int64_t qi = blockIdx.x, h = blockIdx.y;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t D = a.D, kvh = h / (a.H / a.KV), ld = a.KV * D, bs = a.block_size;
  const T* q = static_cast<const T*>(a.q) + (qi * a.H + h) * D;
  const T* kc = static_cast<const T*>(a.k_cache) + kvh * D;
  const T* vc = static_cast<const T*>(a.v_cache) + kvh * D;
  const int64_t n = a.ctx[qi];
  const int32_t* table = a.tables + static_cast<int64_t>(a.seq[qi]) * a.table_stride;
  float qv[E], acc[E];
#pragma unroll
  for (int e = 0; e < E; ++e) {
    const int64_t d = lane + 32 * e;
    qv[e] = d < D ? to_f(q[d]) : 0.0f;
    acc[e] = 0.0f;
  }
  float m = -INFINITY, l = 0.0f;
  auto row_of = [&](int64_t j) { return (static_cast<int64_t>(table[j / bs]) * bs + j % bs) * ld; };
  int64_t j = warp;
  // Two keys per turn: both rows' loads are in flight before the first use.
  for (; j + WARPS < n; j += 2 * WARPS) {
    const int64_t r0 = row_of(j), r1 = row_of(j + WARPS);
    float k0[E], k1[E], v0[E], v1[E];
#pragma unroll
    for (int e = 0; e < E; ++e) {
      const int64_t d = lane + 32 * e;
      const bool in = d < D;
      k0[e] = in ? to_f(kc[r0 + d]) : 0.0f;
      k1[e] = in ? to_f(kc[r1 + d]) : 0.0f;
      v0[e] = in ? to_f(vc[r0 + d]) : 0.0f;
      v1[e] = in ? to_f(vc[r1 + d]) : 0.0f;
    }
    float d0 = 0.0f, d1 = 0.0f;
#pragma unroll
    for (int e = 0; e < E; ++e) {
      d0 = fmaf(qv[e], k0[e], d0);
      d1 = fmaf(qv[e], k1[e], d1);
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
      d0 += __shfl_xor_sync(0xffffffffu, d0, o);
      d1 += __shfl_xor_sync(0xffffffffu, d1, o);
    }
    const float s0 = d0 * a.scale, s1 = d1 * a.scale;
    const float m_new = fmaxf(m, fmaxf(s0, s1));
    const float corr = expf(m - m_new), p0 = expf(s0 - m_new), p1 = expf(s1 - m_new);
    l = l * corr + p0 + p1;
#pragma unroll
    for (int e = 0; e < E; ++e) acc[e] = fmaf(p1, v1[e], fmaf(p0, v0[e], acc[e] * corr));
    m = m_new;
  }
  if (j < n) {
    const int64_t r0 = row_of(j);
    float d0 = 0.0f, v0[E];
#pragma unroll
    for (int e = 0; e < E; ++e) {
      const int64_t d = lane + 32 * e;
      const bool in = d < D;
      d0 = fmaf(qv[e], in ? to_f(kc[r0 + d]) : 0.0f, d0);
      v0[e] = in ? to_f(vc[r0 + d]) : 0.0f;
    }
    d0 = warp_sum(d0);
    const float s0 = d0 * a.scale, m_new = fmaxf(m, s0);
    const float corr = expf(m - m_new), p0 = expf(s0 - m_new);
    l = l * corr + p0;
#pragma unroll
    for (int e = 0; e < E; ++e) acc[e] = fmaf(p0, v0[e], acc[e] * corr);
    m = m_new;
  }
  if (lane == 0) {
    s_m[warp] = m;
    s_l[warp] = l;
  }
#pragma unroll
  for (int e = 0; e < E; ++e) s_acc[warp][lane + 32 * e] = acc[e];
  __syncthreads();
  float M = -INFINITY;
#pragma unroll
  for (int w = 0; w < WARPS; ++w) M = fmaxf(M, s_m[w]);
  float L = 0.0f;
#pragma unroll
  for (int w = 0; w < WARPS; ++w)
    if (s_m[w] != -INFINITY) L += s_l[w] * expf(s_m[w] - M);
  T* out = static_cast<T*>(a.out) + (qi * a.H + h) * D;
  for (int64_t d = threadIdx.x; d < D; d += WARPS * 32) {
    float o = 0.0f;
#pragma unroll
    for (int w = 0; w < WARPS; ++w)
      if (s_m[w] != -INFINITY) o = fmaf(s_acc[w][d], expf(s_m[w] - M), o);
    out[d] = from_f<T>(n > 0 ? o / L : 0.0f);
  }
}

template <class T, int E>
cudaError_t launch_attention(const AttentionArgs& a, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>(a.Q), static_cast<unsigned>(a.H));
  // Few (query, head) pairs (small decode batches): 16 warps per pair share its
  // keys, so a step is not bound by one warp's latency chain; many: 4 warps.
  if (a.Q * a.H <= 2 * static_cast<int64_t>(a.sm_count)) {
    attention_kernel<T, E, 16><<<grid, 16 * 32, 0, stream>>>(a);
  } else {
    attention_kernel<T, E, 4><<<grid, 4 * 32, 0, stream>>>(a);
  }
  return cudaGetLastError();
}

}  // namespace

cudaError_t add_rms_norm(DType t, void* x, const void* delta, const void* w, void* out, int64_t rows, int64_t n,
                         float eps, cudaStream_t stream) {
  if (rows == 0) return cudaSuccess;
  return RL_CUDA_DISPATCH(t, [&] {
    add_rms_norm_kernel<T><<<static_cast<unsigned>(rows), kNormThreads, 0, stream>>>(
        static_cast<T*>(x), static_cast<const T*>(delta), static_cast<const T*>(w), static_cast<T*>(out), n, eps);
    return cudaGetLastError();
  });
}

cudaError_t qk_norm_rope_store(DType t, const QkvArgs& a, cudaStream_t stream) {
  if (a.N == 0) return cudaSuccess;
  if (a.D > kMaxD || a.D % 2 != 0) return cudaErrorInvalidValue;
  return RL_CUDA_DISPATCH(t, [&] {
    qk_norm_rope_kernel<T><<<static_cast<unsigned>(a.N), kQkvWarps * 32, 0, stream>>>(a);
    return cudaGetLastError();
  });
}

cudaError_t silu_mul(DType t, const void* gu, void* out, int64_t rows, int64_t I, cudaStream_t stream) {
  const int64_t total = rows * I;
  if (total == 0) return cudaSuccess;
  const int threads = 256;
  const int64_t blocks = std::min<int64_t>((total + threads - 1) / threads, 65535);
  return RL_CUDA_DISPATCH(t, [&] {
    silu_mul_kernel<T><<<static_cast<unsigned>(blocks), threads, 0, stream>>>(static_cast<const T*>(gu),
                                                                               static_cast<T*>(out), rows, I);
    return cudaGetLastError();
  });
}

cudaError_t paged_attention(DType t, const AttentionArgs& a, cudaStream_t stream) {
  if (a.Q == 0) return cudaSuccess;
  if (a.D > kMaxD || a.KV <= 0 || a.H % a.KV != 0 || a.block_size <= 0 || a.H > 65535) return cudaErrorInvalidValue;
  return RL_CUDA_DISPATCH(t, [&] {
    if (a.D <= 32) return launch_attention<T, 1>(a, stream);
    if (a.D <= 64) return launch_attention<T, 2>(a, stream);
    if (a.D <= 128) return launch_attention<T, 4>(a, stream);
    return launch_attention<T, 8>(a, stream);
  });
}

}  // namespace rl::nn::cuda
