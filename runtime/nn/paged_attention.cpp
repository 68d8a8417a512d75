#include "nn/paged_attention.hpp"

#include "nn/batch_invariant.hpp"
#include "nn/claim_for.hpp"

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
                float* w, float* o, float* lse) {
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
    if (lse) lse[h] = m + std::log(sum);
    const float inv = 1.0f / sum;
    for (int64_t j = 0; j < n; ++j) wh[j] *= inv;
  }
  std::fill(o, o + H * D, 0.0f);
  for (int64_t j = 0; j < n; ++j) {
    const float* vr = vc + row[j] * KV * D;
    for (int64_t h = 0; h < H; ++h) axpy(w[h * n + j], vr + (h / group) * D, o + h * D, D);
  }
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

// Pulls the cache lines of floats [p, p + n) towards the core.
template <int Hint>
__attribute__((always_inline)) inline void prefetch_span(const float* p, int64_t n) {
  const char* c = reinterpret_cast<const char*>(p);
  for (int64_t b = 0; b < n * static_cast<int64_t>(sizeof(float)); b += 64)
    _mm_prefetch(c + b, static_cast<_mm_hint>(Hint));
}

// value_cols for two heads' whole rows of D = 16 * VPH columns at once, with
// 16-lane registers: 2 * VPH independent fma chains per key (one head's VPH chains
// alone would wait on the fma latency).
template <int VPH>
__attribute__((target("avx512f"), always_inline)) inline void value_pair(const float* w0, const float* w1,
                                                                       const float* vc, const int64_t* row,
                                                                       int64_t n, int64_t ld, int64_t off0,
                                                                       int64_t off1, float* o0, float* o1) {
  __m512 a[VPH], b[VPH];
#pragma GCC unroll 8
  for (int v = 0; v < VPH; ++v) a[v] = b[v] = _mm512_setzero_ps();
  for (int64_t t = 0; t < n; ++t) {
    const float* vr = vc + row[t] * ld;
    const __m512 x = _mm512_set1_ps(w0[t]), y = _mm512_set1_ps(w1[t]);
#pragma GCC unroll 8
    for (int v = 0; v < VPH; ++v) {
      a[v] = _mm512_fmadd_ps(x, _mm512_loadu_ps(vr + off0 + 16 * v), a[v]);
      b[v] = _mm512_fmadd_ps(y, _mm512_loadu_ps(vr + off1 + 16 * v), b[v]);
    }
  }
#pragma GCC unroll 8
  for (int v = 0; v < VPH; ++v) {
    _mm512_storeu_ps(o0 + 16 * v, a[v]);
    _mm512_storeu_ps(o1 + 16 * v, b[v]);
  }
}

// Every head's output with value_pair (D of 32, 64 or 128); false for other D.
__attribute__((target("avx512f"))) bool values_avx512(const float* w, const float* vc, const int64_t* row, int64_t n,
                                                      const Shapes& sh, float* o) {
  const int64_t H = sh.H, D = sh.D, ld = sh.KV * D, group = H / sh.KV;
  if (D != 32 && D != 64 && D != 128) return false;
  for (int64_t h = 0; h < H; h += 2) {
    const int64_t g = std::min(h + 1, H - 1);  // an odd last head pairs with itself
    const float *w0 = w + h * n, *w1 = w + g * n;
    const int64_t off0 = (h / group) * D, off1 = (g / group) * D;
    float *o0 = o + h * D, *o1 = o + g * D;
    if (D == 32) value_pair<2>(w0, w1, vc, row, n, ld, off0, off1, o0, o1);
    else if (D == 64) value_pair<4>(w0, w1, vc, row, n, ld, off0, off1, o0, o1);
    else value_pair<8>(w0, w1, vc, row, n, ld, off0, off1, o0, o1);
  }
  return true;
}

// attend_one's arithmetic with SIMD registers, for D a multiple of 8. Scores: eight
// keys at a time, every head over them before the next eight (their rows, 8 x 2 KB
// at the 42M shape, stay in L1 while the heads read them, and the next eight keys'
// rows, and this eight's value rows, are pulled in meanwhile); each key's eight
// partial sums in one register, then the same pairwise tree, done for eight keys by
// horizontal adds. Values: values_avx512 with AVX-512 (D of 32, 64, 128), else
// value_cols head by head, reading rows the scores pulled into L2. Every value takes the same
// operations in the same order as in attend_one: the same bits, fewer instructions
// and the cache lines in the order memory serves them best.
__attribute__((target("avx2,fma"))) void attend_one_simd(const float* q, const float* kc, const float* vc,
                                                         const int64_t* row, int64_t n, const Shapes& sh, float* w,
                                                         float* o, bool zmm, float* lse) {
  const int64_t H = sh.H, D = sh.D, KV = sh.KV, group = H / KV, ld = KV * D;
  const int64_t seg = (ld + H - 1) / H;  // the share of a row each head's turn prefetches
  const __m256 scale = _mm256_set1_ps(sh.scale);
  int64_t j = 0;
  for (; j + 8 <= n; j += 8) {
    const float* rows[8];
#pragma GCC unroll 8
    for (int t = 0; t < 8; ++t) rows[t] = kc + row[j + t] * ld;
    const int64_t ahead = std::min<int64_t>(8, n - j - 8);  // keys of the next block
    for (int64_t h = 0; h < H; ++h) {
      const float* qh = q + h * D;
      const int64_t off = (h / group) * D;
      const int64_t p0 = std::min(h * seg, ld), pn = std::min(seg, ld - p0);
      for (int64_t t = 0; t < ahead; ++t) prefetch_span<_MM_HINT_T0>(kc + row[j + 8 + t] * ld + p0, pn);
      for (int64_t t = 0; t < 8; ++t) prefetch_span<_MM_HINT_T1>(vc + row[j + t] * ld + p0, pn);
      __m256 acc[8];
#pragma GCC unroll 8
      for (int t = 0; t < 8; ++t) acc[t] = _mm256_setzero_ps();
      for (int64_t i = 0; i < D; i += 8) {
        const __m256 qv = _mm256_loadu_ps(qh + i);
#pragma GCC unroll 8
        for (int t = 0; t < 8; ++t) acc[t] = _mm256_fmadd_ps(qv, _mm256_loadu_ps(rows[t] + off + i), acc[t]);
      }
      // hadd(a, b) = [a0+a1, a2+a3, b0+b1, b2+b3, a4+a5, a6+a7, b4+b5, b6+b7]: two rounds
      // leave keys 0-3 (then 4-7) as [(01)+(23) x4 | (45)+(67) x4]; the halves' sum is
      // ((a0+a1)+(a2+a3))+((a4+a5)+(a6+a7)), dot_inline's order.
      const __m256 x = _mm256_hadd_ps(_mm256_hadd_ps(acc[0], acc[1]), _mm256_hadd_ps(acc[2], acc[3]));
      const __m256 y = _mm256_hadd_ps(_mm256_hadd_ps(acc[4], acc[5]), _mm256_hadd_ps(acc[6], acc[7]));
      const __m256 s = _mm256_add_ps(_mm256_permute2f128_ps(x, y, 0x20), _mm256_permute2f128_ps(x, y, 0x31));
      _mm256_storeu_ps(w + h * n + j, _mm256_mul_ps(s, scale));
    }
  }
  for (; j < n; ++j) {
    const float* kr = kc + row[j] * ld;
    prefetch_span<_MM_HINT_T1>(vc + row[j] * ld, ld);
    for (int64_t h = 0; h < H; ++h) w[h * n + j] = dot_inline(q + h * D, kr + (h / group) * D, D) * sh.scale;
  }
  for (int64_t h = 0; h < H; ++h) {
    float* wh = w + h * n;
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
    if (lse) lse[h] = m + std::log(sum);
    const float inv = 1.0f / sum;
    const __m256 iv = _mm256_set1_ps(inv);
    for (t = 0; t + 8 <= n; t += 8) _mm256_storeu_ps(wh + t, _mm256_mul_ps(_mm256_loadu_ps(wh + t), iv));
    for (; t < n; ++t) wh[t] *= inv;
  }
  if (!zmm || !values_avx512(w, vc, row, n, sh, o)) {
    for (int64_t h = 0; h < H; ++h) {
      const int64_t off = (h / group) * D;
      int64_t d = 0;
      for (; d + 64 <= D; d += 64) value_cols<8>(w + h * n, vc, row, n, ld, off + d, o + h * D + d);
      for (; d < D; d += 8) value_cols<1>(w + h * n, vc, row, n, ld, off + d, o + h * D + d);
    }
  }
}

const bool kAvx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && bi::simd_kernels();
const bool kAvx512 = kAvx2 && __builtin_cpu_supports("avx512f");

}  // namespace

bool paged_decode_supported(const torch::Tensor& q, const torch::Tensor& k_cache) {
  return q.device().is_cpu() && q.scalar_type() == torch::kFloat32 && k_cache.scalar_type() == torch::kFloat32 &&
         k_cache.is_contiguous();
}

void write_cache_rows(torch::Tensor& cache, const torch::Tensor& slots, const torch::Tensor& src) {
  const int64_t N = slots.numel();
  if (!cache.device().is_cpu() || cache.scalar_type() != torch::kFloat32 || !cache.is_contiguous() ||
      src.scalar_type() != torch::kFloat32 || !src.device().is_cpu() || slots.scalar_type() != torch::kInt64 ||
      src.dim() != 3 || src.size(0) != N || src.size(1) != cache.size(1) || src.size(2) != cache.size(2) ||
      src.stride(2) != 1 || src.stride(1) != src.size(2)) {
    cache.index_copy_(0, slots, src);
    return;
  }
  auto sl = slots.contiguous();
  const int64_t* sp = sl.data_ptr<int64_t>();
  const int64_t row = cache.size(1) * cache.size(2), n_slots = cache.size(0);
  for (int64_t i = 0; i < N; ++i)
    if (sp[i] < 0 || sp[i] >= n_slots)
      throw std::out_of_range("write_cache_rows: slot " + std::to_string(sp[i]) + " of token " + std::to_string(i) +
                              " outside the cache's [0, " + std::to_string(n_slots) + ")");
  const float* s = src.data_ptr<float>();
  float* c = cache.data_ptr<float>();
  for (int64_t i = 0; i < N; ++i) std::copy(s + i * src.stride(0), s + i * src.stride(0) + row, c + sp[i] * row);
}

torch::Tensor paged_attention(const torch::Tensor& q_in, const torch::Tensor& k_cache, const torch::Tensor& v_cache,
                              const torch::Tensor& context_slots, const std::vector<int64_t>& seq_of_query,
                              const std::vector<int64_t>& context_of_query, double scale, torch::Tensor* lse) {
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
  float* lp = nullptr;
  if (lse) {
    *lse = torch::empty({Q, H}, q.options());
    lp = lse->data_ptr<float>();
  }
  int64_t max_ctx = 1;
  for (int64_t i = 0; i < Q; ++i) {
    const int64_t s = seq_of_query[static_cast<size_t>(i)], c = context_of_query[static_cast<size_t>(i)];
    if (s < 0 || s >= slots.size(0) || c < 1 || c > slots.size(1))
      throw std::invalid_argument("paged_attention: query " + std::to_string(i) + " has sequence " +
                                  std::to_string(s) + " and context " + std::to_string(c) + " outside [" +
                                  std::to_string(slots.size(0)) + ", " + std::to_string(slots.size(1)) + "]");
    max_ctx = std::max(max_ctx, c);
  }
  // Queries differ in context length: a thread done with its share takes the others' next ones.
  std::vector<std::vector<float>> scratch(static_cast<size_t>(at::get_num_threads()));
  const bool fast = kAvx2 && D % 8 == 0;
  claim_for(Q, Q, [&](int64_t i, int64_t, int64_t task) {
    std::vector<float>& w = scratch[static_cast<size_t>(task)];
    w.resize(static_cast<size_t>(H * max_ctx));
    const int64_t* row = sp + seq_of_query[static_cast<size_t>(i)] * sh.stride;
    const int64_t n = context_of_query[static_cast<size_t>(i)];
    float* li = lp ? lp + i * H : nullptr;
    if (fast) attend_one_simd(qp + i * H * D, kp, vp, row, n, sh, w.data(), op + i * H * D, kAvx512, li);
    else attend_one(qp + i * H * D, kp, vp, row, n, sh, w.data(), op + i * H * D, li);
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
