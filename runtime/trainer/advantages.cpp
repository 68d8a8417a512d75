// Advantage estimators and masked whitening (slime §8.3). Advantages are targets,
// not part of the graph: everything here runs without gradient.
#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

#include "trainer/loss_checks.hpp"
#include "trainer/losses.hpp"

namespace rl::trainer {

using detail::check_finite;
using detail::check_same_shape;
using detail::fail;

Estimator parse_estimator(const std::string& name) {
  if (name == "grpo") return Estimator::grpo;
  if (name == "gspo") return Estimator::gspo;
  if (name == "cispo") return Estimator::cispo;
  if (name == "reinforce_plus_plus") return Estimator::reinforce_plus_plus;
  if (name == "reinforce_plus_plus_baseline") return Estimator::reinforce_plus_plus_baseline;
  if (name == "ppo") return Estimator::ppo;
  throw std::invalid_argument("advantage_estimator: unknown '" + name +
                              "'; expected one of grpo, gspo, cispo, reinforce_plus_plus, "
                              "reinforce_plus_plus_baseline, ppo");
}

const char* estimator_name(Estimator e) {
  switch (e) {
    case Estimator::grpo: return "grpo";
    case Estimator::gspo: return "gspo";
    case Estimator::cispo: return "cispo";
    case Estimator::reinforce_plus_plus: return "reinforce_plus_plus";
    case Estimator::reinforce_plus_plus_baseline: return "reinforce_plus_plus_baseline";
    case Estimator::ppo: return "ppo";
  }
  return "?";
}

torch::Tensor whiten(const torch::Tensor& a, const torch::Tensor& mask) {
  torch::NoGradGuard no_grad;
  if (!a.defined() || !mask.defined()) fail("whiten", "a and mask must be defined");
  check_same_shape("whiten", "mask", mask, a);
  // Statistics in float64: E[a²] − E[a]² cancels badly in float32 when |mean| >> std.
  const auto a64 = a.to(torch::kFloat64), m64 = mask.to(torch::kFloat64);
  const double n = m64.sum().item<double>();
  if (!(n > 1))
    fail("whiten", "needs more than one token inside the mask (mask sums to " + std::to_string(n) +
                       "); the unbiased variance is undefined — check the loss masks or disable normalize");
  const auto mean = (a64 * m64).sum() / n;
  const auto var = ((a64.square() * m64).sum() / n - mean.square()) * (n / (n - 1));
  const auto out = (a64 - mean) * torch::rsqrt(var + 1e-8);
  return torch::where(mask.ne(0), out, torch::zeros({}, out.options())).to(a.scalar_type());
}

namespace {

// G_t = r_t + γ·G_{t+1} along each row. A sequential scan in float64 on the CPU:
// a closed form through γ^t underflows for long responses, and [B, T] is small.
torch::Tensor discounted_returns(const torch::Tensor& rewards, double gamma) {
  auto r = rewards.to(torch::kCPU, torch::kFloat64).contiguous();
  auto g = torch::empty_like(r);
  const int64_t B = r.size(0), T = r.size(1);
  const double* rp = r.data_ptr<double>();
  double* gp = g.data_ptr<double>();
  for (int64_t b = 0; b < B; ++b) {
    double running = 0;
    for (int64_t t = T - 1; t >= 0; --t) {
      running = rp[b * T + t] + gamma * running;
      gp[b * T + t] = running;
    }
  }
  return g.to(rewards.device(), rewards.scalar_type());
}

// Index of the last position inside the mask per row; -1 for a fully masked row.
torch::Tensor last_masked_index(const torch::Tensor& mask) {
  const int64_t T = mask.size(1);
  const auto pos = torch::arange(T, mask.options().dtype(torch::kInt64)).expand_as(mask);
  return torch::where(mask.ne(0), pos, torch::full_like(pos, -1)).amax(1);
}

}  // namespace

std::pair<torch::Tensor, torch::Tensor> gae(const torch::Tensor& token_rewards, const torch::Tensor& values,
                                            double gamma, double lambd) {
  torch::NoGradGuard no_grad;
  const char* fn = "gae";
  if (!token_rewards.defined() || token_rewards.dim() != 2)
    fail(fn, "token_rewards must be [B, T]; got " + detail::shape_str(token_rewards));
  if (!values.defined()) fail(fn, "values is missing; pass the critic's values [B, T]");
  check_same_shape(fn, "values", values, token_rewards);
  check_finite(fn, "gamma", gamma);
  check_finite(fn, "lambd", lambd);
  const auto r = token_rewards.to(torch::kCPU, torch::kFloat64).contiguous();
  const auto v = values.to(torch::kCPU, torch::kFloat64).contiguous();
  auto adv = torch::empty_like(r);
  const int64_t B = r.size(0), T = r.size(1);
  const double *rp = r.data_ptr<double>(), *vp = v.data_ptr<double>();
  double* ap = adv.data_ptr<double>();
  for (int64_t b = 0; b < B; ++b) {
    double running = 0;
    for (int64_t t = T - 1; t >= 0; --t) {
      const double next = t + 1 < T ? vp[b * T + t + 1] : 0.0;
      running = rp[b * T + t] + gamma * next - vp[b * T + t] + gamma * lambd * running;
      ap[b * T + t] = running;
    }
  }
  auto ret = adv + v;
  return {adv.to(token_rewards.device(), token_rewards.scalar_type()),
          ret.to(token_rewards.device(), token_rewards.scalar_type())};
}

namespace {
// ppo: token rewards (−kl_coef·kl, the sequence reward on each response's last token)
// through GAE over the response; both zero past it.
std::pair<torch::Tensor, torch::Tensor> ppo_advantages(const AdvantageInputs& in, const torch::Tensor& reward,
                                                       const torch::Tensor& kl, torch::ScalarType dtype) {
  const char* fn = "compute_advantages";
  const int64_t B = in.mask.size(0), T = in.mask.size(1);
  if (!in.values.defined()) fail(fn, "ppo needs the critic's values [B, T] (values)");
  check_same_shape(fn, "values", in.values, in.mask);
  if (!in.response_lengths.defined() || in.response_lengths.dim() != 1 || in.response_lengths.size(0) != B)
    fail(fn, "ppo needs response_lengths [B] (int64); got " + detail::shape_str(in.response_lengths));
  const auto len = in.response_lengths.to(in.mask.device(), torch::kInt64);
  if (len.lt(1).any().item<bool>() || len.gt(T).any().item<bool>())
    fail(fn, "response_lengths must be in [1, T] = [1, " + std::to_string(T) + "]");
  const auto pos = torch::arange(T, len.options()).unsqueeze(0);
  const auto resp = pos.lt(len.unsqueeze(1)).to(dtype);                    // [B, T] 1 over the response
  const auto last = pos.eq((len - 1).unsqueeze(1)).to(dtype);              // its last token
  const auto token_rewards = (-in.kl_coef * kl + last * reward) * resp;
  return gae(token_rewards, in.values.to(dtype) * resp, in.gamma, in.lambd);
}
}  // namespace

std::pair<torch::Tensor, torch::Tensor> compute_advantages(Estimator est, const AdvantageInputs& in) {
  torch::NoGradGuard no_grad;
  const char* fn = "compute_advantages";
  if (!in.mask.defined() || in.mask.dim() != 2) fail(fn, "mask must be the loss mask [B, T]; got " + detail::shape_str(in.mask));
  const int64_t B = in.mask.size(0);
  if (!in.rewards.defined()) fail(fn, "rewards is missing; pass one scalar reward per sample, [B]");
  if (in.rewards.dim() != 1 || in.rewards.size(0) != B)
    fail(fn, "rewards must be [B] = [" + std::to_string(B) + "] (one per sample); got " +
                 detail::shape_str(in.rewards));
  check_same_shape(fn, "kl", in.kl, in.mask);
  check_finite(fn, "kl_coef", in.kl_coef);
  check_finite(fn, "gamma", in.gamma);
  check_finite(fn, "lambd", in.lambd);
  const bool reinforce = est == Estimator::reinforce_plus_plus || est == Estimator::reinforce_plus_plus_baseline;
  if ((reinforce || est == Estimator::ppo) && in.kl_coef != 0 && !in.kl.defined())
    fail(fn, "kl is missing while kl_coef != 0; pass approx_kl(logp, ref_logp, type) per token, or set kl_coef = 0");

  const auto dtype = in.rewards.is_floating_point() ? in.rewards.scalar_type() : torch::kFloat32;
  const auto mask = in.mask.to(dtype);
  const auto inside = mask.ne(0);
  const auto reward = in.rewards.to(dtype).unsqueeze(1);  // [B, 1]
  const auto zero = torch::zeros({}, mask.options());
  // kl enters the reinforce++ variants and ppo only (grpo/gspo/cispo ignore it, as slime).
  const auto kl = in.kl.defined() && in.kl_coef != 0 ? in.kl.to(dtype) : torch::zeros_like(mask);

  torch::Tensor returns;
  switch (est) {
    case Estimator::grpo:
    case Estimator::gspo:
    case Estimator::cispo:
      returns = torch::where(inside, reward.expand_as(mask), zero);
      break;
    case Estimator::reinforce_plus_plus: {
      auto token_rewards = -in.kl_coef * kl * mask;
      // The sequence reward lands on the last token inside the mask; a fully masked
      // row has none and keeps only its (zero) KL terms.
      const auto last = last_masked_index(in.mask);
      const auto has_any = last.ge(0);
      const auto onehot = torch::zeros_like(mask).scatter(1, last.clamp_min(0).unsqueeze(1), 1.0) *
                          has_any.unsqueeze(1).to(dtype);
      token_rewards = token_rewards + onehot * reward;
      returns = torch::where(inside, discounted_returns(token_rewards, in.gamma), zero);
      break;
    }
    case Estimator::reinforce_plus_plus_baseline:
      returns = torch::where(inside, reward - in.kl_coef * kl, zero);
      break;
    case Estimator::ppo: {
      auto [adv, ret] = ppo_advantages(in, reward, kl, dtype);
      adv = torch::where(inside, adv, zero);
      ret = torch::where(inside, ret, zero);
      return {in.normalize ? whiten(adv, mask) : adv, ret};
    }
  }
  auto advantages = in.normalize ? whiten(returns, mask) : returns.clone();
  return {advantages, returns};
}

}  // namespace rl::trainer
