#include "nn/logprobs.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>
#include <vector>

#include <ATen/autocast_mode.h>
#ifdef RLHOST_WITH_CUDA
#include <ATen/cuda/CUDAContext.h>
#endif

#include "nn/batch_invariant.hpp"
#include "nn/batch_invariant_ops.hpp"
#include "nn/logprob_rows.hpp"

namespace rl::nn {
namespace detail {

// Logits in the compute dtype (the weight's, or autocast's lower precision), then
// float32 and scaled, as the engine computes them (float32 on the CPU: with the
// engine's batch-invariant kernel, nn/batch_invariant_ops.hpp).
torch::Tensor scaled_logits(const torch::Tensor& h, const torch::Tensor& w, double temperature,
                            const bi::PackedWeight& packed) {
  auto hc = h.to(w.scalar_type());
  auto z = bi::active(hc) ? bi::linear(hc, w, torch::Tensor(), packed) : torch::matmul(hc, w.t()).to(torch::kFloat32);
  return temperature == 1.0 ? z : z / temperature;
}

// Row-wise log-sum-exp and the targets' log-probs of z [n, V] float32, with the
// engine sampler's arithmetic (bi::logsumexp, the difference taken in double).
void exact_logprobs(const torch::Tensor& z_in, const torch::Tensor& targets, torch::Tensor lse_out,
                    torch::Tensor logprob_out) {
  auto z = z_in.contiguous();
  auto t = targets.contiguous();
  const int64_t n = z.size(0), V = z.size(1);
  const float* zp = z.data_ptr<float>();
  const int64_t* tp = t.data_ptr<int64_t>();
  float* lse = lse_out.data_ptr<float>();
  float* lp = logprob_out.data_ptr<float>();
  at::parallel_for(0, n, 1, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const double l = bi::logsumexp(zp + r * V, V);
      lse[r] = static_cast<float>(l);
      lp[r] = static_cast<float>(static_cast<double>(zp[r * V + tp[r]]) - l);
    }
  });
}

// Entropy of each row from its logits z and log-sum-exp: -sum p (z - lse), p = exp(z - lse).
__attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
void entropy_rows(const float* z, const float* lse, float* out, int64_t r0, int64_t r1, int64_t V) {
  for (int64_t r = r0; r < r1; ++r) {
    const float* zr = z + r * V;
    const float l = lse[r];
    float acc[16] = {};
    int64_t j = 0;
    for (; j + 16 <= V; j += 16)
      for (int k = 0; k < 16; ++k) {
        const float lp = zr[j + k] - l;
        acc[k] += bi::exp_inline(lp) * lp;
      }
    float h = 0;
    for (int k = 0; k < 16; ++k) h += acc[k];
    for (; j < V; ++j) h += bi::exp_inline(zr[j] - l) * (zr[j] - l);
    out[r] = -h;
  }
}

// The dtype the lm_head matmul runs in: the weight's, or under autocast (the
// trainer's bf16 mixed precision) autocast's lower-precision dtype, as torch.autocast
// would run the matmul.
torch::ScalarType compute_dtype(const torch::Tensor& hidden, const torch::Tensor& weight) {
  const auto dev = hidden.device().type();
  if (weight.scalar_type() == torch::kFloat32 && at::autocast::is_autocast_available(dev) &&
      at::autocast::is_autocast_enabled(dev))
    return at::autocast::get_autocast_dtype(dev);
  return weight.scalar_type();
}

torch::Tensor softmax_grad(const torch::Tensor& logp, const torch::Tensor& entropy, const torch::Tensor& g_lp,
                           const torch::Tensor& g_ent) {
  auto gz = torch::exp(logp);  // built in place over p: no other vocabulary-sized temporaries
  if (g_ent.defined()) {
    auto scale = g_lp.defined() ? g_lp : torch::zeros_like(g_ent);
    return gz.mul_((logp + entropy).mul_(g_ent).add_(scale)).neg_();
  }
  if (g_lp.defined()) return gz.mul_(g_lp.neg());
  return gz.zero_();
}

}  // namespace detail

namespace {

using detail::compute_dtype;
using detail::entropy_rows;
using detail::exact_logprobs;
using detail::scaled_logits;

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// A PackedWeight kept in an autograd context (saved_data holds IValues).
struct PackedHolder : torch::CustomClassHolder {
  explicit PackedHolder(bi::PackedWeight p) : packed(std::move(p)) {}
  bi::PackedWeight packed;
};

constexpr int64_t kLogitsPerChunk = int64_t(1) << 25;
// The forward pass keeps every chunk's log-softmax for the backward pass (instead
// of recomputing the lm_head matmul there) while all of them fit this many logits
// (256 MiB of float32); past it, each chunk is recomputed in the backward pass.
constexpr int64_t kKeptLogits = int64_t(1) << 26;

// On a GPU: chunks of up to 2^28 logits (1 GiB of float32), and all of a batch's
// kept for the backward pass while they take at most 1/16 of the device's memory
// (capped at 2^30 logits): one lm_head GEMM or a few instead of one per 128 MiB,
// and none recomputed.
int64_t gpu_kept_logits(const torch::Device& d) {
#ifdef RLHOST_WITH_CUDA
  const auto* prop = at::cuda::getDeviceProperties(d.index() < 0 ? at::cuda::current_device() : d.index());
  return std::min<int64_t>(int64_t(1) << 30, static_cast<int64_t>(prop->totalGlobalMem / 16 / sizeof(float)));
#else
  (void)d;
  return kKeptLogits;
#endif
}

// d/dz of g_lp * logprob[target] + g_ent * entropy for rows of logits z (scaled by
// 1/T), in place: gz = -p (g_lp + g_ent (log p + H)) + g_lp onehot(target), times
// 1/T. One pass per row over what the forward kept (or recomputed).
__attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
void logit_grad_rows(float* z, const float* lse, const int64_t* targets, const float* g_lp, const float* g_ent,
                     const float* ent, float inv_t, int64_t r0, int64_t r1, int64_t V) {
  for (int64_t r = r0; r < r1; ++r) {
    float* zr = z + r * V;
    const float l = lse[r], gl = g_lp ? g_lp[r] : 0.0f, ge = g_ent ? g_ent[r] : 0.0f, H = g_ent ? ent[r] : 0.0f;
    if (g_ent) {
      for (int64_t j = 0; j < V; ++j) {
        const float lp = zr[j] - l;
        zr[j] = -bi::exp_inline(lp) * (gl + ge * (lp + H)) * inv_t;
      }
    } else {
      const float c = -gl * inv_t;
      for (int64_t j = 0; j < V; ++j) zr[j] = c * bi::exp_inline(zr[j] - l);
    }
    zr[targets[r]] += gl * inv_t;
  }
}

struct ChunkedLogprob : torch::autograd::Function<ChunkedLogprob> {
  static variable_list forward(AutogradContext* ctx, torch::Tensor hidden, torch::Tensor weight, torch::Tensor targets,
                               double temperature, bool with_entropy, int64_t chunk, int64_t compute_dtype,
                               int64_t keep_logits, bi::PackedWeight packed) {
    const int64_t n = hidden.size(0);
    const auto dt = static_cast<torch::ScalarType>(compute_dtype);
    const auto w = weight.to(dt);
    auto opts = hidden.options().dtype(torch::kFloat32);
    // float32 on the CPU with the batch-invariant kernels: the engine's arithmetic, and
    // the fused row passes below.
    const bool exact = hidden.is_cpu() && dt == torch::kFloat32 && bi::active(w);
    auto logprobs = torch::empty({n}, opts);
    auto lse = torch::empty({n}, opts);
    auto entropy = with_entropy ? torch::empty({n}, opts) : torch::zeros({0}, opts);
    // Chunks are kept for the backward pass in order while they fit the budget (at
    // least the first); the backward pass recomputes the rest.
    const int64_t keep_rows = std::max(keep_logits, chunk * weight.size(0)) / std::max<int64_t>(1, weight.size(0));
    std::vector<torch::Tensor> kept;
    for (int64_t s = 0; s < n; s += chunk) {
      const int64_t len = std::min(chunk, n - s);
      const bool keep = s + len <= keep_rows;
      auto z = scaled_logits(hidden.narrow(0, s, len), w, temperature, packed);
      torch::Tensor logp;
      if (exact) {
        // The engine sampler's arithmetic; the logits themselves are kept (the backward
        // pass and the entropy read exp(z - lse) in one pass each).
        exact_logprobs(z, targets.narrow(0, s, len), lse.narrow(0, s, len), logprobs.narrow(0, s, len));
        if (with_entropy) {
          const float* zp = z.data_ptr<float>();
          const float* lp = lse.data_ptr<float>() + s;
          float* ep = entropy.data_ptr<float>() + s;
          const int64_t V = z.size(1);
          at::parallel_for(0, len, 1, [&](int64_t r0, int64_t r1) { entropy_rows(zp, lp, ep, r0, r1, V); });
        }
        if (keep) kept.push_back(z);
        continue;
      } else {
        auto l = torch::logsumexp(z, -1);
        lse.narrow(0, s, len).copy_(l);
        logp = z.sub_(l.unsqueeze(1));  // in place: z becomes log p
        logprobs.narrow(0, s, len).copy_(logp.gather(1, targets.narrow(0, s, len).unsqueeze(1)).squeeze(1));
      }
      if (with_entropy) entropy.narrow(0, s, len).copy_(-(logp.exp() * logp).sum(-1));  // no cancellation
      if (keep) kept.push_back(logp);
    }
    std::vector<torch::Tensor> saved{hidden, weight, targets, lse, entropy};
    saved.insert(saved.end(), kept.begin(), kept.end());
    ctx->save_for_backward(saved);
    ctx->saved_data["temperature"] = temperature;
    ctx->saved_data["chunk"] = chunk;
    ctx->saved_data["with_entropy"] = with_entropy;
    ctx->saved_data["compute_dtype"] = compute_dtype;
    ctx->saved_data["packed"] = c10::IValue::make_capsule(c10::make_intrusive<PackedHolder>(std::move(packed)));
    ctx->saved_data["exact"] = exact;
    ctx->saved_data["consumed"] = false;
    return {logprobs, entropy};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    auto saved = ctx->get_saved_variables();
    auto hidden = saved[0], weight = saved[1], targets = saved[2], lse = saved[3], entropy = saved[4];
    const double temperature = ctx->saved_data["temperature"].toDouble();
    const int64_t chunk = ctx->saved_data["chunk"].toInt();
    const bool with_entropy = ctx->saved_data["with_entropy"].toBool();
    const auto dt = static_cast<torch::ScalarType>(ctx->saved_data["compute_dtype"].toInt());
    const size_t kept = saved.size() - 5;
    const auto holder = ctx->saved_data["packed"].toCapsule();
    const auto& packed = static_cast<const PackedHolder*>(holder.get())->packed;
    const auto w = weight.to(dt);
    auto g_lp = grads[0];
    auto g_ent = with_entropy ? grads[1] : torch::Tensor();
    const int64_t n = hidden.size(0);
    auto grad_hidden = torch::empty(hidden.sizes(), hidden.options());
    const bool exact = ctx->saved_data["exact"].toBool();
    // The two GEMMs on the AVX-512 tiles (bi::gemm_grad): w packed as [V, H] once for
    // this pass, each chunk's hidden rows per chunk; the chunks' sums continue in
    // grad_weight.
    const bool tiles = exact && n > 0 && bi::gemm_grad_available() && hidden.scalar_type() == torch::kFloat32;
    auto grad_weight = tiles ? torch::empty(weight.sizes(), weight.options().dtype(torch::kFloat32))
                             : torch::zeros(weight.sizes(), weight.options().dtype(torch::kFloat32));
    if (exact) {
      // The kept logits become their gradient in place (one pass per row), then two GEMMs.
      if (ctx->saved_data["consumed"].toBool())
        throw std::logic_error("token_logprobs: a second backward pass (retain_graph) is not supported");
      ctx->saved_data["consumed"] = true;
      auto gl = g_lp.defined() ? g_lp.to(torch::kFloat32).contiguous() : torch::Tensor();
      auto ge = g_ent.defined() ? g_ent.to(torch::kFloat32).contiguous() : torch::Tensor();
      auto t = targets.contiguous();
      auto ent = entropy.contiguous();
      const float inv_t = static_cast<float>(1.0 / temperature);
      const int64_t H = weight.size(1), V = weight.size(0);
      auto wc = w.contiguous(), hc = hidden.contiguous();
      const auto w_rows = tiles ? bi::pack_rows(wc.data_ptr<float>(), H, V, H) : bi::PackedWeight{};
      for (int64_t s = 0, c = 0; s < n; s += chunk, ++c) {
        const int64_t len = std::min(chunk, n - s);
        auto h = hidden.narrow(0, s, len);
        auto z = static_cast<size_t>(c) < kept ? saved[5 + c] : scaled_logits(h, w, temperature, packed);
        float* zp = z.data_ptr<float>();
        const float* lp = lse.data_ptr<float>() + s;
        const int64_t* tp = t.data_ptr<int64_t>() + s;
        const float* glp = gl.defined() ? gl.data_ptr<float>() + s : nullptr;
        const float* gep = ge.defined() ? ge.data_ptr<float>() + s : nullptr;
        const float* ep = ge.defined() ? ent.data_ptr<float>() + s : nullptr;
        at::parallel_for(0, len, 1, [&](int64_t r0, int64_t r1) {
          logit_grad_rows(zp, lp, tp, glp, gep, ep, inv_t, r0, r1, V);
        });
        auto gh = grad_hidden.narrow(0, s, len);
        if (tiles) {
          bi::gemm_grad(zp, V, false, w_rows, gh.data_ptr<float>(), H, len, false);
          const auto h_rows = bi::pack_rows(hc.data_ptr<float>() + s * H, H, len, H);
          bi::gemm_grad(zp, V, true, h_rows, grad_weight.data_ptr<float>(), H, V, s > 0);
          continue;
        }
        torch::mm_out(gh, z, w);
        grad_weight.addmm_(z.t(), h);
      }
      return {grad_hidden, grad_weight.to(weight.scalar_type()), torch::Tensor(), torch::Tensor(), torch::Tensor(),
              torch::Tensor(), torch::Tensor(), torch::Tensor(), torch::Tensor()};
    }
    for (int64_t s = 0, c = 0; s < n; s += chunk, ++c) {
      const int64_t len = std::min(chunk, n - s);
      auto h = hidden.narrow(0, s, len);
      auto logp = static_cast<size_t>(c) < kept
                      ? saved[5 + c]
                      : scaled_logits(h, w, temperature, packed).sub_(lse.narrow(0, s, len).unsqueeze(1));
      // d logprob / dz = onehot(target) - p;  d entropy / dz = -p (log p + H).
      auto column = [&](const torch::Tensor& v) {
        return v.defined() ? v.narrow(0, s, len).to(torch::kFloat32).unsqueeze(1) : v;
      };
      auto gz = detail::softmax_grad(logp, g_ent.defined() ? column(entropy) : torch::Tensor(), column(g_lp),
                                     column(g_ent));
      if (g_lp.defined())
        gz.scatter_add_(1, targets.narrow(0, s, len).unsqueeze(1), g_lp.narrow(0, s, len).to(torch::kFloat32).unsqueeze(1));
      if (temperature != 1.0) gz.div_(temperature);
      auto gz_c = gz.to(dt);
      grad_hidden.narrow(0, s, len).copy_(torch::matmul(gz_c, w));
      if (dt == torch::kFloat32) grad_weight.addmm_(gz.t(), h.to(torch::kFloat32));
      else grad_weight.add_(torch::matmul(gz_c.t(), h.to(dt)));
    }
    return {grad_hidden, grad_weight.to(weight.scalar_type()), torch::Tensor(), torch::Tensor(), torch::Tensor(),
            torch::Tensor(), torch::Tensor(), torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace

TokenLogprobs token_logprobs(const torch::Tensor& hidden, const torch::Tensor& weight, const torch::Tensor& targets,
                             double temperature, bool with_entropy, int64_t chunk_tokens, int64_t keep_logits,
                             const bi::PackedWeight* packed) {
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
  const bool gpu = hidden.is_cuda();
  const int64_t per_chunk = gpu ? std::min<int64_t>(int64_t(1) << 28, gpu_kept_logits(hidden.device())) : kLogitsPerChunk;
  const int64_t chunk = chunk_tokens > 0 ? chunk_tokens : std::max<int64_t>(1, per_chunk / weight.size(0));
  const int64_t keep = keep_logits >= 0 ? keep_logits : gpu ? gpu_kept_logits(hidden.device()) : kKeptLogits;
  const bool usable = packed && packed->defined() && packed->k == weight.size(1) && packed->n == weight.size(0);
  auto out = ChunkedLogprob::apply(hidden, weight, t, temperature, with_entropy, chunk,
                                   static_cast<int64_t>(compute_dtype(hidden, weight)), keep,
                                   usable ? *packed : bi::PackedWeight{});
  return {out[0], with_entropy ? out[1] : torch::Tensor()};
}

torch::Tensor scaled_log_softmax(const torch::Tensor& logits, double temperature) {
  auto z = logits.to(torch::kFloat32);
  if (temperature != 1.0) z = z / temperature;
  return torch::log_softmax(z, -1);
}

}  // namespace rl::nn
