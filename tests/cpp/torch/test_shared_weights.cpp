// Shared-memory weights (nn/shared_weights): an engine-layout model moved into a
// two-buffer file computes what it did; a writer fills the other buffer and the
// switch makes the model compute with the new weights; bad layouts and
// mismatched models are errors naming the cause.
#include <torch/torch.h>

#define CATCH_CONFIG_PREFIX_ALL
#include <catch2/catch.hpp>

#include <filesystem>

#include "model_fixtures.hpp"
#include "nn/batch_invariant_ops.hpp"
#include "nn/shared_weights.hpp"
#include "nn/transformer.hpp"

using rl::nn::SharedLayout;
using rl::nn::SharedWeights;
using rl::nn::SharedWeightsWriter;
using rl::nn::Transformer;

namespace {

std::unique_ptr<Transformer> engine_model(const rl::model::ModelConfig& cfg, uint64_t seed) {
  auto m = std::make_unique<Transformer>(cfg, rl::nn::ModelOptions{torch::kFloat32, torch::kCPU, true});
  m->init_random(seed);
  return m;
}

double max_diff(Transformer& a, Transformer& b, const torch::Tensor& ids) {
  torch::NoGradGuard ng;
  return (a.logits(a.forward(ids)) - b.logits(b.forward(ids))).abs().max().item<double>();
}

std::string shm_dir() {
  return std::filesystem::is_directory("/dev/shm") ? "/dev/shm" : std::filesystem::temp_directory_path().string();
}

}  // namespace

CATCH_TEST_CASE("shared weights: move, write the other buffer, switch", "[model][shm]") {
  for (std::string family : {"qwen3", "qwen2", "llama"}) {
    CATCH_INFO(family);
    const auto cfg = rl::test::tiny_config(family);
    auto eng = engine_model(cfg, 3);
    auto before = engine_model(cfg, 3);  // the same weights, private memory
    auto ids = torch::randint(0, cfg.vocab_size, {2, 7});

    SharedWeights shared(eng->named_parameters(), shm_dir());
    const SharedLayout& l = shared.layout();
    CATCH_CHECK(l.active == 0);
    CATCH_CHECK(l.buffers == 2);
    CATCH_CHECK(std::filesystem::file_size(l.path) == static_cast<uintmax_t>(2 * l.buffer_bytes));
    CATCH_CHECK(max_diff(*eng, *before, ids) == 0);  // moved, not changed

    // The trainer's side: its own (default-layout) model with other weights.
    Transformer trainer(cfg);
    trainer.init_random(9);
    auto after = engine_model(cfg, 9);
    SharedWeightsWriter w(SharedLayout::from_json(l.to_json()));  // through JSON, as over HTTP
    CATCH_CHECK_FALSE(std::filesystem::exists(l.path));            // the writer removed the name
    w.write(1, trainer.named_parameters());
    CATCH_CHECK(max_diff(*eng, *before, ids) == 0);  // buffer 1 is not read yet
    // The engine packs its GEMM panels from buffer 1 before it switches to it (AVX-512;
    // elsewhere there are none): the switch then only adopts them.
    std::vector<rl::nn::bi::PackedWeight> panels;
    for (const auto& src : eng->panel_sources()) panels.push_back(rl::nn::bi::pack(shared.view_in(1, src)));
    CATCH_CHECK(max_diff(*eng, *before, ids) == 0);
    shared.activate(1);
    eng->weights_changed(std::move(panels));
    CATCH_CHECK(max_diff(*eng, *after, ids) == 0);  // panels from buffer 0 would be the old weights'
    CATCH_CHECK_THROWS(shared.view_in(2, eng->panel_sources().empty() ? eng->parameter("model.norm.weight")
                                                                      : eng->panel_sources()[0]));
    for (const auto& [name, t] : trainer.named_parameters()) CATCH_CHECK(torch::equal(eng->parameter(name), t));

    // And back: the old buffer takes the next weights.
    Transformer third(cfg);
    third.init_random(5);
    w.write(0, third.named_parameters());
    shared.activate(0);
    eng->weights_changed();  // as every writer does (the engine's packed GEMM panels follow)
    auto ref = engine_model(cfg, 5);
    CATCH_CHECK(max_diff(*eng, *ref, ids) < 1e-5);
  }
}

CATCH_TEST_CASE("shared weights: a bfloat16 engine takes float32 weights, rounded as copy_ rounds", "[model][shm]") {
  const auto cfg = rl::test::tiny_config("qwen2");
  Transformer eng(cfg, rl::nn::ModelOptions{torch::kBFloat16, torch::kCPU, true});
  eng.init_random(3);
  SharedWeights shared(eng.named_parameters(), shm_dir());
  CATCH_CHECK(shared.layout().tensors[0].dtype == "bfloat16");
  Transformer trainer(cfg);
  trainer.init_random(9);
  SharedWeightsWriter(shared.layout()).write(1, trainer.named_parameters());
  shared.activate(1);
  for (const auto& [name, t] : trainer.named_parameters())
    CATCH_CHECK(torch::equal(eng.parameter(name), t.to(torch::kBFloat16)));
}

CATCH_TEST_CASE("shared weights: another model, bad buffers and bad layouts are errors", "[model][shm]") {
  const auto cfg = rl::test::tiny_config("qwen3");
  auto eng = engine_model(cfg, 3);
  SharedWeights shared(eng->named_parameters(), shm_dir());
  SharedWeightsWriter w(shared.layout());

  Transformer other(rl::test::tiny_config("qwen2"));  // tied embeddings, biases: other names
  CATCH_CHECK_THROWS_WITH(w.write(1, other.named_parameters()), Catch::Contains("but the engine does not"));
  auto params = Transformer(cfg).named_parameters();
  params.pop_back();
  CATCH_CHECK_THROWS_WITH(w.write(1, params), Catch::Contains("but the trainer does not"));
  params = Transformer(cfg).named_parameters();
  params[0].second = torch::zeros({3, 3});
  CATCH_CHECK_THROWS_WITH(w.write(1, params), Catch::Contains("in the trainer but"));
  CATCH_CHECK_THROWS_WITH(w.write(2, params), Catch::Contains("buffer 2 does not exist"));
  CATCH_CHECK_THROWS_WITH(shared.activate(-1), Catch::Contains("buffer -1 does not exist"));

  auto j = shared.layout().to_json();
  j.erase("buffer_bytes");
  CATCH_CHECK_THROWS_WITH(SharedLayout::from_json(j), Catch::Contains("'buffer_bytes' is missing"));
  j = shared.layout().to_json();
  j["tensors"][1]["offset"] = shared.layout().buffer_bytes;  // past the end of a buffer
  CATCH_CHECK_THROWS_WITH(SharedLayout::from_json(j), Catch::Contains("does not fit its buffer"));
  j = shared.layout().to_json();
  j["tensors"][0]["dtype"] = "int3";
  CATCH_CHECK_THROWS_WITH(SharedLayout::from_json(j), Catch::Contains("unknown dtype 'int3'"));
  j = shared.layout().to_json();
  j["path"] = "/nonexistent/rlhost-weights";
  CATCH_CHECK_THROWS_WITH(SharedWeightsWriter(SharedLayout::from_json(j)), Catch::Contains("/nonexistent/rlhost-weights"));
  CATCH_CHECK_THROWS_WITH(SharedWeights(eng->named_parameters(), "/nonexistent"),
                          Catch::Contains("creating /nonexistent/rlhost-weights-"));
}

CATCH_TEST_CASE("shared weights: the file outlives the owner while a model reads it", "[model][shm]") {
  const auto cfg = rl::test::tiny_config("llama");
  auto eng = engine_model(cfg, 3);
  auto ref = engine_model(cfg, 3);
  auto ids = torch::randint(0, cfg.vocab_size, {1, 5});
  std::string path;
  {
    SharedWeights shared(eng->named_parameters(), shm_dir());
    path = shared.layout().path;
  }
  // The owner is gone; the parameters still point into the mapping, which stays.
  CATCH_CHECK(max_diff(*eng, *ref, ids) == 0);
  eng.reset();  // the last reader: the file goes with it
  CATCH_CHECK_FALSE(std::filesystem::exists(path));
}
