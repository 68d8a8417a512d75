#include "nn/paged_attention.hpp"

#include "nn/batch_invariant.hpp"

#include <ATen/Parallel.h>
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>

namespace rl::nn {
namespace {

using bi::dot_inline;

// Fixed 8-wide blocks for the same reason (-O2 leaves a variable-length loop scalar).
__attribute__((always_inline)) inline void axpy(float w, const float* __restrict x, float* __restrict y, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int k = 0; k < 8; ++k) y[i + k] = std::fma(w, x[i + k], y[i + k]);
  for (; i < n; ++i) y[i] = std::fma(w, x[i], y[i]);
}

struct Shapes {
  int64_t H, KV, D, stride;
  float scale;
};

// One sequence, all heads: each context slot's K (then V) row [KV, D] is read
// once, contiguously, for every head. Built for AVX-512, AVX2 and baseline x86
// (the loader picks one), since the rest of the binary targets baseline x86-64.
__attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
void attend_one(const float* q, const float* kc, const float* vc, const int64_t* row, int64_t n, const Shapes& sh,
                float* w, float* o) {
  const int64_t H = sh.H, D = sh.D, KV = sh.KV, group = H / KV;
  for (int64_t j = 0; j < n; ++j) {
    const float* kr = kc + row[j] * KV * D;
    for (int64_t h = 0; h < H; ++h) w[h * n + j] = dot_inline(q + h * D, kr + (h / group) * D, D) * sh.scale;
  }
  for (int64_t h = 0; h < H; ++h) {
    float* wh = w + h * n;
    float m = -std::numeric_limits<float>::infinity();
    for (int64_t j = 0; j < n; ++j) m = std::max(m, wh[j]);
    float sum = 0;
    for (int64_t j = 0; j < n; ++j) sum += (wh[j] = bi::exp_inline(wh[j] - m));
    const float inv = 1.0f / sum;
    for (int64_t j = 0; j < n; ++j) wh[j] *= inv;
  }
  std::fill(o, o + H * D, 0.0f);
  for (int64_t j = 0; j < n; ++j) {
    const float* vr = vc + row[j] * KV * D;
    for (int64_t h = 0; h < H; ++h) axpy(w[h * n + j], vr + (h / group) * D, o + h * D, D);
  }
}

// out[c] = sum over t < n in order of w[t] * v(t)[c] (from 0, through fma) for NV x 8
// columns c of the value rows.
template <int NV>
__attribute__((target("avx2,fma"), always_inline)) inline void value_cols(const float* w, const float* vc,
                                                                        const int64_t* row, int64_t n, int64_t ld,
                                                                        int64_t off, float* out) {
  __m256 acc[NV];
#pragma GCC unroll 8
  for (int v = 0; v < NV; ++v) acc[v] = _mm256_setzero_ps();
  for (int64_t t = 0; t < n; ++t) {
    const __m256 wv = _mm256_set1_ps(w[t]);
    const float* vr = vc + row[t] * ld + off;
#pragma GCC unroll 8
    for (int v = 0; v < NV; ++v) acc[v] = _mm256_fmadd_ps(wv, _mm256_loadu_ps(vr + 8 * v), acc[v]);
  }
#pragma GCC unroll 8
  for (int v = 0; v < NV; ++v) _mm256_storeu_ps(out + 8 * v, acc[v]);
}

// bi::exp_inline on eight lanes, operation for operation (the same bits per lane).
__attribute__((target("avx2,fma"), always_inline)) inline __m256 exp8(__m256 x) {
  const __m256 kRound = _mm256_set1_ps(12582912.0f);
  // x > 88 ? 88 : (x < -87 ? -87 : x); max/min return their second operand for a NaN, as the ternaries do.
  const __m256 xc = _mm256_min_ps(_mm256_set1_ps(88.0f), _mm256_max_ps(_mm256_set1_ps(-87.0f), x));
  const __m256 t = _mm256_fmadd_ps(xc, _mm256_set1_ps(1.44269504088896341f), kRound);
  const __m256 n = _mm256_sub_ps(t, kRound);
  __m256 r = _mm256_fmadd_ps(n, _mm256_set1_ps(-0.693145751953125f), xc);
  r = _mm256_fmadd_ps(n, _mm256_set1_ps(-1.428606765330187e-06f), r);
  __m256 p = _mm256_set1_ps(1.0f / 720.0f);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 120.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 24.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 6.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
  const __m256i bits = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvttps_epi32(n), _mm256_set1_epi32(127)), 23);
  const __m256 e = _mm256_mul_ps(p, _mm256_castsi256_ps(bits));
  return _mm256_blendv_ps(e, _mm256_setzero_ps(), _mm256_cmp_ps(x, _mm256_set1_ps(-87.0f), _CMP_LT_OQ));
}

// attend_one's arithmetic with AVX2 registers, for D a multiple of 8: head by head,
// eight keys' scores at once (each key's eight partial sums in one register, then
// the same pairwise tree, done for eight keys by horizontal adds), and each head's
// output accumulated in registers over the keys. Every value takes the same
// operations in the same order as in attend_one: the same bits, fewer instructions.
__attribute__((target("avx2,fma"))) void attend_one_avx2(const float* q, const float* kc, const float* vc,
                                                         const int64_t* row, int64_t n, const Shapes& sh, float* w,
                                                         float* o) {
  const int64_t H = sh.H, D = sh.D, KV = sh.KV, group = H / KV, ld = KV * D;
  const __m256 scale = _mm256_set1_ps(sh.scale);
  for (int64_t h = 0; h < H; ++h) {
    const float* qh = q + h * D;
    const int64_t off = (h / group) * D;
    float* wh = w + h * n;
    int64_t j = 0;
    for (; j + 8 <= n; j += 8) {
      const float* kr[8];
#pragma GCC unroll 8
      for (int t = 0; t < 8; ++t) kr[t] = kc + row[j + t] * ld + off;
      __m256 acc[8];
#pragma GCC unroll 8
      for (int t = 0; t < 8; ++t) acc[t] = _mm256_setzero_ps();
      for (int64_t i = 0; i < D; i += 8) {
        const __m256 qv = _mm256_loadu_ps(qh + i);
#pragma GCC unroll 8
        for (int t = 0; t < 8; ++t) acc[t] = _mm256_fmadd_ps(qv, _mm256_loadu_ps(kr[t] + i), acc[t]);
      }
      // hadd(a, b) = [a0+a1, a2+a3, b0+b1, b2+b3, a4+a5, a6+a7, b4+b5, b6+b7]: two rounds
      // leave keys 0-3 (then 4-7) as [(01)+(23) x4 | (45)+(67) x4]; the halves' sum is
      // ((a0+a1)+(a2+a3))+((a4+a5)+(a6+a7)), dot_inline's order.
      const __m256 x = _mm256_hadd_ps(_mm256_hadd_ps(acc[0], acc[1]), _mm256_hadd_ps(acc[2], acc[3]));
      const __m256 y = _mm256_hadd_ps(_mm256_hadd_ps(acc[4], acc[5]), _mm256_hadd_ps(acc[6], acc[7]));
      const __m256 s = _mm256_add_ps(_mm256_permute2f128_ps(x, y, 0x20), _mm256_permute2f128_ps(x, y, 0x31));
      _mm256_storeu_ps(wh + j, _mm256_mul_ps(s, scale));
    }
    for (; j < n; ++j) wh[j] = dot_inline(qh, kc + row[j] * ld + off, D) * sh.scale;
    // Softmax as attend_one: the maximum (any order finds it), exp, then the sum
    // in key order and one scale.
    __m256 mv = _mm256_set1_ps(-std::numeric_limits<float>::infinity());
    int64_t t = 0;
    for (; t + 8 <= n; t += 8) mv = _mm256_max_ps(mv, _mm256_loadu_ps(wh + t));
    float lanes[8];
    _mm256_storeu_ps(lanes, mv);
    float m = -std::numeric_limits<float>::infinity();
    for (float l : lanes) m = std::max(m, l);
    for (; t < n; ++t) m = std::max(m, wh[t]);
    const __m256 mb = _mm256_set1_ps(m);
    for (t = 0; t + 8 <= n; t += 8) _mm256_storeu_ps(wh + t, exp8(_mm256_sub_ps(_mm256_loadu_ps(wh + t), mb)));
    for (; t < n; ++t) wh[t] = bi::exp_inline(wh[t] - m);
    float sum = 0;
    for (t = 0; t < n; ++t) sum += wh[t];
    const float inv = 1.0f / sum;
    const __m256 iv = _mm256_set1_ps(inv);
    for (t = 0; t + 8 <= n; t += 8) _mm256_storeu_ps(wh + t, _mm256_mul_ps(_mm256_loadu_ps(wh + t), iv));
    for (; t < n; ++t) wh[t] *= inv;
    // o[h] = sum over keys in order of w * v, from 0, through fma: 64 columns at a time
    // (eight independent chains hide the fma latency), then 8.
    int64_t d = 0;
    for (; d + 64 <= D; d += 64) value_cols<8>(wh, vc, row, n, ld, off + d, o + h * D + d);
    for (; d < D; d += 8) value_cols<1>(wh, vc, row, n, ld, off + d, o + h * D + d);
  }
}

const bool kAvx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && bi::simd_kernels();

}  // namespace

bool paged_decode_supported(const torch::Tensor& q, const torch::Tensor& k_cache) {
  return q.device().is_cpu() && q.scalar_type() == torch::kFloat32 && k_cache.scalar_type() == torch::kFloat32 &&
         k_cache.is_contiguous();
}

torch::Tensor paged_attention(const torch::Tensor& q_in, const torch::Tensor& k_cache, const torch::Tensor& v_cache,
                              const torch::Tensor& context_slots, const std::vector<int64_t>& seq_of_query,
                              const std::vector<int64_t>& context_of_query, double scale) {
  const int64_t Q = q_in.size(0), H = q_in.size(1), D = q_in.size(2), KV = k_cache.size(1);
  if (H % KV != 0 || k_cache.size(2) != D || static_cast<int64_t>(seq_of_query.size()) != Q ||
      seq_of_query.size() != context_of_query.size() || !k_cache.is_contiguous() || !v_cache.is_contiguous())
    throw std::invalid_argument("paged_attention: shapes disagree");
  auto q = q_in.contiguous();
  auto slots = context_slots.contiguous();
  auto out = torch::empty_like(q);
  const Shapes sh{H, KV, D, slots.size(1), static_cast<float>(scale)};
  const float* qp = q.data_ptr<float>();
  const float* kp = k_cache.data_ptr<float>();
  const float* vp = v_cache.data_ptr<float>();
  const int64_t* sp = slots.data_ptr<int64_t>();
  float* op = out.data_ptr<float>();
  int64_t max_ctx = 1;
  for (int64_t i = 0; i < Q; ++i) {
    const int64_t s = seq_of_query[static_cast<size_t>(i)], c = context_of_query[static_cast<size_t>(i)];
    if (s < 0 || s >= slots.size(0) || c < 1 || c > slots.size(1))
      throw std::invalid_argument("paged_attention: query " + std::to_string(i) + " has sequence " +
                                  std::to_string(s) + " and context " + std::to_string(c) + " outside [" +
                                  std::to_string(slots.size(0)) + ", " + std::to_string(slots.size(1)) + "]");
    max_ctx = std::max(max_ctx, c);
  }
  at::parallel_for(0, Q, 1, [&](int64_t begin, int64_t end) {
    std::vector<float> w(static_cast<size_t>(H * max_ctx));
    const bool fast = kAvx2 && D % 8 == 0;
    for (int64_t i = begin; i < end; ++i)
      (fast ? attend_one_avx2 : attend_one)(qp + i * H * D, kp, vp, sp + seq_of_query[static_cast<size_t>(i)] * sh.stride,
                 context_of_query[static_cast<size_t>(i)], sh, w.data(), op + i * H * D);
  });
  return out;
}

torch::Tensor paged_decode_attention(const torch::Tensor& q_in, const torch::Tensor& k_cache,
                                     const torch::Tensor& v_cache, const torch::Tensor& context_slots,
                                     const std::vector<int64_t>& context_lens, double scale) {
  const int64_t S = q_in.size(0);
  if (static_cast<int64_t>(context_lens.size()) != S) throw std::invalid_argument("paged_decode_attention: shapes disagree");
  std::vector<int64_t> seq(static_cast<size_t>(S));
  for (int64_t s = 0; s < S; ++s) seq[static_cast<size_t>(s)] = s;
  return paged_attention(q_in, k_cache, v_cache, context_slots, seq, context_lens, scale);
}

}  // namespace rl::nn
