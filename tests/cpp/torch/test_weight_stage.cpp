// A staged weight update (nn/weight_stage): tensors written beside an engine-layout
// model change nothing until the swap, after which the model computes with them and
// its parameters equal them exactly; a partial update leaves the rest as it was; bad
// names and shapes are errors naming them.
#include <torch/torch.h>

#define CATCH_CONFIG_PREFIX_ALL
#include <catch2/catch.hpp>

#include "model_fixtures.hpp"
#include "nn/transformer.hpp"
#include "nn/weight_stage.hpp"

using rl::nn::Transformer;
using rl::nn::WeightStage;

namespace {

std::unique_ptr<Transformer> engine_model(const rl::model::ModelConfig& cfg, uint64_t seed,
                                          torch::ScalarType dtype = torch::kFloat32) {
  auto m = std::make_unique<Transformer>(cfg, rl::nn::ModelOptions{dtype, torch::kCPU, true});
  m->init_random(seed);
  return m;
}

double max_diff(Transformer& a, Transformer& b, const torch::Tensor& ids) {
  torch::NoGradGuard ng;
  return (a.logits(a.forward(ids)) - b.logits(b.forward(ids))).abs().max().item<double>();
}

struct Update {
  std::vector<std::string> names;
  std::vector<std::vector<int64_t>> shapes;
  std::vector<torch::Tensor> tensors;
};

Update update_of(const Transformer& m, const std::function<bool(const std::string&)>& keep = nullptr) {
  Update u;
  for (const auto& [name, t] : m.named_parameters()) {
    if (keep && !keep(name)) continue;
    u.names.push_back(name);
    u.shapes.push_back(t.sizes().vec());
    u.tensors.push_back(t.detach().contiguous());
  }
  return u;
}

}  // namespace

CATCH_TEST_CASE("weight stage: nothing changes until the swap, then the model is the new one", "[model][stage]") {
  for (std::string family : {"qwen3", "qwen2", "llama"}) {
    CATCH_INFO(family);
    const auto cfg = rl::test::tiny_config(family);
    auto eng = engine_model(cfg, 3);
    auto before = engine_model(cfg, 3);
    auto after = engine_model(cfg, 9);
    Transformer trainer(cfg);  // the default (training) layout, as a trainer sends it
    trainer.init_random(9);
    auto ids = torch::randint(0, cfg.vocab_size, {2, 7});
    const auto u = update_of(trainer);

    WeightStage stage(eng->named_parameters(), u.names, u.shapes);
    stage.copy_uncovered();
    for (size_t k = 0; k < u.tensors.size(); ++k) {
      CATCH_CHECK_FALSE(stage.complete());
      stage.put(k, u.tensors[k]);
    }
    CATCH_CHECK(stage.complete());
    CATCH_CHECK(max_diff(*eng, *before, ids) == 0);  // staged, not live
    CATCH_CHECK(stage.matches(eng->named_parameters()));
    stage.swap_in();
    eng->weights_changed();
    for (const auto& [name, t] : trainer.named_parameters()) CATCH_CHECK(torch::equal(eng->parameter(name), t));
    CATCH_CHECK(max_diff(*eng, *after, ids) == 0);  // the same weights in the same layout: the same bits
    CATCH_CHECK_THROWS(stage.swap_in());            // once
  }
}

CATCH_TEST_CASE("weight stage: a partial update keeps every other weight", "[model][stage]") {
  const auto cfg = rl::test::tiny_config("qwen2");
  auto eng = engine_model(cfg, 3);
  auto before = engine_model(cfg, 3);
  Transformer trainer(cfg);
  trainer.init_random(9);
  const auto u = update_of(trainer, [](const std::string& n) { return n.find("layers.0.self_attn.k_proj") != n.npos; });
  CATCH_REQUIRE(u.names.size() >= 1);
  WeightStage stage(eng->named_parameters(), u.names, u.shapes);
  stage.copy_uncovered();
  for (size_t k = 0; k < u.tensors.size(); ++k) stage.put(k, u.tensors[k]);
  stage.swap_in();
  eng->weights_changed();
  for (const auto& [name, t] : eng->named_parameters()) {
    CATCH_INFO(name);
    const bool sent = name.find("layers.0.self_attn.k_proj") != name.npos;
    CATCH_CHECK(torch::equal(t, sent ? trainer.parameter(name) : before->parameter(name)));
  }
}

CATCH_TEST_CASE("weight stage: a bfloat16 engine rounds float32 weights as copy_ does", "[model][stage]") {
  const auto cfg = rl::test::tiny_config("llama");
  auto eng = engine_model(cfg, 3, torch::kBFloat16);
  Transformer trainer(cfg);
  trainer.init_random(9);
  const auto u = update_of(trainer);
  WeightStage stage(eng->named_parameters(), u.names, u.shapes);
  stage.copy_uncovered();
  for (size_t k = 0; k < u.tensors.size(); ++k) stage.put(k, u.tensors[k]);
  stage.swap_in();
  for (const auto& [name, t] : trainer.named_parameters())
    CATCH_CHECK(torch::equal(eng->parameter(name), t.to(torch::kBFloat16)));
}

CATCH_TEST_CASE("weight stage: unknown, repeated and misshapen tensors are refused by name", "[model][stage]") {
  const auto cfg = rl::test::tiny_config("qwen2");
  auto eng = engine_model(cfg, 3);
  auto u = update_of(*eng);
  auto message = [&](std::vector<std::string> names, std::vector<std::vector<int64_t>> shapes) {
    try {
      WeightStage s(eng->named_parameters(), names, shapes);
    } catch (const std::exception& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  CATCH_CHECK_THAT(message({"model.nope.weight"}, {{1}}), Catch::Contains("no parameter 'model.nope.weight'"));
  CATCH_CHECK_THAT(message({u.names[1], u.names[1]}, {u.shapes[1], u.shapes[1]}), Catch::Contains("sent twice"));
  auto bad = u.shapes[1];
  bad[0] += 1;
  CATCH_CHECK_THAT(message({u.names[1]}, {bad}), Catch::Contains(u.names[1] + " has shape"));

  WeightStage incomplete(eng->named_parameters(), u.names, u.shapes);
  incomplete.copy_uncovered();
  incomplete.put(0, u.tensors[0]);
  CATCH_CHECK_THROWS_WITH(incomplete.swap_in(), Catch::Contains("not complete"));
  CATCH_CHECK_THROWS(incomplete.put(u.names.size(), u.tensors[0]));
  auto other = engine_model(cfg, 4);
  CATCH_CHECK_FALSE(incomplete.matches(other->named_parameters()));
}
