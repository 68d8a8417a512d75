#include "nn/logprobs.hpp"

#include <stdexcept>
#include <string>

namespace rl::nn {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

constexpr int64_t kLogitsPerChunk = int64_t(1) << 25;

torch::Tensor scaled_logits(const torch::Tensor& h, const torch::Tensor& w, double temperature) {
  auto z = torch::matmul(h, w.t()).to(torch::kFloat32);
  return temperature == 1.0 ? z : z / temperature;
}

struct ChunkedLogprob : torch::autograd::Function<ChunkedLogprob> {
  static variable_list forward(AutogradContext* ctx, torch::Tensor hidden, torch::Tensor weight, torch::Tensor targets,
                               double temperature, bool with_entropy, int64_t chunk) {
    const int64_t n = hidden.size(0);
    auto opts = hidden.options().dtype(torch::kFloat32);
    auto logprobs = torch::empty({n}, opts);
    auto lse = torch::empty({n}, opts);
    auto entropy = with_entropy ? torch::empty({n}, opts) : torch::zeros({0}, opts);
    // One chunk covers everything: keep its log-softmax for the backward pass
    // instead of recomputing the lm_head matmul (same memory bound either way).
    const bool keep = n <= chunk;
    torch::Tensor kept;
    for (int64_t s = 0; s < n; s += chunk) {
      const int64_t len = std::min(chunk, n - s);
      auto z = scaled_logits(hidden.narrow(0, s, len), weight, temperature);
      auto l = torch::logsumexp(z, -1);
      lse.narrow(0, s, len).copy_(l);
      auto logp = z.sub_(l.unsqueeze(1));  // in place: z becomes log p
      logprobs.narrow(0, s, len).copy_(logp.gather(1, targets.narrow(0, s, len).unsqueeze(1)).squeeze(1));
      if (with_entropy) entropy.narrow(0, s, len).copy_(-(logp.exp() * logp).sum(-1));  // no cancellation
      if (keep) kept = logp;
    }
    ctx->save_for_backward({hidden, weight, targets, lse, entropy, kept});
    ctx->saved_data["temperature"] = temperature;
    ctx->saved_data["chunk"] = chunk;
    ctx->saved_data["with_entropy"] = with_entropy;
    return {logprobs, entropy};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    auto saved = ctx->get_saved_variables();
    auto hidden = saved[0], weight = saved[1], targets = saved[2], lse = saved[3], entropy = saved[4];
    const auto& kept = saved[5];
    const double temperature = ctx->saved_data["temperature"].toDouble();
    const int64_t chunk = ctx->saved_data["chunk"].toInt();
    const bool with_entropy = ctx->saved_data["with_entropy"].toBool();
    auto g_lp = grads[0];
    auto g_ent = with_entropy ? grads[1] : torch::Tensor();
    const int64_t n = hidden.size(0);
    auto grad_hidden = torch::empty_like(hidden);
    auto grad_weight = torch::zeros(weight.sizes(), weight.options().dtype(torch::kFloat32));
    for (int64_t s = 0; s < n; s += chunk) {
      const int64_t len = std::min(chunk, n - s);
      auto h = hidden.narrow(0, s, len);
      auto logp = kept.defined() ? kept
                                 : scaled_logits(h, weight, temperature).sub_(lse.narrow(0, s, len).unsqueeze(1));
      auto p = torch::exp(logp);
      // d logprob / dz = onehot(target) - p;  d entropy / dz = -p (log p + H)
      torch::Tensor gz = torch::zeros_like(p);
      if (g_lp.defined()) {
        auto g = g_lp.narrow(0, s, len).to(torch::kFloat32).unsqueeze(1);
        gz = -p * g;
        gz.scatter_add_(1, targets.narrow(0, s, len).unsqueeze(1), g);
      }
      if (g_ent.defined()) {
        auto g = g_ent.narrow(0, s, len).to(torch::kFloat32).unsqueeze(1);
        gz -= g * p * (logp + entropy.narrow(0, s, len).unsqueeze(1));
      }
      if (temperature != 1.0) gz = gz / temperature;
      auto gz_w = gz.to(weight.scalar_type());
      grad_hidden.narrow(0, s, len).copy_(torch::matmul(gz_w, weight));
      grad_weight.addmm_(gz.t(), h.to(torch::kFloat32));
    }
    return {grad_hidden, grad_weight.to(weight.scalar_type()), torch::Tensor(), torch::Tensor(), torch::Tensor(),
            torch::Tensor()};
  }
};

}  // namespace

TokenLogprobs token_logprobs(const torch::Tensor& hidden, const torch::Tensor& weight, const torch::Tensor& targets,
                             double temperature, bool with_entropy, int64_t chunk_tokens) {
  if (hidden.dim() != 2 || weight.dim() != 2 || hidden.size(1) != weight.size(1))
    throw std::invalid_argument("token_logprobs: hidden must be [N, H] and weight [V, H], got " +
                                std::to_string(hidden.dim()) + "-d and " + std::to_string(weight.dim()) + "-d");
  if (targets.dim() != 1 || targets.size(0) != hidden.size(0))
    throw std::invalid_argument("token_logprobs: targets must be [N] with N = " + std::to_string(hidden.size(0)));
  if (!(temperature > 0)) throw std::invalid_argument("token_logprobs: temperature must be > 0");
  auto t = targets.to(torch::kInt64);
  if (t.numel() > 0) {
    const int64_t lo = t.min().item<int64_t>(), hi = t.max().item<int64_t>();
    if (lo < 0 || hi >= weight.size(0))
      throw std::out_of_range("token_logprobs: target id " + std::to_string(lo < 0 ? lo : hi) +
                              " outside the vocabulary [0, " + std::to_string(weight.size(0)) + ")");
  }
  const int64_t chunk = chunk_tokens > 0 ? chunk_tokens : std::max<int64_t>(1, kLogitsPerChunk / weight.size(0));
  auto out = ChunkedLogprob::apply(hidden, weight, t, temperature, with_entropy, chunk);
  return {out[0], with_entropy ? out[1] : torch::Tensor()};
}

torch::Tensor scaled_log_softmax(const torch::Tensor& logits, double temperature) {
  auto z = logits.to(torch::kFloat32);
  if (temperature != 1.0) z = z / temperature;
  return torch::log_softmax(z, -1);
}

}  // namespace rl::nn
