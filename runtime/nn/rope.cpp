#include "nn/rope.hpp"

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

}  // namespace

torch::Tensor apply_rope(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin) {
  const bool grad = torch::GradMode::is_enabled() && (x.requires_grad() || cos.requires_grad() || sin.requires_grad());
  if (!grad && x.device().is_cpu() && x.scalar_type() == torch::kFloat32 && cos.scalar_type() == torch::kFloat32 &&
      sin.scalar_type() == torch::kFloat32 && x.size(-1) % 2 == 0 && cos.sizes() == sin.sizes() &&
      x.numel() > 0 && cos.dim() == x.dim() - 1 && cos.size(-1) == x.size(-1) &&
      cos.sizes().slice(0, cos.dim() - 1) == x.sizes().slice(0, x.dim() - 2)) {
    auto rows = as_rows(x);
    if (rows.defined()) {
      auto c = cos.contiguous(), s = sin.contiguous();
      auto out = torch::empty(x.sizes(), x.options());
      rope_rows(rows.data_ptr<float>(), rows.stride(0), c.data_ptr<float>(), s.data_ptr<float>(),
                out.data_ptr<float>(), rows.size(0), x.size(-2), x.size(-1));
      return out;
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
