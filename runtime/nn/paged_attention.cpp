#include "nn/paged_attention.hpp"

#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>

namespace rl::nn {
namespace {

// Eight independent partial sums: lets the compiler vectorise without
// reassociating one long chain (no -ffast-math needed).
inline float dot(const float* a, const float* b, int64_t n) {
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int k = 0; k < 8; ++k) acc[k] += a[i + k] * b[i + k];
  float s = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
  for (; i < n; ++i) s += a[i] * b[i];
  return s;
}

inline void axpy(float w, const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += w * x[i];
}

}  // namespace

bool paged_decode_supported(const torch::Tensor& q, const torch::Tensor& k_cache) {
  return q.device().is_cpu() && q.scalar_type() == torch::kFloat32 && k_cache.scalar_type() == torch::kFloat32 &&
         k_cache.is_contiguous();
}

torch::Tensor paged_decode_attention(const torch::Tensor& q_in, const torch::Tensor& k_cache,
                                     const torch::Tensor& v_cache, const torch::Tensor& context_slots,
                                     const std::vector<int64_t>& context_lens, double scale) {
  const int64_t S = q_in.size(0), H = q_in.size(1), D = q_in.size(2), KV = k_cache.size(1);
  if (H % KV != 0 || k_cache.size(2) != D || static_cast<int64_t>(context_lens.size()) != S)
    throw std::invalid_argument("paged_decode_attention: shapes disagree");
  auto q = q_in.contiguous();
  auto slots = context_slots.contiguous();
  auto out = torch::empty_like(q);
  const float* qp = q.data_ptr<float>();
  const float* kp = k_cache.data_ptr<float>();
  const float* vp = v_cache.data_ptr<float>();
  const int64_t* sp = slots.data_ptr<int64_t>();
  const int64_t stride = slots.size(1);
  float* op = out.data_ptr<float>();
  const int64_t group = H / KV;
  const float fscale = static_cast<float>(scale);
  int64_t max_ctx = 1;
  for (auto c : context_lens) max_ctx = std::max(max_ctx, c);
  at::parallel_for(0, S * H, 1, [&](int64_t begin, int64_t end) {
    std::vector<float> w(static_cast<size_t>(max_ctx));
    for (int64_t i = begin; i < end; ++i) {
      const int64_t s = i / H, h = i % H, kvh = h / group;
      const int64_t n = context_lens[static_cast<size_t>(s)];
      const float* qv = qp + (s * H + h) * D;
      const int64_t* row = sp + s * stride;
      float m = -std::numeric_limits<float>::infinity();
      for (int64_t j = 0; j < n; ++j) {
        w[static_cast<size_t>(j)] = dot(qv, kp + (row[j] * KV + kvh) * D, D) * fscale;
        m = std::max(m, w[static_cast<size_t>(j)]);
      }
      float sum = 0;
      for (int64_t j = 0; j < n; ++j) sum += (w[static_cast<size_t>(j)] = std::exp(w[static_cast<size_t>(j)] - m));
      float* o = op + (s * H + h) * D;
      std::fill(o, o + D, 0.0f);
      const float inv = 1.0f / sum;
      for (int64_t j = 0; j < n; ++j) axpy(w[static_cast<size_t>(j)] * inv, vp + (row[j] * KV + kvh) * D, o, D);
    }
  });
  return out;
}

}  // namespace rl::nn
