// The batch-invariant float32 kernels (nn/batch_invariant*.hpp): accurate against
// float64 references, the same bits for a row whatever batch or layout it comes
// in, and gradients equal to ATen's. ctest runs this file under every CPU
// capability the host offers (tests/CMakeLists.txt).
#include <torch/torch.h>

#define CATCH_CONFIG_PREFIX_ALL
#include <catch2/catch.hpp>

#include <array>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "nn/batch_invariant.hpp"
#include "nn/batch_invariant_ops.hpp"
#include "nn/paged_attention.hpp"
#include "nn/rope.hpp"

namespace bi = rl::nn::bi;

namespace {

double max_abs(const torch::Tensor& a, const torch::Tensor& b) {
  return (a.to(torch::kFloat64) - b.to(torch::kFloat64)).abs().max().item<double>();
}

int64_t ulps(float a, float b) {
  int32_t ia, ib;
  std::memcpy(&ia, &a, 4);
  std::memcpy(&ib, &b, 4);
  return std::abs(static_cast<int64_t>(ia) - static_cast<int64_t>(ib));
}

}  // namespace

CATCH_TEST_CASE("bi::linear matches float64 and gives a row the same bits in any batch and layout", "[bi]") {
  torch::NoGradGuard ng;
  torch::manual_seed(7);
  // Shapes around every tile and edge: ragged columns, 1..13 rows, stream and tiled paths.
  for (int64_t K : {1, 7, 64, 333}) {
    for (int64_t N : {1, 31, 32, 100, 515}) {
      auto w = torch::randn({N, K});                       // HF layout [out, in]
      auto w_kn = w.t().contiguous().t();                  // the engine's layout: [in, out] storage
      auto b = torch::randn({N});
      auto x = torch::randn({13, K});
      auto want = torch::addmm(b.to(torch::kFloat64), x.to(torch::kFloat64), w.t().to(torch::kFloat64));
      auto all = bi::linear(x, w, b);
      CATCH_INFO("K " << K << " N " << N);
      CATCH_CHECK(max_abs(all, want) < 1e-4 * std::sqrt(static_cast<double>(K)));
      CATCH_CHECK(torch::equal(bi::linear(x, w_kn, b), all));
      for (int64_t m : {1, 2, 3, 5, 6, 7, 9, 12}) {
        CATCH_CHECK(torch::equal(bi::linear(x.narrow(0, 0, m), w, b), all.narrow(0, 0, m)));
        CATCH_CHECK(torch::equal(bi::linear(x.narrow(0, 13 - m, m), w_kn, b), all.narrow(0, 13 - m, m)));
      }
    }
  }
}

// The definition itself, one element at a time: an accumulator from 0 taking the
// products in ascending k through fma, then + bias.
torch::Tensor fma_reference(const torch::Tensor& x, const torch::Tensor& w, const torch::Tensor& b) {
  const int64_t M = x.size(0), K = x.size(1), N = w.size(0);
  auto y = torch::empty({M, N});
  auto xa = x.accessor<float, 2>(), wa = w.accessor<float, 2>(), ya = y.accessor<float, 2>();
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) {
      float acc = 0.0f;
      for (int64_t k = 0; k < K; ++k) acc = std::fma(xa[i][k], wa[j][k], acc);
      ya[i][j] = b.defined() ? acc + b[j].item<float>() : acc;
    }
  return y;
}

CATCH_TEST_CASE("bi::linear, per-call and on packed weights, computes each element in the fixed fma order", "[bi]") {
  torch::NoGradGuard ng;
  torch::manual_seed(11);
  // Rows around the 8-row tiles (decode batches up to 64 and a ragged rest), columns
  // around the 48-column panels; with and without bias. K 200 with 10 rows or more takes
  // the AVX2 path's 6 x 16 tiles (every remainder of 6 rows), the others its 4 x 24.
  for (int64_t K : {1, 19, 130, 200}) {
    for (int64_t N : {1, 47, 48, 49, 200}) {
      auto w = torch::randn({N, K});
      auto w_kn = w.t().contiguous().t();
      auto b = torch::randn({N});
      auto x = torch::randn({67, K});
      const auto packed = bi::pack(w_kn);
      CATCH_CHECK(packed.defined() == bi::packed_available());
      for (bool bias : {false, true}) {
        auto bb = bias ? b : torch::Tensor();
        auto want = fma_reference(x, w, bb);
        CATCH_INFO("K " << K << " N " << N << " bias " << bias);
        CATCH_CHECK(torch::equal(bi::linear(x, w, bb), want));
        CATCH_CHECK(torch::equal(bi::linear(x, w_kn, bb, packed), want));
        for (int64_t m : {1, 3, 8, 9, 10, 11, 12, 16, 31, 64}) {
          CATCH_CHECK(torch::equal(bi::linear(x.narrow(0, 67 - m, m), w_kn, bb, packed), want.narrow(0, 67 - m, m)));
          CATCH_CHECK(torch::equal(bi::linear(x.narrow(0, 0, m), w_kn, bb), want.narrow(0, 0, m)));
        }
      }
    }
  }
  // A packed weight of another shape is refused, naming the shape wanted.
  auto w = torch::randn({5, 4});
  if (bi::packed_available())
    CATCH_CHECK_THROWS_WITH(bi::linear(torch::randn({2, 4}), w, torch::Tensor(), bi::pack(torch::randn({5, 3}))),
                            Catch::Contains("packed weight is not [out, 4]"));
}

CATCH_TEST_CASE("bi::gemm_grad: either layout of the left operand, blocks of k, accumulation, in fma order", "[bi]") {
  torch::NoGradGuard ng;
  torch::manual_seed(13);
  // y (+)= a w with a = x or x^T (a weight gradient's g^T x), w [k, n] row-major packed
  // per call: tiles of 8 rows and the rest, panels of 48 columns and a part-filled last
  // one, blocks of rows (m 250 at k 1100), blocks of k (k 4500: 2048, 2048, 404), and
  // sums that start from y's values; each element's fused multiply-adds in ascending k.
  auto reference = [](const torch::Tensor& a, const torch::Tensor& w, const torch::Tensor& start) {
    const int64_t M = a.size(0), K = a.size(1), N = w.size(1);
    auto y = start.defined() ? start.clone() : torch::zeros({M, N});
    auto aa = a.accessor<float, 2>(), wa = w.accessor<float, 2>(), ya = y.accessor<float, 2>();
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) {
        float acc = ya[i][j];
        for (int64_t k = 0; k < K; ++k) acc = std::fma(aa[i][k], wa[k][j], acc);
        ya[i][j] = acc;
      }
    return y;
  };
  for (auto [M, K, N] : std::vector<std::array<int64_t, 3>>{{1, 1, 1}, {13, 19, 47}, {67, 130, 49}, {250, 1100, 100},
                                                            {9, 4500, 50}}) {
    auto w = torch::randn({K, N});
    const auto packed = bi::pack_rows(w.data_ptr<float>(), N, K, N);
    for (bool x_t : {false, true}) {
      for (bool accumulate : {false, true}) {
        CATCH_INFO("M " << M << " K " << K << " N " << N << " x_t " << x_t << " accumulate " << accumulate);
        auto x = x_t ? torch::randn({K, M}) : torch::randn({M, K});
        auto start = torch::randn({M, N});
        auto y = start.clone();
        const bool ran =
            bi::gemm_grad(x.data_ptr<float>(), x_t ? M : K, x_t, packed, y.data_ptr<float>(), N, M, accumulate);
        CATCH_CHECK(ran == bi::gemm_grad_available());
        if (!ran) {  // this CPU (or RLHOST_BI_SIMD) has no AVX-512 path: y untouched, callers use ATen
          CATCH_CHECK(torch::equal(y, start));
          continue;
        }
        auto a = x_t ? x.t().contiguous() : x;
        CATCH_CHECK(torch::equal(y, reference(a, w, accumulate ? start : torch::Tensor())));
      }
    }
  }
}

CATCH_TEST_CASE("bi::linear on packed weights with many rows (row blocks) keeps each element's fma order", "[bi]") {
  torch::NoGradGuard ng;
  torch::manual_seed(12);
  // gemm_packed takes x in blocks of rows once there are two blocks' worth (48 rows at
  // K 1100, 120 at K 512): whole blocks, a ragged last block, blocks against the
  // part-filled last panel, with and without bias; each row's bits those it has alone.
  for (auto [M, K] : std::vector<std::pair<int64_t, int64_t>>{{211, 1100}, {250, 512}, {96, 1100}}) {
    auto w = torch::randn({100, K});
    auto w_kn = w.t().contiguous().t();
    auto b = torch::randn({100});
    auto x = torch::randn({M, K});
    const auto packed = bi::pack(w_kn);
    for (bool bias : {false, true}) {
      auto bb = bias ? b : torch::Tensor();
      auto want = fma_reference(x, w, bb);
      CATCH_INFO("M " << M << " K " << K << " bias " << bias);
      CATCH_CHECK(torch::equal(bi::linear(x, w_kn, bb, packed), want));
      for (int64_t r : {int64_t{0}, int64_t{47}, int64_t{48}, M - 1})
        CATCH_CHECK(torch::equal(bi::linear(x.narrow(0, r, 1), w_kn, bb, packed), want.narrow(0, r, 1)));
    }
  }
}

CATCH_TEST_CASE("bi::exp is within 3 ulp of libm's and exact at the edges", "[bi]") {
  int64_t worst = 0;
  for (float x = -87.0f; x <= 88.0f; x += 0.0137f) worst = std::max(worst, ulps(bi::exp(x), std::exp(x)));
  CATCH_CHECK(worst <= 3);
  CATCH_CHECK(bi::exp(0.0f) == 1.0f);
  CATCH_CHECK(bi::exp(-std::numeric_limits<float>::infinity()) == 0.0f);
  CATCH_CHECK(bi::exp(-100.0f) == 0.0f);
}

CATCH_TEST_CASE("bi::logsumexp matches float64 and keeps -inf entries out", "[bi]") {
  torch::manual_seed(3);
  for (int64_t V : {1, 15, 16, 17, 1000, 151936}) {
    auto z = torch::randn({V}) * 8;
    const double want = torch::logsumexp(z.to(torch::kFloat64), 0).item<double>();
    CATCH_CHECK(std::abs(bi::logsumexp(z.data_ptr<float>(), V) - want) < 1e-6);
  }
  std::vector<float> z{1.0f, -std::numeric_limits<float>::infinity(), 2.0f};
  CATCH_CHECK(std::abs(bi::logsumexp(z.data(), 3) - std::log(std::exp(1.0) + std::exp(2.0))) < 1e-6);
}

CATCH_TEST_CASE("bi ops: rms_norm, silu_mul and causal attention match ATen, with ATen's gradients", "[bi]") {
  torch::manual_seed(11);
  const int64_t B = 2, T = 9, H = 4, KV = 2, D = 8;
  auto q = torch::randn({B, T, H, D}, torch::requires_grad());
  auto k = torch::randn({B, T, KV, D}, torch::requires_grad());
  auto v = torch::randn({B, T, KV, D}, torch::requires_grad());
  const double scale = 1.0 / std::sqrt(static_cast<double>(D));
  auto ref = at::scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), {}, 0.0, true,
                                              scale, true)
                 .transpose(1, 2)
                 .reshape({B, T, H * D});
  auto got = bi::causal_attention(q, k, v, scale);
  CATCH_CHECK(max_abs(got, ref) < 1e-5);
  auto g = torch::randn_like(ref);
  auto gr = torch::autograd::grad({ref}, {q, k, v}, {g});
  auto gg = torch::autograd::grad({got}, {q, k, v}, {g});
  for (int i = 0; i < 3; ++i) CATCH_CHECK(max_abs(gg[i], gr[i]) < 1e-5);
  // A prefix's rows do not depend on what follows it (causal, per row).
  torch::NoGradGuard ng;
  auto head = bi::causal_attention(q.narrow(1, 0, 4), k.narrow(1, 0, 4), v.narrow(1, 0, 4), scale);
  CATCH_CHECK(torch::equal(head, got.narrow(1, 0, 4)));

  auto x = torch::randn({5, 3, 37});
  auto w = torch::randn({37});
  auto rms = w * (x * torch::rsqrt(x.pow(2).mean(-1, true) + 1e-6));
  CATCH_CHECK(max_abs(bi::rms_norm(x, w, 1e-6), rms) < 1e-5);
  CATCH_CHECK(torch::equal(bi::rms_norm(x.narrow(0, 2, 1), w, 1e-6), bi::rms_norm(x, w, 1e-6).narrow(0, 2, 1)));
  auto gu = torch::randn({6, 2 * 45}) * 4;
  auto gate = gu.narrow(1, 0, 45), up = gu.narrow(1, 45, 45);
  CATCH_CHECK(max_abs(bi::silu_mul(gate, up), torch::silu(gate) * up) < 1e-5);
  CATCH_CHECK(torch::equal(bi::silu_mul(gate, up), bi::silu_mul(gate.contiguous(), up.contiguous())));
}

CATCH_TEST_CASE("bi causal attention over sequences packed end to end: the padded layout's bits, ATen's gradients",
                "[bi]") {
  torch::manual_seed(12);
  const int64_t H = 4, KV = 2, D = 8;
  const std::vector<int64_t> lens = {5, 1, 11, 3};
  const int64_t total = 20, L = 11;
  auto q = torch::randn({1, total, H, D}, torch::requires_grad());
  auto k = torch::randn({1, total, KV, D}, torch::requires_grad());
  auto v = torch::randn({1, total, KV, D}, torch::requires_grad());
  const double scale = 1.0 / std::sqrt(static_cast<double>(D));
  auto got = bi::causal_attention(q, k, v, scale, lens);
  auto g = torch::randn_like(got);
  auto gg = torch::autograd::grad({got}, {q, k, v}, {g});
  torch::NoGradGuard ng;
  // The same sequences right-padded to L rows: every real row the same bits.
  auto pad = [&](const torch::Tensor& t) {
    auto out = torch::zeros({static_cast<int64_t>(lens.size()), L, t.size(2), t.size(3)});
    for (int64_t s = 0, start = 0; s < static_cast<int64_t>(lens.size()); start += lens[s++])
      out[s].narrow(0, 0, lens[s]).copy_(t[0].narrow(0, start, lens[s]));
    return out;
  };
  auto padded = bi::causal_attention(pad(q), pad(k), pad(v), scale);
  for (int64_t s = 0, start = 0; s < static_cast<int64_t>(lens.size()); start += lens[s++]) {
    CATCH_CHECK(torch::equal(got[0].narrow(0, start, lens[s]), padded[s].narrow(0, 0, lens[s])));
    // Gradients: ATen's attention on the sequence alone.
    torch::AutoGradMode on(true);
    auto part = [&](const torch::Tensor& t) { return t.detach().narrow(1, start, lens[s]).requires_grad_(); };
    auto qs = part(q), ks = part(k), vs = part(v);
    auto ref = at::scaled_dot_product_attention(qs.transpose(1, 2), ks.transpose(1, 2), vs.transpose(1, 2), {}, 0.0,
                                                true, scale, true)
                   .transpose(1, 2)
                   .reshape({1, lens[s], H * D});
    auto gr = torch::autograd::grad({ref}, {qs, ks, vs}, {g.narrow(1, start, lens[s])});
    for (int i = 0; i < 3; ++i) CATCH_CHECK(max_abs(gg[i].narrow(1, start, lens[s]), gr[i]) < 1e-5);
  }
  CATCH_CHECK_THROWS_WITH(bi::causal_attention(q, k, v, scale, {5, 1, 11}),
                          Catch::Contains("q [1, 17, H, D]"));
  CATCH_CHECK_THROWS_WITH(bi::causal_attention(q, k, v, scale, {5, 0, 11, 4}), Catch::Contains(">= 1"));
}

CATCH_TEST_CASE("bi ops: linear, rms_norm and silu_mul gradients equal ATen's", "[bi]") {
  torch::manual_seed(5);
  auto x = torch::randn({4, 3, 20}, torch::requires_grad());
  auto w = torch::randn({30, 20}, torch::requires_grad());
  auto b = torch::randn({30}, torch::requires_grad());
  auto g = torch::randn({4, 3, 30});
  auto gr = torch::autograd::grad({torch::linear(x, w, b)}, {x, w, b}, {g});
  auto gg = torch::autograd::grad({bi::linear(x, w, b)}, {x, w, b}, {g});
  for (int i = 0; i < 3; ++i) CATCH_CHECK(max_abs(gg[i], gr[i]) < 1e-4);
  {  // many rows and columns: the backward GEMMs' tiles (bi::gemm_grad) where the CPU has them
    auto xl = torch::randn({3, 70, 130}, torch::requires_grad());
    auto wl = torch::randn({100, 130}, torch::requires_grad());
    auto gl = torch::randn({3, 70, 100});
    auto want = torch::autograd::grad({torch::linear(xl, wl)}, {xl, wl}, {gl});
    auto got = torch::autograd::grad({bi::linear(xl, wl, torch::Tensor())}, {xl, wl}, {gl});
    for (int i = 0; i < 2; ++i) CATCH_CHECK(max_abs(got[i], want[i]) < 1e-5 * want[i].abs().max().item<double>());
  }
  auto nw = torch::randn({20}, torch::requires_grad());
  auto g2 = torch::randn({4, 3, 20});
  auto ref = nw * (x * torch::rsqrt(x.pow(2).mean(-1, true) + 1e-5));
  auto r1 = torch::autograd::grad({ref}, {x, nw}, {g2});
  auto r2 = torch::autograd::grad({bi::rms_norm(x, nw, 1e-5)}, {x, nw}, {g2});
  for (int i = 0; i < 2; ++i) CATCH_CHECK(max_abs(r1[i], r2[i]) < 1e-4);
  auto u = torch::randn({4, 3, 20}, torch::requires_grad());
  auto s1 = torch::autograd::grad({torch::silu(x) * u}, {x, u}, {g2});
  auto s2 = torch::autograd::grad({bi::silu_mul(x, u)}, {x, u}, {g2});
  for (int i = 0; i < 2; ++i) CATCH_CHECK(max_abs(s1[i], s2[i]) < 1e-5);
}

CATCH_TEST_CASE("paged_attention computes every output in the portable kernel's fixed order", "[bi]") {
  // The SIMD paths (AVX2 scores, AVX-512 values, prefetching) against that order
  // spelled out in scalars: the same bits for odd contexts, head sizes with and
  // without the 16-lane value path, grouped heads and scattered slots. Under
  // RLHOST_BI_SIMD=0 (ctest's `default` run) this checks the portable kernel.
  torch::NoGradGuard ng;
  torch::manual_seed(3);
  struct Shape { int64_t H, KV, D; };
  for (const Shape sh : {Shape{4, 2, 8}, Shape{3, 3, 16}, Shape{2, 1, 24}, Shape{4, 4, 32}, Shape{5, 5, 48},
                         Shape{8, 2, 64}, Shape{3, 3, 128}, Shape{2, 2, 7}}) {
    const int64_t H = sh.H, KV = sh.KV, D = sh.D, slots = 300;
    auto k = torch::randn({slots, KV, D}) * 2, v = torch::randn({slots, KV, D});
    const std::vector<int64_t> ctx{1, 7, 8, 9, 17, 33, 40};
    const int64_t S = static_cast<int64_t>(ctx.size()), width = 40;
    auto ctx_slots = torch::randperm(slots, torch::kInt64).narrow(0, 0, S * width).view({S, width}).contiguous();
    auto q = torch::randn({S, H, D});
    const float scale = 1.0f / std::sqrt(static_cast<float>(D));
    auto got = rl::nn::paged_decode_attention(q, k, v, ctx_slots, ctx, scale);
    auto want = torch::empty_like(got);
    const float *kp = k.data_ptr<float>(), *vp = v.data_ptr<float>();
    for (int64_t s = 0; s < S; ++s) {
      const int64_t n = ctx[static_cast<size_t>(s)];
      for (int64_t h = 0; h < H; ++h) {
        const int64_t kvh = h / (H / KV);
        std::vector<float> w(static_cast<size_t>(n));
        float m = -std::numeric_limits<float>::infinity(), sum = 0;
        for (int64_t j = 0; j < n; ++j) {
          const int64_t slot = ctx_slots[s][j].item<int64_t>();
          w[j] = bi::dot_inline(q[s][h].data_ptr<float>(), kp + (slot * KV + kvh) * D, D) * scale;
          m = std::max(m, w[j]);
        }
        for (auto& x : w) sum += (x = bi::exp_inline(x - m));
        const float inv = 1.0f / sum;
        for (auto& x : w) x *= inv;
        float* o = want[s][h].data_ptr<float>();
        for (int64_t d = 0; d < D; ++d) {
          float acc = 0;
          for (int64_t j = 0; j < n; ++j)
            acc = std::fma(w[j], vp[(ctx_slots[s][j].item<int64_t>() * KV + kvh) * D + d], acc);
          o[d] = acc;
        }
      }
    }
    CATCH_INFO("H " << H << " KV " << KV << " D " << D);
    CATCH_CHECK(torch::equal(got, want));
  }
}

CATCH_TEST_CASE("apply_rope's one-pass float32 path gives the tensor expression's bits, and its gradient", "[bi]") {
  torch::manual_seed(4);
  for (int64_t D : {2, 8, 64, 70}) {
    // A view into a fused projection (row stride > H * D), as the transformer passes it.
    auto qkv = torch::randn({2, 5, 3 * 4 * D}) * 3;
    auto x = qkv.narrow(-1, 4 * D, 4 * D).reshape({2, 5, 4, D});
    auto cos = torch::randn({2, 5, D}), sin = torch::randn({2, 5, D});
    torch::Tensor fast;
    {
      torch::NoGradGuard ng;
      fast = rl::nn::apply_rope(x, cos, sin);
    }
    // The tensor expression, spelled out: x * cos + rotate_half(x) * sin, per head.
    auto expr = [&](const torch::Tensor& t) {
      const int64_t half = D / 2;
      auto rot = torch::cat({-t.narrow(-1, half, half), t.narrow(-1, 0, half)}, -1);
      return t * cos.unsqueeze(-2) + rot * sin.unsqueeze(-2);
    };
    CATCH_INFO("D " << D);
    CATCH_CHECK(torch::equal(fast, expr(x)));
    // With gradients: the same forward bits through the kernel, and its explicit backward
    // equal to autograd's of the expression (a view input, as in the trainer).
    auto base = qkv.clone().requires_grad_(true);
    auto xv = base.narrow(-1, 4 * D, 4 * D).reshape({2, 5, 4, D});
    auto y = rl::nn::apply_rope(xv, cos, sin);
    CATCH_CHECK(torch::equal(y.detach(), fast));
    auto g = torch::randn_like(y);
    auto got = torch::autograd::grad({y}, {base}, {g})[0];
    auto ref_in = qkv.clone().requires_grad_(true);
    auto want = torch::autograd::grad({expr(ref_in.narrow(-1, 4 * D, 4 * D).reshape({2, 5, 4, D}))}, {ref_in}, {g})[0];
    CATCH_CHECK(max_abs(got, want) < 1e-5);
  }
}

CATCH_TEST_CASE("a weight packs to the same panels from either layout", "[bi]") {
  if (!bi::packed_available()) return;  // packing exists on AVX-512 and AVX2 CPUs only
  torch::manual_seed(5);
  // Whole 16 x 16 (AVX-512) and 8 x 8 (AVX2) blocks, a k tail, part-filled and empty
  // column groups of the last panel, and a row stride wider than k.
  for (auto [k, n] : std::vector<std::pair<int64_t, int64_t>>{{64, 96}, {37, 101}, {512, 1376}, {16, 17}, {5, 3}}) {
    CATCH_INFO(k << " x " << n);
    auto nk = torch::randn({n, k + 3}).narrow(1, 0, k);  // [n, k] rows (the HF layout)
    auto kn = nk.t().contiguous();                        // [k, n]
    auto a = bi::pack_weight(nk.data_ptr<float>(), nk.stride(0), false, k, n);
    auto b = bi::pack_weight(kn.data_ptr<float>(), kn.stride(0), true, k, n);
    CATCH_REQUIRE(a.bytes() == b.bytes());
    CATCH_CHECK(std::memcmp(a.data.get(), b.data.get(), a.bytes()) == 0);  // values and zero padding
  }
}

CATCH_TEST_CASE("packed_columns reads a packed weight's columns back exactly", "[bi]") {
  if (!bi::packed_available()) return;  // packing exists on AVX-512 and AVX2 CPUs only
  torch::manual_seed(6);
  auto w = torch::randn({37, 101});  // [k, n]
  auto p = bi::pack_weight(w.data_ptr<float>(), w.stride(0), true, 37, 101);
  const std::vector<int64_t> cols{0, 47, 48, 100, 5, 5};
  std::vector<float> out(cols.size() * 37);
  bi::packed_columns(p, cols.data(), static_cast<int64_t>(cols.size()), out.data());
  auto got = torch::from_blob(out.data(), {static_cast<int64_t>(cols.size()), 37}).clone();
  CATCH_CHECK(torch::equal(got, w.t().index_select(0, torch::tensor(cols))));
  const int64_t bad = 101;
  CATCH_CHECK_THROWS_WITH(bi::packed_columns(p, &bad, 1, out.data()), Catch::Contains("outside [0, 101)"));
}
