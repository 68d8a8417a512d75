#include "nn/logprobs_blocked.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>
#include <vector>

#include "nn/batch_invariant_ops.hpp"
#include "nn/logprob_rows.hpp"

namespace rl::nn {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

constexpr int64_t kKeptLogits = int64_t(1) << 26;  // as token_logprobs keeps (256 MiB of float32)

struct HeadHolder : torch::CustomClassHolder {
  explicit HeadHolder(HeadBlocks h) : head(std::move(h)) {}
  HeadBlocks head;
};

// Goes over the blocks in order, each fetched while the one before computes.
template <class Fn>
void for_each_block(const HeadBlocks& head, Fn&& fn) {
  const size_t n = head.rows.size() - 1;
  auto next = [&](size_t from) {
    while (from < n && head.rows[from + 1] == head.rows[from]) ++from;  // empty blocks: nobody fetches them
    return from;
  };
  size_t b = next(0);
  std::function<torch::Tensor()> ready = b < n ? head.fetch(b) : nullptr;
  while (b < n) {
    const size_t after = next(b + 1);
    auto ahead = after < n ? head.fetch(after) : nullptr;
    fn(b, ready());
    ready = std::move(ahead);
    b = after;
  }
}

struct BlockedLogprob : torch::autograd::Function<BlockedLogprob> {
  static variable_list forward(AutogradContext* ctx, torch::Tensor hidden, torch::Tensor targets, double temperature,
                               bool with_entropy, c10::intrusive_ptr<HeadHolder> holder, int64_t compute_dtype) {
    const HeadBlocks& head = holder->head;
    const int64_t n = hidden.size(0), V = head.rows.back();
    const auto dt = static_cast<torch::ScalarType>(compute_dtype);
    ctx->saved_data["compute_dtype"] = compute_dtype;
    auto opts = hidden.options().dtype(torch::kFloat32);
    const bool exact = hidden.is_cpu() && dt == torch::kFloat32 && bi::active(torch::empty({0}, opts));
    const int64_t P = head.pass_rows > 0 ? head.pass_rows : std::max<int64_t>(1, kKeptLogits / std::max<int64_t>(1, V));
    const int64_t passes = head.max_over_ranks((n + P - 1) / P);
    auto logprobs = torch::empty({n}, opts), lse = torch::empty({n}, opts);
    auto entropy = with_entropy ? torch::empty({n}, opts) : torch::zeros({0}, opts);
    std::vector<torch::Tensor> kept;
    int64_t kept_logits = 0;
    for (int64_t p = 0; p < passes; ++p) {
      const int64_t s = std::min(n, p * P), len = std::min(P, n - s);
      auto h = hidden.narrow(0, s, len);
      auto z = torch::empty({len, V}, opts);
      for_each_block(head, [&](size_t b, const torch::Tensor& w) {
        if (len == 0) return;
        z.narrow(1, head.rows[b], w.size(0)).copy_(detail::scaled_logits(h, w.to(dt), temperature, {}));
      });
      if (len == 0) continue;
      auto t = targets.narrow(0, s, len);
      if (exact) {
        detail::exact_logprobs(z, t, lse.narrow(0, s, len), logprobs.narrow(0, s, len));
        if (with_entropy) {
          const float* zp = z.data_ptr<float>();
          const float* lp = lse.data_ptr<float>() + s;
          float* ep = entropy.data_ptr<float>() + s;
          at::parallel_for(0, len, 1, [&](int64_t r0, int64_t r1) { detail::entropy_rows(zp, lp, ep, r0, r1, V); });
        }
      } else {
        auto l = torch::logsumexp(z, -1);
        lse.narrow(0, s, len).copy_(l);
        auto logp = z - l.unsqueeze(1);
        logprobs.narrow(0, s, len).copy_(logp.gather(1, t.unsqueeze(1)).squeeze(1));
        if (with_entropy) entropy.narrow(0, s, len).copy_(-(logp.exp() * logp).sum(-1));
      }
      // The first pass's logits always stay for the backward pass, the next ones while
      // they fit the budget; the backward pass recomputes the others block by block.
      const int64_t budget = head.keep_logits < 0 ? kKeptLogits : head.keep_logits;
      if (kept.size() == static_cast<size_t>(p) && (p == 0 || kept_logits + len * V <= budget)) {
        kept.push_back(z);
        kept_logits += len * V;
      }
    }
    std::vector<torch::Tensor> saved{hidden, targets, lse, entropy};
    saved.insert(saved.end(), kept.begin(), kept.end());
    ctx->save_for_backward(saved);
    ctx->saved_data["temperature"] = temperature;
    ctx->saved_data["with_entropy"] = with_entropy;
    ctx->saved_data["passes"] = passes;
    ctx->saved_data["pass_rows"] = P;
    ctx->saved_data["head"] = c10::IValue::make_capsule(holder);
    return {logprobs, entropy};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    auto saved = ctx->get_saved_variables();
    auto hidden = saved[0], targets = saved[1], lse = saved[2], entropy = saved[3];
    const size_t kept = saved.size() - 4;
    const double temperature = ctx->saved_data["temperature"].toDouble();
    const bool with_entropy = ctx->saved_data["with_entropy"].toBool();
    const int64_t passes = ctx->saved_data["passes"].toInt(), P = ctx->saved_data["pass_rows"].toInt();
    const auto dt = static_cast<torch::ScalarType>(ctx->saved_data["compute_dtype"].toInt());
    const auto capsule = ctx->saved_data["head"].toCapsule();
    const HeadBlocks& head = static_cast<const HeadHolder*>(capsule.get())->head;
    const int64_t n = hidden.size(0);
    auto f32 = [](const torch::Tensor& t) { return t.defined() ? t.to(torch::kFloat32) : t; };
    auto g_lp = f32(grads[0]);
    auto g_ent = with_entropy ? f32(grads[1]) : torch::Tensor();
    auto grad_hidden = torch::zeros({n, head.hidden}, hidden.options().dtype(torch::kFloat32));
    for_each_block(head, [&](size_t b, const torch::Tensor& w) {
      const int64_t r0 = head.rows[b], nb = w.size(0);
      const auto wc = w.to(dt);
      auto grad_w = torch::zeros({nb, head.hidden}, hidden.options().dtype(torch::kFloat32));
      for (int64_t p = 0; p < passes; ++p) {
        const int64_t s = std::min(n, p * P), len = std::min(P, n - s);
        if (len == 0) continue;
        auto h = hidden.narrow(0, s, len);
        // log p of this block's columns; d logprob / dz = onehot(target) - p and
        // d entropy / dz = -p (log p + H), both times 1/T.
        auto z = static_cast<size_t>(p) < kept ? saved[4 + p].narrow(1, r0, nb)
                                                : detail::scaled_logits(h, wc, temperature, {});
        auto column = [&](const torch::Tensor& v) { return v.defined() ? v.narrow(0, s, len).unsqueeze(1) : v; };
        auto gz = detail::softmax_grad(z - lse.narrow(0, s, len).unsqueeze(1),
                                       g_ent.defined() ? column(entropy) : torch::Tensor(), column(g_lp), column(g_ent));
        if (g_lp.defined()) {  // + g_lp at each row's target, where it falls in this block
          auto t = targets.narrow(0, s, len);
          auto in = (t >= r0).logical_and_(t < r0 + nb).nonzero().squeeze(1);
          if (in.numel() > 0) gz.index_put_({in, t.index_select(0, in) - r0}, g_lp.narrow(0, s, len).index_select(0, in),
                                            /*accumulate=*/true);
        }
        if (temperature != 1.0) gz.div_(temperature);
        if (dt == torch::kFloat32) {
          grad_hidden.narrow(0, s, len).addmm_(gz, wc);
          grad_w.addmm_(gz.t(), h.to(torch::kFloat32));
        } else {
          auto gc = gz.to(dt);
          grad_hidden.narrow(0, s, len).add_(torch::matmul(gc, wc));
          grad_w.add_(torch::matmul(gc.t(), h.to(dt)));
        }
      }
      head.give(b, grad_w);
    });
    return {grad_hidden.to(hidden.scalar_type()), torch::Tensor(), torch::Tensor(), torch::Tensor(), torch::Tensor(),
            torch::Tensor()};
  }
};

}  // namespace

TokenLogprobs token_logprobs_blocked(const torch::Tensor& hidden, const HeadBlocks& head, const torch::Tensor& targets,
                                     double temperature, bool with_entropy) {
  if (head.rows.size() < 2 || head.rows.front() != 0 || !head.fetch || !head.give || !head.max_over_ranks)
    throw std::invalid_argument("token_logprobs_blocked: the head needs row bounds from 0, fetch, give and max_over_ranks");
  for (size_t b = 1; b < head.rows.size(); ++b)
    if (head.rows[b] < head.rows[b - 1]) throw std::invalid_argument("token_logprobs_blocked: row bounds must not decrease");
  const int64_t V = head.rows.back();
  if (hidden.dim() != 2 || hidden.size(1) != head.hidden)
    throw std::invalid_argument("token_logprobs_blocked: hidden must be [N, " + std::to_string(head.hidden) + "]");
  if (targets.dim() != 1 || targets.size(0) != hidden.size(0))
    throw std::invalid_argument("token_logprobs_blocked: targets must be [N] with N = " + std::to_string(hidden.size(0)));
  if (!(temperature > 0)) throw std::invalid_argument("token_logprobs_blocked: temperature must be > 0");
  auto t = targets.to(torch::kInt64);
  if (t.numel() > 0) {
    const int64_t lo = t.min().item<int64_t>(), hi = t.max().item<int64_t>();
    if (lo < 0 || hi >= V)
      throw std::out_of_range("token_logprobs_blocked: target id " + std::to_string(lo < 0 ? lo : hi) +
                              " outside the vocabulary [0, " + std::to_string(V) + ")");
  }
  const auto dt = detail::compute_dtype(hidden, torch::empty({0}, hidden.options().dtype(head.dtype)));
  auto holder = c10::make_intrusive<HeadHolder>(head);
  auto out = BlockedLogprob::apply(hidden, t, temperature, with_entropy, holder, static_cast<int64_t>(dt));
  return {out[0], with_entropy ? out[1] : torch::Tensor()};
}

}  // namespace rl::nn
