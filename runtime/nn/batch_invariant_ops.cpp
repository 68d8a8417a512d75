#include "nn/batch_invariant_ops.hpp"

#include <ATen/autocast_mode.h>

#include <cstdlib>
#include <stdexcept>
#include <string>
#include <vector>

#include "nn/batch_invariant.hpp"
#include "nn/paged_attention.hpp"

#include <ATen/Parallel.h>
#include <ATen/ops/_scaled_dot_product_flash_attention_for_cpu_backward.h>

#include <algorithm>
#include <array>
#include <cmath>

#define RL_BI_OPS_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))

namespace rl::nn::bi {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

bool wanted() {
  static const bool on = [] {
    const char* e = std::getenv("RLHOST_BATCH_INVARIANT");
    return !(e && std::string(e) == "0");
  }();
  return on;
}

bool needs_grad(std::initializer_list<const torch::Tensor*> ts) {
  if (!torch::GradMode::is_enabled()) return false;
  for (const auto* t : ts)
    if (t->defined() && t->requires_grad()) return true;
  return false;
}

torch::Tensor linear_forward(const torch::Tensor& x, const torch::Tensor& w, const torch::Tensor& b) {
  const int64_t K = x.size(-1), N = w.size(0);
  if (w.dim() != 2 || w.size(1) != K) throw std::invalid_argument("bi::linear: weight must be [out, " + std::to_string(K) + "]");
  auto x2 = x.reshape({-1, K}).contiguous();
  auto wc = w;
  bool w_kn = false;
  if (N > 1 && w.stride(0) == 1) {
    w_kn = true;  // a transposed [in, out] matrix (the engine's layout), read in place
  } else if (w.stride(1) != 1) {
    wc = w.contiguous();
  }
  const int64_t ldw = w_kn ? wc.stride(1) : wc.stride(0);
  auto bc = b.defined() ? b.contiguous() : b;
  auto y = torch::empty({x2.size(0), N}, x2.options());
  gemm(x2.data_ptr<float>(), K, wc.data_ptr<float>(), ldw, w_kn, bc.defined() ? bc.data_ptr<float>() : nullptr,
       y.data_ptr<float>(), N, x2.size(0), K, N);
  auto sizes = x.sizes().vec();
  sizes.back() = N;
  return y.view(sizes);
}

torch::Tensor rms_norm_forward(const torch::Tensor& x, const torch::Tensor& w, double eps) {
  const int64_t n = x.size(-1);
  auto x2 = x.contiguous();
  auto wc = w.contiguous();
  auto y = torch::empty_like(x2);
  rl::nn::bi::rms_norm(x2.data_ptr<float>(), wc.data_ptr<float>(), static_cast<float>(eps), y.data_ptr<float>(),
                       x2.numel() / n, n);
  return y;
}

torch::Tensor silu_mul_forward(const torch::Tensor& g, const torch::Tensor& u) {
  const int64_t n = g.size(-1);
  auto g2 = g.reshape({-1, n});
  auto u2 = u.reshape({-1, n});
  if (g2.stride(1) != 1) g2 = g2.contiguous();
  if (u2.stride(1) != 1) u2 = u2.contiguous();
  auto y = torch::empty({g2.size(0), n}, g2.options());
  rl::nn::bi::silu_mul(g2.data_ptr<float>(), g2.stride(0), u2.data_ptr<float>(), u2.stride(0), y.data_ptr<float>(),
                       g2.size(0), n);
  return y.view(g.sizes());
}

// Causal attention through the engine's kernel: B right-padded rows of T tokens, or
// with `lens` sequences packed end to end in one row (q [1, sum(lens), H, D]), each
// attending within itself. With `lse`, also each query's log-sum-exp per head,
// [B * T, H] (for the backward pass).
torch::Tensor attention_forward(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v, double scale,
                                const std::vector<int64_t>& lens, torch::Tensor* lse = nullptr) {
  const int64_t B = q.size(0), T = q.size(1), H = q.size(2), D = q.size(3), KV = k.size(2);
  auto kc = k.contiguous().view({B * T, KV, D});
  auto vc = v.contiguous().view({B * T, KV, D});
  auto i64 = torch::TensorOptions().dtype(torch::kInt64);
  std::vector<int64_t> seq(static_cast<size_t>(B * T)), ctx(static_cast<size_t>(B * T));
  torch::Tensor slots;
  if (lens.empty()) {
    slots = (torch::arange(B, i64) * T).unsqueeze(1) + torch::arange(T, i64).unsqueeze(0);
    for (int64_t b = 0; b < B; ++b)
      for (int64_t t = 0; t < T; ++t) {
        seq[static_cast<size_t>(b * T + t)] = b;
        ctx[static_cast<size_t>(b * T + t)] = t + 1;
      }
  } else {
    // Row s of the slot table: sequence s's tokens (the columns past its length repeat
    // its first slot and are never read).
    const int64_t S = static_cast<int64_t>(lens.size());
    slots = torch::empty({S, *std::max_element(lens.begin(), lens.end())}, i64);
    auto a = slots.accessor<int64_t, 2>();
    int64_t start = 0;
    size_t i = 0;
    for (int64_t s = 0; s < S; ++s) {
      for (int64_t j = 0; j < slots.size(1); ++j) a[s][j] = start + (j < lens[s] ? j : 0);
      for (int64_t j = 0; j < lens[s]; ++j, ++i) {
        seq[i] = s;
        ctx[i] = j + 1;
      }
      start += lens[s];
    }
  }
  return paged_attention(q.reshape({B * T, H, D}), kc, vc, slots, seq, ctx, scale, lse).view({B, T, H * D});
}

// ATen's flash-attention backward over [B, T, H, D] q (k and v already repeated to H
// heads), out and g, and lse [B, T, H] -> gq, gk, gv [B, T, H, D].
std::array<torch::Tensor, 3> flash_backward(const torch::Tensor& g, const torch::Tensor& q, const torch::Tensor& kh,
                                            const torch::Tensor& vh, const torch::Tensor& out,
                                            const torch::Tensor& lse, double scale) {
  auto [gq, gk, gv] = at::_scaled_dot_product_flash_attention_for_cpu_backward(
      g.transpose(1, 2), q.transpose(1, 2), kh.transpose(1, 2), vh.transpose(1, 2), out.transpose(1, 2),
      lse.permute({0, 2, 1}), 0.0, /*is_causal=*/true, std::nullopt, scale);
  return {gq.transpose(1, 2), gk.transpose(1, 2), gv.transpose(1, 2)};
}

// The backward passes below are explicit formulas (no recomputation of the forward
// through ATen): gradients need correctness, not bit-equality with the engine.

// dx = g W and dW = g^T x on the AVX-512 GEMM tiles (bi::gemm_grad; W and x packed per
// call); an undefined pair where the CPU has none or the operands are not float32.
std::pair<torch::Tensor, torch::Tensor> linear_grads_tiled(const torch::Tensor& g2, const torch::Tensor& x2,
                                                           const torch::Tensor& w) {
  if (!gemm_grad_available() || g2.scalar_type() != torch::kFloat32 || x2.scalar_type() != torch::kFloat32 ||
      w.scalar_type() != torch::kFloat32)
    return {};
  auto gc = g2.contiguous(), xc = x2.contiguous(), wc = w.contiguous();
  const int64_t M = gc.size(0), N = gc.size(1), K = xc.size(1);
  auto dx = torch::empty({M, K}, xc.options()), dw = torch::empty({N, K}, wc.options());
  gemm_grad(gc.data_ptr<float>(), N, false, pack_rows(wc.data_ptr<float>(), K, N, K), dx.data_ptr<float>(), K, M,
            false);
  gemm_grad(gc.data_ptr<float>(), N, true, pack_rows(xc.data_ptr<float>(), K, M, K), dw.data_ptr<float>(), K, N,
            false);
  return {dx, dw};
}

variable_list linear_backward(AutogradContext* ctx, const torch::Tensor& g, bool bias) {
  auto saved = ctx->get_saved_variables();
  const auto &x = saved[0], &w = saved[1];
  auto g2 = g.reshape({-1, g.size(-1)});
  auto x2 = x.reshape({-1, x.size(-1)});
  auto [dx, dw] = linear_grads_tiled(g2, x2, w);
  variable_list out = dx.defined() ? variable_list{dx.view(x.sizes()), dw} : variable_list{g.matmul(w), g2.t().mm(x2)};
  if (bias) out.push_back(g2.sum(0));
  return out;
}

// The forward of a linear op: on the weight's packed panels when it has them (same bits).
torch::Tensor linear_any(const torch::Tensor& x, const torch::Tensor& w, const torch::Tensor& b,
                         const PackedWeight& packed) {
  if (!packed.defined()) return linear_forward(x, w, b);
  const int64_t K = x.size(-1), N = w.size(0);
  if (packed.k != K || packed.n != N)
    throw std::invalid_argument("bi::linear: packed weight is not [out, " + std::to_string(K) + "]");
  auto x2 = x.reshape({-1, K}).contiguous();
  auto bc = b.defined() ? b.contiguous() : b;
  auto y = torch::empty({x2.size(0), N}, x2.options());
  gemm_packed(x2.data_ptr<float>(), K, packed, bc.defined() ? bc.data_ptr<float>() : nullptr, y.data_ptr<float>(), N,
              x2.size(0));
  auto sizes = x.sizes().vec();
  sizes.back() = N;
  return y.view(sizes);
}

struct LinearFn : torch::autograd::Function<LinearFn> {
  static torch::Tensor forward(AutogradContext* ctx, torch::Tensor x, torch::Tensor w, PackedWeight packed) {
    ctx->save_for_backward({x, w});
    return linear_any(x, w, torch::Tensor(), packed);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    auto out = linear_backward(ctx, grads[0], false);
    out.push_back(torch::Tensor());
    return out;
  }
};

struct LinearBiasFn : torch::autograd::Function<LinearBiasFn> {
  static torch::Tensor forward(AutogradContext* ctx, torch::Tensor x, torch::Tensor w, torch::Tensor b,
                               PackedWeight packed) {
    ctx->save_for_backward({x, w});
    return linear_any(x, w, b, packed);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    auto out = linear_backward(ctx, grads[0], true);
    out.push_back(torch::Tensor());
    return out;
  }
};

// y = w * x * r with r = 1 / sqrt(mean(x^2) + eps), per row of n:
//   dx = r * (g * w) - x * r^3 / n * sum(g * w * x),   dw = sum over rows of g * x * r.
RL_BI_OPS_CLONES
void rms_norm_backward_rows(const float* x, const float* w, const float* g, float eps, float* dx, float* dw,
                            int64_t r0, int64_t r1, int64_t n) {
  for (int64_t r = r0; r < r1; ++r) {
    const float* xr = x + r * n;
    const float* gr = g + r * n;
    const float inv = 1.0f / std::sqrt(dot_inline(xr, xr, n) / static_cast<float>(n) + eps);
    float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    int64_t j0 = 0;
    for (; j0 + 8 <= n; j0 += 8)
      for (int k = 0; k < 8; ++k) acc[k] += gr[j0 + k] * w[j0 + k] * xr[j0 + k];
    float gwx = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
    for (; j0 < n; ++j0) gwx += gr[j0] * w[j0] * xr[j0];
    const float c = inv * inv * inv * gwx / static_cast<float>(n);
    float* dr = dx + r * n;
    for (int64_t j = 0; j < n; ++j) {
      dr[j] = inv * gr[j] * w[j] - c * xr[j];
      dw[j] += gr[j] * xr[j] * inv;
    }
  }
}

struct RmsNormFn : torch::autograd::Function<RmsNormFn> {
  static torch::Tensor forward(AutogradContext* ctx, torch::Tensor x, torch::Tensor w, double eps) {
    auto xc = x.contiguous();
    ctx->save_for_backward({xc, w});
    ctx->saved_data["eps"] = eps;
    return rms_norm_forward(xc, w, eps).view(x.sizes());
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    auto saved = ctx->get_saved_variables();
    const auto& x = saved[0];
    auto w = saved[1].contiguous();
    auto g = grads[0].contiguous();
    const int64_t n = x.size(-1), rows = x.numel() / n;
    const float eps = static_cast<float>(ctx->saved_data["eps"].toDouble());
    auto dx = torch::empty_like(x);
    // dw: one partial sum per task, added in task order (deterministic for a thread count).
    const int64_t grain = std::max<int64_t>(1, 16384 / std::max<int64_t>(1, n));
    const int64_t tasks = std::max<int64_t>(1, (rows + grain - 1) / grain);
    auto parts = torch::zeros({tasks, n}, x.options());
    const float *xp = x.data_ptr<float>(), *wp = w.data_ptr<float>(), *gp = g.data_ptr<float>();
    float *dxp = dx.data_ptr<float>(), *pp = parts.data_ptr<float>();
    at::parallel_for(0, tasks, 1, [&](int64_t t0, int64_t t1) {
      for (int64_t t = t0; t < t1; ++t)
        rms_norm_backward_rows(xp, wp, gp, eps, dxp, pp + t * n, t * grain, std::min(rows, (t + 1) * grain), n);
    });
    return {dx, parts.sum(0).to(saved[1].scalar_type()), torch::Tensor()};
  }
};

// y = silu(g) * u, s = sigmoid(g):  dg = dy * u * s * (1 + g * (1 - s)),  du = dy * g * s.
RL_BI_OPS_CLONES
void silu_mul_backward_rows(const float* g, int64_t ldg, const float* u, int64_t ldu, const float* dy, float* dg,
                            float* du, int64_t r0, int64_t r1, int64_t n) {
  for (int64_t r = r0; r < r1; ++r) {
    const float *gr = g + r * ldg, *ur = u + r * ldu, *yr = dy + r * n;
    float *dgr = dg + r * n, *dur = du + r * n;
    for (int64_t j = 0; j < n; ++j) {
      const float s = 1.0f / (1.0f + exp_inline(-gr[j]));
      dur[j] = yr[j] * gr[j] * s;
      dgr[j] = yr[j] * ur[j] * s * (1.0f + gr[j] * (1.0f - s));
    }
  }
}

struct SiluMulFn : torch::autograd::Function<SiluMulFn> {
  static torch::Tensor forward(AutogradContext* ctx, torch::Tensor g, torch::Tensor u) {
    ctx->save_for_backward({g, u});
    return silu_mul_forward(g, u);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    auto saved = ctx->get_saved_variables();
    const int64_t n = saved[0].size(-1);
    auto g2 = saved[0].reshape({-1, n}), u2 = saved[1].reshape({-1, n});
    if (g2.stride(1) != 1) g2 = g2.contiguous();
    if (u2.stride(1) != 1) u2 = u2.contiguous();
    auto dy = grads[0].reshape({-1, n}).contiguous();
    const int64_t rows = g2.size(0);
    auto dg = torch::empty({rows, n}, g2.options()), du = torch::empty({rows, n}, g2.options());
    const float *gp = g2.data_ptr<float>(), *up = u2.data_ptr<float>(), *yp = dy.data_ptr<float>();
    float *dgp = dg.data_ptr<float>(), *dup = du.data_ptr<float>();
    at::parallel_for(0, rows, std::max<int64_t>(1, 16384 / std::max<int64_t>(1, n)), [&](int64_t r0, int64_t r1) {
      silu_mul_backward_rows(gp, g2.stride(0), up, u2.stride(0), yp, dgp, dup, r0, r1, n);
    });
    return {dg.view(saved[0].sizes()), du.view(saved[1].sizes())};
  }
};

// Forward through the engine's kernel, which also returns each row's log-sum-exp; the
// backward pass is ATen's flash-attention backward over those (no second forward).
struct AttentionFn : torch::autograd::Function<AttentionFn> {
  static torch::Tensor forward(AutogradContext* ctx, torch::Tensor q, torch::Tensor k, torch::Tensor v, double scale,
                               std::vector<int64_t> lens) {
    torch::Tensor lse;
    auto out = attention_forward(q, k, v, scale, lens, &lse);
    ctx->save_for_backward({q, k, v, out, lse});
    ctx->saved_data["scale"] = scale;
    ctx->saved_data["lens"] = c10::IValue(lens);
    return out;
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    auto saved = ctx->get_saved_variables();
    const auto &q = saved[0], &k = saved[1], &v = saved[2], &out = saved[3], &lse = saved[4];
    const int64_t B = q.size(0), T = q.size(1), H = q.size(2), D = q.size(3), KV = k.size(2), group = H / KV;
    const double scale = ctx->saved_data["scale"].toDouble();
    const auto lens = ctx->saved_data["lens"].toIntVector();
    auto kh = group == 1 ? k : k.repeat_interleave(group, 2);
    auto vh = group == 1 ? v : v.repeat_interleave(group, 2);
    auto g = grads[0].reshape({B, T, H, D});
    auto o = out.view({B, T, H, D});
    auto l = lse.view({B, T, H});
    torch::Tensor gq, gk, gv;
    if (lens.empty()) {
      auto r = flash_backward(g, q, kh, vh, o, l, scale);
      gq = r[0];
      gk = r[1];
      gv = r[2];
    } else {
      // Packed sequences: ATen's kernel has no variable lengths, so one call each.
      std::vector<torch::Tensor> dq, dk, dv;
      int64_t start = 0;
      for (int64_t n : lens) {
        const auto part = [&](const torch::Tensor& t) { return t.narrow(1, start, n); };
        auto r = flash_backward(part(g), part(q), part(kh), part(vh), part(o), part(l), scale);
        dq.push_back(r[0]);
        dk.push_back(r[1]);
        dv.push_back(r[2]);
        start += n;
      }
      gq = torch::cat(dq, 1);
      gk = torch::cat(dk, 1);
      gv = torch::cat(dv, 1);
    }
    if (group != 1) {
      gk = gk.reshape({B, T, KV, group, D}).sum(3);
      gv = gv.reshape({B, T, KV, group, D}).sum(3);
    }
    return {gq, gk, gv, torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace

bool active(const torch::Tensor& x) {
  return wanted() && x.device().is_cpu() && x.scalar_type() == torch::kFloat32 &&
         !at::autocast::is_autocast_enabled(at::kCPU);
}

torch::Tensor linear(const torch::Tensor& x, const torch::Tensor& w, const torch::Tensor& b) {
  return linear(x, w, b, PackedWeight{});
}

torch::Tensor linear(const torch::Tensor& x, const torch::Tensor& w, const torch::Tensor& b, const PackedWeight& packed) {
  if (needs_grad({&x, &w, &b}))
    return b.defined() ? LinearBiasFn::apply(x, w, b, packed) : LinearFn::apply(x, w, packed);
  return linear_any(x, w, b, packed);
}

PackedWeight pack_rows(const float* w, int64_t ldw, int64_t k, int64_t n) {
  auto buf = torch::empty({static_cast<int64_t>(packed_bytes(k, n) / sizeof(float)) + 16}, torch::kFloat32);
  const auto at = (reinterpret_cast<uintptr_t>(buf.data_ptr<float>()) + 63) & ~uintptr_t{63};
  auto holder = std::make_shared<torch::Tensor>(std::move(buf));
  return pack_weight(w, ldw, true, k, n, std::shared_ptr<float>(holder, reinterpret_cast<float*>(at)));
}

PackedWeight pack(const torch::Tensor& w, std::shared_ptr<float> into) {
  if (!packed_available() || w.dim() != 2 || !w.device().is_cpu() || w.scalar_type() != torch::kFloat32) return {};
  torch::NoGradGuard no_grad;
  const int64_t N = w.size(0), K = w.size(1);
  if (N > 1 && w.stride(0) == 1) return pack_weight(w.data_ptr<float>(), w.stride(1), true, K, N, std::move(into));
  auto wc = w.stride(1) == 1 ? w : w.contiguous();
  return pack_weight(wc.data_ptr<float>(), wc.stride(0), false, K, N, std::move(into));
}

torch::Tensor rms_norm(const torch::Tensor& x, const torch::Tensor& w, double eps) {
  if (needs_grad({&x, &w})) return RmsNormFn::apply(x, w, eps);
  return rms_norm_forward(x, w, eps);
}

torch::Tensor silu_mul(const torch::Tensor& g, const torch::Tensor& u) {
  if (needs_grad({&g, &u})) return SiluMulFn::apply(g, u);
  return silu_mul_forward(g, u);
}

torch::Tensor causal_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v, double scale,
                               const std::vector<int64_t>& lens) {
  if (!lens.empty()) {
    int64_t total = 0;
    for (int64_t n : lens) {
      if (n < 1) throw std::invalid_argument("bi::causal_attention: packed sequence lengths must be >= 1");
      total += n;
    }
    if (q.size(0) != 1 || q.size(1) != total)
      throw std::invalid_argument("bi::causal_attention: packed sequences need q [1, " + std::to_string(total) +
                                  ", H, D] (the sum of lens)");
  }
  if (needs_grad({&q, &k, &v})) return AttentionFn::apply(q, k, v, scale, lens);
  return attention_forward(q, k, v, scale, lens);
}

}  // namespace rl::nn::bi
