// The backward pass's GEMMs of a linear op y = x Wᵀ (x [M, K], W [N, K]): dx = g W and
// dW = gᵀ x, on rlhost's tiles (bi::gemm_grad, the right operand packed per call, the
// packing timed with it) next to ATen's mm (MKL) on the same operands, same threads;
// best of ROUNDS per shape, GFLOP/s, and the largest difference between the two sides.
// The trainer runs these where the CPU has AVX-512 (docs/model.md, "Log-probabilities
// without the full-vocabulary tensor").
//
//   bench_gemm_backward [threads=1] [rounds=6] [M,K,N ...]
//
// Default: the 42M Llama's step at 8 x 256 tokens (q/k/v/o, gate/up, down) and its
// lm_head over 8 x 192 response tokens of a 32,000-token vocabulary.
#include <array>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include <torch/torch.h>

#include "nn/batch_invariant.hpp"
#include "nn/batch_invariant_ops.hpp"

namespace bi = rl::nn::bi;

namespace {

double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

double max_diff(const torch::Tensor& a, const torch::Tensor& b) { return (a - b).abs().max().item<double>(); }

}  // namespace

int main(int argc, char** argv) {
  const int threads = argc > 1 ? std::atoi(argv[1]) : 1;
  const int rounds = argc > 2 ? std::atoi(argv[2]) : 6;
  if (threads < 1 || rounds < 1) {
    std::fprintf(stderr, "usage: %s [threads >= 1] [rounds >= 1] [M,K,N ...]\n", argv[0]);
    return 2;
  }
  std::vector<std::array<int64_t, 3>> shapes;
  for (int i = 3; i < argc; ++i) {
    std::array<int64_t, 3> s{};
    if (std::sscanf(argv[i], "%ld,%ld,%ld", &s[0], &s[1], &s[2]) != 3 || s[0] < 1 || s[1] < 1 || s[2] < 1) {
      std::fprintf(stderr, "bench_gemm_backward: shape '%s' is not M,K,N (all >= 1)\n", argv[i]);
      return 2;
    }
    shapes.push_back(s);
  }
  if (shapes.empty()) shapes = {{2048, 512, 512}, {2048, 512, 1376}, {2048, 1376, 512}, {1536, 512, 32000}};
  torch::set_num_threads(threads);
  if (!bi::gemm_grad_available()) {
    std::printf("# no AVX-512 path on this CPU (or RLHOST_BI_SIMD set): the trainer runs ATen's GEMMs here\n");
    return 0;
  }
  std::printf("# threads %d, best of %d rounds, GFLOP/s (rlhost includes packing its right operand)\n", threads,
              rounds);
  std::printf("%6s %6s %6s  %9s %9s %6s  %9s %9s %6s  %s\n", "M", "K", "N", "dx rlhost", "aten", "ratio", "dW rlhost",
              "aten", "ratio", "max |diff| dx, dW");
  for (const auto& [M, K, N] : shapes) {
    auto x = torch::randn({M, K}), w = torch::randn({N, K}), g = torch::randn({M, N});
    auto dx = torch::empty({M, K}), dw = torch::empty({N, K}), dx_a = torch::empty({M, K}), dw_a = torch::empty({N, K});
    double best[4] = {1e30, 1e30, 1e30, 1e30};
    for (int r = 0; r <= rounds; ++r) {  // round 0 warms up
      double t[5];
      t[0] = now();
      bi::gemm_grad(g.data_ptr<float>(), N, false, bi::pack_rows(w.data_ptr<float>(), K, N, K), dx.data_ptr<float>(),
                    K, M, false);
      t[1] = now();
      at::mm_out(dx_a, g, w);
      t[2] = now();
      bi::gemm_grad(g.data_ptr<float>(), N, true, bi::pack_rows(x.data_ptr<float>(), K, M, K), dw.data_ptr<float>(),
                    K, N, false);
      t[3] = now();
      at::mm_out(dw_a, g.t(), x);
      t[4] = now();
      if (r == 0) continue;
      for (int i = 0; i < 4; ++i) best[i] = std::min(best[i], t[i + 1] - t[i]);
    }
    const double f = 2.0 * static_cast<double>(M * K * N) / 1e9;
    std::printf("%6ld %6ld %6ld  %9.1f %9.1f %5.2fx  %9.1f %9.1f %5.2fx  %.2g, %.2g\n", M, K, N, f / best[0],
                f / best[1], best[1] / best[0], f / best[2], f / best[3], best[3] / best[2], max_diff(dx, dx_a),
                max_diff(dw, dw_a));
  }
}
