// trainer/datum_losses + trainer/stepwise: Tinker's losses over datums, and a trainer
// driven call by call (forward, forward_backward accumulating, optim_step).
#include <catch2/catch.hpp>

#include <cmath>

#include "model_fixtures.hpp"
#include "nn/transformer.hpp"
#include "trainer/datum_losses.hpp"
#include "trainer/stepwise.hpp"

using namespace rl;
using trainer::Datum;

namespace {

torch::Tensor f32(std::vector<float> v) { return torch::tensor(v, torch::kFloat32); }
torch::Tensor i64(std::vector<int64_t> v) { return torch::tensor(v, torch::kInt64); }

Datum rl_datum(std::vector<int64_t> tokens, std::vector<int64_t> targets, std::vector<float> q, std::vector<float> adv) {
  Datum d;
  d.tokens = std::move(tokens);
  d.inputs["target_tokens"] = i64(std::move(targets));
  d.inputs["logprobs"] = f32(std::move(q));
  d.inputs["advantages"] = f32(std::move(adv));
  return d;
}

std::shared_ptr<nn::Transformer> tiny_model(uint64_t seed) {
  auto m = std::make_shared<nn::Transformer>(test::tiny_config("qwen3"));
  m->init_random(seed);
  return m;
}

}  // namespace

TEST_CASE("datum losses follow Tinker's formulas, summed over tokens and data", "[stepwise]") {
  const auto lp = f32({-1.0f, -2.0f, -0.5f});
  const auto q = f32({-1.5f, -1.0f, -0.5f});
  const auto adv = f32({1.0f, -2.0f, 0.5f});
  std::vector<Datum> data{rl_datum({1, 2, 3}, {2, 3, 4}, {-1.5f, -1.0f, -0.5f}, {1.0f, -2.0f, 0.5f})};
  const auto ratio = torch::exp(lp - q);
  auto value = [&](const std::string& fn, std::map<std::string, double> cfg = {}) {
    return trainer::datum_loss(fn, data, {lp}, cfg).loss.item<double>();
  };
  CHECK(value("importance_sampling") == Approx(-(ratio * adv).sum().item<double>()));
  CHECK(value("ppo") == Approx(-torch::min(ratio * adv, torch::clamp(ratio, 0.8, 1.2) * adv).sum().item<double>()));
  CHECK(value("ppo", {{"clip_low_threshold", 0.5}, {"clip_high_threshold", 3.0}}) ==
        Approx(-torch::min(ratio * adv, torch::clamp(ratio, 0.5, 3.0) * adv).sum().item<double>()));
  CHECK(value("cispo") == Approx(-(torch::clamp(ratio, 0.8, 1.2) * lp * adv).sum().item<double>()));
  CHECK(value("dro", {{"beta", 0.1}}) == Approx(-(lp * adv - 0.05 * (lp - q).pow(2)).sum().item<double>()));

  Datum ce;
  ce.tokens = {5, 6, 7};
  ce.inputs["target_tokens"] = i64({6, 7, 8});
  ce.inputs["weights"] = f32({0.0f, 1.0f, 1.0f});
  auto out = trainer::datum_loss("cross_entropy", {ce, ce}, {lp, lp}, {});
  CHECK(out.loss.item<double>() == Approx(2 * 2.5));
  REQUIRE(out.elementwise.size() == 2);
  CHECK(out.elementwise[0][1].item<float>() == 2.0f);

  SECTION("cispo's clipped ratio carries no gradient; its log-prob does") {
    auto x = lp.clone().requires_grad_(true);
    trainer::datum_loss("cispo", data, {x}, {}).loss.backward();
    const auto expect = -(torch::clamp(ratio, 0.8, 1.2) * adv);
    CHECK(torch::allclose(x.grad(), expect));
  }
}

TEST_CASE("datum validation names the datum, the input and the problem", "[stepwise]") {
  auto err = [](const std::string& fn, const std::vector<Datum>& d, std::map<std::string, double> cfg = {}) {
    try {
      trainer::validate_datums(fn, d, cfg, 97);
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  const auto good = rl_datum({1, 2}, {2, 3}, {-1, -1}, {1, 1});
  CHECK(err("ppo", {good}) == "no error");
  CHECK_THAT(err("sft", {good}), Catch::Contains("loss_fn 'sft'") && Catch::Contains("cross_entropy"));
  CHECK_THAT(err("ppo", {good}, {{"beta", 1}}), Catch::Contains("'beta'") && Catch::Contains("clip_low_threshold"));
  CHECK_THAT(err("cross_entropy", {good}), Catch::Contains("data[0].loss_fn_inputs['weights'] is missing"));
  auto short_adv = good;
  short_adv.inputs["advantages"] = f32({1});
  CHECK_THAT(err("ppo", {good, short_adv}), Catch::Contains("data[1].loss_fn_inputs['advantages']") &&
                                                Catch::Contains("[2]"));
  auto far = rl_datum({1, 2}, {2, 300}, {-1, -1}, {1, 1});
  CHECK_THAT(err("ppo", {far}), Catch::Contains("target_tokens") && Catch::Contains("300"));
  auto nan = good;
  nan.inputs["logprobs"] = f32({NAN, -1});
  CHECK_THAT(err("ppo", {nan}), Catch::Contains("NaN"));
  CHECK_THAT(err("ppo", {}), Catch::Contains("empty"));
}

TEST_CASE("a stepwise trainer accumulates gradients until optim_step, then takes one AdamW step", "[stepwise]") {
  torch::manual_seed(0);
  auto model = tiny_model(3);
  trainer::StepwiseTrainer st(model, nullptr);
  Datum a, b;
  a.tokens = {1, 5, 9, 11};
  a.inputs["target_tokens"] = i64({5, 9, 11, 12});
  a.inputs["weights"] = f32({0, 1, 1, 1});
  b.tokens = {3, 4};
  b.inputs["target_tokens"] = i64({4, 8});
  b.inputs["weights"] = f32({1, 1});

  // Log-probs of a datum do not depend on the others in the call (nor on padding).
  const auto alone = st.logprobs({a})[0];
  const auto both = st.forward({a, b}, "cross_entropy", {});
  CHECK(torch::equal(alone, both.logprobs[0]));
  const auto lp_b = st.logprobs({b})[0];
  CHECK(both.metrics.at("loss:sum") ==
        Approx(-(alone.narrow(0, 1, 3).sum() + lp_b.sum()).item<double>()).epsilon(1e-5));

  // Two forward_backward calls on halves == one on the whole (sums, so the gradients add).
  st.forward_backward({a}, "cross_entropy", {});
  st.forward_backward({b}, "cross_entropy", {});
  CHECK(st.pending_forward_backwards() == 2);
  std::vector<torch::Tensor> split;
  for (auto& p : st.parameters()) split.push_back(p.grad().clone());
  st.zero_grad();
  st.forward_backward({a, b}, "cross_entropy", {});
  for (size_t i = 0; i < split.size(); ++i) CHECK(torch::allclose(split[i], st.parameters()[i].grad(), 1e-5, 1e-6));

  // One step lowers the loss; gradients are cleared.
  trainer::AdamParams p;
  p.learning_rate = 1e-2;
  const auto m = st.optim_step(p);
  CHECK(m.at("grad_norm") > 0);
  CHECK(m.at("optim_steps") == 1);
  CHECK(st.pending_forward_backwards() == 0);
  for (auto& t : st.parameters()) CHECK(!t.grad().defined());
  CHECK(st.forward({a, b}, "cross_entropy", {}).metrics.at("loss:sum") < both.metrics.at("loss:sum"));

  SECTION("bad hyperparameters are refused before anything changes") {
    trainer::AdamParams bad;
    bad.beta2 = 1.5;
    CHECK_THROWS_WITH(st.optim_step(bad), Catch::Contains("beta2"));
    CHECK(st.steps() == 1);
  }
}

TEST_CASE("AdamW with Tinker's parameters matches torch's AdamW step by step", "[stepwise]") {
  auto model = tiny_model(5);
  auto twin = tiny_model(5);
  trainer::StepwiseTrainer st(model, nullptr);
  std::vector<torch::Tensor> ref_params;
  for (auto& [n, t] : twin->named_parameters()) ref_params.push_back(t.detach().clone().requires_grad_(true));
  trainer::AdamParams p;
  p.learning_rate = 3e-3;
  p.weight_decay = 0.1;
  p.grad_clip_norm = 0.5;
  torch::optim::AdamW ref(ref_params, torch::optim::AdamWOptions(p.learning_rate)
                                          .betas({p.beta1, p.beta2})
                                          .eps(p.eps)
                                          .weight_decay(p.weight_decay));
  Datum a;
  a.tokens = {1, 5, 9};
  a.inputs["target_tokens"] = i64({5, 9, 2});
  a.inputs["weights"] = f32({1, 1, 1});
  for (int step = 0; step < 2; ++step) {
    st.forward_backward({a}, "cross_entropy", {});
    for (size_t i = 0; i < ref_params.size(); ++i) ref_params[i].mutable_grad() = st.parameters()[i].grad().clone();
    torch::nn::utils::clip_grad_norm_(ref_params, p.grad_clip_norm);
    ref.step();
    st.optim_step(p);
    for (size_t i = 0; i < ref_params.size(); ++i) CHECK(torch::equal(ref_params[i].detach(), st.parameters()[i].detach()));
  }
}
