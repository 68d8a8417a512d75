// trainer/fsdp.hpp on one rank (no process group): the sharded model's forward and
// backward against the same model unsharded, bit for bit, and what a sharded model
// refuses. Several ranks: tests/e2e/test_trainer_fsdp.py.
#include <torch/torch.h>

#define CATCH_CONFIG_PREFIX_ALL
#include <catch2/catch.hpp>

#include "model_fixtures.hpp"
#include "nn/logprobs.hpp"
#include "nn/logprobs_blocked.hpp"
#include "nn/transformer.hpp"
#include "trainer/fsdp.hpp"

using rl::nn::Transformer;
using rl::trainer::ShardedModel;

namespace {

std::shared_ptr<Transformer> tiny(const std::string& family) {
  auto m = std::make_shared<Transformer>(rl::test::tiny_config(family));
  m->init_random(11);
  m->set_requires_grad(true);
  return m;
}

// A scalar that reads every unit: the log-probs of the next tokens through the lm_head.
torch::Tensor score(Transformer& m, ShardedModel* sm, const torch::Tensor& ids) {
  const int64_t T = ids.size(1);
  auto hidden = m.forward(ids).narrow(1, 0, T - 1).reshape({-1, m.config().hidden_size});
  auto targets = ids.narrow(1, 1, T - 1).reshape({-1});
  auto out = rl::nn::token_logprobs(hidden, sm ? sm->lm_head() : m.lm_head_weight(), targets, 1.0, true, 0, -1, nullptr);
  if (sm) out.logprobs = sm->lm_head_done(out.logprobs);
  return out.logprobs.sum() + 0.1 * out.entropy.sum();
}

}  // namespace

CATCH_TEST_CASE("a sharded model computes the unsharded one's loss and gradients bit for bit", "[fsdp]") {
  for (const std::string family : {"qwen2", "qwen3", "llama"}) {
    CATCH_SECTION(family) {
      auto whole = tiny(family), shard = tiny(family);
      ShardedModel sm(shard, nullptr, true);
      const auto ids = torch::tensor({{1, 5, 9, 13, 2, 7}, {3, 4, 8, 2, 90, 6}}, torch::kInt64);
      for (int pass = 0; pass < 2; ++pass) {  // a second pass: the released storage is gathered again
        auto a = score(*whole, nullptr, ids), b = score(*shard, &sm, ids);
        CATCH_REQUIRE(torch::equal(a, b));
        a.backward();
        b.backward();
      }
      // Each unit's gradient, flattened, against the shard's (one rank: the whole unit).
      const auto& params = whole->named_parameters();
      const auto units = whole->parameter_units();
      CATCH_REQUIRE(units.size() == sm.units().size());
      for (size_t u = 0; u < units.size(); ++u) {
        std::vector<torch::Tensor> g;
        for (size_t i : units[u]) g.push_back(params[i].second.grad().reshape({-1}));
        const auto flat = torch::cat(g);
        const auto local = sm.shards()[u];
        CATCH_REQUIRE(local.grad().defined());
        CATCH_REQUIRE(torch::equal(local.grad().narrow(0, 0, flat.numel()), flat));
      }
      // The model's own storage is gone; whatever would read it refuses.
      for (const auto& [name, t] : shard->named_parameters()) CATCH_REQUIRE(t.storage().nbytes() == 0);
      CATCH_REQUIRE_THROWS_WITH(shard->save("/nonexistent"), Catch::Contains("sharded over the trainer's ranks"));
      CATCH_REQUIRE(shard->exact_weights_digest().empty());
      // for_each_unit hands every parameter over, gathered, with the unsharded values.
      size_t seen = 0;
      sm.for_each_unit([&](const rl::nn::NamedTensors& unit) {
        for (const auto& [name, t] : unit) {
          CATCH_REQUIRE(torch::equal(t, whole->parameter(name).detach()));
          ++seen;
        }
      });
      CATCH_REQUIRE(seen == params.size());
    }
  }
}

CATCH_TEST_CASE("no-grad passes release every gathered unit; a model outlives its sharder only to refuse", "[fsdp]") {
  auto m = tiny("qwen2");
  {
    ShardedModel sm(m, nullptr, false);
    torch::NoGradGuard ng;
    const auto ids = torch::tensor({{1, 2, 3, 4}}, torch::kInt64);
    const auto a = m->forward(ids);
    const auto b = m->forward(ids);
    CATCH_REQUIRE(torch::equal(a, b));
    CATCH_REQUIRE_THROWS_WITH(ShardedModel(m, nullptr, false), Catch::Contains("sharded already"));
  }
  CATCH_REQUIRE_THROWS_WITH(m->forward(torch::tensor({{1, 2}}, torch::kInt64)), Catch::Contains("no longer exists"));
}

CATCH_TEST_CASE("a sharded model's lm_head by row blocks: the unsharded log-probs bit for bit, its gradients", "[fsdp]") {
  for (const std::string family : {"qwen2", "llama"}) {  // a tied embedding and an untied lm_head
    CATCH_SECTION(family) {
      auto whole = tiny(family), shard = tiny(family);
      ShardedModel sm(shard, nullptr, true);
      CATCH_REQUIRE(sm.blocked_head());
      const auto ids = torch::tensor({{1, 5, 9, 13, 2, 7}, {3, 4, 8, 2, 90, 6}}, torch::kInt64);
      const int64_t T = ids.size(1), H = whole->config().hidden_size;
      auto targets = ids.narrow(1, 1, T - 1).reshape({-1});
      auto hidden_of = [&](Transformer& m) { return m.forward(ids).narrow(1, 0, T - 1).reshape({-1, H}); };
      auto a = rl::nn::token_logprobs(hidden_of(*whole), whole->lm_head_weight(), targets, 0.8, true, 0, -1, nullptr);
      auto b = rl::nn::token_logprobs_blocked(hidden_of(*shard), sm.head_blocks(), targets, 0.8, true);
      CATCH_REQUIRE(torch::equal(a.logprobs, b.logprobs));
      CATCH_REQUIRE(torch::equal(a.entropy, b.entropy));
      (a.logprobs.sum() + 0.1 * a.entropy.sum()).backward();
      (b.logprobs.sum() + 0.1 * b.entropy.sum()).backward();
      const auto& params = whole->named_parameters();
      const auto units = whole->parameter_units();
      for (size_t u = 0; u < units.size(); ++u) {
        std::vector<torch::Tensor> g;
        for (size_t i : units[u]) g.push_back(params[i].second.grad().reshape({-1}));
        const auto flat = torch::cat(g);
        const auto got = sm.shards()[u].grad().narrow(0, 0, flat.numel());
        CATCH_REQUIRE((got - flat).abs().max().item<float>() <= 1e-5f * (1 + flat.abs().max().item<float>()));
      }
    }
  }
}
