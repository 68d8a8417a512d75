// The packed batch-invariant GEMM (nn/batch_invariant.hpp, gemm_packed) alone, next to
// ATen's matmul (MKL or oneDNN, not batch-invariant) on the same operands, with one
// core's AVX2 FMA roof measured in the same run (12 independent chains of 8-float fused
// multiply-adds; an AVX-512 CPU's packed path has twice that roof). For each shape
// y[M, N] = x[M, K] W[N, K]^T (the HF layout) it prints GFLOP/s, the share of the roof,
// and the ratio to ATen; then the whole chain's, best and median round.
//
//   bench_gemm [threads=1] [rounds=20] [M,K,N[xCOPIES] ...]
//
// COPIES weights of a shape (distinct memory, as layers are) run layer by layer, every
// shape in turn, so weights come from wherever a forward pass leaves them (mostly
// memory). Default: one decode step of the 42M Llama at 64 rows: 8 layers of fused
// q/k/v, o, fused gate/up and down, then the 32,000-column lm_head. A prefill or a
// training forward: e.g. `bench_gemm 2 5 1024,512,1536x8 4096,512,1536x2 4096,1376,512x2`.
#include <immintrin.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include <torch/torch.h>

#include "nn/batch_invariant.hpp"

namespace {

double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

// GFLOP/s of one core's 8-float fused multiply-adds (0 without AVX2 + FMA).
__attribute__((target("avx2,fma"))) double fma_roof_avx2() {
  __m256 a[12];
  for (int i = 0; i < 12; ++i) a[i] = _mm256_set1_ps(1.0f + static_cast<float>(i) * 1e-7f);
  const __m256 m = _mm256_set1_ps(0.9999999f), c = _mm256_set1_ps(1e-7f);
  const int64_t n = 100000000;
  const double t0 = now();
  for (int64_t r = 0; r < n; ++r) {
#pragma GCC unroll 12
    for (int i = 0; i < 12; ++i) a[i] = _mm256_fmadd_ps(a[i], m, c);
  }
  const double s = now() - t0;
  __m256 sum = a[0];
  for (int i = 1; i < 12; ++i) sum = _mm256_add_ps(sum, a[i]);
  float sink[8];
  _mm256_storeu_ps(sink, sum);
  if (sink[0] == 12345.0f) std::puts("");  // keeps the chains
  return static_cast<double>(n) * 12 * 16 / s / 1e9;
}

double fma_roof() {
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") ? fma_roof_avx2() : 0.0;
}

struct Shape {
  int64_t m, k, n, copies;
};

struct Op {
  size_t shape;
  torch::Tensor x, w, y;
  rl::nn::bi::PackedWeight packed;
};

double pct(double gflops, double roof) { return roof > 0 ? 100 * gflops / roof : 0.0; }

}  // namespace

int main(int argc, char** argv) {
  const int threads = argc > 1 ? std::atoi(argv[1]) : 1;
  const int rounds = argc > 2 ? std::atoi(argv[2]) : 20;
  if (threads < 1 || rounds < 1) {
    std::fprintf(stderr, "usage: %s [threads >= 1] [rounds >= 1] [M,K,N[xCOPIES] ...]\n", argv[0]);
    return 2;
  }
  std::vector<Shape> shapes;
  for (int i = 3; i < argc; ++i) {
    Shape s{0, 0, 0, 1};
    const int got = std::sscanf(argv[i], "%ld,%ld,%ldx%ld", &s.m, &s.k, &s.n, &s.copies);
    if (got < 3 || s.m < 1 || s.k < 1 || s.n < 1 || s.copies < 1) {
      std::fprintf(stderr, "bench_gemm: shape '%s' is not M,K,N[xCOPIES] (all >= 1)\n", argv[i]);
      return 2;
    }
    shapes.push_back(s);
  }
  if (shapes.empty())
    shapes = {{64, 512, 1536, 8}, {64, 512, 512, 8}, {64, 512, 2752, 8}, {64, 1376, 512, 8}, {64, 512, 32000, 1}};
  torch::set_num_threads(threads);
  const double roof = fma_roof() * threads;
  std::printf("# threads %d, AVX2 FMA roof %.1f GFLOP/s (%d x one core's), packed path: %s\n", threads, roof, threads,
              rl::nn::bi::packed_available() ? "yes" : "no (portable kernels)");
  int64_t layers = 0;
  for (const auto& s : shapes) layers = std::max(layers, s.copies);
  std::vector<Op> ops;
  for (int64_t c = 0; c < layers; ++c)
    for (size_t i = 0; i < shapes.size(); ++i) {
      const auto& s = shapes[i];
      if (c >= s.copies) continue;
      Op op{i, torch::randn({s.m, s.k}), torch::randn({s.n, s.k}), torch::empty({s.m, s.n}), {}};
      op.packed = rl::nn::bi::pack_weight(op.w.data_ptr<float>(), s.k, false, s.k, s.n);
      ops.push_back(std::move(op));
    }
  // Per side (0: rlhost, 1: ATen): each shape's best round, and every round's total.
  std::vector<double> best[2] = {std::vector<double>(shapes.size(), 1e30), std::vector<double>(shapes.size(), 1e30)};
  std::vector<double> totals[2];
  for (int r = 0; r <= rounds; ++r) {  // round 0 warms up
    for (int side = 0; side < 2; ++side) {
      std::vector<double> t(shapes.size(), 0.0);
      const double t0 = now();
      for (auto& op : ops) {
        const auto& s = shapes[op.shape];
        const double a = now();
        if (side == 0)
          rl::nn::bi::gemm_packed(op.x.data_ptr<float>(), s.k, op.packed, nullptr, op.y.data_ptr<float>(), s.n, s.m);
        else
          at::mm_out(op.y, op.x, op.w.t());
        t[op.shape] += now() - a;
      }
      if (r == 0) continue;
      totals[side].push_back(now() - t0);
      for (size_t i = 0; i < shapes.size(); ++i) best[side][i] = std::min(best[side][i], t[i]);
    }
  }
  std::printf("%6s %6s %6s %6s  %10s %6s  %10s %6s  %s\n", "M", "K", "N", "copies", "rlhost", "roof", "aten", "roof",
              "rlhost/aten");
  double flop = 0;
  for (size_t i = 0; i < shapes.size(); ++i) {
    const auto& s = shapes[i];
    const double f = 2.0 * static_cast<double>(s.m * s.k * s.n * s.copies);
    flop += f;
    const double ours = f / best[0][i] / 1e9, aten = f / best[1][i] / 1e9;
    std::printf("%6ld %6ld %6ld %6ld  %10.1f %5.0f%%  %10.1f %5.0f%%  %.2fx\n", s.m, s.k, s.n, s.copies, ours,
                pct(ours, roof), aten, pct(aten, roof), ours / aten);
  }
  for (int median = 0; median < 2; ++median) {
    double s[2];
    for (int side = 0; side < 2; ++side) {
      auto v = totals[side];
      std::sort(v.begin(), v.end());
      s[side] = median ? v[v.size() / 2] : v.front();
    }
    const double ours = flop / s[0] / 1e9, aten = flop / s[1] / 1e9;
    std::printf("%27s  %10.1f %5.0f%%  %10.1f %5.0f%%  %.2fx   (%s round of the chain, GFLOP/s)\n", "all", ours,
                pct(ours, roof), aten, pct(aten, roof), ours / aten, median ? "median" : "best");
  }
}
