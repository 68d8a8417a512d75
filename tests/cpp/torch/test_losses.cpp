// runtime/trainer losses: hand-computed values, edge cases (fully masked rows,
// garbage in padding, gradient accumulation through the divisor) and the errors
// bad inputs raise. Parity with a PyTorch reference is test_loss_parity.cpp.
#include <torch/torch.h>

#define CATCH_CONFIG_PREFIX_ALL
#include <catch2/catch.hpp>

#include <cmath>
#include <limits>
#include <string>

#include "trainer/losses.hpp"

using namespace rl::trainer;

namespace {

// Runs f and returns the std::invalid_argument message ("" when nothing was thrown).
template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "";
}

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

LossInputs inputs(torch::Tensor logp, torch::Tensor old_logp, torch::Tensor advantages, torch::Tensor mask) {
  LossInputs in;
  in.logp = std::move(logp), in.old_logp = std::move(old_logp);
  in.advantages = std::move(advantages), in.mask = std::move(mask);
  return in;
}

AdvantageInputs advantage_inputs(torch::Tensor rewards, torch::Tensor mask) {
  AdvantageInputs in;
  in.rewards = std::move(rewards), in.mask = std::move(mask);
  return in;
}

LossInputs batch(uint64_t seed, int64_t B = 3, int64_t T = 6) {
  torch::manual_seed(seed);
  LossInputs in;
  in.mask = (torch::arange(T).unsqueeze(0) < torch::tensor({T, T - 2, int64_t(2)}).narrow(0, 0, B).unsqueeze(1)).to(torch::kFloat32);
  in.logp = (-(torch::rand({B, T}) * 2 + 0.05)).requires_grad_(true);
  in.old_logp = in.logp.detach() + torch::randn({B, T}) * 0.2;
  in.advantages = torch::randn({B, 1}).expand({B, T}).contiguous();
  in.entropy = (torch::rand({B, T}) + 0.1).requires_grad_(true);
  in.ref_logp = in.logp.detach() + torch::randn({B, T}) * 0.3;
  in.rollout_logp = in.old_logp + torch::randn({B, T}) * 0.3;
  return in;
}

double item(const torch::Tensor& t) { return t.item<double>(); }

}  // namespace

CATCH_TEST_CASE("approx_kl: the four estimators on one log-ratio", "[losses]") {
  auto logp = torch::tensor({-1.0f}), base = torch::tensor({-1.5f});  // log_r = 0.5
  CATCH_CHECK(item(approx_kl(logp, base, KlType::k1)) == Approx(0.5));
  CATCH_CHECK(item(approx_kl(logp, base, KlType::k2)) == Approx(0.125));
  CATCH_CHECK(item(approx_kl(logp, base, KlType::k3)) == Approx(std::exp(-0.5) - 1 + 0.5));
  CATCH_CHECK(item(approx_kl(logp, base, KlType::k3, torch::tensor({2.0f}))) == Approx(2 * (std::exp(-0.5) - 0.5)));
  // low_var_kl is k3 clamped to [-10, 10]: log_r = -5 gives e^5 - 6 ≈ 142 → 10.
  CATCH_CHECK(item(approx_kl(torch::tensor({-6.0f}), torch::tensor({-1.0f}), KlType::low_var_kl)) == 10.0);
  CATCH_CHECK(item(approx_kl(torch::tensor({-6.0f}), torch::tensor({-1.0f}), KlType::k3)) > 100.0);
  CATCH_CHECK(contains(error_of([] { parse_kl_type("k4"); }), "k1, k2, k3, low_var_kl"));
  CATCH_CHECK(LossOptions{}.kl_loss_type == KlType::k1);  // slime's --kl-loss-type default
}

CATCH_TEST_CASE("PPO clip, dual clip and CISPO on hand-computed tokens", "[losses]") {
  // One sequence, four tokens: ratios 1.5, 1.5, 0.5, 1.1 with A = +1, −1, −1, +2.
  LossInputs in;
  in.logp = torch::log(torch::tensor({{1.5f, 1.5f, 0.5f, 1.1f}})).requires_grad_(true);
  in.old_logp = torch::zeros({1, 4});
  in.advantages = torch::tensor({{1.0f, -1.0f, -1.0f, 2.0f}});
  in.mask = torch::ones({1, 4});
  LossOptions o;  // eps_clip 0.2, eps_clip_high = eps_clip
  auto r = policy_loss(o, in);
  // max(−r·A, −clip(r)·A): −1.2, 1.5, 0.8, −2.2 → mean −0.275; clipped: tokens 0 and 2.
  CATCH_CHECK(item(r.loss) == Approx(-0.275));
  CATCH_CHECK(item(r.metrics.at("pg_clipfrac")) == Approx(0.5));
  CATCH_CHECK(item(r.metrics.at("ppo_kl")) == Approx(-(2 * std::log(1.5) + std::log(0.5) + std::log(1.1)) / 4));
  o.eps_clip_c = 1.4;  // caps the A < 0 token with loss 1.5 at 1.4
  CATCH_CHECK(item(policy_loss(o, in).loss) == Approx((-1.2 + 1.4 + 0.8 - 2.2) / 4));
  o.eps_clip_c.reset();
  o.eps_clip_high = 0.6;  // asymmetric: token 0 no longer clipped
  CATCH_CHECK(item(policy_loss(o, in).loss) == Approx((-1.5 + 1.5 + 0.8 - 2.2) / 4));
  // CISPO: −sg(clip(r))·A·logp; weights 1.2, 1.2, 0.8, 1.1.
  LossOptions c;
  c.estimator = Estimator::cispo;
  auto rc = policy_loss(c, in);
  const double expect = -(1.2 * 1 * std::log(1.5) + 1.2 * -1 * std::log(1.5) + 0.8 * -1 * std::log(0.5) +
                          1.1 * 2 * std::log(1.1)) / 4;
  CATCH_CHECK(item(rc.loss) == Approx(expect));
  rc.loss.backward();  // the gradient is the stop-gradient weight times −A / 4
  auto g = in.logp.grad();
  CATCH_CHECK(item(g[0][2]) == Approx(0.8 * 1 / 4.0));
  CATCH_CHECK(item(g[0][3]) == Approx(-1.1 * 2 / 4.0));
}

CATCH_TEST_CASE("eps_clip_high defaults to eps_clip", "[losses]") {
  auto in = batch(1);
  LossOptions a, b;
  b.eps_clip_high = a.eps_clip;
  CATCH_CHECK(item(policy_loss(a, in).loss) == item(policy_loss(b, in).loss));
}

CATCH_TEST_CASE("GSPO equals token-level PPO when every token of a sequence shares the ratio", "[losses]") {
  auto in = batch(2);
  // old − new = a per-sequence constant on the masked tokens.
  in.old_logp = in.logp.detach() + torch::tensor({0.3f, -0.1f, 0.05f}).unsqueeze(1);
  LossOptions ppo, gspo;
  gspo.estimator = Estimator::gspo;
  for (auto agg : {Aggregation::sample_mean, Aggregation::token_mean}) {
    ppo.aggregation = gspo.aggregation = agg;
    auto a = policy_loss(ppo, in), b = policy_loss(gspo, in);
    CATCH_CHECK(item(a.loss) == Approx(item(b.loss)).epsilon(1e-6));
    for (auto& [k, v] : a.metrics) CATCH_CHECK(item(v) == Approx(item(b.metrics.at(k))).epsilon(1e-6).margin(1e-7));
  }
}

CATCH_TEST_CASE("a fully masked sequence contributes nothing but still counts", "[losses]") {
  auto in = batch(3);
  in.mask[2].zero_();
  LossOptions o;
  o.entropy_coef = 0.01;
  auto r = policy_loss(o, in);
  CATCH_CHECK(std::isfinite(item(r.loss)));
  r.loss.backward();
  CATCH_CHECK(item(in.logp.grad()[2].abs().sum()) == 0.0);
  CATCH_CHECK(item(in.entropy.grad()[2].abs().sum()) == 0.0);
  // sample_mean divides by B = 3 (the empty sample included, as slime's global batch size).
  auto x = torch::ones({3, 6});
  CATCH_CHECK(item(reduce(x, in.mask, Aggregation::sample_mean)) == Approx(2.0 / 3));
  // token_mean: slime's num_tokens counts an empty sample as one token: 6 + 4 + 1.
  CATCH_CHECK(item(reduce(x, in.mask, Aggregation::token_mean)) == Approx(10.0 / 11));
  // All rows empty: zero, not NaN.
  CATCH_CHECK(item(reduce(x, torch::zeros({3, 6}), Aggregation::token_mean)) == 0.0);
  CATCH_CHECK(item(reduce(x, torch::zeros({3, 6}), Aggregation::sample_mean)) == 0.0);
}

CATCH_TEST_CASE("garbage log-probs in padding give neither inf nor NaN", "[losses]") {
  auto clean = batch(4);
  auto dirty = batch(4);
  auto pad = dirty.mask.eq(0);
  {
    torch::NoGradGuard g;
    dirty.logp.masked_fill_(pad, -1e4);  // exp(old − new) would overflow to inf
    dirty.old_logp = dirty.old_logp.masked_fill(pad, 0);
    dirty.rollout_logp = dirty.rollout_logp.masked_fill(pad, 80);
    dirty.ref_logp = dirty.ref_logp.masked_fill(pad, 1e4);
  }
  LossOptions o;
  o.use_kl_loss = true, o.kl_loss_coef = 0.1, o.kl_loss_type = KlType::k3, o.use_unbiased_kl = true;
  o.use_tis = true, o.entropy_coef = 0.01;
  for (auto est : {Estimator::grpo, Estimator::gspo, Estimator::cispo}) {
    o.estimator = est;
    auto a = policy_loss(o, clean), b = policy_loss(o, dirty);
    CATCH_CHECK(item(a.loss) == Approx(item(b.loss)));
    for (auto& [k, v] : a.metrics) CATCH_CHECK(item(v) == Approx(item(b.metrics.at(k))));
    b.loss.backward();
    CATCH_CHECK(torch::isfinite(dirty.logp.grad()).all().item<bool>());
    CATCH_CHECK(item(dirty.logp.grad().masked_select(pad).abs().sum()) == 0.0);
    dirty.logp.mutable_grad() = torch::Tensor();
  }
}

CATCH_TEST_CASE("micro-batch losses with the step's divisor sum to the full batch's", "[losses]") {
  torch::manual_seed(5);
  const int64_t B = 6, T = 7;
  auto logp = (-(torch::rand({B, T}) * 2 + 0.05)).requires_grad_(true);
  auto mask = (torch::arange(T).unsqueeze(0) < torch::tensor({7, 3, 5, 1, 7, 2}).unsqueeze(1)).to(torch::kFloat32);
  mask[3].zero_();
  auto old = logp.detach() + torch::randn({B, T}) * 0.2;
  auto adv = torch::randn({B, T});
  for (auto agg : {Aggregation::sample_mean, Aggregation::token_mean}) {
    LossOptions o;
    o.aggregation = agg;
    o.use_tis = false;
    auto full = inputs(logp, old, adv, mask);
    auto whole = policy_loss(o, full);
    auto g_whole = torch::autograd::grad({whole.loss}, {logp})[0];
    // The step's normaliser: its sample count, or Σ_i max(Σ_t m_it, 1) tokens.
    const double divisor = agg == Aggregation::sample_mean ? double(B) : item(mask.sum(1).clamp_min(1).sum());
    torch::Tensor sum_loss = torch::zeros({}), g_sum = torch::zeros_like(logp);
    std::map<std::string, double> metric_sum;
    for (int64_t start : {0, 2, 5}) {
      const int64_t len = start == 0 ? 2 : start == 2 ? 3 : 1;
      auto mb = inputs(logp.narrow(0, start, len), old.narrow(0, start, len), adv.narrow(0, start, len),
                       mask.narrow(0, start, len));
      mb.divisor = divisor;
      auto r = policy_loss(o, mb);
      sum_loss = sum_loss + r.loss.detach();
      g_sum += torch::autograd::grad({r.loss}, {logp})[0];
      for (auto& [k, v] : r.metrics) metric_sum[k] += item(v);
    }
    CATCH_CHECK(item(sum_loss) == Approx(item(whole.loss)).margin(1e-6));
    CATCH_CHECK(item((g_sum - g_whole).abs().max()) < 1e-6);
    for (auto& [k, v] : whole.metrics) CATCH_CHECK(metric_sum[k] == Approx(item(v)).margin(1e-6));
  }
}

CATCH_TEST_CASE("advantages: estimators on hand-computed rows", "[losses]") {
  auto mask = torch::tensor({{1.0f, 1.0f, 0.0f, 1.0f, 0.0f}, {1.0f, 1.0f, 1.0f, 0.0f, 0.0f}});
  auto in = advantage_inputs(torch::tensor({1.0f, -2.0f}), mask);
  auto [adv, ret] = compute_advantages(Estimator::grpo, in);
  CATCH_CHECK(torch::equal(ret, torch::tensor({{1.0f, 1.0f, 0.0f, 1.0f, 0.0f}, {-2.0f, -2.0f, -2.0f, 0.0f, 0.0f}})));
  CATCH_CHECK(torch::equal(adv, ret));
  // reinforce++: reward on the last masked token, discounted back with γ = 0.5
  // (the hole at t = 2 still discounts), minus kl_coef·kl on every masked token.
  in.gamma = 0.5, in.normalize = true, in.kl_coef = 0.1, in.kl = torch::ones({2, 5});
  std::tie(adv, ret) = compute_advantages(Estimator::reinforce_plus_plus, in);
  auto r0 = ret[0];
  CATCH_CHECK(item(r0[3]) == Approx(0.9));
  CATCH_CHECK(item(r0[2]) == 0.0);  // outside the mask
  CATCH_CHECK(item(r0[1]) == Approx(-0.1 + 0.5 * 0.5 * 0.9));
  CATCH_CHECK(item(r0[0]) == Approx(-0.1 + 0.5 * (-0.1 + 0.25 * 0.9)));
  CATCH_CHECK(item(ret[1][2]) == Approx(-2.1));
  // Whitened advantages: zero mean and unit (unbiased) variance over the mask.
  auto sel = adv.masked_select(mask.ne(0)).to(torch::kFloat64);
  CATCH_CHECK(item(sel.mean()) == Approx(0.0).margin(1e-6));
  CATCH_CHECK(item(sel.var()) == Approx(1.0).epsilon(1e-4));
  std::tie(adv, ret) = compute_advantages(Estimator::reinforce_plus_plus_baseline, in);
  CATCH_CHECK(item(ret[1][0]) == Approx(-2.1));
  // A fully masked row gets nothing.
  in.mask = torch::tensor({{1.0f, 1.0f, 1.0f, 0.0f, 0.0f}, {0.0f, 0.0f, 0.0f, 0.0f, 0.0f}});
  std::tie(adv, ret) = compute_advantages(Estimator::reinforce_plus_plus, in);
  CATCH_CHECK(item(ret[1].abs().sum()) == 0.0);
  CATCH_CHECK(item(adv[1].abs().sum()) == 0.0);
}

CATCH_TEST_CASE("advantages: bad inputs name the field", "[losses]") {
  auto mask = torch::ones({2, 3});
  auto in = advantage_inputs(torch::tensor({1.0f, 0.0f}), mask);
  in.kl_coef = 0.1;
  in.normalize = true;
  CATCH_CHECK(contains(error_of([&] { compute_advantages(Estimator::reinforce_plus_plus, in); }), "kl is missing"));
  in.rewards = torch::ones({3});
  CATCH_CHECK(contains(error_of([&] { compute_advantages(Estimator::grpo, in); }), "rewards must be [B] = [2]"));
  in.rewards = torch::ones({2});
  in.kl = torch::ones({2, 4});
  CATCH_CHECK(contains(error_of([&] { compute_advantages(Estimator::grpo, in); }), "kl has shape"));
  in.kl = torch::Tensor();
  in.gamma = std::numeric_limits<double>::quiet_NaN();
  CATCH_CHECK(contains(error_of([&] { compute_advantages(Estimator::grpo, in); }), "gamma must be a finite"));
  CATCH_CHECK(contains(error_of([] { whiten(torch::ones({1, 2}), torch::tensor({{1.0f, 0.0f}})); }),
                       "more than one token"));
  CATCH_CHECK(parse_estimator("ppo") == Estimator::ppo);
  in.gamma = 1.0;
  in.kl_coef = 0.0;
  CATCH_CHECK(contains(error_of([&] { compute_advantages(Estimator::ppo, in); }), "ppo needs the critic's values"));
  in.values = torch::zeros({2, 3});
  CATCH_CHECK(contains(error_of([&] { compute_advantages(Estimator::ppo, in); }), "ppo needs response_lengths"));
  in.response_lengths = torch::tensor({4, 5}, torch::kInt64);
  CATCH_CHECK(contains(error_of([&] { compute_advantages(Estimator::ppo, in); }), "response_lengths must be in [1, T]"));
  CATCH_CHECK(contains(error_of([] {
                         ValueLossInputs v;
                         v.values = torch::zeros({2, 3});
                         v.old_values = torch::zeros({2, 3});
                         v.returns = torch::zeros({2, 4});
                         v.mask = torch::ones({2, 3});
                         value_loss(0.2, Aggregation::sample_mean, v);
                       }),
                       "returns has shape"));
  CATCH_CHECK(contains(error_of([] { parse_estimator("dapo"); }), "grpo, gspo, cispo"));
  CATCH_CHECK(contains(error_of([] { parse_estimator("dapo"); }), "ppo"));
  CATCH_CHECK(parse_estimator(estimator_name(Estimator::reinforce_plus_plus_baseline)) ==
              Estimator::reinforce_plus_plus_baseline);
}

CATCH_TEST_CASE("policy_loss: bad options and missing tensors name the field", "[losses]") {
  auto in = batch(6);
  auto err = [&](LossOptions o, LossInputs i = {}) {
    return error_of([&] { policy_loss(o, i.logp.defined() ? i : in); });
  };
  LossOptions o;
  o.eps_clip_c = 1.0;
  CATCH_CHECK(contains(err(o), "eps_clip_c (dual clip) must be > 1"));
  o.eps_clip_c = 0.5;
  CATCH_CHECK(contains(err(o), "eps_clip_c"));
  o = {};
  o.use_kl_loss = true;
  auto no_ref = in;
  no_ref.ref_logp = torch::Tensor();
  CATCH_CHECK(contains(err(o, no_ref), "ref_logp is missing while use_kl_loss"));
  o = {};
  o.entropy_coef = std::numeric_limits<double>::quiet_NaN();
  CATCH_CHECK(contains(err(o), "entropy_coef must be a finite number"));
  o = {};
  o.eps_clip_high = std::numeric_limits<double>::infinity();
  CATCH_CHECK(contains(err(o), "eps_clip_high"));
  o = {};
  o.use_tis = true;
  o.tis_mode = "truncate";
  CATCH_CHECK(contains(err(o), "tis_mode: unknown 'truncate'"));
  o.tis_mode = "icepop", o.tis_clip_low = 3;
  CATCH_CHECK(contains(err(o), "tis_clip_low"));
  o = {};
  o.use_tis = true;
  auto no_rollout = in;
  no_rollout.rollout_logp = torch::Tensor();
  CATCH_CHECK(contains(err(o, no_rollout), "rollout_logp is missing while use_tis"));
  o = {};
  o.entropy_coef = 0.01;
  auto no_entropy = in;
  no_entropy.entropy = torch::Tensor();
  CATCH_CHECK(contains(err(o, no_entropy), "entropy is missing"));
  o = {};
  auto bad = in;
  bad.advantages = torch::ones({3, 5});
  CATCH_CHECK(contains(err(o, bad), "advantages has shape [3, 5] but should be [3, 6]"));
  bad = in;
  bad.advantages = torch::Tensor();
  CATCH_CHECK(contains(err(o, bad), "advantages is missing"));
  bad = in;
  bad.sample_denoms = torch::ones({2});
  CATCH_CHECK(contains(err(o, bad), "sample_denoms must be [B] = [3]"));
  bad = in;
  bad.divisor = std::numeric_limits<double>::quiet_NaN();
  CATCH_CHECK(contains(err(o, bad), "divisor must be a finite"));
  bad.divisor = -1;
  CATCH_CHECK(contains(err(o, bad), "divisor must be >= 0"));
  bad = in;
  bad.mask = torch::Tensor();
  CATCH_CHECK(contains(err(o, bad), "mask is missing"));
  CATCH_CHECK(contains(error_of([] { parse_aggregation("seq_mean"); }), "sample_mean"));
  // SFT needs neither advantages nor old log-probs.
  o.sft = true;
  bad = in;
  bad.advantages = bad.old_logp = torch::Tensor();
  CATCH_CHECK(err(o, bad).empty());
}

CATCH_TEST_CASE("SFT loss is the negative mean log-prob; float64 targets keep a float32 loss", "[losses]") {
  LossInputs in;
  in.logp = torch::tensor({{-1.0f, -3.0f, -9.0f}, {-2.0f, -9.0f, -9.0f}}).requires_grad_(true);
  in.mask = torch::tensor({{1.0f, 1.0f, 0.0f}, {1.0f, 0.0f, 0.0f}});
  LossOptions o;
  o.sft = true;
  auto r = policy_loss(o, in);
  CATCH_CHECK(item(r.loss) == Approx((2.0 + 2.0) / 2));
  CATCH_CHECK(r.metrics.size() == 1);
  o.sft = false;
  in.advantages = torch::ones({2, 3}, torch::kFloat64);
  in.old_logp = in.logp.detach().to(torch::kFloat64);
  CATCH_CHECK(policy_loss(o, in).loss.scalar_type() == torch::kFloat32);
}
