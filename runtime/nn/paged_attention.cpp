#include "nn/paged_attention.hpp"

#include "nn/batch_invariant.hpp"

#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>

namespace rl::nn {
namespace {

using bi::dot_inline;

// Fixed 8-wide blocks for the same reason (-O2 leaves a variable-length loop scalar).
__attribute__((always_inline)) inline void axpy(float w, const float* __restrict x, float* __restrict y, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int k = 0; k < 8; ++k) y[i + k] = std::fma(w, x[i + k], y[i + k]);
  for (; i < n; ++i) y[i] = std::fma(w, x[i], y[i]);
}

struct Shapes {
  int64_t H, KV, D, stride;
  float scale;
};

// One sequence, all heads: each context slot's K (then V) row [KV, D] is read
// once, contiguously, for every head. Built for AVX-512, AVX2 and baseline x86
// (the loader picks one), since the rest of the binary targets baseline x86-64.
__attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
void attend_one(const float* q, const float* kc, const float* vc, const int64_t* row, int64_t n, const Shapes& sh,
                float* w, float* o) {
  const int64_t H = sh.H, D = sh.D, KV = sh.KV, group = H / KV;
  for (int64_t j = 0; j < n; ++j) {
    const float* kr = kc + row[j] * KV * D;
    for (int64_t h = 0; h < H; ++h) w[h * n + j] = dot_inline(q + h * D, kr + (h / group) * D, D) * sh.scale;
  }
  for (int64_t h = 0; h < H; ++h) {
    float* wh = w + h * n;
    float m = -std::numeric_limits<float>::infinity();
    for (int64_t j = 0; j < n; ++j) m = std::max(m, wh[j]);
    float sum = 0;
    for (int64_t j = 0; j < n; ++j) sum += (wh[j] = bi::exp_inline(wh[j] - m));
    const float inv = 1.0f / sum;
    for (int64_t j = 0; j < n; ++j) wh[j] *= inv;
  }
  std::fill(o, o + H * D, 0.0f);
  for (int64_t j = 0; j < n; ++j) {
    const float* vr = vc + row[j] * KV * D;
    for (int64_t h = 0; h < H; ++h) axpy(w[h * n + j], vr + (h / group) * D, o + h * D, D);
  }
}

}  // namespace

bool paged_decode_supported(const torch::Tensor& q, const torch::Tensor& k_cache) {
  return q.device().is_cpu() && q.scalar_type() == torch::kFloat32 && k_cache.scalar_type() == torch::kFloat32 &&
         k_cache.is_contiguous();
}

torch::Tensor paged_attention(const torch::Tensor& q_in, const torch::Tensor& k_cache, const torch::Tensor& v_cache,
                              const torch::Tensor& context_slots, const std::vector<int64_t>& seq_of_query,
                              const std::vector<int64_t>& context_of_query, double scale) {
  const int64_t Q = q_in.size(0), H = q_in.size(1), D = q_in.size(2), KV = k_cache.size(1);
  if (H % KV != 0 || k_cache.size(2) != D || static_cast<int64_t>(seq_of_query.size()) != Q ||
      seq_of_query.size() != context_of_query.size() || !k_cache.is_contiguous() || !v_cache.is_contiguous())
    throw std::invalid_argument("paged_attention: shapes disagree");
  auto q = q_in.contiguous();
  auto slots = context_slots.contiguous();
  auto out = torch::empty_like(q);
  const Shapes sh{H, KV, D, slots.size(1), static_cast<float>(scale)};
  const float* qp = q.data_ptr<float>();
  const float* kp = k_cache.data_ptr<float>();
  const float* vp = v_cache.data_ptr<float>();
  const int64_t* sp = slots.data_ptr<int64_t>();
  float* op = out.data_ptr<float>();
  int64_t max_ctx = 1;
  for (int64_t i = 0; i < Q; ++i) {
    const int64_t s = seq_of_query[static_cast<size_t>(i)], c = context_of_query[static_cast<size_t>(i)];
    if (s < 0 || s >= slots.size(0) || c < 1 || c > slots.size(1))
      throw std::invalid_argument("paged_attention: query " + std::to_string(i) + " has sequence " +
                                  std::to_string(s) + " and context " + std::to_string(c) + " outside [" +
                                  std::to_string(slots.size(0)) + ", " + std::to_string(slots.size(1)) + "]");
    max_ctx = std::max(max_ctx, c);
  }
  at::parallel_for(0, Q, 1, [&](int64_t begin, int64_t end) {
    std::vector<float> w(static_cast<size_t>(H * max_ctx));
    for (int64_t i = begin; i < end; ++i)
      attend_one(qp + i * H * D, kp, vp, sp + seq_of_query[static_cast<size_t>(i)] * sh.stride,
                 context_of_query[static_cast<size_t>(i)], sh, w.data(), op + i * H * D);
  });
  return out;
}

torch::Tensor paged_decode_attention(const torch::Tensor& q_in, const torch::Tensor& k_cache,
                                     const torch::Tensor& v_cache, const torch::Tensor& context_slots,
                                     const std::vector<int64_t>& context_lens, double scale) {
  const int64_t S = q_in.size(0);
  if (static_cast<int64_t>(context_lens.size()) != S) throw std::invalid_argument("paged_decode_attention: shapes disagree");
  std::vector<int64_t> seq(static_cast<size_t>(S));
  for (int64_t s = 0; s < S; ++s) seq[static_cast<size_t>(s)] = s;
  return paged_attention(q_in, k_cache, v_cache, context_slots, seq, context_lens, scale);
}

}  // namespace rl::nn
