// The policy / SFT losses, the critic's value loss, and their aggregation (slime §8.2, §8.4–8.6). The
// advantage estimators live in advantages.cpp; shared checks in loss_checks.hpp.
#include "trainer/losses.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

#include "trainer/loss_checks.hpp"

namespace rl::trainer {

using detail::check_finite;
using detail::check_same_shape;
using detail::fail;
using detail::masked_diff;

KlType parse_kl_type(const std::string& name) {
  if (name == "k1") return KlType::k1;
  if (name == "k2") return KlType::k2;
  if (name == "k3") return KlType::k3;
  if (name == "low_var_kl") return KlType::low_var_kl;
  throw std::invalid_argument("kl_loss_type: unknown '" + name + "'; expected one of k1, k2, k3, low_var_kl");
}

const char* kl_type_name(KlType t) {
  switch (t) {
    case KlType::k1: return "k1";
    case KlType::k2: return "k2";
    case KlType::k3: return "k3";
    case KlType::low_var_kl: return "low_var_kl";
  }
  return "?";
}

Aggregation parse_aggregation(const std::string& name) {
  if (name == "sample_mean") return Aggregation::sample_mean;
  if (name == "token_mean") return Aggregation::token_mean;
  throw std::invalid_argument("aggregation: unknown '" + name +
                              "'; expected sample_mean (per-sample token mean, slime's default) or token_mean "
                              "(slime's --calculate-per-token-loss)");
}

torch::Tensor approx_kl(const torch::Tensor& logp, const torch::Tensor& logp_base, KlType type,
                        const torch::Tensor& importance_ratio) {
  if (!logp.defined() || !logp_base.defined()) fail("approx_kl", "logp and logp_base must be defined");
  check_same_shape("approx_kl", "logp_base", logp_base, logp);
  const auto log_r = logp - logp_base;
  torch::Tensor kl;
  switch (type) {
    case KlType::k1: kl = log_r; break;
    case KlType::k2: kl = log_r.square() / 2; break;
    // Schulman's k3: unbiased and always >= 0 (e^x >= 1 + x).
    case KlType::k3:
    case KlType::low_var_kl: kl = torch::exp(-log_r) - 1 + log_r; break;
  }
  if (importance_ratio.defined()) {
    check_same_shape("approx_kl", "importance_ratio", importance_ratio, logp);
    kl = kl * importance_ratio;
  }
  // The clamp comes after the ratio, as in slime: it bounds the weighted estimate.
  if (type == KlType::low_var_kl) kl = kl.clamp(-10, 10);
  return kl;
}

torch::Tensor reduce(const torch::Tensor& x, const torch::Tensor& mask, Aggregation agg,
                     const torch::Tensor& sample_denoms, double divisor) {
  if (!x.defined() || !mask.defined()) fail("reduce", "x and mask must be defined");
  if (x.dim() != 2) fail("reduce", "x must be [B, T]; got " + detail::shape_str(x));
  check_same_shape("reduce", "mask", mask, x);
  check_finite("reduce", "divisor", divisor);
  if (divisor < 0) fail("reduce", "divisor must be >= 0 (0 = this micro-batch's own normaliser)");
  const auto m = mask.to(x.scalar_type());
  const auto xm = x * m;
  if (agg == Aggregation::sample_mean) {
    torch::Tensor denom = m.sum(1);
    if (sample_denoms.defined()) {
      if (sample_denoms.dim() != 1 || sample_denoms.size(0) != x.size(0))
        fail("reduce", "sample_denoms must be [B] = [" + std::to_string(x.size(0)) + "]; got " +
                           detail::shape_str(sample_denoms));
      denom = sample_denoms.to(x.scalar_type());
    }
    const double div = divisor > 0 ? divisor : std::max<double>(static_cast<double>(x.size(0)), 1.0);
    return (xm.sum(1) / denom.clamp_min(1)).sum() / div;
  }
  if (divisor > 0) return xm.sum() / divisor;
  // slime's num_tokens: Σ_i max(Σ_t m_it, 1); the outer clamp covers an empty batch.
  return xm.sum() / m.sum(1).clamp_min(1).sum().clamp_min(1);
}

namespace {

void validate(const LossOptions& o, const LossInputs& in) {
  const char* fn = "policy_loss";
  check_finite(fn, "eps_clip", o.eps_clip);
  if (o.eps_clip < 0) fail(fn, "eps_clip must be >= 0 (the ratio is clipped to [1 - eps_clip, 1 + eps_clip_high])");
  if (o.eps_clip_high) {
    check_finite(fn, "eps_clip_high", *o.eps_clip_high);
    if (*o.eps_clip_high < 0) fail(fn, "eps_clip_high must be >= 0 (unset = eps_clip)");
  }
  if (o.eps_clip_c) {
    check_finite(fn, "eps_clip_c", *o.eps_clip_c);
    if (*o.eps_clip_c <= 1.0)
      fail(fn, "eps_clip_c (dual clip) must be > 1, got " + std::to_string(*o.eps_clip_c) +
                   "; it caps the loss of negative advantages at eps_clip_c·|A| (3 is usual), unset disables it");
  }
  check_finite(fn, "entropy_coef", o.entropy_coef);
  check_finite(fn, "kl_loss_coef", o.kl_loss_coef);
  check_finite(fn, "tis_clip_low", o.tis_clip_low);
  check_finite(fn, "tis_clip", o.tis_clip);
  check_finite(fn, "divisor", in.divisor);
  if (in.divisor < 0) fail(fn, "divisor must be >= 0 (0 = this micro-batch's own normaliser)");
  if (o.use_tis) {
    if (o.tis_mode != "clamp" && o.tis_mode != "icepop")
      fail(fn, "tis_mode: unknown '" + o.tis_mode + "'; expected clamp (vanilla TIS) or icepop");
    if (o.tis_clip_low > o.tis_clip)
      fail(fn, "tis_clip_low (" + std::to_string(o.tis_clip_low) + ") must be <= tis_clip (" +
                   std::to_string(o.tis_clip) + ")");
  }

  if (!in.logp.defined()) fail(fn, "logp is missing; pass the current policy's per-token log-probs [B, T]");
  if (in.logp.dim() != 2 || !in.logp.is_floating_point())
    fail(fn, "logp must be a floating [B, T] tensor; got " + detail::shape_str(in.logp));
  if (!in.mask.defined()) fail(fn, "mask is missing; pass the loss mask [B, T] (0 on padding)");
  check_same_shape(fn, "mask", in.mask, in.logp);
  check_same_shape(fn, "old_logp", in.old_logp, in.logp);
  check_same_shape(fn, "entropy", in.entropy, in.logp);
  check_same_shape(fn, "ref_logp", in.ref_logp, in.logp);
  check_same_shape(fn, "rollout_logp", in.rollout_logp, in.logp);
  if (in.sample_denoms.defined() &&
      (in.sample_denoms.dim() != 1 || in.sample_denoms.size(0) != in.logp.size(0)))
    fail(fn, "sample_denoms must be [B] = [" + std::to_string(in.logp.size(0)) + "]; got " +
                 detail::shape_str(in.sample_denoms));
  if (o.sft) return;  // SFT needs only logp and mask
  if (!in.advantages.defined())
    fail(fn, "advantages is missing; compute them with compute_advantages (or set sft = true for the SFT loss)");
  check_same_shape(fn, "advantages", in.advantages, in.logp);
  if (o.entropy_coef != 0 && !in.entropy.defined())
    fail(fn, "entropy is missing while entropy_coef != 0; request it from sequence_logprobs(with_entropy=true)");
  if (o.use_kl_loss && !in.ref_logp.defined())
    fail(fn, "ref_logp is missing while use_kl_loss is set; pass the reference model's log-probs [B, T]");
  if (o.use_tis && !in.rollout_logp.defined())
    fail(fn, "rollout_logp is missing while use_tis is set; pass the engine's log-probs of the sampled tokens");
}

}  // namespace

LossResult policy_loss(const LossOptions& o, const LossInputs& in) {
  validate(o, in);
  const auto& logp = in.logp;
  const auto mask = in.mask.to(logp.scalar_type());
  const auto red = [&](const torch::Tensor& x) {
    return reduce(x, mask, o.aggregation, in.sample_denoms, in.divisor);
  };
  LossResult r;
  if (o.sft) {
    r.loss = -red(logp);
    r.metrics["loss"] = r.loss.detach();
    return r;
  }

  // Targets and references are constants in the logp's dtype (rewards may come in as float64).
  const auto dt = logp.scalar_type();
  const auto old_logp = in.old_logp.defined() ? in.old_logp.detach().to(dt) : logp.detach();
  const auto adv = in.advantages.detach().to(dt);
  const double low = 1.0 - o.eps_clip, high = 1.0 + o.eps_clip_high.value_or(o.eps_clip);

  // ppo_kl = old − new per token; GSPO uses each sequence's masked mean of it.
  torch::Tensor ppo_kl = masked_diff(old_logp, logp, mask);
  if (o.estimator == Estimator::gspo) {
    const auto seq = (ppo_kl * mask).sum(1, /*keepdim=*/true) / mask.sum(1, true).clamp_min(1);
    ppo_kl = seq.expand_as(logp);
  }
  const auto ratio = torch::exp(-ppo_kl);

  torch::Tensor pg, clipfrac;
  if (o.estimator == Estimator::cispo) {
    // CISPO: the clipped ratio is a stop-gradient weight on the REINFORCE term.
    const auto clipped = ratio.detach().clamp(low, high);
    pg = -clipped * adv * logp;
    clipfrac = clipped.ne(ratio.detach()).to(logp.scalar_type());
  } else {
    const auto l1 = -ratio * adv;
    const auto l2 = -ratio.clamp(low, high) * adv;
    pg = torch::maximum(l1, l2);
    clipfrac = l2.gt(l1).to(logp.scalar_type()).detach();
    if (o.eps_clip_c) {
      // Dual clip: a negative advantage's loss is capped at −eps_clip_c·A, so a
      // huge ratio on a bad token cannot blow the update up.
      const auto capped = torch::minimum(-*o.eps_clip_c * adv, pg);
      pg = torch::where(adv.lt(0), capped, pg);
    }
  }

  if (o.use_tis) {
    const auto rollout = in.rollout_logp.detach().to(dt);
    const auto tis = torch::exp(masked_diff(old_logp, rollout, mask));
    const auto w = o.tis_mode == "icepop"
                       ? torch::where(tis.ge(o.tis_clip_low) & tis.le(o.tis_clip), tis, torch::zeros_like(tis))
                       : tis.clamp(o.tis_clip_low, o.tis_clip);
    pg = pg * w;
    r.metrics["tis"] = red(tis).detach();
    r.metrics["tis_clipfrac"] = red(w.ne(tis).to(logp.scalar_type())).detach();
    r.metrics["tis_abs"] = red((tis - 1).abs()).detach();
    r.metrics["ois"] = red(ratio.detach()).detach();
    // The applied weights' first and second moments (they sum over micro-batches); the
    // trainer makes the step's effective sample size of them (train/tis_ess).
    const auto wd = w.detach();
    r.metrics["tis_weight"] = red(wd).detach();
    r.metrics["tis_weight_sq"] = red(wd * wd).detach();
  }

  const auto pg_loss = red(pg);
  torch::Tensor loss = pg_loss;
  r.metrics["pg_loss"] = pg_loss.detach();
  r.metrics["pg_clipfrac"] = red(clipfrac).detach();
  r.clipped = clipfrac.detach();
  r.metrics["ppo_kl"] = red(ppo_kl.detach()).detach();

  if (in.entropy.defined()) {
    const auto entropy_loss = red(in.entropy.to(dt));
    if (o.entropy_coef != 0) loss = loss - o.entropy_coef * entropy_loss;
    r.metrics["entropy_loss"] = entropy_loss.detach();
  }
  if (o.use_kl_loss) {
    // The unbiased estimator weights the KL by the (differentiable) ratio π/π_old.
    // Outside the mask logp is replaced by ref_logp (log-ratio 0), so padding stays finite.
    const auto ref = in.ref_logp.detach().to(dt);
    const auto ir = o.use_unbiased_kl ? torch::exp(masked_diff(logp, old_logp, mask)) : torch::Tensor();
    const auto kl_loss = red(approx_kl(torch::where(mask.ne(0), logp, ref), ref, o.kl_loss_type, ir));
    loss = loss + o.kl_loss_coef * kl_loss;
    r.metrics["kl_loss"] = kl_loss.detach();
  }
  if (in.rollout_logp.defined())  // the behaviour (old) log-probs against the engine's, as slime reports it
    r.metrics["train_rollout_logprob_abs_diff"] =
        red(masked_diff(old_logp, in.rollout_logp.detach().to(dt), mask).abs()).detach();

  r.loss = loss;
  r.metrics["loss"] = loss.detach();
  return r;
}

LossResult value_loss(double value_clip, Aggregation agg, const ValueLossInputs& in) {
  const char* fn = "value_loss";
  if (!in.values.defined() || in.values.dim() != 2) fail(fn, "values must be the critic's [B, T]; got " + detail::shape_str(in.values));
  if (!in.old_values.defined()) fail(fn, "old_values is missing; pass the critic's values before the update (V_old)");
  if (!in.returns.defined()) fail(fn, "returns is missing; pass the GAE returns (compute_advantages' second)");
  if (!in.mask.defined()) fail(fn, "mask is missing");
  check_same_shape(fn, "old_values", in.old_values, in.values);
  check_same_shape(fn, "returns", in.returns, in.values);
  check_same_shape(fn, "mask", in.mask, in.values);
  check_finite(fn, "value_clip", value_clip);
  if (value_clip < 0) fail(fn, "value_clip must be >= 0, got " + std::to_string(value_clip));
  const auto dt = in.values.scalar_type();
  const auto mask = in.mask.to(dt);
  const auto red = [&](const torch::Tensor& x) { return reduce(x, mask, agg, in.sample_denoms, in.divisor); };
  // Differences through masked_diff: whatever sits on padding stays out of the graph.
  const auto old = in.old_values.detach().to(dt), ret = in.returns.detach().to(dt);
  const auto delta = masked_diff(in.values, old, mask);        // V − V_old
  const auto err = masked_diff(in.values, ret, mask);          // V − R
  const auto err_clipped = delta.clamp(-value_clip, value_clip) + masked_diff(old, ret, mask);  // V_clip − R
  const auto per_token = torch::maximum(err.square(), err_clipped.square());
  LossResult r;
  r.loss = red(per_token);
  r.metrics["value_loss"] = r.loss.detach();
  r.metrics["value_clipfrac"] = red(delta.detach().abs().gt(value_clip).to(dt)).detach();
  return r;
}

}  // namespace rl::trainer
