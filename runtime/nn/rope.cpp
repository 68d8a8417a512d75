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

torch::Tensor apply_rope(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin) {
  const int64_t half = x.size(-1) / 2;
  auto x1 = x.narrow(-1, 0, half);
  auto x2 = x.narrow(-1, half, half);
  auto rotated = torch::cat({-x2, x1}, -1);
  auto c = cos.unsqueeze(-2);  // broadcast over heads
  auto s = sin.unsqueeze(-2);
  return x * c + rotated * s;
}

}  // namespace rl::nn
