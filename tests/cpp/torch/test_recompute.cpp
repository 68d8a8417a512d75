// nn/recompute.hpp through Transformer::set_recompute: recomputed layers give the
// loss and gradients of kept activations bit for bit (float32, bf16 autocast, a LoRA
// adapter, a one-rank sharded model), each recomputed layer really runs twice, the
// sharder is told which units come next, and retain_graph works as without it. Several
// ranks: tests/e2e/test_trainer_fsdp.py.
#include <torch/torch.h>

#include <ATen/autocast_mode.h>

#define CATCH_CONFIG_PREFIX_ALL
#include <catch2/catch.hpp>

#include <map>
#include <tuple>

#include "model_fixtures.hpp"
#include "nn/logprobs.hpp"
#include "nn/logprobs_blocked.hpp"
#include "nn/lora.hpp"
#include "nn/transformer.hpp"
#include "trainer/fsdp.hpp"

using rl::nn::Recompute;
using rl::nn::Transformer;

namespace {

std::shared_ptr<Transformer> tiny(const std::string& family, int64_t layers = 3) {
  auto c = rl::test::tiny_config(family);
  c.num_hidden_layers = layers;
  auto m = std::make_shared<Transformer>(c);
  m->init_random(5);
  m->set_requires_grad(true);
  return m;
}

const torch::Tensor& ids() {
  static const auto t = torch::tensor({{1, 5, 9, 13, 2, 7, 40}, {3, 4, 8, 2, 90, 6, 11}}, torch::kInt64);
  return t;
}

torch::Tensor score(Transformer& m) {
  const int64_t T = ids().size(1);
  auto hidden = m.forward(ids()).narrow(1, 0, T - 1).reshape({-1, m.config().hidden_size});
  auto out = rl::nn::token_logprobs(hidden, m.lm_head_weight(), ids().narrow(1, 1, T - 1).reshape({-1}), 1.0, true, 0,
                                    -1, nullptr);
  return out.logprobs.sum() + 0.1 * out.entropy.sum();
}

std::vector<torch::Tensor> grads(const std::vector<torch::Tensor>& ps) {
  std::vector<torch::Tensor> out;
  for (const auto& p : ps) out.push_back(p.grad().defined() ? p.grad().clone() : torch::Tensor());
  return out;
}

std::vector<torch::Tensor> params_of(const Transformer& m) {
  std::vector<torch::Tensor> out;
  for (const auto& [name, t] : m.named_parameters()) out.push_back(t);
  return out;
}

void require_equal(const std::vector<torch::Tensor>& a, const std::vector<torch::Tensor>& b) {
  CATCH_REQUIRE(a.size() == b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    CATCH_REQUIRE(a[i].defined());
    CATCH_REQUIRE(torch::equal(a[i], b[i]));
  }
}

const std::vector<std::pair<std::string, Recompute>> kMethods = {
    {"uniform 1", {Recompute::Method::uniform, 1}},
    {"uniform 2", {Recompute::Method::uniform, 2}},
    {"block 2", {Recompute::Method::block, 2}},
};

// Counts each unit's uses and the recompute calls, handing out another model's
// parameters (its own storage stays whole: no sharding here).
struct CountingHooks : rl::nn::UnitHooks {
  std::shared_ptr<Transformer> source;
  std::map<int, int> entered;
  std::vector<std::tuple<int, int, int>> begun;
  int ended = 0;
  std::vector<torch::Tensor> enter(int unit) override {
    ++entered[unit];
    std::vector<torch::Tensor> out;
    const auto units = source->parameter_units();
    for (size_t i : units[static_cast<size_t>(unit)])
      out.push_back(source->named_parameters()[i].second);
    return out;
  }
  torch::Tensor leave(int, const torch::Tensor& out) override { return out; }
  void recompute_begin(int first, int last, int next) override { begun.emplace_back(first, last, next); }
  void recompute_end() override { ++ended; }
};

}  // namespace

CATCH_TEST_CASE("recomputed layers: the kept activations' loss and gradients bit for bit", "[recompute]") {
  for (const std::string family : {"qwen2", "qwen3", "llama"}) {
    for (const auto& [name, r] : kMethods) {
      CATCH_SECTION(family + ", " + name) {
        auto kept = tiny(family), again = tiny(family);
        again->set_recompute(r);
        for (int pass = 0; pass < 2; ++pass) {  // gradients accumulate over passes alike
          auto a = score(*kept), b = score(*again);
          CATCH_REQUIRE(torch::equal(a, b));
          a.backward();
          b.backward();
        }
        require_equal(grads(params_of(*kept)), grads(params_of(*again)));
        // Without autograd nothing is recomputed and nothing differs.
        torch::NoGradGuard ng;
        CATCH_REQUIRE(torch::equal(kept->forward(ids()), again->forward(ids())));
      }
    }
  }
}

CATCH_TEST_CASE("recomputed layers under bf16 autocast and with a LoRA adapter over a frozen base", "[recompute]") {
  CATCH_SECTION("bf16 autocast: the second pass runs in the forward's precision") {
    auto kept = tiny("qwen2"), again = tiny("qwen2");
    again->set_recompute({Recompute::Method::uniform, 1});
    torch::Tensor a, b;
    {
      at::autocast::set_autocast_enabled(at::kCPU, true);
      at::autocast::set_autocast_dtype(at::kCPU, at::kBFloat16);
      a = score(*kept);
      b = score(*again);
      at::autocast::set_autocast_enabled(at::kCPU, false);
      at::autocast::clear_cache();
    }
    CATCH_REQUIRE(torch::equal(a, b));
    a.backward();  // outside autocast, as the trainer runs it
    b.backward();
    require_equal(grads(params_of(*kept)), grads(params_of(*again)));
  }
  CATCH_SECTION("LoRA: the embedding's output needs no gradient, the adapter's do") {
    auto kept = tiny("llama"), again = tiny("llama");
    kept->set_requires_grad(false);
    again->set_requires_grad(false);
    rl::nn::LoraConfig cfg;
    cfg.rank = 4;
    auto ka = std::make_shared<rl::nn::LoraAdapter>(kept->config(), cfg);
    auto aa = std::make_shared<rl::nn::LoraAdapter>(again->config(), cfg);
    ka->init(3, /*identity=*/false);
    aa->init(3, /*identity=*/false);
    for (auto* a : {&ka, &aa})
      for (auto& t : (*a)->parameters()) t.requires_grad_(true);
    kept->set_lora(ka);
    again->set_lora(aa);
    again->set_recompute({Recompute::Method::uniform, 1});
    auto a = score(*kept), b = score(*again);
    CATCH_REQUIRE(torch::equal(a, b));
    a.backward();
    b.backward();
    require_equal(grads(ka->parameters()), grads(aa->parameters()));
    for (const auto& p : params_of(*again)) CATCH_REQUIRE(!p.grad().defined());
  }
}

CATCH_TEST_CASE("recomputed layers run twice, the sharder hears which come next, one backward only", "[recompute]") {
  auto m = tiny("llama", 4), source = tiny("llama", 4);
  CountingHooks hooks;
  hooks.source = source;
  m->set_unit_hooks(&hooks);
  CATCH_SECTION("uniform over groups of 2: units 1-4 entered twice, groups recomputed last first") {
    m->set_recompute({Recompute::Method::uniform, 2});
    auto hidden = m->forward(ids());
    for (int u = 1; u <= 4; ++u) CATCH_REQUIRE(hooks.entered[u] == 1);
    hidden.sum().backward();
    for (int u = 1; u <= 4; ++u) CATCH_REQUIRE(hooks.entered[u] == 2);
    CATCH_REQUIRE(hooks.entered[5] == 1);  // the final norm is kept
    CATCH_REQUIRE((hooks.begun == std::vector<std::tuple<int, int, int>>{{3, 4, 1}, {1, 2, -1}}));
    CATCH_REQUIRE(hooks.ended == 2);
  }
  CATCH_SECTION("block of 1: only the first layer again") {
    m->set_recompute({Recompute::Method::block, 1});
    m->forward(ids()).sum().backward();
    CATCH_REQUIRE(hooks.entered[1] == 2);
    for (int u = 2; u <= 4; ++u) CATCH_REQUIRE(hooks.entered[u] == 1);
    CATCH_REQUIRE((hooks.begun == std::vector<std::tuple<int, int, int>>{{1, 1, -1}}));
  }
  CATCH_SECTION("retain_graph: a second backward recomputes again; without it, refused") {
    m->set_recompute({Recompute::Method::uniform, 1});
    auto loss = m->forward(ids()).sum();
    loss.backward({}, /*retain_graph=*/true);
    const auto once = grads(params_of(*source));
    loss.backward();
    for (int u = 1; u <= 4; ++u) CATCH_REQUIRE(hooks.entered[u] == 3);
    const auto twice = grads(params_of(*source));
    for (size_t i = 0; i < once.size(); ++i)  // (the lm_head is not in forward())
      if (once[i].defined()) CATCH_REQUIRE(torch::equal(twice[i], once[i] * 2));
    CATCH_REQUIRE_THROWS_WITH(loss.backward(), Catch::Contains("second time"));
  }
  CATCH_REQUIRE_THROWS_WITH(m->set_recompute({Recompute::Method::uniform, 0}), Catch::Contains("num_layers must be >= 1"));
  m->set_unit_hooks(nullptr);
}

CATCH_TEST_CASE("recomputed layers of a sharded model (one rank): its gradients bit for bit", "[recompute][fsdp]") {
  for (const std::string family : {"qwen2", "llama"}) {
    CATCH_SECTION(family) {
      auto kept = tiny(family), again = tiny(family);
      again->set_recompute({Recompute::Method::uniform, 1});
      rl::trainer::ShardedModel ks(kept, nullptr, true), as(again, nullptr, true);
      const int64_t T = ids().size(1), H = kept->config().hidden_size;
      auto targets = ids().narrow(1, 1, T - 1).reshape({-1});
      const auto logp = [&](Transformer& m, rl::trainer::ShardedModel& sm) {
        auto hidden = m.forward(ids()).narrow(1, 0, T - 1).reshape({-1, H});
        return rl::nn::token_logprobs_blocked(hidden, sm.head_blocks(), targets, 1.0, false).logprobs;
      };
      for (int pass = 0; pass < 2; ++pass) {
        auto a = logp(*kept, ks), b = logp(*again, as);
        CATCH_REQUIRE(torch::equal(a, b));
        a.sum().backward();
        b.sum().backward();
      }
      for (size_t u = 0; u < ks.units().size(); ++u) {
        CATCH_REQUIRE(as.shards()[u].grad().defined());
        CATCH_REQUIRE(torch::equal(ks.shards()[u].grad(), as.shards()[u].grad()));
      }
      // Every use was released: a no-grad pass after the step gathers afresh and agrees.
      torch::NoGradGuard ng;
      CATCH_REQUIRE(torch::equal(kept->forward(ids()), again->forward(ids())));
    }
  }
}
