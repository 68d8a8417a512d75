#include "nn/batch_invariant.hpp"

#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

// The hot loops are compiled once per x86-64 level (the loader picks one); every
// product goes through std::fma, so each level computes the same bits, only wider.
#define RL_BI_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#define RL_BI_INLINE __attribute__((always_inline)) inline

namespace rl::nn::bi {
namespace detail {
bool gemm_panels(const float* x, int64_t ldx, const float* w, int64_t ldw, bool w_kn, const float* bias, float* y,
                 int64_t ldy, int64_t m, int64_t k, int64_t n);  // batch_invariant_packed.cpp
}
namespace {

constexpr int kNR = 32;  // columns per register tile
// Rows per register tile: 6 x 32 floats fill 12 of AVX-512's 32 vector registers;
// AVX2 has 16, so 3 rows there. The tile shape changes speed, never the bits.
const bool kWideRegisters = __builtin_cpu_supports("avx512f");

// One tile: rows [0, MR) x columns [0, kNR) of a [k, >= kNR] panel, stores the
// first nc columns. Accumulators start at 0 and take the k products in order.
template <int MR>
RL_BI_INLINE void tile(const float* x, int64_t ldx, const float* w, int64_t ldw, const float* bias, float* y,
                       int64_t ldy, int64_t K, int64_t nc) {
  float acc[MR][kNR];
  for (int r = 0; r < MR; ++r)
    for (int c = 0; c < kNR; ++c) acc[r][c] = 0.0f;
  for (int64_t k = 0; k < K; ++k) {
    const float* wk = w + k * ldw;
    for (int r = 0; r < MR; ++r) {
      const float xv = x[r * ldx + k];
      for (int c = 0; c < kNR; ++c) acc[r][c] = std::fma(xv, wk[c], acc[r][c]);
    }
  }
  for (int r = 0; r < MR; ++r)
    for (int64_t c = 0; c < nc; ++c) y[r * ldy + c] = bias ? acc[r][c] + bias[c] : acc[r][c];
}

// Few rows (decode) of a [k, n] matrix: stream W row by row over a chunk of
// columns whose accumulators stay in L1, instead of walking column panels down
// a matrix whose rows are pages apart. Same arithmetic per element.
// Up to kStreamRows rows; `cols` accumulators per row (8K floats in all).
constexpr int64_t kStreamRows = 8;
int64_t stream_cols(int64_t m) { return std::clamp<int64_t>(8192 / m / kNR * kNR, kNR, 512); }

RL_BI_CLONES
void gemm_stream(const float* x, int64_t ldx, const float* w, int64_t ldw, const float* bias, float* y, int64_t ldy,
                 int64_t m, int64_t K, int64_t c0, int64_t c1, float* acc) {
  const int64_t kStreamCols = stream_cols(m);
  for (int64_t a = c0; a < c1; a += kStreamCols) {
    const int64_t nc = std::min(kStreamCols, c1 - a);
    for (int64_t i = 0; i < m * kStreamCols; ++i) acc[i] = 0.0f;
    int64_t k = 0;
    // Four rows of W per pass: each accumulator is loaded and stored once per four
    // products (they still come in k order, one fma each: the same bits).
    for (; k + 4 <= K; k += 4) {
      const float* w0 = w + k * ldw + a;
      const float *w1 = w0 + ldw, *w2 = w1 + ldw, *w3 = w2 + ldw;
      for (int64_t r = 0; r < m; ++r) {
        const float* xr = x + r * ldx + k;
        const float x0 = xr[0], x1 = xr[1], x2 = xr[2], x3 = xr[3];
        float* ar = acc + r * kStreamCols;
        for (int64_t c = 0; c < nc; ++c)
          ar[c] = std::fma(x3, w3[c], std::fma(x2, w2[c], std::fma(x1, w1[c], std::fma(x0, w0[c], ar[c]))));
      }
    }
    for (; k < K; ++k) {
      const float* wk = w + k * ldw + a;
      for (int64_t r = 0; r < m; ++r) {
        const float xv = x[r * ldx + k];
        float* ar = acc + r * kStreamCols;
        for (int64_t c = 0; c < nc; ++c) ar[c] = std::fma(xv, wk[c], ar[c]);
      }
    }
    for (int64_t r = 0; r < m; ++r)
      for (int64_t c = 0; c < nc; ++c)
        y[r * ldy + a + c] = bias ? acc[r * kStreamCols + c] + bias[a + c] : acc[r * kStreamCols + c];
  }
}

// Column blocks [jb0, jb1) for all m rows. `pack` holds K * kNR floats.
RL_BI_CLONES
void gemm_blocks(const float* x, int64_t ldx, const float* w, int64_t ldw, bool w_kn, const float* bias, float* y,
                 int64_t ldy, int64_t m, int64_t K, int64_t n, int64_t jb0, int64_t jb1, float* pack) {
  // Rows in full register tiles, block by block, from a [K, kNR] panel packed
  // once per block (contiguous for the tiles, whatever the matrix layout).
  const int64_t mr = kWideRegisters ? 6 : 3;
  for (int64_t jb = jb0; jb < jb1; ++jb) {
    const int64_t c0 = jb * kNR, nc = std::min<int64_t>(kNR, n - c0);
    const float* b = bias ? bias + c0 : nullptr;
    for (int64_t k = 0; k < K; ++k) {
      float* dst = pack + k * kNR;
      if (w_kn) {
        const float* src = w + k * ldw + c0;
        for (int64_t c = 0; c < nc; ++c) dst[c] = src[c];
      } else {
        for (int64_t c = 0; c < nc; ++c) dst[c] = w[(c0 + c) * ldw + k];
      }
      for (int64_t c = nc; c < kNR; ++c) dst[c] = 0.0f;
    }
    const float* panel = pack;
    const int64_t lp = kNR;
    int64_t i = 0;
    if (mr == 6)
      for (; i + 6 <= m; i += 6) tile<6>(x + i * ldx, ldx, panel, lp, b, y + i * ldy + c0, ldy, K, nc);
    for (; i + 3 <= m; i += 3) tile<3>(x + i * ldx, ldx, panel, lp, b, y + i * ldy + c0, ldy, K, nc);
    for (; i < m; ++i) tile<1>(x + i * ldx, ldx, panel, lp, b, y + i * ldy + c0, ldy, K, nc);
  }
}

RL_BI_CLONES
void rms_norm_rows(const float* x, const float* w, float eps, float* y, int64_t r0, int64_t r1, int64_t n) {
  for (int64_t r = r0; r < r1; ++r) {
    const float* xr = x + r * n;
    const float ss = dot_inline(xr, xr, n);
    const float inv = 1.0f / std::sqrt(ss / static_cast<float>(n) + eps);
    float* yr = y + r * n;
    for (int64_t j = 0; j < n; ++j) yr[j] = w[j] * (xr[j] * inv);
  }
}

RL_BI_CLONES
void silu_mul_rows(const float* g, int64_t ldg, const float* u, int64_t ldu, float* y, int64_t r0, int64_t r1,
                   int64_t n) {
  for (int64_t r = r0; r < r1; ++r) {
    const float* gr = g + r * ldg;
    const float* ur = u + r * ldu;
    float* yr = y + r * n;
    for (int64_t j = 0; j < n; ++j) yr[j] = gr[j] / (1.0f + exp_inline(-gr[j])) * ur[j];
  }
}

RL_BI_CLONES
double logsumexp_row(const float* z, int64_t n) {
  float m = -std::numeric_limits<float>::infinity();
  for (int64_t i = 0; i < n; ++i) m = z[i] > m ? z[i] : m;
  if (std::isinf(m)) return m;  // all -inf (or +inf present)
  double acc[16] = {};
  int64_t i = 0;
  for (; i + 16 <= n; i += 16)
    for (int k = 0; k < 16; ++k) acc[k] += static_cast<double>(exp_inline(z[i + k] - m));
  for (int k = 0; i < n; ++i, ++k) acc[k] += static_cast<double>(exp_inline(z[i] - m));
  for (int w = 8; w >= 1; w /= 2)
    for (int k = 0; k < w; ++k) acc[k] += acc[k + w];
  return static_cast<double>(m) + std::log(acc[0]);
}

RL_BI_CLONES
float exp_one(float x) { return exp_inline(x); }

}  // namespace

void gemm(const float* x, int64_t ldx, const float* w, int64_t ldw, bool w_kn, const float* bias, float* y,
          int64_t ldy, int64_t m, int64_t k, int64_t n) {
  if (m <= 0 || n <= 0) return;
  // AVX-512 or AVX2: register tiles over panels packed per call (batch_invariant_packed.cpp).
  if (!(w_kn && m <= kStreamRows) && detail::gemm_panels(x, ldx, w, ldw, w_kn, bias, y, ldy, m, k, n)) return;
  if (w_kn && m <= kStreamRows) {
    const int64_t cols = stream_cols(m), chunks = (n + cols - 1) / cols;
    const int64_t grain = std::max<int64_t>(1, (int64_t(1) << 18) / std::max<int64_t>(1, m * k * cols));
    at::parallel_for(0, chunks, grain, [&](int64_t a0, int64_t a1) {
      std::vector<float> acc(static_cast<size_t>(m * cols));
      gemm_stream(x, ldx, w, ldw, bias, y, ldy, m, k, a0 * cols, std::min(n, a1 * cols), acc.data());
    });
    return;
  }
  const int64_t blocks = (n + kNR - 1) / kNR;
  // Enough work per task to pay for a thread (and for packing a panel).
  const int64_t grain = std::max<int64_t>(1, (int64_t(1) << 16) / std::max<int64_t>(1, m * k));
  at::parallel_for(0, blocks, grain, [&](int64_t b0, int64_t b1) {
    std::vector<float> pack(static_cast<size_t>(k * kNR));
    gemm_blocks(x, ldx, w, ldw, w_kn, bias, y, ldy, m, k, n, b0, b1, pack.data());
  });
}

void rms_norm(const float* x, const float* w, float eps, float* y, int64_t rows, int64_t n) {
  at::parallel_for(0, rows, std::max<int64_t>(1, 16384 / std::max<int64_t>(1, n)),
                   [&](int64_t r0, int64_t r1) { rms_norm_rows(x, w, eps, y, r0, r1, n); });
}

void silu_mul(const float* g, int64_t ldg, const float* u, int64_t ldu, float* y, int64_t rows, int64_t n) {
  at::parallel_for(0, rows, std::max<int64_t>(1, 16384 / std::max<int64_t>(1, n)),
                   [&](int64_t r0, int64_t r1) { silu_mul_rows(g, ldg, u, ldu, y, r0, r1, n); });
}

float exp(float x) { return exp_one(x); }

double logsumexp(const float* z, int64_t n) { return logsumexp_row(z, n); }

}  // namespace rl::nn::bi
