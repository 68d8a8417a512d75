// Argument checks and masking helpers shared by losses.cpp and advantages.cpp.
// Every failure is a std::invalid_argument that names the function, the field
// and what was expected, so a recipe author can fix the call without reading C++.
#pragma once
#include <cmath>
#include <sstream>
#include <stdexcept>
#include <string>

#include <torch/torch.h>

namespace rl::trainer::detail {

[[noreturn]] inline void fail(const char* fn, const std::string& what) {
  throw std::invalid_argument(std::string(fn) + ": " + what);
}

inline std::string shape_str(const torch::Tensor& t) {
  if (!t.defined()) return "undefined";
  std::ostringstream s;
  s << t.sizes();
  return s.str();
}

// Optional tensors (undefined) pass; defined ones must match `like`'s shape.
inline void check_same_shape(const char* fn, const char* field, const torch::Tensor& t, const torch::Tensor& like) {
  if (!t.defined() || t.sizes() == like.sizes()) return;
  fail(fn, std::string(field) + " has shape " + shape_str(t) + " but should be " + shape_str(like) +
               " (every per-token tensor is [B, T], right-padded like logp)");
}

inline void check_finite(const char* fn, const char* field, double v) {
  if (!std::isfinite(v)) fail(fn, std::string(field) + " must be a finite number, got " + std::to_string(v));
}

// a − b inside the mask and 0 outside: a log-ratio taken through this is exp-safe
// on padding (garbage log-probs there could overflow exp, and 0·inf in the
// backward pass is NaN even when the forward value is masked away).
inline torch::Tensor masked_diff(const torch::Tensor& a, const torch::Tensor& b, const torch::Tensor& mask) {
  return torch::where(mask.ne(0), a - b, torch::zeros({}, a.options()));
}

}  // namespace rl::trainer::detail
