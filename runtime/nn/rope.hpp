// Rotary position embeddings in Hugging Face's rotate_half layout, with the
// rope_scaling variants of config.json (none, linear, llama3).
#pragma once
#include <torch/torch.h>

#include "model/config.hpp"

namespace rl::nn {

// inv_freq[i] = 1 / theta^(2i/head_dim), adjusted by rope_scaling (float64 math, float32 result).
torch::Tensor rope_inv_freq(const model::ModelConfig& config);

// cos/sin tables for positions [0, n), shape [n, head_dim] each (the two halves repeat),
// grown on demand; computed in float32 and cast to the model dtype on use.
class RopeTable {
 public:
  explicit RopeTable(const model::ModelConfig& config);
  // cos and sin rows for `positions` (int64, any shape) → [..., head_dim], dtype `dtype`.
  std::pair<torch::Tensor, torch::Tensor> lookup(const torch::Tensor& positions, torch::ScalarType dtype);
  // The whole tables, at least n rows, on `device` in `dtype` (cached until they
  // grow): the engine's CUDA kernels index them by position. Call with the largest
  // n first when the result is captured in a CUDA graph (growing reallocates).
  std::pair<torch::Tensor, torch::Tensor> tables(int64_t n, torch::Device device, torch::ScalarType dtype);

 private:
  void grow(int64_t n, torch::Device device);
  torch::Tensor inv_freq_;
  torch::Tensor cos_, sin_;  // [n, head_dim] float32
  torch::Tensor cos_dt_, sin_dt_;  // cos_/sin_ in the dtype tables() was last asked for
};

// x: [..., heads, head_dim]; cos/sin: [..., head_dim] broadcast over heads.
torch::Tensor apply_rope(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin);

}  // namespace rl::nn
