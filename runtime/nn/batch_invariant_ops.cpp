#include "nn/batch_invariant_ops.hpp"

#include <ATen/autocast_mode.h>

#include <cstdlib>
#include <stdexcept>
#include <string>
#include <vector>

#include "nn/batch_invariant.hpp"
#include "nn/paged_attention.hpp"

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

torch::Tensor attention_forward(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v, double scale) {
  const int64_t B = q.size(0), T = q.size(1), H = q.size(2), D = q.size(3), KV = k.size(2);
  auto kc = k.contiguous().view({B * T, KV, D});
  auto vc = v.contiguous().view({B * T, KV, D});
  auto i64 = torch::TensorOptions().dtype(torch::kInt64);
  auto slots = (torch::arange(B, i64) * T).unsqueeze(1) + torch::arange(T, i64).unsqueeze(0);
  std::vector<int64_t> seq(static_cast<size_t>(B * T)), ctx(static_cast<size_t>(B * T));
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T; ++t) {
      seq[static_cast<size_t>(b * T + t)] = b;
      ctx[static_cast<size_t>(b * T + t)] = t + 1;
    }
  return paged_attention(q.reshape({B * T, H, D}), kc, vc, slots, seq, ctx, scale).view({B, T, H * D});
}

// Backward passes recompute the op with ATen's differentiable kernels and take
// their gradient: the same function, so the same gradient up to rounding.
variable_list reference_grads(const torch::Tensor& out, const std::vector<torch::Tensor>& inputs,
                              const torch::Tensor& grad) {
  return torch::autograd::grad({out}, inputs, {grad}, /*retain_graph=*/false, /*create_graph=*/false,
                               /*allow_unused=*/true);
}

variable_list linear_backward(AutogradContext* ctx, const torch::Tensor& g, bool bias) {
  auto saved = ctx->get_saved_variables();
  const auto &x = saved[0], &w = saved[1];
  auto g2 = g.reshape({-1, g.size(-1)});
  variable_list out{g.matmul(w), g2.t().mm(x.reshape({-1, x.size(-1)}))};
  if (bias) out.push_back(g2.sum(0));
  return out;
}

struct LinearFn : torch::autograd::Function<LinearFn> {
  static torch::Tensor forward(AutogradContext* ctx, torch::Tensor x, torch::Tensor w) {
    ctx->save_for_backward({x, w});
    return linear_forward(x, w, torch::Tensor());
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    return linear_backward(ctx, grads[0], false);
  }
};

struct LinearBiasFn : torch::autograd::Function<LinearBiasFn> {
  static torch::Tensor forward(AutogradContext* ctx, torch::Tensor x, torch::Tensor w, torch::Tensor b) {
    ctx->save_for_backward({x, w});
    return linear_forward(x, w, b);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    return linear_backward(ctx, grads[0], true);
  }
};

struct RmsNormFn : torch::autograd::Function<RmsNormFn> {
  static torch::Tensor forward(AutogradContext* ctx, torch::Tensor x, torch::Tensor w, double eps) {
    ctx->save_for_backward({x, w});
    ctx->saved_data["eps"] = eps;
    return rms_norm_forward(x, w, eps);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    auto saved = ctx->get_saved_variables();
    auto x = saved[0].detach().requires_grad_(true), w = saved[1].detach().requires_grad_(true);
    torch::AutoGradMode on(true);
    auto y = w * (x * torch::rsqrt(x.pow(2).mean(-1, true) + ctx->saved_data["eps"].toDouble()));
    auto g = reference_grads(y, {x, w}, grads[0]);
    return {g[0], g[1], torch::Tensor()};
  }
};

struct SiluMulFn : torch::autograd::Function<SiluMulFn> {
  static torch::Tensor forward(AutogradContext* ctx, torch::Tensor g, torch::Tensor u) {
    ctx->save_for_backward({g, u});
    return silu_mul_forward(g, u);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    auto saved = ctx->get_saved_variables();
    auto g = saved[0].detach().requires_grad_(true), u = saved[1].detach().requires_grad_(true);
    torch::AutoGradMode on(true);
    return reference_grads(torch::silu(g) * u, {g, u}, grads[0]);
  }
};

struct AttentionFn : torch::autograd::Function<AttentionFn> {
  static torch::Tensor forward(AutogradContext* ctx, torch::Tensor q, torch::Tensor k, torch::Tensor v, double scale) {
    ctx->save_for_backward({q, k, v});
    ctx->saved_data["scale"] = scale;
    return attention_forward(q, k, v, scale);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    auto saved = ctx->get_saved_variables();
    auto q = saved[0].detach().requires_grad_(true), k = saved[1].detach().requires_grad_(true),
         v = saved[2].detach().requires_grad_(true);
    torch::AutoGradMode on(true);
    const int64_t B = q.size(0), T = q.size(1), H = q.size(2), D = q.size(3);
    auto o = at::scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), {}, 0.0,
                                              /*is_causal=*/true, ctx->saved_data["scale"].toDouble(),
                                              /*enable_gqa=*/H != k.size(2));
    auto g = reference_grads(o.transpose(1, 2).reshape({B, T, H * D}), {q, k, v}, grads[0]);
    return {g[0], g[1], g[2], torch::Tensor()};
  }
};

}  // namespace

bool active(const torch::Tensor& x) {
  return wanted() && x.device().is_cpu() && x.scalar_type() == torch::kFloat32 &&
         !at::autocast::is_autocast_enabled(at::kCPU);
}

torch::Tensor linear(const torch::Tensor& x, const torch::Tensor& w, const torch::Tensor& b) {
  if (needs_grad({&x, &w, &b})) return b.defined() ? LinearBiasFn::apply(x, w, b) : LinearFn::apply(x, w);
  return linear_forward(x, w, b);
}

torch::Tensor linear(const torch::Tensor& x, const torch::Tensor& w, const torch::Tensor& b, const PackedWeight& packed) {
  if (!packed.defined() || needs_grad({&x, &w, &b})) return linear(x, w, b);
  const int64_t K = x.size(-1), N = w.size(0);
  if (packed.k != K || packed.n != N) throw std::invalid_argument("bi::linear: packed weight is not [out, " + std::to_string(K) + "]");
  auto x2 = x.reshape({-1, K}).contiguous();
  auto bc = b.defined() ? b.contiguous() : b;
  auto y = torch::empty({x2.size(0), N}, x2.options());
  gemm_packed(x2.data_ptr<float>(), K, packed, bc.defined() ? bc.data_ptr<float>() : nullptr, y.data_ptr<float>(), N,
              x2.size(0));
  auto sizes = x.sizes().vec();
  sizes.back() = N;
  return y.view(sizes);
}

PackedWeight pack(const torch::Tensor& w) {
  if (!packed_available() || w.dim() != 2 || !w.device().is_cpu() || w.scalar_type() != torch::kFloat32) return {};
  torch::NoGradGuard no_grad;
  const int64_t N = w.size(0), K = w.size(1);
  if (N > 1 && w.stride(0) == 1) return pack_weight(w.data_ptr<float>(), w.stride(1), true, K, N);
  auto wc = w.stride(1) == 1 ? w : w.contiguous();
  return pack_weight(wc.data_ptr<float>(), wc.stride(0), false, K, N);
}

torch::Tensor rms_norm(const torch::Tensor& x, const torch::Tensor& w, double eps) {
  if (needs_grad({&x, &w})) return RmsNormFn::apply(x, w, eps);
  return rms_norm_forward(x, w, eps);
}

torch::Tensor silu_mul(const torch::Tensor& g, const torch::Tensor& u) {
  if (needs_grad({&g, &u})) return SiluMulFn::apply(g, u);
  return silu_mul_forward(g, u);
}

torch::Tensor causal_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v, double scale) {
  if (needs_grad({&q, &k, &v})) return AttentionFn::apply(q, k, v, scale);
  return attention_forward(q, k, v, scale);
}

}  // namespace rl::nn::bi
