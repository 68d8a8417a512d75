// A decoder layer's small kernels on CUDA: residual add + RMSNorm, the q/k norm +
// RoPE + KV-cache store of the fused qkv projection, and SiLU * up. See kernels.hpp.
// At decode sizes they are bound by latency, not bandwidth: each thread moves 16
// bytes per load where the shapes allow, holds its values in registers between
// the passes, and every head gets its own warp.
#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "nn/cuda/common.cuh"

namespace rl::nn::cuda {
namespace {

using detail::block_sum;
using detail::from_f;
using detail::load_vec;
using detail::round_to;
using detail::store_vec;
using detail::to_f;
using detail::warp_sum;

// ---- residual add + RMSNorm ---------------------------------------------------

// transformers' order: x.float() * rsqrt(mean(x^2) + eps), cast to T, then weight * that in T.
template <class T>
__device__ __forceinline__ float rms_out(float w, float x, float inv) {
  return __fmul_rn(w, round_to<T>(__fmul_rn(x, inv)));
}

// One block per row; thread k holds vectors k, k + threads, ... of V elements (16
// bytes) in registers, at most kMaxVecs of them: rows up to threads * kMaxVecs * V.
constexpr int kNormThreads = 128;
constexpr int kMaxVecs = 8;

template <class T>
__global__ void __launch_bounds__(kNormThreads)
    add_rms_norm_vec_kernel(T* x, const T* delta, const T* w, T* out, int64_t n, float eps) {
  constexpr int V = 16 / sizeof(T);
  const int64_t row = blockIdx.x;
  T* xr = x + row * n;
  const T* dr = delta ? delta + row * n : nullptr;
  const int64_t nv = n / V;
  float v[kMaxVecs][V];
  float ss = 0.0f;
#pragma unroll
  for (int k = 0; k < kMaxVecs; ++k) {
    const int64_t i = threadIdx.x + static_cast<int64_t>(k) * kNormThreads;
    if (i >= nv) break;
    load_vec<T, V>(xr + i * V, v[k]);
    if (dr) {
      float d[V];
      load_vec<T, V>(dr + i * V, d);
#pragma unroll
      for (int e = 0; e < V; ++e) v[k][e] = round_to<T>(v[k][e] + d[e]);  // the residual add, in T
      store_vec<T, V>(xr + i * V, v[k]);
    }
#pragma unroll
    for (int e = 0; e < V; ++e) ss = fmaf(v[k][e], v[k][e], ss);
  }
  const float inv = rsqrtf(block_sum(ss) / static_cast<float>(n) + eps);
#pragma unroll
  for (int k = 0; k < kMaxVecs; ++k) {
    const int64_t i = threadIdx.x + static_cast<int64_t>(k) * kNormThreads;
    if (i >= nv) break;
    float wv[V], y[V];
    load_vec<T, V>(w + i * V, wv);
#pragma unroll
    for (int e = 0; e < V; ++e) y[e] = rms_out<T>(wv[e], v[k][e], inv);
    store_vec<T, V>(out + row * n + i * V, y);
  }
}

// Any n: element by element, x re-read in the second pass.
template <class T>
__global__ void __launch_bounds__(kNormThreads)
    add_rms_norm_kernel(T* x, const T* delta, const T* w, T* out, int64_t n, float eps) {
  const int64_t row = blockIdx.x;
  T* xr = x + row * n;
  const T* dr = delta ? delta + row * n : nullptr;
  float ss = 0.0f;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
    float v = to_f(xr[i]);
    if (dr) {
      v = round_to<T>(v + to_f(dr[i]));
      xr[i] = from_f<T>(v);
    }
    ss = fmaf(v, v, ss);
  }
  const float inv = rsqrtf(block_sum(ss) / static_cast<float>(n) + eps);
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x)
    out[row * n + i] = from_f<T>(rms_out<T>(to_f(w[i]), to_f(xr[i]), inv));
}

// ---- q/k norm + RoPE + KV store -------------------------------------------------

constexpr int kHeadWarps = 4;  // heads per block: one warp each
constexpr int kMaxD = 256;

// The warp's head: v[e] holds element d(lane, e). CONSEC: d = lane * E + e (one
// vector load per lane; the RoPE partner d +- D/2 sits in lane +- 16); otherwise
// d = lane + 32 e, the partner exchanged through shared memory.
template <class T, int E, bool CONSEC>
__global__ void __launch_bounds__(kHeadWarps * 32) qk_norm_rope_kernel(QkvArgs a) {
  __shared__ float row[kHeadWarps][CONSEC ? 1 : kMaxD];
  const int64_t t = blockIdx.x;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t hh = static_cast<int64_t>(blockIdx.y) * kHeadWarps + warp;
  const int64_t D = a.D, H = a.H, KV = a.KV, half = D / 2;
  if (hh >= H + 2 * KV) return;
  const bool is_q = hh < H, is_k = !is_q && hh < H + KV;
  const int32_t slot = a.slots[t];
  if (!is_q && slot < 0) return;  // a padding row: no cache write
  T* dst;
  const T* norm_w;
  if (is_q) {
    dst = static_cast<T*>(a.q_out) + (t * H + hh) * D;
    norm_w = static_cast<const T*>(a.q_norm);
  } else if (is_k) {
    dst = static_cast<T*>(a.k_cache) + (static_cast<int64_t>(slot) * KV + (hh - H)) * D;
    norm_w = static_cast<const T*>(a.k_norm);
  } else {
    dst = static_cast<T*>(a.v_cache) + (static_cast<int64_t>(slot) * KV + (hh - H - KV)) * D;
    norm_w = nullptr;
  }
  const T* src = static_cast<const T*>(a.qkv) + t * a.ld + hh * D;
  auto d_of = [&](int e) -> int64_t { return CONSEC ? lane * E + e : lane + 32 * e; };
  float v[E];
  if constexpr (CONSEC) {
    load_vec<T, E>(src + lane * E, v);
  } else {
#pragma unroll
    for (int e = 0; e < E; ++e) v[e] = d_of(e) < D ? to_f(src[d_of(e)]) : 0.0f;
  }
  if (is_q || is_k) {
    const int64_t pos = a.positions[t];
    float c[E], s[E], nw[E];
    if constexpr (CONSEC) {
      load_vec<T, E>(static_cast<const T*>(a.cos) + pos * D + lane * E, c);
      load_vec<T, E>(static_cast<const T*>(a.sin) + pos * D + lane * E, s);
      if (norm_w) load_vec<T, E>(norm_w + lane * E, nw);
    } else {
#pragma unroll
      for (int e = 0; e < E; ++e) {
        const int64_t d = d_of(e) < D ? d_of(e) : 0;
        c[e] = to_f(static_cast<const T*>(a.cos)[pos * D + d]);
        s[e] = to_f(static_cast<const T*>(a.sin)[pos * D + d]);
        nw[e] = norm_w ? to_f(norm_w[d]) : 0.0f;
      }
    }
    if (norm_w) {  // per-head RMSNorm (Qwen3's q_norm / k_norm)
      float ss = 0.0f;
#pragma unroll
      for (int e = 0; e < E; ++e) ss = fmaf(v[e], v[e], ss);
      const float inv = rsqrtf(warp_sum(ss) / static_cast<float>(D) + a.eps);
#pragma unroll
      for (int e = 0; e < E; ++e) v[e] = round_to<T>(rms_out<T>(nw[e], v[e], inv));
    }
    // x * cos + rotate_half(x) * sin, each product and the sum rounded to T;
    // rotate_half(x)[d] = -x[d + D/2] for d < D/2, x[d - D/2] after.
    float rot[E];
    if constexpr (CONSEC) {
#pragma unroll
      for (int e = 0; e < E; ++e) {
        const float other = __shfl_xor_sync(0xffffffffu, v[e], 16);
        rot[e] = lane < 16 ? -other : other;
      }
    } else {
#pragma unroll
      for (int e = 0; e < E; ++e)
        if (d_of(e) < D) row[warp][d_of(e)] = v[e];
      __syncwarp();
#pragma unroll
      for (int e = 0; e < E; ++e) {
        const int64_t d = d_of(e);
        rot[e] = d >= D ? 0.0f : d < half ? -row[warp][d + half] : row[warp][d - half];
      }
    }
#pragma unroll
    for (int e = 0; e < E; ++e)
      v[e] = __fadd_rn(round_to<T>(__fmul_rn(v[e], c[e])), round_to<T>(__fmul_rn(rot[e], s[e])));
  }
  if constexpr (CONSEC) {
    store_vec<T, E>(dst + lane * E, v);
  } else {
#pragma unroll
    for (int e = 0; e < E; ++e)
      if (d_of(e) < D) dst[d_of(e)] = from_f<T>(v[e]);
  }
}

// ---- SiLU * up --------------------------------------------------------------------

template <class T>
__device__ __forceinline__ float silu_mul_one(float g, float u) {
  return __fmul_rn(round_to<T>(g / (1.0f + expf(-g))), u);  // torch.silu in T, then * up in T
}

template <class T>
__global__ void silu_mul_vec_kernel(const T* gu, T* out, int64_t rows, int64_t I) {
  constexpr int V = 16 / sizeof(T);
  const int64_t per_row = I / V, total = rows * per_row;
  for (int64_t k = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; k < total;
       k += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = k / per_row, i = (k - r * per_row) * V;
    float g[V], u[V], y[V];
    load_vec<T, V>(gu + r * 2 * I + i, g);
    load_vec<T, V>(gu + r * 2 * I + I + i, u);
#pragma unroll
    for (int e = 0; e < V; ++e) y[e] = silu_mul_one<T>(g[e], u[e]);
    store_vec<T, V>(out + r * I + i, y);
  }
}

template <class T>
__global__ void silu_mul_kernel(const T* gu, T* out, int64_t rows, int64_t I) {
  const int64_t total = rows * I;
  for (int64_t k = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; k < total;
       k += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = k / I, i = k - r * I;
    out[k] = from_f<T>(silu_mul_one<T>(to_f(gu[r * 2 * I + i]), to_f(gu[r * 2 * I + I + i])));
  }
}

// ---- paged attention --------------------------------------------------------------

// Block (query qi, head group y): the G query heads [y G, y G + G) share one KV head,
// so each key and value row is read once for all of them. WARPS warps split the
// context; each keeps an online softmax per head, combined at the end. Lane holds
// element d(lane, e) of a row (CONSEC: lane * E + e, one vector load).
template <class T, int E, int G, int WARPS, bool CONSEC>
__global__ void __launch_bounds__(WARPS * 32) attention_kernel(AttentionArgs a) {
  __shared__ float s_m[WARPS][G], s_l[WARPS][G];
  __shared__ float s_acc[WARPS][E * 32];
  const int64_t qi = blockIdx.x, h0 = static_cast<int64_t>(blockIdx.y) * G;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t D = a.D, kvh = h0 / (a.H / a.KV), ld = a.KV * D, bs = a.block_size;
  const T* kc = static_cast<const T*>(a.k_cache) + kvh * D;
  const T* vc = static_cast<const T*>(a.v_cache) + kvh * D;
  const int64_t n = a.ctx[qi];
  const int32_t* table = a.tables + static_cast<int64_t>(a.seq[qi]) * a.table_stride;
  auto d_of = [&](int e) -> int64_t { return CONSEC ? lane * E + e : lane + 32 * e; };
  auto load = [&](const T* p, float (&out)[E]) {
    if constexpr (CONSEC) {
      load_vec<T, E>(p + lane * E, out);
    } else {
#pragma unroll
      for (int e = 0; e < E; ++e) out[e] = d_of(e) < D ? to_f(p[d_of(e)]) : 0.0f;
    }
  };
  float qv[G][E], acc[G][E], m[G], l[G];
#pragma unroll
  for (int g = 0; g < G; ++g) {
    load(static_cast<const T*>(a.q) + (qi * a.H + h0 + g) * D, qv[g]);
#pragma unroll
    for (int e = 0; e < E; ++e) acc[g][e] = 0.0f;
    m[g] = -INFINITY, l[g] = 0.0f;
  }
  auto row_of = [&](int64_t j) { return (static_cast<int64_t>(table[j / bs]) * bs + j % bs) * ld; };
  // One key (or two: both rows' loads are in flight before the first use).
  auto update = [&](const float (&kr)[E], const float (&vr)[E], float (&dot)[G]) {
#pragma unroll
    for (int g = 0; g < G; ++g) {
      const float sc = dot[g] * a.scale, m_new = fmaxf(m[g], sc);
      const float corr = expf(m[g] - m_new), p = expf(sc - m_new);
      l[g] = l[g] * corr + p;
#pragma unroll
      for (int e = 0; e < E; ++e) acc[g][e] = fmaf(p, vr[e], acc[g][e] * corr);
      m[g] = m_new;
    }
  };
  int64_t j = warp;
  for (; j + WARPS < n; j += 2 * WARPS) {
    const int64_t r0 = row_of(j), r1 = row_of(j + WARPS);
    float k0[E], k1[E], v0[E], v1[E], d0[G], d1[G];
    load(kc + r0, k0);
    load(kc + r1, k1);
    load(vc + r0, v0);
    load(vc + r1, v1);
#pragma unroll
    for (int g = 0; g < G; ++g) {
      d0[g] = 0.0f, d1[g] = 0.0f;
#pragma unroll
      for (int e = 0; e < E; ++e) {
        d0[g] = fmaf(qv[g][e], k0[e], d0[g]);
        d1[g] = fmaf(qv[g][e], k1[e], d1[g]);
      }
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
#pragma unroll
      for (int g = 0; g < G; ++g) {
        d0[g] += __shfl_xor_sync(0xffffffffu, d0[g], o);
        d1[g] += __shfl_xor_sync(0xffffffffu, d1[g], o);
      }
    update(k0, v0, d0);
    update(k1, v1, d1);
  }
  if (j < n) {
    const int64_t r0 = row_of(j);
    float k0[E], v0[E], d0[G];
    load(kc + r0, k0);
    load(vc + r0, v0);
#pragma unroll
    for (int g = 0; g < G; ++g) {
      d0[g] = 0.0f;
#pragma unroll
      for (int e = 0; e < E; ++e) d0[g] = fmaf(qv[g][e], k0[e], d0[g]);
      d0[g] = warp_sum(d0[g]);
    }
    update(k0, v0, d0);
  }
  if (lane == 0) {
#pragma unroll
    for (int g = 0; g < G; ++g) s_m[warp][g] = m[g], s_l[warp][g] = l[g];
  }
  // Combine the warps head by head through one shared buffer.
#pragma unroll
  for (int g = 0; g < G; ++g) {
#pragma unroll
    for (int e = 0; e < E; ++e) s_acc[warp][CONSEC ? lane * E + e : lane + 32 * e] = acc[g][e];
    __syncthreads();
    float M = -INFINITY;
#pragma unroll
    for (int w = 0; w < WARPS; ++w) M = fmaxf(M, s_m[w][g]);
    float L = 0.0f;
#pragma unroll
    for (int w = 0; w < WARPS; ++w)
      if (s_m[w][g] != -INFINITY) L += s_l[w][g] * expf(s_m[w][g] - M);
    T* out = static_cast<T*>(a.out) + (qi * a.H + h0 + g) * D;
    for (int64_t d = threadIdx.x; d < D; d += WARPS * 32) {
      float o = 0.0f;
#pragma unroll
      for (int w = 0; w < WARPS; ++w)
        if (s_m[w][g] != -INFINITY) o = fmaf(s_acc[w][d], expf(s_m[w][g] - M), o);
      out[d] = from_f<T>(n > 0 ? o / L : 0.0f);
    }
    __syncthreads();  // s_acc is refilled for the next head
  }
}

template <class T, int E, int G, bool CONSEC>
cudaError_t launch_attention(const AttentionArgs& a, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>(a.Q), static_cast<unsigned>(a.H / G));
  // Few blocks (small decode batches): more warps per block share each query's
  // keys, so a step is not bound by one warp's chain of dependent loads.
  const int64_t blocks = a.Q * (a.H / G);
  if (blocks <= 2 * static_cast<int64_t>(a.sm_count))
    attention_kernel<T, E, G, 16, CONSEC><<<grid, 16 * 32, 0, stream>>>(a);
  else if (blocks <= 8 * static_cast<int64_t>(a.sm_count))
    attention_kernel<T, E, G, 8, CONSEC><<<grid, 8 * 32, 0, stream>>>(a);
  else
    attention_kernel<T, E, G, 4, CONSEC><<<grid, 4 * 32, 0, stream>>>(a);
  return cudaGetLastError();
}

template <class T, int E, bool CONSEC>
cudaError_t attention_for_group(const AttentionArgs& a, cudaStream_t stream) {
  const int64_t group = a.H / a.KV;  // query heads per KV head
  if constexpr (E < 8) {  // (E 8 x G 8 would spill)
    if (group % 8 == 0) return launch_attention<T, E, 8, CONSEC>(a, stream);
  }
  if (group % 4 == 0) return launch_attention<T, E, 4, CONSEC>(a, stream);
  if (group % 2 == 0) return launch_attention<T, E, 2, CONSEC>(a, stream);
  return launch_attention<T, E, 1, CONSEC>(a, stream);
}

template <class T, int E>
cudaError_t attention_for_d(const AttentionArgs& a, cudaStream_t stream) {
  return a.D == 32 * E ? attention_for_group<T, E, true>(a, stream) : attention_for_group<T, E, false>(a, stream);
}

}  // namespace

cudaError_t add_rms_norm(DType t, void* x, const void* delta, const void* w, void* out, int64_t rows, int64_t n,
                         float eps, cudaStream_t stream) {
  if (rows == 0) return cudaSuccess;
  return RL_CUDA_DISPATCH(t, [&] {
    constexpr int V = 16 / sizeof(T);
    const bool aligned = (reinterpret_cast<uintptr_t>(x) | reinterpret_cast<uintptr_t>(delta) |
                          reinterpret_cast<uintptr_t>(w) | reinterpret_cast<uintptr_t>(out)) % 16 == 0;
    if (aligned && n % V == 0 && n / V <= static_cast<int64_t>(kNormThreads) * kMaxVecs)
      add_rms_norm_vec_kernel<T><<<static_cast<unsigned>(rows), kNormThreads, 0, stream>>>(
          static_cast<T*>(x), static_cast<const T*>(delta), static_cast<const T*>(w), static_cast<T*>(out), n, eps);
    else
      add_rms_norm_kernel<T><<<static_cast<unsigned>(rows), kNormThreads, 0, stream>>>(
          static_cast<T*>(x), static_cast<const T*>(delta), static_cast<const T*>(w), static_cast<T*>(out), n, eps);
    return cudaGetLastError();
  });
}

cudaError_t qk_norm_rope_store(DType t, const QkvArgs& a, cudaStream_t stream) {
  if (a.N == 0) return cudaSuccess;
  if (a.D > kMaxD || a.D % 2 != 0) return cudaErrorInvalidValue;
  const dim3 grid(static_cast<unsigned>(a.N), static_cast<unsigned>((a.H + 2 * a.KV + kHeadWarps - 1) / kHeadWarps));
  return RL_CUDA_DISPATCH(t, [&] {
    // The vector path needs whole 16-lane halves (D a multiple of 32) and aligned rows.
    const bool aligned = (a.ld * static_cast<int64_t>(sizeof(T))) % 16 == 0 &&
                         (reinterpret_cast<uintptr_t>(a.qkv) % 16) == 0;
    auto go = [&](auto e_tag, auto consec_tag) {
      qk_norm_rope_kernel<T, decltype(e_tag)::value, decltype(consec_tag)::value>
          <<<grid, kHeadWarps * 32, 0, stream>>>(a);
      return cudaGetLastError();
    };
    using F = std::false_type;
    using Tr = std::true_type;
    if (aligned && a.D == 32) return go(std::integral_constant<int, 1>{}, Tr{});
    if (aligned && a.D == 64) return go(std::integral_constant<int, 2>{}, Tr{});
    if (aligned && a.D == 128) return go(std::integral_constant<int, 4>{}, Tr{});
    if (aligned && a.D == 256) return go(std::integral_constant<int, 8>{}, Tr{});
    return go(std::integral_constant<int, kMaxD / 32>{}, F{});
  });
}

cudaError_t silu_mul(DType t, const void* gu, void* out, int64_t rows, int64_t I, cudaStream_t stream) {
  const int64_t total = rows * I;
  if (total == 0) return cudaSuccess;
  const int threads = 256;
  return RL_CUDA_DISPATCH(t, [&] {
    constexpr int V = 16 / sizeof(T);
    if (I % V == 0 && (reinterpret_cast<uintptr_t>(gu) | reinterpret_cast<uintptr_t>(out)) % 16 == 0) {
      const int64_t blocks = std::min<int64_t>((total / V + threads - 1) / threads, 65535);
      silu_mul_vec_kernel<T><<<static_cast<unsigned>(blocks), threads, 0, stream>>>(static_cast<const T*>(gu),
                                                                                     static_cast<T*>(out), rows, I);
    } else {
      const int64_t blocks = std::min<int64_t>((total + threads - 1) / threads, 65535);
      silu_mul_kernel<T><<<static_cast<unsigned>(blocks), threads, 0, stream>>>(static_cast<const T*>(gu),
                                                                                 static_cast<T*>(out), rows, I);
    }
    return cudaGetLastError();
  });
}

cudaError_t paged_attention(DType t, const AttentionArgs& a, cudaStream_t stream) {
  if (a.Q == 0) return cudaSuccess;
  if (a.D > kMaxD || a.KV <= 0 || a.H % a.KV != 0 || a.block_size <= 0 || a.H > 65535) return cudaErrorInvalidValue;
  return RL_CUDA_DISPATCH(t, [&] {
    // CONSEC (vector loads) needs rows aligned to a lane's 32 * E elements: D = 32 E.
    if (a.D <= 32) return attention_for_d<T, 1>(a, stream);
    if (a.D <= 64) return attention_for_d<T, 2>(a, stream);
    if (a.D <= 128) return attention_for_d<T, 4>(a, stream);
    return attention_for_d<T, 8>(a, stream);
  });
}

}  // namespace rl::nn::cuda
