// The AVX2 + FMA path of the packed batch-invariant GEMM (see batch_invariant_avx2.hpp).
// The bits are those of every other path: each output element is one accumulator
// that starts at 0 and takes the k products in ascending order through a fused
// multiply-add, then + bias. Only the tile shape differs, and it has two here, each
// 12 accumulators + the panel's vectors + the broadcast in the 16 registers:
// - 4 rows x 24 columns (a panel is two strips): per k 12 fmas for 3 panel loads and
//   4 broadcasts. Best where a strip fits L1 (K < 192) or there are few rows.
// - 6 rows x 16 columns (three strips): per k 12 fmas for 2 panel loads and 6
//   broadcasts, a third less panel read per fma: where the strip streams from L2
//   (K >= 192) with 10 rows or more, 1.1-1.2x (m 16-512, K 192-2048, one core).
// (The compiler-vectorised 3 x 32 tiles of the portable kernel spill their 4 panel
// vectors to memory operands: 12 fmas for 15 loads, bound by the load ports.)
#include "nn/batch_invariant_avx2.hpp"

#include <immintrin.h>

#include <algorithm>

#include "nn/batch_invariant.hpp"

namespace rl::nn::bi::avx2 {
namespace {

static_assert(kPanelCols % 24 == 0 && kPanelCols % 16 == 0, "a panel is whole strips of 24 and of 16 columns");

#define RL_AVX2 __attribute__((target("avx2,fma")))
#define RL_AVX2_INLINE __attribute__((target("avx2,fma"), always_inline)) inline

RL_AVX2_INLINE __m256i lanes_below(int64_t n) {
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(n)), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

// Rows [0, MR) of x against the strip p of V vectors (row stride kPanelCols); stores
// columns [0, nc) of y. With `next`, prefetches `rows` rows of it, one every `every` k (the
// panel's tiles share the next panel's rows, so the reads spread over the panel).
template <int MR, int V>
RL_AVX2_INLINE void tile(const float* x, int64_t ldx, const float* p, int64_t K, const float* bias, float* y,
                         int64_t ldy, int64_t nc, const float* next, int64_t rows, int64_t every) {
  __m256 acc[MR][V];
#pragma GCC unroll 6
  for (int r = 0; r < MR; ++r)
#pragma GCC unroll 3
    for (int v = 0; v < V; ++v) acc[r][v] = _mm256_setzero_ps();
  for (int64_t k0 = 0; k0 < K; k0 += every) {
    if (next && rows > 0) {
      for (int line = 0; line < 3; ++line)  // a panel row: 48 floats, three cache lines
        _mm_prefetch(reinterpret_cast<const char*>(next + 16 * line), _MM_HINT_T1);
      next += kPanelCols;
      --rows;
    }
    const int64_t k1 = std::min(K, k0 + every);
    for (int64_t k = k0; k < k1; ++k) {
      __m256 w[V];
#pragma GCC unroll 3
      for (int v = 0; v < V; ++v) w[v] = _mm256_load_ps(p + k * kPanelCols + 8 * v);
#pragma GCC unroll 6
      for (int r = 0; r < MR; ++r) {
        const __m256 xv = _mm256_broadcast_ss(x + r * ldx + k);
#pragma GCC unroll 3
        for (int v = 0; v < V; ++v) acc[r][v] = _mm256_fmadd_ps(xv, w[v], acc[r][v]);
      }
    }
  }
#pragma GCC unroll 3
  for (int v = 0; v < V; ++v) {
    const int64_t left = std::clamp<int64_t>(nc - 8 * v, 0, 8);
    if (left == 0) break;
    const __m256i mask = lanes_below(left);
    const __m256 b = bias ? _mm256_maskload_ps(bias + 8 * v, mask) : _mm256_setzero_ps();
#pragma GCC unroll 6
    for (int r = 0; r < MR; ++r) {
      const __m256 out = bias ? _mm256_add_ps(acc[r][v], b) : acc[r][v];
      if (left == 8)
        _mm256_storeu_ps(y + r * ldy + 8 * v, out);
      else
        _mm256_maskstore_ps(y + r * ldy + 8 * v, mask, out);
    }
  }
}

// v[j] = column j of the 8 x 8 block whose rows v[i] held.
RL_AVX2_INLINE void transpose8(__m256 v[8]) {
  __m256 t[8];
  for (int i = 0; i < 8; i += 2) {
    t[i] = _mm256_unpacklo_ps(v[i], v[i + 1]);
    t[i + 1] = _mm256_unpackhi_ps(v[i], v[i + 1]);
  }
  for (int i = 0; i < 8; i += 4) {  // v[i + r]: column r (low lane) and r + 4 (high) of rows i..i+3
    v[i] = _mm256_shuffle_ps(t[i], t[i + 2], _MM_SHUFFLE(1, 0, 1, 0));
    v[i + 1] = _mm256_shuffle_ps(t[i], t[i + 2], _MM_SHUFFLE(3, 2, 3, 2));
    v[i + 2] = _mm256_shuffle_ps(t[i + 1], t[i + 3], _MM_SHUFFLE(1, 0, 1, 0));
    v[i + 3] = _mm256_shuffle_ps(t[i + 1], t[i + 3], _MM_SHUFFLE(3, 2, 3, 2));
  }
  for (int r = 0; r < 4; ++r) {
    t[r] = _mm256_permute2f128_ps(v[r], v[4 + r], 0x20);
    t[4 + r] = _mm256_permute2f128_ps(v[r], v[4 + r], 0x31);
  }
  for (int j = 0; j < 8; ++j) v[j] = t[j];
}

// The panel's strips of V vectors under tiles of up to MR rows.
template <int MR, int V>
RL_AVX2_INLINE void strips(const float* x, int64_t ldx, const float* p, int64_t K, const float* bias, float* y,
                           int64_t ldy, int64_t m, int64_t nc, const float* next) {
  constexpr int64_t kStrip = 8 * V;
  const int64_t n_strips = (nc + kStrip - 1) / kStrip, per_strip = (m + MR - 1) / MR;
  const int64_t tiles = std::max<int64_t>(1, n_strips * per_strip), share = (K + tiles - 1) / tiles;
  int64_t t = 0;
  // A row tile across the panel's strips, then the next rows: the tile's x rows stay in
  // L1 from one strip to the next (strips outer would read all of x once per strip).
  for (int64_t i = 0; i < m; i += MR) {
    for (int64_t s = 0; s < n_strips; ++s, ++t) {
      const int64_t c = s * kStrip, ncs = std::min(kStrip, nc - c);
      const float* b = bias ? bias + c : nullptr;
      const float* nx = next ? next + std::min(K, t * share) * kPanelCols : nullptr;
      const int64_t nr = std::max<int64_t>(0, std::min(share, K - t * share));
      const float* xr = x + i * ldx;
      float* yr = y + i * ldy + c;
      switch (std::min<int64_t>(MR, m - i)) {
        case 6: if constexpr (MR >= 6) tile<6, V>(xr, ldx, p + c, K, b, yr, ldy, ncs, nx, nr, tiles); break;
        case 5: if constexpr (MR >= 5) tile<5, V>(xr, ldx, p + c, K, b, yr, ldy, ncs, nx, nr, tiles); break;
        case 4: tile<4, V>(xr, ldx, p + c, K, b, yr, ldy, ncs, nx, nr, tiles); break;
        case 3: tile<3, V>(xr, ldx, p + c, K, b, yr, ldy, ncs, nx, nr, tiles); break;
        case 2: tile<2, V>(xr, ldx, p + c, K, b, yr, ldy, ncs, nx, nr, tiles); break;
        default: tile<1, V>(xr, ldx, p + c, K, b, yr, ldy, ncs, nx, nr, tiles); break;
      }
    }
  }
}

}  // namespace

bool supported() { return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"); }

RL_AVX2 void panel_rows(const float* x, int64_t ldx, const float* p, int64_t K, const float* bias, float* y,
                        int64_t ldy, int64_t m, int64_t nc, const float* next) {
  // Where 6 x 16 tiles win (the head of the file): the strip streams from L2, and enough
  // rows that the 6-row tiles are mostly full.
  constexpr int64_t kMinRows = 10, kMinK = 192;
  if (m >= kMinRows && K >= kMinK) return strips<6, 2>(x, ldx, p, K, bias, y, ldy, m, nc, next);
  strips<4, 3>(x, ldx, p, K, bias, y, ldy, m, nc, next);
}

RL_AVX2 void pack_panel_nk(const float* w, int64_t ldw, int64_t K, int64_t c0, int64_t nc, float* dst) {
  const int64_t k8 = K / 8 * 8;
  for (int64_t g = 0; g < kPanelCols; g += 8) {
    if (g + 8 > nc) {  // a part-filled or empty group: zero-padded
      for (int64_t k = 0; k < K; ++k)
        for (int64_t c = g; c < g + 8; ++c) dst[k * kPanelCols + c] = c < nc ? w[(c0 + c) * ldw + k] : 0.0f;
      continue;
    }
    const float* src = w + (c0 + g) * ldw;
    for (int64_t k = 0; k < k8; k += 8) {
      __m256 v[8];
#pragma GCC unroll 8
      for (int i = 0; i < 8; ++i) v[i] = _mm256_loadu_ps(src + i * ldw + k);
      transpose8(v);
#pragma GCC unroll 8
      for (int j = 0; j < 8; ++j) _mm256_store_ps(dst + (k + j) * kPanelCols + g, v[j]);
    }
    for (int64_t k = k8; k < K; ++k)
      for (int64_t c = 0; c < 8; ++c) dst[k * kPanelCols + g + c] = src[c * ldw + k];
  }
}

}  // namespace rl::nn::bi::avx2
