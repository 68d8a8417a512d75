// A staged weight update (nn/weight_stage): tensors written beside an engine-layout
// model change nothing until the swap, after which the model computes with them and
// its parameters equal them exactly; a partial update leaves the rest as it was; bad
// names and shapes are errors naming them. Where the engine keeps the HF rows (the
// packed AVX-512 path), a c10d receive lands in the spare memory itself.
#include <torch/torch.h>

#include <cstring>
#include <functional>
#include <thread>

#define CATCH_CONFIG_PREFIX_ALL
#include <catch2/catch.hpp>

#include "dist/dist.hpp"
#include "model/weight_buckets.hpp"
#include "model_fixtures.hpp"
#include "nn/batch_invariant.hpp"
#include "nn/batch_invariant_ops.hpp"
#include "nn/panel_memory.hpp"
#include "nn/transformer.hpp"
#include "nn/weight_stage.hpp"
#include "tensor/huge_pages.hpp"

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

// Over a new two-rank group: send(rank 0's group) on a thread, receive(rank 1's) here.
// Both must succeed (a failed receive leaves the sender to fail on its timeout).
void over_a_group(const char* name, const std::function<void(rl::dist::ProcessGroup&)>& send,
                  const std::function<void(rl::dist::ProcessGroup&)>& receive) {
  rl::dist::GroupOptions o;
  o.world_size = 2;
  o.timeout_s = 60;
  o.name = name;
  rl::dist::ProcessGroup sender(o);
  o.rank = 1;
  o.master_port = sender.port();
  std::string send_failed, failed;
  std::thread tx([&] {
    try {
      sender.connect();
      send(sender);
    } catch (const std::exception& e) {
      send_failed = e.what();
    }
  });
  try {
    rl::dist::ProcessGroup receiver(o);
    receive(receiver);
  } catch (const std::exception& e) {
    failed = e.what();
  }
  tx.join();
  CATCH_REQUIRE(failed.empty());
  CATCH_REQUIRE(send_failed.empty());
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
    stage.set_panel_sources(eng->panel_sources());  // each matrix packed once its last part is put
    stage.copy_uncovered();
    for (size_t k = 0; k < u.tensors.size(); ++k) {
      CATCH_CHECK_FALSE(stage.complete());
      stage.put(k, u.tensors[k]);
    }
    CATCH_CHECK(stage.complete());
    CATCH_CHECK(stage.uncovered_bytes() == 0);  // a whole update: nothing copied first, fused matrices too
    stage.pack_panels();
    CATCH_CHECK(max_diff(*eng, *before, ids) == 0);  // staged, not live
    CATCH_CHECK(stage.matches(eng->named_parameters()));
    stage.swap_in();
    eng->weights_changed(stage.take_panels());  // a panel packed too early would change the logits below
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
  stage.set_panel_sources(eng->panel_sources());  // packed ahead: the touched matrix as k arrives, the rest after
  stage.copy_uncovered();
  CATCH_CHECK(stage.uncovered_bytes() > 0);  // k's storage (q|k|v where fused) and every other one
  for (size_t k = 0; k < u.tensors.size(); ++k) stage.put(k, u.tensors[k]);
  stage.pack_panels();
  stage.swap_in();
  eng->weights_changed(stage.take_panels());
  for (const auto& [name, t] : eng->named_parameters()) {
    CATCH_INFO(name);
    const bool sent = name.find("layers.0.self_attn.k_proj") != name.npos;
    CATCH_CHECK(torch::equal(t, sent ? trainer.parameter(name) : before->parameter(name)));
  }
  // The same weights packed by the model itself compute the same bits.
  before->parameter("model.layers.0.self_attn.k_proj.weight").copy_(trainer.parameter("model.layers.0.self_attn.k_proj.weight"));
  before->weights_changed();
  CATCH_CHECK(max_diff(*eng, *before, torch::randint(0, cfg.vocab_size, {2, 7})) == 0);
}

CATCH_TEST_CASE("weight stage: column blocks of a fused matrix kept transposed cover it only side by side",
                "[model][stage]") {
  // q|k|v in one [in 6, out 4+3+3] matrix, each exposed as its transposed [out, in] view
  // (the inference layout without packed panels): all three cover it; with a gap, or
  // with a block missing, the storage is copied before the update goes in.
  auto fused = torch::arange(60, torch::kFloat32).view({6, 10});
  std::vector<std::pair<std::string, torch::Tensor>> params{{"q", fused.narrow(1, 0, 4).t()},
                                                            {"k", fused.narrow(1, 4, 3).t()},
                                                            {"v", fused.narrow(1, 7, 3).t()}};
  const std::vector<std::vector<int64_t>> shapes{{4, 6}, {3, 6}, {3, 6}};
  {
    WeightStage all(params, {"q", "k", "v"}, shapes);
    CATCH_CHECK(all.uncovered_bytes() == 0);
  }
  {
    WeightStage two(params, {"q", "v"}, {shapes[0], shapes[2]});
    CATCH_CHECK(two.uncovered_bytes() == 240);
    two.copy_uncovered();
    auto q = torch::full({4, 6}, -1.0f), v = torch::full({3, 6}, -3.0f);
    two.put(0, q);
    two.put(1, v);
    const auto k_before = params[1].second.clone();
    two.swap_in();
    CATCH_CHECK(torch::equal(params[0].second, q));
    CATCH_CHECK(torch::equal(params[1].second, k_before));  // kept: the storage was copied first
    CATCH_CHECK(torch::equal(params[2].second, v));
  }
  {
    auto wide = torch::zeros({6, 12});  // a gap of two columns between k and v
    std::vector<std::pair<std::string, torch::Tensor>> gapped{{"q", wide.narrow(1, 0, 4).t()},
                                                              {"k", wide.narrow(1, 4, 3).t()},
                                                              {"v", wide.narrow(1, 9, 3).t()}};
    WeightStage gap(gapped, {"q", "k", "v"}, shapes);
    CATCH_CHECK(gap.uncovered_bytes() == 6 * 12 * 4);
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

CATCH_TEST_CASE("weight stage: a c10d receive lands in the spare weights where the layouts agree", "[model][stage]") {
  const auto cfg = rl::test::tiny_config("qwen2");
  auto eng = engine_model(cfg, 3);
  Transformer trainer(cfg);
  trainer.init_random(9);
  const auto u = update_of(trainer);
  rl::dist::WeightMeta meta;
  for (size_t k = 0; k < u.names.size(); ++k) {
    meta.names.push_back(u.names[k]);
    meta.dtypes.emplace_back("float32");
    meta.shapes.push_back(u.shapes[k]);
  }
  WeightStage stage(eng->named_parameters(), u.names, u.shapes);
  stage.set_panel_sources(eng->panel_sources());
  stage.copy_uncovered();
  // The engine keeps the HF rows where packed panels serve its matmuls (AVX-512, the
  // SIMD kernels on): then every tensor's spare view takes the sent values as they are.
  const bool rows = rl::nn::bi::packed_available();
  size_t targets = 0;
  for (size_t k = 0; k < u.names.size(); ++k) {
    CATCH_INFO(u.names[k]);
    if (stage.target(k).defined()) ++targets;
    else CATCH_CHECK_FALSE(rows);  // rows: every view is dense in the HF shape
  }
  CATCH_CHECK(targets >= (rows ? u.names.size() : 1));  // the norms' vectors are dense either way

  size_t in_place = 0;
  over_a_group(
      "weight stage test",
      [&](rl::dist::ProcessGroup& g) { rl::dist::send_weights(g, trainer.named_parameters(), 0); },
      [&](rl::dist::ProcessGroup& g) {
        rl::dist::receive_weights(
            g, meta, 0,
            [&](size_t k, const at::Tensor& t) {
              const auto v = stage.target(k);
              if (v.defined() && v.data_ptr() == t.data_ptr()) ++in_place;
              stage.put(k, t);
            },
            [&](size_t k) { return stage.target(k); });
      });
  CATCH_CHECK(in_place == targets);
  CATCH_CHECK(stage.in_place() == targets);
  {
    // In the trainer's send order, in buckets of several: the stage lays its spare
    // storages out as the update writes them, so in the rows layout every bucket is one
    // range of them, received in place, fused q/k/v (GQA: k and v smaller) included.
    const auto& params = trainer.named_parameters();
    std::vector<std::string> names;
    std::vector<int64_t> bytes;
    for (const auto& [name, t] : params) names.push_back(name), bytes.push_back(t.nbytes());
    std::vector<std::pair<std::string, at::Tensor>> sent;
    rl::dist::WeightMeta sent_meta;
    for (size_t i : rl::model::weight_send_order(names, bytes)) {
      sent.push_back(params[i]);
      sent_meta.names.push_back(params[i].first);
      sent_meta.dtypes.emplace_back("float32");
      sent_meta.shapes.push_back(params[i].second.sizes().vec());
    }
    auto other = engine_model(cfg, 5);
    WeightStage bucketed(other->named_parameters(), sent_meta.names, sent_meta.shapes);
    bucketed.copy_uncovered();
    const int64_t bucket = 16 << 10;
    CATCH_CHECK(rl::dist::weight_buckets(sent_meta.dtypes, [&] {
                  std::vector<int64_t> b;
                  for (const auto& [n, t] : sent) b.push_back(t.nbytes());
                  return b;
                }(), bucket).size() < sent.size() / 2);
    over_a_group(
        "weight stage bucketed test", [&](rl::dist::ProcessGroup& g) { rl::dist::send_weights(g, sent, bucket); },
        [&](rl::dist::ProcessGroup& g) {
          rl::dist::receive_weights(
              g, sent_meta, bucket, [&](size_t k, const at::Tensor& t) { bucketed.put(k, t); },
              [&](size_t k) { return bucketed.target(k); });
        });
    if (rows) CATCH_CHECK(bucketed.in_place() == sent.size());
    bucketed.pack_panels();
    auto bucketed_panels = bucketed.take_panels();
    bucketed.swap_in();
    other->weights_changed(std::move(bucketed_panels));
    for (const auto& [name, t] : trainer.named_parameters()) CATCH_CHECK(torch::equal(other->parameter(name), t));
  }
  // The panels are packed from the staged weights before the swap, and taken after it:
  // wrong ones (the old weights') would change the logits below.
  stage.pack_panels();
  auto panels = stage.take_panels();
  CATCH_CHECK(panels.size() == (rows ? eng->panel_sources().size() : 0));
  CATCH_CHECK(panels.size() == (rows ? 4 * static_cast<size_t>(cfg.num_hidden_layers) + 1 : 0));
  stage.swap_in();
  eng->weights_changed(std::move(panels));
  for (const auto& [name, t] : trainer.named_parameters()) CATCH_CHECK(torch::equal(eng->parameter(name), t));
  auto same = engine_model(cfg, 9);
  auto ids = torch::randint(0, cfg.vocab_size, {2, 7});
  CATCH_CHECK(max_diff(*eng, *same, ids) == 0);
}

CATCH_TEST_CASE("weight receive: buffers in a ring that wraps, tensor by tensor and bucketed", "[model][stage]") {
  // 12 matrices of 1 MiB that no receiver takes in place (into() names a transposed
  // view), at most 3 MiB in flight: the ring of buffers (3 MiB) wraps three times over
  torch::manual_seed(5);
  std::vector<std::pair<std::string, at::Tensor>> sent;
  rl::dist::WeightMeta meta;
  for (int k = 0; k < 12; ++k) {
    sent.emplace_back("w" + std::to_string(k), torch::randn({512, 512}));
    meta.names.push_back(sent.back().first);
    meta.dtypes.emplace_back("float32");
    meta.shapes.push_back({512, 512});
  }
  for (const int64_t bucket : {int64_t{0}, int64_t{5} << 19}) {  // a tensor at a time; 2.5 MiB buckets (2,2,2,2,2,1,1)
    CATCH_INFO("bucket_bytes " << bucket);
    std::vector<at::Tensor> got(sent.size()), spare(sent.size());
    for (auto& s : spare) s = torch::empty({512, 512}).t();  // not contiguous: never received in place
    over_a_group(
        "weight ring test", [&](rl::dist::ProcessGroup& g) { rl::dist::send_weights(g, sent, bucket); },
        [&](rl::dist::ProcessGroup& g) {
          rl::dist::receive_weights(
              g, meta, bucket, [&](size_t k, const at::Tensor& t) { got[k] = t.clone(); },
              [&](size_t k) { return spare[k]; }, int64_t{3} << 20);
        });
    for (size_t k = 0; k < sent.size(); ++k) {
      CATCH_INFO(sent[k].first);
      CATCH_CHECK(torch::equal(got[k], sent[k].second));
    }
  }
}

CATCH_TEST_CASE("weight send: a trainer's model lies end to end in send order and goes uncopied", "[model][stage]") {
  const auto cfg = rl::test::tiny_config("qwen2");
  Transformer trainer(cfg);
  trainer.init_random(4);
  const auto& params = trainer.named_parameters();
  std::vector<std::string> names;
  std::vector<int64_t> bytes;
  for (const auto& [name, t] : params) names.push_back(name), bytes.push_back(t.nbytes());
  std::vector<std::pair<std::string, at::Tensor>> sent;
  for (size_t i : rl::model::weight_send_order(names, bytes)) sent.push_back(params[i]);
  // One storage, each tensor contiguous and its own (not a view), in send order.
  for (size_t k = 1; k < sent.size(); ++k) {
    CATCH_INFO(sent[k].first);
    const at::Tensor &a = sent[k - 1].second, &b = sent[k].second;
    CATCH_CHECK(b.is_contiguous());
    CATCH_CHECK_FALSE(b.is_view());
    CATCH_CHECK(b.storage().is_alias_of(a.storage()));
    CATCH_CHECK(b.storage_offset() * 4 >= a.storage_offset() * 4 + static_cast<int64_t>(a.nbytes()));
    CATCH_CHECK(b.storage_offset() * 4 % 64 == 0);
  }
  // An in-place write to one parameter moves its version counter only.
  const auto v0 = sent[0].second._version(), v1 = sent[1].second._version();
  {
    torch::NoGradGuard ng;
    sent[1].second.mul_(1);
  }
  CATCH_CHECK(sent[0].second._version() == v0);
  CATCH_CHECK(sent[1].second._version() == v1 + 1);

  rl::dist::WeightMeta meta;
  for (const auto& [name, t] : sent) {
    meta.names.push_back(name);
    meta.dtypes.emplace_back("float32");
    meta.shapes.push_back(t.sizes().vec());
  }
  // Buckets of several in send order are ranges of that storage, sent as they lie: every
  // tensor of this model is a multiple of 64 bytes. In checkpoint order they are packed.
  std::vector<std::pair<std::string, at::Tensor>> shuffled(params.begin(), params.end());
  std::swap(shuffled[1], shuffled[2]);
  rl::dist::WeightMeta shuffled_meta;
  for (const auto& [name, t] : shuffled) {
    shuffled_meta.names.push_back(name);
    shuffled_meta.dtypes.emplace_back("float32");
    shuffled_meta.shapes.push_back(t.sizes().vec());
  }
  const int64_t bucket = 64 << 10;
  for (const bool in_order : {true, false}) {
    CATCH_INFO((in_order ? "send order" : "shuffled"));
    const auto& list = in_order ? sent : shuffled;
    const auto& m = in_order ? meta : shuffled_meta;
    std::vector<at::Tensor> got(list.size());
    rl::dist::SentWeights stats;
    over_a_group(
        "weight send test", [&](rl::dist::ProcessGroup& g) { stats = rl::dist::send_weights(g, list, bucket); },
        [&](rl::dist::ProcessGroup& g) {
          rl::dist::receive_weights(g, m, bucket, [&](size_t k, const at::Tensor& t) { got[k] = t.clone(); });
        });
    CATCH_CHECK(stats.broadcasts == rl::dist::weight_buckets(m.dtypes, [&] {
                  std::vector<int64_t> b;
                  for (const auto& [n, t] : list) b.push_back(t.nbytes());
                  return b;
                }(), bucket).size());
    CATCH_CHECK(stats.broadcasts < list.size());  // some buckets hold several tensors
    if (in_order) CATCH_CHECK(stats.copied_bytes == 0);
    else CATCH_CHECK(stats.copied_bytes > 0);
    for (size_t k = 0; k < list.size(); ++k) {
      CATCH_INFO(list[k].first);
      CATCH_CHECK(torch::equal(got[k], list[k].second));
    }
  }
}

CATCH_TEST_CASE("weight buckets shrink towards the end; a whole model is sent largest first", "[stage]") {
  using Ranges = std::vector<std::pair<size_t, size_t>>;
  constexpr int64_t MiB = int64_t{1} << 20;
  const std::vector<std::string> f32(10, "float32");
  const std::vector<int64_t> eight(10, 8 * MiB);
  // 80 MiB in 64 MiB buckets: capped at half of what is left (40, 20, 12, 8, 4 MiB), a
  // tensor over the cap alone
  CATCH_CHECK(rl::dist::weight_buckets(f32, eight, 64 * MiB) == Ranges{{0, 5}, {5, 7}, {7, 8}, {8, 9}, {9, 10}});
  // never below bucket_bytes / 16: 1 MiB tensors in 32 MiB buckets end in buckets of 2 MiB
  const std::vector<int64_t> ones(8, MiB);
  CATCH_CHECK(rl::dist::weight_buckets(std::vector<std::string>(8, "float32"), ones, 32 * MiB) ==
              Ranges{{0, 4}, {4, 6}, {6, 8}});
  // a dtype change cuts a bucket; bucket_bytes 0: a tensor at a time
  std::vector<std::string> mixed = f32;
  mixed[2] = "bfloat16";
  CATCH_CHECK(rl::dist::weight_buckets(mixed, eight, 64 * MiB).front() == std::pair<size_t, size_t>{0, 2});
  CATCH_CHECK(rl::dist::weight_buckets(f32, eight, 0).size() == 10);
  // the send order: largest first, ties in their order, the parts of a fused matrix as one
  CATCH_CHECK(rl::model::weight_send_order({"a", "b", "c", "d", "e"}, {4, 65, 1, 65, 3}) ==
              std::vector<size_t>{1, 3, 0, 4, 2});
  CATCH_CHECK(rl::model::weight_send_order({}, {}).empty());
  const std::string l0 = "model.layers.0.", l1 = "model.layers.1.";
  const std::vector<std::string> names = {l0 + "self_attn.q_proj.weight", l0 + "self_attn.k_proj.weight",
                                          l0 + "self_attn.v_proj.weight", l0 + "self_attn.o_proj.weight",
                                          l1 + "self_attn.q_proj.weight", l1 + "mlp.up_proj.weight",
                                          l1 + "mlp.gate_proj.bias",      l1 + "mlp.gate_proj.weight"};
  // q/k/v of layer 0 weigh 6 together, more than its o (4); layer 1's gate/up weights 7
  CATCH_CHECK(rl::model::weight_send_order(names, {4, 1, 1, 4, 4, 3, 9, 4}) ==
              std::vector<size_t>{6, 5, 7, 0, 1, 2, 3, 4});
  CATCH_CHECK(rl::model::fusion_group(names[1]) == l0 + "self_attn.qkv.weight");
  CATCH_CHECK(rl::model::fusion_group(names[6]) == l1 + "mlp.gate_up.bias");
  CATCH_CHECK(rl::model::fusion_group(l1 + "mlp.down_proj.weight") == l1 + "mlp.down_proj.weight");
  CATCH_CHECK(rl::model::fusion_group("model.embed_tokens.weight") == "model.embed_tokens.weight");
  CATCH_CHECK(rl::model::fusion_group("model.layers.q_proj.weight") == "model.layers.q_proj.weight");
}

CATCH_TEST_CASE("huge page arenas: storages keep them alive; a released one serves the next of its size",
                "[model][stage]") {
  rl::tensor::HugePageArena::drop_kept();
  void* first = nullptr;
  {
    auto a = rl::tensor::HugePageArena::make(5 << 20);
    CATCH_CHECK(a->size() == (5 << 20));
    c10::Storage s = a->storage(1 << 20, 4096);
    first = s.mutable_data();
    CATCH_CHECK_THROWS(a->storage(5 << 20, 1));
    a.reset();  // the storage still holds it: writing is fine
    std::memset(s.mutable_data(), 7, 4096);
  }
  auto b = rl::tensor::HugePageArena::make(5 << 20);  // kept, and warm: the same mapping
  CATCH_CHECK(b->storage(1 << 20, 1).mutable_data() == first);
  CATCH_CHECK(static_cast<unsigned char*>(b->storage(1 << 20, 1).mutable_data())[0] == 7);
  auto c = rl::tensor::HugePageArena::make(5 << 20);  // none kept now: a new one
  CATCH_CHECK(c->storage(1 << 20, 1).mutable_data() != first);
  b.reset();
  c.reset();
  CATCH_CHECK(rl::tensor::HugePageArena::drop_kept() == 2 * (6 << 20));  // both kept, each 3 huge pages
  CATCH_CHECK(rl::tensor::HugePageArena::drop_kept() == 0);
}

CATCH_TEST_CASE("huge page arenas: at most four released mappings are kept", "[model][stage]") {
  rl::tensor::HugePageArena::drop_kept();
  for (int i = 1; i <= 5; ++i) rl::tensor::HugePageArena::make(int64_t{i} << 21);  // released at once
  CATCH_CHECK(rl::tensor::HugePageArena::drop_kept() == (int64_t{2 + 3 + 4 + 5} << 21));  // the oldest went
}

CATCH_TEST_CASE("panel memory: the panels bi::pack makes, in a mapping the next update's panels reuse",
                "[model][stage]") {
  if (!rl::nn::bi::packed_available()) return;  // no packed GEMM path on this CPU (or RLHOST_BI_SIMD=0)
  torch::manual_seed(9);
  rl::tensor::HugePageArena::drop_kept();
  // [out, in] matrices as a model holds them: rows, a transposed view, a tiny one.
  const std::vector<torch::Tensor> w{torch::randn({1000, 520}), torch::randn({300, 1376}).t(), torch::randn({5, 7})};
  const void* first = nullptr;
  {
    rl::nn::PanelMemory memory(w);
    for (size_t i = 0; i < w.size(); ++i) {
      auto want = rl::nn::bi::pack(w[i]);
      auto got = memory.pack(i, w[i]);
      CATCH_REQUIRE(got.bytes() == want.bytes());
      CATCH_CHECK(std::memcmp(got.data.get(), want.data.get(), got.bytes()) == 0);
      if (i == 0) first = got.data.get();
    }
    CATCH_CHECK_THROWS(memory.pack(3, w[0]));
  }  // the memory and its panels released: the mapping is kept
  rl::nn::PanelMemory again(w);
  auto p = again.pack(0, w[0] * 2);
  CATCH_CHECK(p.data.get() == first);
  CATCH_CHECK(torch::equal(torch::from_blob(p.data.get(), {520, 48}), (w[0] * 2).narrow(0, 0, 48).t()));
  CATCH_CHECK(again.pack(1, torch::randn({2, 2})).bytes() == rl::nn::bi::pack(torch::randn({2, 2})).bytes());
}
