// The packed paths of the batch-invariant GEMM (nn/batch_invariant.hpp): column
// panels [k, 48], either packed once per weight update (gemm_packed: the engine, the
// trainer's cached panels) or packed per call into a panel buffer (gemm()); and, on
// AVX-512, the backward pass's GEMMs on the same tiles (gemm_grad). AVX-512:
// register tiles of up to 8 rows x 48 columns (24 of the 32 vector registers), here;
// AVX2 + FMA: tiles of up to 4 rows x 24 columns (batch_invariant_avx2.cpp).
// Each output element is still one accumulator starting at 0 that takes the k
// products in ascending order through a fused multiply-add, then + bias: the bits
// of the portable kernels, only with the accumulators held in registers.
//
// GCC 12's AVX-512 unpack and shuffle intrinsics start from an "undefined" register that
// -Wmaybe-uninitialized reports where they are inlined (GCC bug 105593; fixed in 13).
// The warning points into the header, so it is off for the file, before any include.
#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ < 13
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include "nn/batch_invariant.hpp"

#include <ATen/Parallel.h>
#include <immintrin.h>

#include <algorithm>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <vector>

#include "nn/batch_invariant_avx2.hpp"
#include "nn/claim_for.hpp"

namespace rl::nn::bi {
namespace {

constexpr int kVecs = kPanelCols / 16;  // zmm registers per tile row
constexpr int kMaxRows = 8;

// RLHOST_BI_SIMD, read once: "0" sets the SIMD paths aside (simd_kernels()); "avx2"
// keeps an AVX-512 CPU on the AVX2 GEMM (to test that path there).
const std::string& simd_setting() {
  static const std::string s = [] {
    const char* e = std::getenv("RLHOST_BI_SIMD");
    return std::string(e ? e : "");
  }();
  return s;
}

const bool kAvx512 = __builtin_cpu_supports("avx512f") && simd_kernels() && simd_setting() != "avx2";
const bool kAvx2 = !kAvx512 && avx2::supported() && simd_kernels();
const bool kPanels = kAvx512 || kAvx2;  // a packed path for this CPU

// rows [0, MR) of x against one panel; stores columns [0, nc) of y. XT: the rows come
// packed k-major, x[k * 8 + r] (pack_tiles: a transposed operand's columns); ACC: the
// sums start from y's values (a block of k after the one that stored them: the same
// chain of fused multiply-adds as one pass over all of k). With `next`, also pulls
// `rows` rows of the next panel from there into L2, one every `every`
// k (a decode step streams every weight from memory: compute and reads overlap,
// ~1.1-1.4x; spread over all of a panel's tiles, the reads never outrun the line
// fill buffers and stall the tile that issues them).
template <int MR, bool XT, bool ACC>
__attribute__((target("avx512f"), always_inline)) inline void tile(const float* x, int64_t ldx, const float* p,
                                                                   int64_t K, const float* bias, float* y,
                                                                   int64_t ldy, int64_t nc, const float* next,
                                                                   int64_t rows, int64_t every) {
  __m512 acc[MR][kVecs];
#pragma GCC unroll 4
  for (int v = 0; v < kVecs; ++v) {
    const int64_t left = std::clamp<int64_t>(nc - 16 * v, 0, 16);
    const __mmask16 mask = static_cast<__mmask16>((1u << left) - 1u);
#pragma GCC unroll 8
    for (int r = 0; r < MR; ++r)
      acc[r][v] = ACC ? _mm512_maskz_loadu_ps(mask, y + r * ldy + 16 * v) : _mm512_setzero_ps();
  }
  for (int64_t k0 = 0; k0 < K; k0 += every) {
    if (next && rows > 0) {
#pragma GCC unroll 4
      for (int v = 0; v < kVecs; ++v) _mm_prefetch(reinterpret_cast<const char*>(next + 16 * v), _MM_HINT_T1);
      next += kPanelCols;
      --rows;
    }
    const int64_t k1 = std::min(K, k0 + every);
    for (int64_t k = k0; k < k1; ++k) {
      __m512 w[kVecs];
#pragma GCC unroll 4
      for (int v = 0; v < kVecs; ++v) w[v] = _mm512_load_ps(p + k * kPanelCols + 16 * v);
#pragma GCC unroll 8
      for (int r = 0; r < MR; ++r) {
        const __m512 xv = _mm512_set1_ps(XT ? x[k * kMaxRows + r] : x[r * ldx + k]);
#pragma GCC unroll 4
        for (int v = 0; v < kVecs; ++v) acc[r][v] = _mm512_fmadd_ps(xv, w[v], acc[r][v]);
      }
    }
  }
#pragma GCC unroll 4
  for (int v = 0; v < kVecs; ++v) {
    const int64_t left = std::clamp<int64_t>(nc - 16 * v, 0, 16);
    const __mmask16 mask = static_cast<__mmask16>((1u << left) - 1u);
    const __m512 b = bias ? _mm512_maskz_loadu_ps(mask, bias + 16 * v) : _mm512_setzero_ps();
#pragma GCC unroll 8
    for (int r = 0; r < MR; ++r)
      _mm512_mask_storeu_ps(y + r * ldy + 16 * v, mask, bias ? _mm512_add_ps(acc[r][v], b) : acc[r][v]);
  }
}

// All m rows against one panel: tiles of 8 rows, then one tile of the rest; each
// tile prefetches its share of `next` (the following panel, or null).
template <bool XT, bool ACC>
__attribute__((target("avx512f"))) void panel_rows(const float* x, int64_t ldx, const float* p, int64_t K,
                                                   const float* bias, float* y, int64_t ldy, int64_t m, int64_t nc,
                                                   const float* next) {
  const int64_t tiles = (m + kMaxRows - 1) / kMaxRows, share = (K + tiles - 1) / tiles;
  int64_t i = 0, t = 0;
  auto part = [&](int64_t t) { return next ? next + std::min(K, t * share) * kPanelCols : nullptr; };
  auto rows = [&](int64_t t) { return std::max<int64_t>(0, std::min(share, K - t * share)); };
  for (; i + kMaxRows <= m; i += kMaxRows, ++t)
    tile<kMaxRows, XT, ACC>(x + (XT ? i * K : i * ldx), ldx, p, K, bias, y + i * ldy, ldy, nc, part(t), rows(t), tiles);
  const float* xr = x + (XT ? i * K : i * ldx);
  float* yr = y + i * ldy;
  const float* nx = part(t);
  const int64_t nr = rows(t);
  switch (m - i) {
    case 7: tile<7, XT, ACC>(xr, ldx, p, K, bias, yr, ldy, nc, nx, nr, tiles); break;
    case 6: tile<6, XT, ACC>(xr, ldx, p, K, bias, yr, ldy, nc, nx, nr, tiles); break;
    case 5: tile<5, XT, ACC>(xr, ldx, p, K, bias, yr, ldy, nc, nx, nr, tiles); break;
    case 4: tile<4, XT, ACC>(xr, ldx, p, K, bias, yr, ldy, nc, nx, nr, tiles); break;
    case 3: tile<3, XT, ACC>(xr, ldx, p, K, bias, yr, ldy, nc, nx, nr, tiles); break;
    case 2: tile<2, XT, ACC>(xr, ldx, p, K, bias, yr, ldy, nc, nx, nr, tiles); break;
    case 1: tile<1, XT, ACC>(xr, ldx, p, K, bias, yr, ldy, nc, nx, nr, tiles); break;
    default: break;
  }
}

// v[j] = column j of the 16 x 16 block whose rows v[i] held (three rounds of
// in-lane shuffles, then two of 128-bit lanes).
__attribute__((target("avx512f"), always_inline)) inline void transpose16(__m512 v[16]) {
  __m512 t[16];
  for (int i = 0; i < 16; i += 2) {
    t[i] = _mm512_unpacklo_ps(v[i], v[i + 1]);
    t[i + 1] = _mm512_unpackhi_ps(v[i], v[i + 1]);
  }
  for (int i = 0; i < 16; i += 4) {
    v[i] = _mm512_shuffle_ps(t[i], t[i + 2], _MM_SHUFFLE(1, 0, 1, 0));
    v[i + 1] = _mm512_shuffle_ps(t[i], t[i + 2], _MM_SHUFFLE(3, 2, 3, 2));
    v[i + 2] = _mm512_shuffle_ps(t[i + 1], t[i + 3], _MM_SHUFFLE(1, 0, 1, 0));
    v[i + 3] = _mm512_shuffle_ps(t[i + 1], t[i + 3], _MM_SHUFFLE(3, 2, 3, 2));
  }
  // v[4q + r], lane l: column 4l + r of rows 4q..4q+3.
  for (int r = 0; r < 4; ++r) {
    t[r] = _mm512_shuffle_f32x4(v[r], v[4 + r], 0x88);           // columns r, 8 + r of rows 0..7
    t[4 + r] = _mm512_shuffle_f32x4(v[r], v[4 + r], 0xdd);       // columns 4 + r, 12 + r
    t[8 + r] = _mm512_shuffle_f32x4(v[8 + r], v[12 + r], 0x88);  // the same of rows 8..15
    t[12 + r] = _mm512_shuffle_f32x4(v[8 + r], v[12 + r], 0xdd);
  }
  for (int r = 0; r < 8; ++r) {
    v[r] = _mm512_shuffle_f32x4(t[r], t[8 + r], 0x88);
    v[8 + r] = _mm512_shuffle_f32x4(t[r], t[8 + r], 0xdd);
  }
}

// pack_panel of an [n, k] weight (the HF layout): 16 x 16 blocks through registers,
// the rest element by element.
__attribute__((target("avx512f"))) void pack_panel_nk(const float* w, int64_t ldw, int64_t K, int64_t c0,
                                                      int64_t nc, float* dst) {
  const int64_t k16 = K / 16 * 16;
  for (int64_t g = 0; g < kPanelCols; g += 16) {
    if (g + 16 > nc) {  // a part-filled or empty group: zero-padded
      for (int64_t k = 0; k < K; ++k)
        for (int64_t c = g; c < g + 16; ++c) dst[k * kPanelCols + c] = c < nc ? w[(c0 + c) * ldw + k] : 0.0f;
      continue;
    }
    const float* src = w + (c0 + g) * ldw;
    for (int64_t k = 0; k < k16; k += 16) {
      __m512 v[16];
#pragma GCC unroll 16
      for (int i = 0; i < 16; ++i) v[i] = _mm512_loadu_ps(src + i * ldw + k);
      transpose16(v);
#pragma GCC unroll 16
      for (int j = 0; j < 16; ++j) _mm512_store_ps(dst + (k + j) * kPanelCols + g, v[j]);
    }
    for (int64_t k = k16; k < K; ++k)
      for (int64_t c = 0; c < 16; ++c) dst[k * kPanelCols + g + c] = src[c * ldw + k];
  }
}

// All m rows against one panel, on this CPU's path.
void rows_of_panel(const float* x, int64_t ldx, const float* p, int64_t K, const float* bias, float* y,
                   int64_t ldy, int64_t m, int64_t nc, const float* next) {
  if (kAvx512) return panel_rows<false, false>(x, ldx, p, K, bias, y, ldy, m, nc, next);
  avx2::panel_rows(x, ldx, p, K, bias, y, ldy, m, nc, next);
}

// Panel `jb` of w (layout as for gemm()) into dst [K, kPanelCols], zero-padded.
void pack_panel(const float* w, int64_t ldw, bool w_kn, int64_t K, int64_t n, int64_t jb, float* dst) {
  const int64_t c0 = jb * kPanelCols, nc = std::min(kPanelCols, n - c0);
  if (!w_kn && kAvx512) return pack_panel_nk(w, ldw, K, c0, nc, dst);
  if (!w_kn && kAvx2) return avx2::pack_panel_nk(w, ldw, K, c0, nc, dst);
  for (int64_t k = 0; k < K; ++k) {
    float* d = dst + k * kPanelCols;
    if (w_kn) {
      std::copy(w + k * ldw + c0, w + k * ldw + c0 + nc, d);
    } else {
      for (int64_t c = 0; c < nc; ++c) d[c] = w[(c0 + c) * ldw + k];
    }
    std::fill(d + nc, d + kPanelCols, 0.0f);
  }
}

float* aligned_floats(size_t n) {
  void* p = std::aligned_alloc(64, (n * sizeof(float) + 63) / 64 * 64);
  if (!p) throw std::bad_alloc();
  return static_cast<float*>(p);
}

int64_t panels(int64_t n) { return (n + kPanelCols - 1) / kPanelCols; }

// Rows of x a gemm_packed item takes against one panel. A panel's item runs all its rows,
// so with many rows (a prefill, a training batch) x passes from L3 or memory once per
// panel; in blocks of rows whose x fits a quarter of L2 (256 KiB), a thread keeps one
// block in L2 while the panels pass (each item here is one block against one panel,
// the blocks outer), 1.1-1.15x at 1,024-4,096 rows on two threads. A whole number of
// 24 rows (the 6- and 8-row tiles are whole), at least 48; fewer than two blocks'
// worth (a decode step) stay one item per panel.
int64_t row_block(int64_t m, int64_t K) {
  constexpr int64_t kBytes = int64_t{256} << 10;
  const int64_t rows = std::max<int64_t>(48, kBytes / (4 * std::max<int64_t>(1, K)) / 24 * 24);
  return m >= 2 * rows ? rows : m;
}

// Enough multiply-adds per task to pay for a thread.
int64_t grain(int64_t m, int64_t K) { return std::max<int64_t>(1, (int64_t(1) << 17) / std::max<int64_t>(1, m * K * kPanelCols)); }

// fn(r0, rows, jb, next) for every block of rows (row_block) against every panel jb of
// the [K, n] panels at d (panel jb at d + jb * stride); items block-major (block b,
// panel jb) = b * np + jb, so a thread's share is whole blocks against every panel;
// `next` is the panel of the item the same thread runs next (to prefetch), or null.
template <class Fn>
void blocked_panels(int64_t m, int64_t K, int64_t n, const float* d, int64_t stride, Fn&& fn) {
  const int64_t np = panels(n), mc = row_block(m, K), items = (m + mc - 1) / mc * np, g = grain(mc, K);
  claim_for(items, (items + g - 1) / g, [&](int64_t it, int64_t next, int64_t task) {
    const int64_t jb = it % np, r0 = it / np * mc;
    fn(r0, std::min(mc, m - r0), jb, next < items ? d + next % np * stride : nullptr, task);
  });
}

// Rows [0, m) of a transposed operand (row i is column i of x [K, *], rows ldx apart)
// into dst k-major by tiles of 8 rows: dst[t * K * 8 + k * 8 + r] = x[k * ldx + 8t + r].
// Read in place, such a block's rows lie a whole row of x apart, and at power-of-two
// widths (512 floats) they share a few cache sets: the block would not stay in L2.
// Each row's few lines lie on a page of their own (a row of x is 2-6 KiB), where the
// hardware's prefetchers do not follow: the rows kAhead on are asked for in advance.
void pack_tiles(const float* x, int64_t ldx, int64_t K, int64_t m, float* dst) {
  constexpr int64_t kAhead = 16;
  for (int64_t k = 0; k < K; ++k) {
    const float* src = x + k * ldx;
    if (k + kAhead < K)
      for (int64_t i = 0; i < m; i += 16) __builtin_prefetch(src + kAhead * ldx + i, 0, 3);
    for (int64_t i = 0; i < m; i += kMaxRows) {
      float* d = dst + i * K + k * kMaxRows;
      const int64_t w = std::min<int64_t>(kMaxRows, m - i);
      for (int64_t r = 0; r < w; ++r) d[r] = src[i + r];
    }
  }
}

}  // namespace

namespace detail {
// gemm() on CPUs with a packed path (false elsewhere): each task packs its panels into a buffer.
bool gemm_panels(const float* x, int64_t ldx, const float* w, int64_t ldw, bool w_kn, const float* bias, float* y,
                 int64_t ldy, int64_t m, int64_t K, int64_t n) {
  if (!kPanels) return false;
  at::parallel_for(0, panels(n), grain(m, K), [&](int64_t p0, int64_t p1) {
    std::unique_ptr<float, decltype(&std::free)> buf(aligned_floats(static_cast<size_t>(K * kPanelCols)), &std::free);
    for (int64_t jb = p0; jb < p1; ++jb) {
      const int64_t c0 = jb * kPanelCols;
      pack_panel(w, ldw, w_kn, K, n, jb, buf.get());
      rows_of_panel(x, ldx, buf.get(), K, bias ? bias + c0 : nullptr, y + c0, ldy, m, std::min(kPanelCols, n - c0),
                    nullptr);
    }
  });
  return true;
}
}  // namespace detail

bool simd_kernels() { return simd_setting() != "0"; }

size_t packed_bytes(int64_t k, int64_t n) { return static_cast<size_t>(panels(n) * k * kPanelCols) * sizeof(float); }

size_t PackedWeight::bytes() const { return packed_bytes(k, n); }

bool packed_available() { return kPanels; }

void packed_columns(const PackedWeight& w, const int64_t* cols, int64_t count, float* out) {
  for (int64_t i = 0; i < count; ++i) {
    if (cols[i] < 0 || cols[i] >= w.n)
      throw std::out_of_range("packed_columns: column " + std::to_string(cols[i]) + " outside [0, " +
                              std::to_string(w.n) + ")");
    const float* c = w.data.get() + (cols[i] / kPanelCols) * w.k * kPanelCols + cols[i] % kPanelCols;
    for (int64_t k = 0; k < w.k; ++k) out[i * w.k + k] = c[k * kPanelCols];
  }
}

PackedWeight pack_weight(const float* w, int64_t ldw, bool w_kn, int64_t k, int64_t n, std::shared_ptr<float> into) {
  PackedWeight p;
  p.k = k;
  p.n = n;
  if (into && reinterpret_cast<uintptr_t>(into.get()) % 64 != 0)
    throw std::invalid_argument("pack_weight: the memory given is not 64-byte aligned");
  p.data = into ? std::move(into) : std::shared_ptr<float>(aligned_floats(p.bytes() / sizeof(float)), &std::free);
  float* d = p.data.get();
  at::parallel_for(0, panels(n), 1, [&](int64_t p0, int64_t p1) {
    for (int64_t jb = p0; jb < p1; ++jb) pack_panel(w, ldw, w_kn, k, n, jb, d + jb * k * kPanelCols);
  });
  return p;
}

void gemm_packed(const float* x, int64_t ldx, const PackedWeight& w, const float* bias, float* y, int64_t ldy,
                 int64_t m) {
  if (m <= 0 || w.n <= 0) return;
  const int64_t K = w.k, n = w.n;
  const float* d = w.data.get();
  if (!kPanels) {  // packed on another CPU's behalf: unpack each panel's columns through gemm()
    for (int64_t jb = 0; jb < panels(n); ++jb) {
      const int64_t c0 = jb * kPanelCols;
      gemm(x, ldx, d + jb * K * kPanelCols, kPanelCols, true, bias ? bias + c0 : nullptr, y + c0, ldy, m, K,
           std::min(kPanelCols, n - c0));
    }
    return;
  }
  blocked_panels(m, K, n, d, K * kPanelCols, [&](int64_t r0, int64_t rows, int64_t jb, const float* next, int64_t) {
    const int64_t c0 = jb * kPanelCols;
    rows_of_panel(x + r0 * ldx, ldx, d + jb * K * kPanelCols, K, bias ? bias + c0 : nullptr, y + r0 * ldy + c0, ldy,
                  rows, std::min(kPanelCols, n - c0), next);
  });
}

bool gemm_grad_available() { return kAvx512; }

bool gemm_grad(const float* x, int64_t ldx, bool x_t, const PackedWeight& w, float* y, int64_t ldy, int64_t m,
               bool accumulate) {
  if (!kAvx512) return false;
  const int64_t K = w.k, n = w.n;
  if (m <= 0 || n <= 0) return true;
  const float* d = w.data.get();
  // Blocks of k whose slice of a panel (2048 x 48 floats, 384 KiB) stays in L2 beside
  // the rows' block: along all of a long k (the lm_head's vocabulary) each panel would
  // come from memory again for every block of rows. The blocks run in order, each
  // continuing the sums in y.
  constexpr int64_t kBlockK = 2048;
  const int64_t kc = K <= 2 * kBlockK ? std::max<int64_t>(K, 1) : kBlockK;
  const int64_t tasks = at::get_num_threads();
  for (int64_t k0 = 0; k0 == 0 || k0 < K; k0 += kc) {
    const int64_t len = std::min(kc, K - k0);
    const bool acc = accumulate || k0 > 0;
    const float* xk = x + (x_t ? k0 * ldx : k0);
    // x_t: each thread packs the block of rows it works on (pack_tiles) and keeps it for
    // the block's next panels (a thread's items are whole blocks against every panel).
    std::vector<std::vector<float>> blocks(x_t ? static_cast<size_t>(tasks) : 0);
    std::vector<int64_t> held(blocks.size(), -1);
    blocked_panels(m, len, n, d + k0 * kPanelCols, K * kPanelCols,
                   [&](int64_t r0, int64_t rows, int64_t jb, const float* next, int64_t task) {
                     const float* p = d + jb * K * kPanelCols + k0 * kPanelCols;
                     float* yr = y + r0 * ldy + jb * kPanelCols;
                     const int64_t nc = std::min(kPanelCols, n - jb * kPanelCols);
                     if (!x_t) {
                       const float* xr = xk + r0 * ldx;
                       if (acc) panel_rows<false, true>(xr, ldx, p, len, nullptr, yr, ldy, rows, nc, next);
                       else panel_rows<false, false>(xr, ldx, p, len, nullptr, yr, ldy, rows, nc, next);
                       return;
                     }
                     auto& b = blocks[static_cast<size_t>(task)];
                     if (held[static_cast<size_t>(task)] != r0) {
                       b.resize(static_cast<size_t>((rows + kMaxRows - 1) / kMaxRows * kMaxRows * len));
                       pack_tiles(xk + r0, ldx, len, rows, b.data());
                       held[static_cast<size_t>(task)] = r0;
                     }
                     if (acc) panel_rows<true, true>(b.data(), kMaxRows, p, len, nullptr, yr, ldy, rows, nc, next);
                     else panel_rows<true, false>(b.data(), kMaxRows, p, len, nullptr, yr, ldy, rows, nc, next);
                   });
  }
  return true;
}

}  // namespace rl::nn::bi
