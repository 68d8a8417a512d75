// Batch-invariant float32 CPU kernels: every output element is computed by one
// fixed sequence of IEEE operations that depends on nothing but that element's
// inputs: not on how many rows the call has, where the row sits, the tensor's
// layout, the thread count, or which SIMD width the CPU offers (products are
// accumulated with explicit fused multiply-adds in a fixed order, and exp is
// our own polynomial rather than a vector library's).
//
// Why: the engine decodes one token at a time over a KV cache while the trainer
// recomputes whole sequences; with vendor kernels (MKL, ATen's vectorised loops)
// the two differ by a few ulps that vary with the host's CPU capability. Running
// both through these kernels makes the engine's reported log-probs equal the
// trainer's bit for bit, on any x86 CPU (see Transformer, token_logprobs and the
// engine's sampler).
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>

namespace rl::nn::bi {

// y[i, j] = (sum over k ascending of x[i, k] * w(k, j)) (+ bias[j]), for i < m,
// j < n. x rows have stride ldx; w is either [k, n] with row stride ldw
// (w_kn = true) or [n, k] with row stride ldw (w_kn = false: the HF layout).
void gemm(const float* x, int64_t ldx, const float* w, int64_t ldw, bool w_kn, const float* bias, float* y,
          int64_t ldy, int64_t m, int64_t k, int64_t n);

// A [k, n] weight packed once (at load or weight update) for gemm_packed: column
// panels of kPanelCols, each [k, kPanelCols] contiguous (the last zero-padded), so
// a call streams it in order and packs nothing. Same bits as gemm().
constexpr int64_t kPanelCols = 48;
struct PackedWeight {
  int64_t k = 0, n = 0;
  std::shared_ptr<float> data;  // 64-byte aligned
  bool defined() const { return data != nullptr; }
  size_t bytes() const;
};
// False under RLHOST_BI_SIMD=0: the SIMD-specific paths (packed AVX-512 and AVX2
// GEMMs, AVX2 attention) step aside for the portable kernels, to measure what they save
// and to test both (same bits either way). RLHOST_BI_SIMD=avx2 keeps the GEMM of an
// AVX-512 CPU on its AVX2 path (the LibTorch specs' avx2 run sets it).
bool simd_kernels();
// Whether gemm_packed has a fast path on this CPU (AVX-512, or AVX2 + FMA); pack_weight is only
// worth its memory where it does.
bool packed_available();
// Bytes of the panels of a [k, n] weight.
size_t packed_bytes(int64_t k, int64_t n);
// w as for gemm() (w_kn: [k, n] with row stride ldw; else [n, k]). The panels go into
// `into` where given (64-byte aligned, at least packed_bytes(k, n); it becomes the
// result's data), else into memory of their own.
PackedWeight pack_weight(const float* w, int64_t ldw, bool w_kn, int64_t k, int64_t n,
                         std::shared_ptr<float> into = nullptr);
// y[i, j] = (sum over k ascending of x[i, k] * w(k, j)) (+ bias[j]): gemm() on a packed weight.
void gemm_packed(const float* x, int64_t ldx, const PackedWeight& w, const float* bias, float* y, int64_t ldy,
                 int64_t m);

// The GEMMs of a backward pass on gemm_packed's tiles: y[i, j] (+)= sum over k
// ascending of a(i, k) * w(k, j) for i < m, j < w.n, k < w.k, with a(i, k) = x[i * ldx + k]
// or, x_t, x[k * ldx + i] (dW = g^T x without a transposed copy of g). w is packed per
// call (a backward pass's operands are activations, or weights about to change).
// accumulate: the sums start from y's values. A long k runs in blocks, each continuing
// the previous one's sums: the products in gemm()'s order either way. False, with y
// untouched, where the CPU has no AVX-512 path (callers use ATen's GEMM there).
bool gemm_grad_available();
bool gemm_grad(const float* x, int64_t ldx, bool x_t, const PackedWeight& w, float* y, int64_t ldy, int64_t m,
               bool accumulate);

// out[i, k] = w(k, cols[i]) for k < w.k: columns of a packed weight (cols in [0, w.n)).
void packed_columns(const PackedWeight& w, const int64_t* cols, int64_t count, float* out);

// y = w * (x * 1/sqrt(mean(x^2) + eps)) row by row; x, y [rows, n] contiguous.
void rms_norm(const float* x, const float* w, float eps, float* y, int64_t rows, int64_t n);

// y = silu(g) * u, elementwise (g, u, y with the given row strides, [rows, n]).
void silu_mul(const float* g, int64_t ldg, const float* u, int64_t ldu, float* y, int64_t rows, int64_t n);

// exp for float, the same result on every CPU (within 3 ulp of libm); exp(-inf) = 0,
// and 0 below -87 (under FLT_MIN).
float exp(float x);

// The body of exp(), inlined into callers compiled for any x86-64 level.
__attribute__((always_inline)) inline float exp_inline(float x) {
  // exp(x) = 2^n * exp(r), n = round(x / ln 2), |r| <= ln2 / 2; exp(r) by a
  // degree-6 polynomial (Taylor coefficients; within 3 ulp on the range).
  constexpr float kLog2e = 1.44269504088896341f, kLn2Hi = 0.693145751953125f, kLn2Lo = 1.428606765330187e-06f;
  constexpr float kRound = 12582912.0f;  // 1.5 * 2^23: adding it rounds to an integer
  const float xc = x > 88.0f ? 88.0f : (x < -87.0f ? -87.0f : x);
  const float t = std::fma(xc, kLog2e, kRound);
  const float n = t - kRound;
  float r = std::fma(n, -kLn2Hi, xc);
  r = std::fma(n, -kLn2Lo, r);
  float p = 1.0f / 720.0f;
  p = std::fma(p, r, 1.0f / 120.0f);
  p = std::fma(p, r, 1.0f / 24.0f);
  p = std::fma(p, r, 1.0f / 6.0f);
  p = std::fma(p, r, 0.5f);
  p = std::fma(p, r, 1.0f);
  p = std::fma(p, r, 1.0f);
  int32_t bits = (static_cast<int32_t>(n) + 127) << 23;
  float scale;
  std::memcpy(&scale, &bits, sizeof scale);
  const float e = p * scale;
  return x < -87.0f ? 0.0f : e;  // below exp(-87) (1.6e-38, about FLT_MIN): 0, and exp(-inf) = 0
}

// sum of a[i] * b[i] in eight fixed partial sums (vectorises without -ffast-math),
// each product through an explicit fma: the same bits at every x86-64 level.
__attribute__((always_inline)) inline float dot_inline(const float* a, const float* b, int64_t n) {
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int k = 0; k < 8; ++k) acc[k] = std::fma(a[i + k], b[i + k], acc[k]);
  float s = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
  for (; i < n; ++i) s = std::fma(a[i], b[i], s);
  return s;
}

// log(sum(exp(z))) of one row, accumulated in double in a fixed order.
double logsumexp(const float* z, int64_t n);

}  // namespace rl::nn::bi
