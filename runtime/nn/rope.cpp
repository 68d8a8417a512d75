#include "nn/rope.hpp"

#include <ATen/Parallel.h>

#include <algorithm>

#include <numbers>

namespace rl::nn {

torch::Tensor rope_inv_freq(const model::ModelConfig& c) {
  // float32 arithmetic in the same order as transformers, so tables match bit for bit.
  auto exponents = torch::arange(0, c.head_dim, 2, torch::kInt64).to(torch::kFloat32) / static_cast<double>(c.head_dim);
  auto inv = 1.0 / torch::pow(c.rope_theta, exponents);
  const auto& s = c.rope_scaling;
  if (s.type == "linear") {
    // Linear scaling divides positions by `factor`; dividing the frequencies is the same.
    inv = inv / s.factor;
  } else if (s.type == "llama3") {
    // Llama 3.1: long wavelengths are slowed by `factor`, short ones kept, the band
    // between interpolated smoothly.
    const double old_len = static_cast<double>(s.original_max_position_embeddings);
    const double low_wavelen = old_len / s.low_freq_factor;
    const double high_wavelen = old_len / s.high_freq_factor;
    auto wavelen = 2 * std::numbers::pi / inv;
    auto scaled = torch::where(wavelen > low_wavelen, inv / s.factor, inv);
    auto smooth = (old_len / wavelen - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor);
    auto smoothed = (1 - smooth) * scaled / s.factor + smooth * scaled;
    auto medium = (wavelen >= high_wavelen).logical_and(wavelen <= low_wavelen);
    inv = torch::where(medium, smoothed, scaled);
  }
  return inv;
}

RopeTable::RopeTable(const model::ModelConfig& config) : inv_freq_(rope_inv_freq(config)) {}

void RopeTable::grow(int64_t n, torch::Device device) {
  int64_t have = cos_.defined() ? cos_.size(0) : 0;
  if (have >= n && cos_.device() == device) return;
  int64_t size = std::max<int64_t>(n, std::max<int64_t>(2 * have, 256));
  // Like HF: freqs = positions (float32) outer inv_freq (float32), emb = cat(freqs, freqs).
  auto pos = torch::arange(size, torch::TensorOptions().dtype(torch::kFloat32));
  auto freqs = torch::outer(pos, inv_freq_);
  auto emb = torch::cat({freqs, freqs}, -1);
  cos_ = emb.cos().to(device);
  sin_ = emb.sin().to(device);
}

std::pair<torch::Tensor, torch::Tensor> RopeTable::lookup(const torch::Tensor& positions, torch::ScalarType dtype) {
  const int64_t max_pos = positions.numel() ? positions.max().item<int64_t>() : 0;
  grow(max_pos + 1, positions.device());
  auto flat = positions.reshape({-1});
  auto shape = positions.sizes().vec();
  shape.push_back(cos_.size(1));
  return {cos_.index_select(0, flat).view(shape).to(dtype), sin_.index_select(0, flat).view(shape).to(dtype)};
}

std::pair<torch::Tensor, torch::Tensor> RopeTable::tables(int64_t n, torch::Device device, torch::ScalarType dtype) {
  grow(n, device);
  if (!cos_dt_.defined() || cos_dt_.size(0) != cos_.size(0) || cos_dt_.scalar_type() != dtype ||
      cos_dt_.device() != device) {
    cos_dt_ = cos_.to(dtype).contiguous();
    sin_dt_ = sin_.to(dtype).contiguous();
  }
  return {cos_dt_, sin_dt_};
}

namespace {

// out = x * cos + rotate_half(x) * sin for rows of `heads` x D floats (x rows with
// stride ldx; cos/sin one row of D per x row): per element the operations of the
// tensor expression in apply_rope (two rounded products, then their rounded sum;
// never contracted into a fused multiply-add), so the same bits in one pass and
// without its five temporaries.
__attribute__((optimize("fp-contract=off"))) void rope_rows(const float* x, int64_t ldx, const float* cos,
                                                            const float* sin, float* out, int64_t rows,
                                                            int64_t heads, int64_t D) {
  const int64_t half = D / 2;
  for (int64_t r = 0; r < rows; ++r) {
    const float *c = cos + r * D, *s = sin + r * D;
    for (int64_t h = 0; h < heads; ++h) {
      const float* a = x + r * ldx + h * D;
      float* o = out + (r * heads + h) * D;
      for (int64_t d = 0; d < half; ++d) {
        const float p = a[d] * c[d], q = -a[d + half] * s[d];
        o[d] = p + q;
      }
      for (int64_t d = half; d < D; ++d) {
        const float p = a[d] * c[d], q = a[d - half] * s[d];
        o[d] = p + q;
      }
    }
  }
}

// x as rows of [heads, D] with one row stride (a view into a fused projection's
// output qualifies), or undefined.
torch::Tensor as_rows(const torch::Tensor& x) {
  if (x.dim() < 3 || x.stride(-1) != 1 || x.stride(-2) != x.size(-1)) return {};
  for (int64_t i = x.dim() - 4; i >= 0; --i)
    if (x.size(i) != 1 && x.stride(i) != x.size(i + 1) * x.stride(i + 1)) return {};
  return x.view({-1, x.size(-2), x.size(-1)});
}

// rope_rows' gradient: out[d] = x[d] c[d] - x[d + h] s[d] (d < h), x[d] c[d] + x[d - h] s[d]
// (d >= h), so dx[d] = g[d] c[d] + g[d + h] s[d + h] (d < h), g[d] c[d] - g[d - h] s[d - h].
void rope_rows_backward(const float* g, const float* cos, const float* sin, float* dx, int64_t rows, int64_t heads,
                        int64_t D) {
  const int64_t half = D / 2;
  for (int64_t r = 0; r < rows; ++r) {
    const float *c = cos + r * D, *s = sin + r * D;
    for (int64_t h = 0; h < heads; ++h) {
      const float* a = g + (r * heads + h) * D;
      float* o = dx + (r * heads + h) * D;
      for (int64_t d = 0; d < half; ++d) o[d] = a[d] * c[d] + a[d + half] * s[d + half];
      for (int64_t d = half; d < D; ++d) o[d] = a[d] * c[d] - a[d - half] * s[d - half];
    }
  }
}

// Rows per task: enough elements to pay for a thread.
int64_t rope_grain(int64_t heads, int64_t D) { return std::max<int64_t>(1, 16384 / std::max<int64_t>(1, heads * D)); }

torch::Tensor rope_forward(const torch::Tensor& rows, const torch::Tensor& x, const torch::Tensor& c,
                           const torch::Tensor& s) {
  auto out = torch::empty(x.sizes(), x.options());
  const int64_t heads = x.size(-2), D = x.size(-1), ld = rows.stride(0);
  const float *xp = rows.data_ptr<float>(), *cp = c.data_ptr<float>(), *sp = s.data_ptr<float>();
  float* op = out.data_ptr<float>();
  at::parallel_for(0, rows.size(0), rope_grain(heads, D), [&](int64_t r0, int64_t r1) {
    rope_rows(xp + r0 * ld, ld, cp + r0 * D, sp + r0 * D, op + r0 * heads * D, r1 - r0, heads, D);
  });
  return out;
}

// The one-pass kernel with its explicit gradient (cos and sin are tables: no gradient).
struct RopeFn : torch::autograd::Function<RopeFn> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, torch::Tensor x, torch::Tensor rows,
                               torch::Tensor c, torch::Tensor s) {
    ctx->save_for_backward({c, s});
    return rope_forward(rows, x, c, s);
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    auto saved = ctx->get_saved_variables();
    auto g = grads[0].contiguous();
    const int64_t D = g.size(-1), heads = g.size(-2), rows = g.numel() / (heads * D);
    auto dx = torch::empty_like(g);
    const float *gp = g.data_ptr<float>(), *cp = saved[0].data_ptr<float>(), *sp = saved[1].data_ptr<float>();
    float* dp = dx.data_ptr<float>();
    at::parallel_for(0, rows, rope_grain(heads, D), [&](int64_t r0, int64_t r1) {
      rope_rows_backward(gp + r0 * heads * D, cp + r0 * D, sp + r0 * D, dp + r0 * heads * D, r1 - r0, heads, D);
    });
    return {dx, torch::Tensor(), torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace

torch::Tensor apply_rope(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin) {
  const bool table_grad = torch::GradMode::is_enabled() && (cos.requires_grad() || sin.requires_grad());
  if (!table_grad && x.device().is_cpu() && x.scalar_type() == torch::kFloat32 &&
      cos.scalar_type() == torch::kFloat32 && sin.scalar_type() == torch::kFloat32 && x.size(-1) % 2 == 0 &&
      cos.sizes() == sin.sizes() && x.numel() > 0 && cos.dim() == x.dim() - 1 && cos.size(-1) == x.size(-1) &&
      cos.sizes().slice(0, cos.dim() - 1) == x.sizes().slice(0, x.dim() - 2)) {
    auto rows = as_rows(x);
    if (rows.defined()) {
      auto c = cos.contiguous(), s = sin.contiguous();
      if (torch::GradMode::is_enabled() && x.requires_grad()) return RopeFn::apply(x, rows.detach(), c, s);
      return rope_forward(rows, x, c, s);
    }
  }
  const int64_t half = x.size(-1) / 2;
  auto x1 = x.narrow(-1, 0, half);
  auto x2 = x.narrow(-1, half, half);
  auto rotated = torch::cat({-x2, x1}, -1);
  auto c = cos.unsqueeze(-2);  // broadcast over heads
  auto s = sin.unsqueeze(-2);
  return x * c + rotated * s;
}

}  // namespace rl::nn
