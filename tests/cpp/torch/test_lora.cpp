// LoRA (nn/lora.hpp): a fresh adapter changes nothing; the engine's cached forward
// with row groups under different adapters (and none) equals the training path with
// each adapter set, bit for bit; the trainer trains the adapter only and checkpoints
// it; PEFT files round-trip and bad ones are refused naming file and field.
#include <torch/torch.h>

#define CATCH_CONFIG_PREFIX_ALL
#include <catch2/catch.hpp>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "model_fixtures.hpp"
#include "nn/logprobs.hpp"
#include "nn/lora.hpp"
#include "nn/transformer.hpp"
#include "trainer/checkpoint.hpp"
#include "trainer/trainer.hpp"
#include "trainer/trainer_options.hpp"

using namespace rl;
using nn::CachedBatch;
using nn::LoraAdapter;
using nn::LoraConfig;
using nn::Transformer;
namespace fs = std::filesystem;

namespace {

struct TempDir {
  fs::path path;
  TempDir() {
    path = fs::temp_directory_path() /
           ("rlhost-lora-test-" + std::to_string(::getpid()) + "-" + std::to_string(reinterpret_cast<uintptr_t>(this)));
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

std::shared_ptr<LoraAdapter> random_adapter(const model::ModelConfig& c, uint64_t seed, LoraConfig cfg = {}) {
  auto a = std::make_shared<LoraAdapter>(c, cfg);
  a->init(seed, /*identity=*/false);
  return a;
}

trainer::TrainBatch batch() {
  trainer::TrainBatch b;
  b.tokens = {{1, 2, 3, 4, 5}, {6, 7, 8, 9, 10}};
  b.response_lengths = {2, 3};
  b.rewards = {1.0, -1.0};
  b.loss_masks = {{1, 1}, {1, 1, 1}};
  return b;
}

}  // namespace

CATCH_TEST_CASE("LoRA: a fresh adapter (B = 0) leaves logits unchanged; a trained one changes them", "[lora]") {
  for (std::string family : {"qwen3", "qwen2"}) {
    auto m = std::make_shared<Transformer>(test::tiny_config(family));
    m->init_random(3);
    torch::NoGradGuard ng;
    auto ids = torch::randint(0, 97, {2, 9}, at::make_generator<at::CPUGeneratorImpl>(1), torch::kInt64);
    auto base = m->logits(m->forward(ids));
    LoraConfig cfg;
    cfg.lm_head = true;
    auto fresh = std::make_shared<LoraAdapter>(m->config(), cfg);
    fresh->init(1);
    for (size_t i = 1; i < fresh->named_parameters().size(); i += 2)
      CATCH_CHECK(fresh->named_parameters()[i].second.abs().max().item<float>() == 0.0f);
    m->set_lora(fresh);
    CATCH_CHECK(torch::equal(m->logits(m->forward(ids)), base));
    m->set_lora(random_adapter(m->config(), 2, cfg));
    CATCH_CHECK(!torch::equal(m->logits(m->forward(ids)), base));
    m->set_lora(nullptr);
    CATCH_CHECK(torch::equal(m->logits(m->forward(ids)), base));
  }
}

CATCH_TEST_CASE("LoRA: the engine's row groups (adapter X, adapter Y, none) equal the training path bit for bit",
                "[lora]") {
  for (std::string family : {"qwen3", "qwen2", "llama"}) {
    CATCH_SECTION(family) {
      const auto cfg = test::tiny_config(family);
      auto train = std::make_shared<Transformer>(cfg);
      train->init_random(5);
      Transformer eng(cfg, nn::ModelOptions{torch::kFloat32, torch::kCPU, true});
      eng.init_random(5);  // the same values in the inference layout (fused q/k/v, gate/up)
      LoraConfig some;
      some.rank = 3;
      some.alpha = 7;
      some.targets = {nn::LoraTarget::v_proj, nn::LoraTarget::q_proj, nn::LoraTarget::down_proj,
                      nn::LoraTarget::up_proj};
      auto X = random_adapter(cfg, 11);
      auto Y = random_adapter(cfg, 12, some);
      const std::vector<std::shared_ptr<const LoraAdapter>> who = {X, Y, nullptr};
      auto gen = at::make_generator<at::CPUGeneratorImpl>(9);
      const std::vector<int64_t> lens = {13, 9, 11};
      std::vector<torch::Tensor> seqs;
      for (auto n : lens) seqs.push_back(torch::randint(0, 97, {1, n}, gen, torch::kInt64));

      // The training path, one sequence at a time under its adapter: hidden states and log-probs.
      std::vector<torch::Tensor> want_h, want_lp;
      for (size_t s = 0; s < seqs.size(); ++s) {
        train->set_lora(who[s] ? std::const_pointer_cast<LoraAdapter>(who[s]) : nullptr);
        torch::NoGradGuard ng;
        want_h.push_back(train->forward(seqs[s])[0]);
        want_lp.push_back(train->sequence_logprobs(seqs[s]).logprobs[0]);
      }
      // With gradients on (the trainer's autograd path), the same bits.
      {
        train->set_lora(std::const_pointer_cast<LoraAdapter>(X));
        for (auto& t : X->parameters()) t.requires_grad_(true);
        auto lp = train->sequence_logprobs(seqs[0]).logprobs[0].detach();
        for (auto& t : X->parameters()) t.requires_grad_(false);
        CATCH_CHECK(torch::equal(lp, want_lp[0]));
      }
      train->set_lora(nullptr);

      // The engine: all three prefill their first tokens together, then decode the rest
      // one token each per step, rows grouped by adapter.
      const int64_t bs = 4;
      auto cache = eng.new_kv_cache(32, bs);
      std::vector<std::vector<int64_t>> tables = {{0, 1, 2, 3}, {4, 5, 6}, {7, 8, 9}};
      std::vector<int64_t> done(3, 0);
      std::vector<std::vector<torch::Tensor>> got(3);
      auto step = [&](const std::vector<int64_t>& n) {
        CachedBatch b;
        std::vector<int64_t> ids, pos, slot, active;
        std::vector<std::vector<int64_t>> tabs;
        std::vector<std::vector<int64_t>> group_rows(2);
        for (size_t s = 0; s < 3; ++s) {
          if (n[s] == 0) continue;
          active.push_back(static_cast<int64_t>(s));
          for (int64_t i = done[s]; i < done[s] + n[s]; ++i) {
            if (s < 2) group_rows[s].push_back(static_cast<int64_t>(ids.size()));
            ids.push_back(seqs[s][0][i].item<int64_t>());
            pos.push_back(i);
            slot.push_back(tables[s][static_cast<size_t>(i / bs)] * bs + i % bs);
          }
          b.query_lens.push_back(n[s]);
          b.context_lens.push_back(done[s] + n[s]);
          tabs.push_back(tables[s]);
        }
        b.input_ids = torch::tensor(ids, torch::kInt64);
        b.positions = torch::tensor(pos, torch::kInt64);
        b.slot_mapping = torch::tensor(slot, torch::kInt64);
        b.context_slots = CachedBatch::slots_from_blocks(tabs, b.context_lens, bs);
        for (size_t g = 0; g < 2; ++g)
          if (!group_rows[g].empty()) {
            b.lora.adapters.push_back(who[g]);
            b.lora.rows.push_back(torch::tensor(group_rows[g], torch::kInt64));
          }
        auto h = eng.forward_cached(b, cache);
        int64_t off = 0;
        for (auto s : active) {
          got[static_cast<size_t>(s)].push_back(h.narrow(0, off, n[static_cast<size_t>(s)]));
          off += n[static_cast<size_t>(s)];
          done[static_cast<size_t>(s)] += n[static_cast<size_t>(s)];
        }
      };
      step({6, 4, 5});
      while (done[0] < lens[0] || done[1] < lens[1] || done[2] < lens[2]) {
        std::vector<int64_t> n(3);
        for (size_t s = 0; s < 3; ++s) n[s] = done[s] < lens[s] ? 1 : 0;
        step(n);
      }
      for (size_t s = 0; s < 3; ++s) {
        auto h = torch::cat(got[s], 0);
        CATCH_INFO("sequence " << s);
        CATCH_CHECK(torch::equal(h, want_h[s]));
        // log-probs from those hidden states with the engine's lm_head, as its sampler computes them
        auto targets = seqs[s][0].narrow(0, 1, lens[s] - 1);
        auto lp = nn::token_logprobs(h.narrow(0, 0, lens[s] - 1), eng.lm_head_weight(), targets, 1.0, false, 0, -1,
                                     &eng.lm_head_packed())
                      .logprobs;
        CATCH_CHECK(torch::equal(lp, want_lp[s]));
      }
      // The weights digest covers the adapter: the base's alone without one, another with one.
      const auto base_digest = train->exact_weights_digest();
      train->set_lora(std::const_pointer_cast<LoraAdapter>(X));
      CATCH_CHECK(train->exact_weights_digest() == nn::lora_weights_digest(eng.exact_weights_digest(), *X));
      CATCH_CHECK(train->exact_weights_digest() != base_digest);
      train->set_lora(nullptr);
    }
  }
}

CATCH_TEST_CASE("LoRA: an adapter on lm_head gives the engine's rows the training path's logits and log-probs bit for bit",
                "[lora]") {
  for (std::string family : {"qwen3", "llama"}) {
    CATCH_SECTION(family) {
      const auto cfg = test::tiny_config(family);
      auto train = std::make_shared<Transformer>(cfg);
      train->init_random(5);
      Transformer eng(cfg, nn::ModelOptions{torch::kFloat32, torch::kCPU, true});
      eng.init_random(5);
      LoraConfig head;
      head.lm_head = true;
      auto X = random_adapter(cfg, 21, head);
      auto gen = at::make_generator<at::CPUGeneratorImpl>(3);
      auto seq = torch::randint(0, 97, {1, 10}, gen, torch::kInt64);
      train->set_lora(X);
      torch::NoGradGuard ng;
      auto hidden = train->forward(seq)[0];
      auto want_logits = train->logits(hidden);
      auto want_lp = train->sequence_logprobs(seq).logprobs[0];
      train->set_lora(nullptr);
      // the engine: the adapter's rows in one prefill, then its merged unembedding (the
      // runner's per-adapter lm_head) over those rows' hidden states
      auto cache = eng.new_kv_cache(4, 4);
      CachedBatch b;
      b.input_ids = seq[0];
      b.positions = torch::arange(10, torch::kInt64);
      b.slot_mapping = torch::arange(10, torch::kInt64);
      b.query_lens = {10};
      b.context_lens = {10};
      b.context_slots = CachedBatch::slots_from_blocks({{0, 1, 2}}, b.context_lens, 4);
      b.lora.adapters = {X};
      b.lora.rows = {torch::arange(10, torch::kInt64)};
      auto h = eng.forward_cached(b, cache);
      CATCH_CHECK(torch::equal(h, hidden));
      const auto merged = X->merged_lm_head(eng.lm_head_weight());
      CATCH_CHECK(torch::equal(eng.logits_with(h, merged), want_logits));
      auto lp = nn::token_logprobs(h.narrow(0, 0, 9), merged, seq[0].narrow(0, 1, 9), 1.0, false).logprobs;
      CATCH_CHECK(torch::equal(lp, want_lp));
      CATCH_CHECK(!torch::equal(lp, train->sequence_logprobs(seq).logprobs[0]));  // the adapter mattered
    }
  }
}

CATCH_TEST_CASE("LoRA: the engine refuses bad row groups and adapters of another shape", "[lora]") {
  const auto cfg = test::tiny_config("qwen3");
  Transformer eng(cfg, nn::ModelOptions{torch::kFloat32, torch::kCPU, true});
  eng.init_random(1);
  auto cache = eng.new_kv_cache(4, 4);
  CachedBatch b;
  b.input_ids = torch::tensor(std::vector<int64_t>{1, 2}, torch::kInt64);
  b.positions = torch::tensor(std::vector<int64_t>{0, 1}, torch::kInt64);
  b.slot_mapping = torch::tensor(std::vector<int64_t>{0, 1}, torch::kInt64);
  b.query_lens = {2};
  b.context_lens = {2};
  b.context_slots = CachedBatch::slots_from_blocks({{0}}, b.context_lens, 4);
  b.lora.adapters = {random_adapter(cfg, 1)};
  b.lora.rows = {torch::tensor(std::vector<int64_t>{0, 2}, torch::kInt64)};
  CATCH_CHECK(contains(error_of([&] { eng.forward_cached(b, cache); }), "outside [0, 2)"));
  b.lora.rows = {torch::tensor(std::vector<int64_t>{1, 1}, torch::kInt64)};
  CATCH_CHECK(contains(error_of([&] { eng.forward_cached(b, cache); }), "already in another group"));
  auto other = test::tiny_config("qwen2");
  CATCH_CHECK(contains(error_of([&] { eng.set_lora(random_adapter(other, 1)); }), "another model shape"));
}

CATCH_TEST_CASE("LoRA: configs are checked naming the option", "[lora]") {
  CATCH_CHECK(contains(error_of([] { nn::make_lora_config(0, 16, {"all-linear"}); }), "lora_rank"));
  CATCH_CHECK(contains(error_of([] { nn::make_lora_config(8, 0, {"all-linear"}); }), "lora_alpha"));
  CATCH_CHECK(contains(error_of([] { nn::make_lora_config(8, 16, {"qkv_proj"}); }), "'qkv_proj'"));
  CATCH_CHECK(contains(error_of([] { nn::make_lora_config(8, 16, {}); }), "target_modules"));
  auto c = nn::make_lora_config(4, 8, {"lm_head", "all-linear", "q_proj"});
  CATCH_CHECK(c.targets.size() == 7);
  CATCH_CHECK(c.lm_head);
  CATCH_CHECK(c.scale() == 2.0);
  // The trainer's options: JSON in, the same JSON out; bad values named.
  auto o = trainer::trainer_options_from_json(
      {{"lora_rank", 4}, {"lora_alpha", 8}, {"target_modules", "q_proj, v_proj,lm_head"}});
  CATCH_CHECK(o.lora_rank == 4);
  CATCH_CHECK(o.target_modules == std::vector<std::string>{"q_proj", "v_proj", "lm_head"});
  CATCH_CHECK(trainer::trainer_options_to_json(o)["target_modules"] == nlohmann::json({"q_proj", "v_proj", "lm_head"}));
  CATCH_CHECK(trainer::trainer_options_to_json(trainer::TrainerOptions{})["target_modules"] == "all-linear");
  CATCH_CHECK(contains(error_of([] { trainer::trainer_options_from_json({{"target_modules", {"embed_tokens"}}}); }),
                       "'embed_tokens'"));
  CATCH_CHECK(contains(error_of([] { trainer::trainer_options_from_json({{"lora_rank", -1}}); }), "lora_rank"));
  auto m = std::make_shared<Transformer>(test::tiny_config("qwen3"));
  m->init_random(1);
  trainer::TrainerOptions t;
  t.lora_rank = 4;
  t.use_critic = true;
  t.loss.estimator = trainer::Estimator::ppo;
  CATCH_CHECK(contains(error_of([&] { trainer::Trainer x(m, nullptr, t, {}, m); }), "use_critic"));
}

CATCH_TEST_CASE("LoRA: an adapter from named tensors (a sync's) takes exactly its own, naming what is off", "[lora]") {
  const auto cfg = test::tiny_config("qwen3");
  const auto lc = nn::make_lora_config(4, 8, {"q_proj", "down_proj", "lm_head"});
  CATCH_CHECK(nn::lora_target_modules(lc) == std::vector<std::string>{"q_proj", "down_proj", "lm_head"});
  nn::LoraAdapter src(cfg, lc);
  src.init(3, /*identity=*/false);
  nn::LoraAdapter dst(cfg, lc);
  nn::copy_adapter_tensors(dst, src.named_parameters());
  for (size_t i = 0; i < dst.named_parameters().size(); ++i)
    CATCH_CHECK(torch::equal(dst.named_parameters()[i].second, src.named_parameters()[i].second));
  auto named = src.named_parameters();
  auto missing = named;
  missing.pop_back();
  CATCH_CHECK(contains(error_of([&] { nn::copy_adapter_tensors(dst, missing); }), "is missing"));
  auto extra = named;
  extra.emplace_back("base_model.model.model.layers.0.self_attn.k_proj.lora_A.weight", torch::zeros({4, 8}));
  CATCH_CHECK(contains(error_of([&] { nn::copy_adapter_tensors(dst, extra); }), "k_proj.lora_A.weight' is unexpected"));
  auto twice = named;
  twice.push_back(named.front());
  CATCH_CHECK(contains(error_of([&] { nn::copy_adapter_tensors(dst, twice); }), "given twice"));
  auto misshapen = named;
  misshapen.front().second = torch::zeros({3, 3});
  CATCH_CHECK(contains(error_of([&] { nn::copy_adapter_tensors(dst, misshapen); }), "has shape [3, 3]"));
}

CATCH_TEST_CASE("LoRA: the trainer trains the adapter only, over the frozen base, and checkpoints it", "[lora]") {
  TempDir tmp;
  auto make = [] {
    auto m = std::make_shared<Transformer>(test::tiny_config("qwen3"));
    m->init_random(4);
    trainer::TrainerOptions o;
    o.optim.lr = 1e-2;
    o.micro_batch_size = 2;
    o.lora_rank = 4;
    o.lora_alpha = 8;
    o.target_modules = {"all-linear", "lm_head"};
    return std::make_shared<trainer::Trainer>(m, nullptr, o);
  };
  auto tr = make();
  auto& m = tr->policy();
  std::vector<torch::Tensor> before;
  for (const auto& [n, t] : m.named_parameters()) {
    CATCH_CHECK(!t.requires_grad());
    before.push_back(t.clone());
  }
  CATCH_REQUIRE(tr->lora());
  CATCH_CHECK(m.lora() == tr->lora());
  const auto n_adapter = tr->lora()->named_parameters().size();
  CATCH_CHECK(n_adapter == 2 * (7 * 2 + 1));
  CATCH_CHECK(tr->optimizer().param_groups()[0].params().size() == n_adapter);
  const auto lp0 = tr->response_logprobs(batch());
  tr->train(batch());
  tr->train(batch());
  size_t i = 0;
  for (const auto& [n, t] : m.named_parameters()) {
    CATCH_INFO(n);
    CATCH_CHECK(torch::equal(t, before[i++]));
    CATCH_CHECK(!t.grad().defined());
  }
  bool b_moved = false;
  for (const auto& [n, t] : tr->lora()->named_parameters())
    if (n.find("lora_B") != std::string::npos) b_moved = b_moved || t.abs().max().item<float>() > 0;
  CATCH_CHECK(b_moved);
  const auto lp1 = tr->response_logprobs(batch());
  CATCH_CHECK(lp1 != lp0);
  // state_bytes counts the adapter and its AdamW state, not the base
  double adapter_bytes = 0;
  for (const auto& t : tr->lora()->parameters()) adapter_bytes += static_cast<double>(t.nbytes());
  CATCH_CHECK(tr->state_bytes() <= 4 * adapter_bytes + 1);

  // Checkpoint: PEFT files + optimizer.pt, no model weights; a fresh LoRA trainer resumes exactly.
  trainer::SaveRequest req;
  req.sources = {{"model", "/base/model"}};
  auto saved = trainer::save_checkpoint(*tr, tmp.path, req);
  CATCH_CHECK(fs::exists(saved.dir / "adapter_model.safetensors"));
  CATCH_CHECK(fs::exists(saved.dir / "adapter_config.json"));
  CATCH_CHECK(!fs::exists(saved.dir / "model.safetensors"));
  auto tr2 = make();
  trainer::load_checkpoint(*tr2, saved.dir);
  CATCH_CHECK(tr2->step() == tr->step());
  for (size_t k = 0; k < n_adapter; ++k)
    CATCH_CHECK(torch::equal(tr2->lora()->named_parameters()[k].second, tr->lora()->named_parameters()[k].second));
  tr->train(batch());
  tr2->train(batch());
  for (size_t k = 0; k < n_adapter; ++k)
    CATCH_CHECK(torch::equal(tr2->lora()->named_parameters()[k].second, tr->lora()->named_parameters()[k].second));
  // A full-model trainer refuses the LoRA checkpoint, naming what it is.
  auto full = std::make_shared<Transformer>(test::tiny_config("qwen3"));
  full->init_random(4);
  trainer::Trainer plain(full, nullptr, trainer::TrainerOptions{});
  CATCH_CHECK(contains(error_of([&] { trainer::load_checkpoint(plain, saved.dir); }), "LoRA checkpoint"));
}

CATCH_TEST_CASE("LoRA: PEFT files round-trip, and what PEFT features rlhost lacks is refused naming the field", "[lora]") {
  TempDir tmp;
  const auto cfg = test::tiny_config("qwen2");
  LoraConfig c;
  c.rank = 2;
  c.alpha = 5;
  c.targets = {nn::LoraTarget::k_proj, nn::LoraTarget::o_proj};
  c.lm_head = true;
  auto a = random_adapter(cfg, 3, c);
  nn::save_peft_adapter(*a, tmp.path, "some/base");
  auto j = nlohmann::json::parse(std::ifstream(tmp.path / "adapter_config.json"));
  CATCH_CHECK(j["peft_type"] == "LORA");
  CATCH_CHECK(j["task_type"] == "CAUSAL_LM");
  CATCH_CHECK(j["r"] == 2);
  CATCH_CHECK(j["lora_alpha"] == 5);
  CATCH_CHECK(j["target_modules"] == nlohmann::json({"k_proj", "o_proj", "lm_head"}));
  CATCH_CHECK(j["base_model_name_or_path"] == "some/base");
  auto b = nn::load_peft_adapter(tmp.path, cfg);
  CATCH_REQUIRE(b->named_parameters().size() == a->named_parameters().size());
  for (size_t i = 0; i < a->named_parameters().size(); ++i) {
    CATCH_CHECK(b->named_parameters()[i].first == a->named_parameters()[i].first);
    CATCH_CHECK(torch::equal(b->named_parameters()[i].second, a->named_parameters()[i].second));
  }
  CATCH_CHECK(a->named_parameters()[0].first == "base_model.model.model.layers.0.self_attn.k_proj.lora_A.weight");
  CATCH_CHECK(a->named_parameters().back().first == "base_model.model.lm_head.lora_B.weight");

  auto refused = [&](const std::function<void(nlohmann::json&)>& edit) {
    auto k = j;
    edit(k);
    std::ofstream(tmp.path / "adapter_config.json") << k.dump();
    return error_of([&] { nn::load_peft_adapter(tmp.path, cfg); });
  };
  auto e = refused([](auto& k) { k["use_dora"] = true; });
  CATCH_CHECK(contains(e, "adapter_config.json: use_dora"));
  CATCH_CHECK(contains(refused([](auto& k) { k["use_rslora"] = true; }), "use_rslora"));
  CATCH_CHECK(contains(refused([](auto& k) { k["peft_type"] = "IA3"; }), "peft_type"));
  CATCH_CHECK(contains(refused([](auto& k) { k["target_modules"] = ".*proj"; }), "target_modules"));
  CATCH_CHECK(contains(refused([](auto& k) { k["rank_pattern"] = {{"q_proj", 4}}; }), "rank_pattern"));
  e = refused([](auto& k) { k["r"] = 3; });
  CATCH_CHECK(contains(e, "adapter_model.safetensors"));
  CATCH_CHECK(contains(e, "shape"));
  e = error_of([&] { nn::load_peft_adapter(tmp.path, test::tiny_config("qwen3")); });
  CATCH_CHECK(!e.empty());
}

CATCH_TEST_CASE("LoRA: a float32 adapter over a bfloat16 base computes in float32 and trains", "[lora]") {
  const auto cfg = test::tiny_config("qwen3");
  auto m16 = std::make_shared<Transformer>(cfg, nn::ModelOptions{torch::kBFloat16, torch::kCPU, false});
  m16->init_random(6);
  auto m32 = std::make_shared<Transformer>(cfg);
  m32->init_random(6);
  auto a = random_adapter(cfg, 8);
  auto ids = torch::randint(0, 97, {1, 12}, at::make_generator<at::CPUGeneratorImpl>(2), torch::kInt64);
  torch::Tensor base16;
  {
    torch::NoGradGuard ng;
    base16 = m16->sequence_logprobs(ids).logprobs;
  }
  m16->set_lora(a);
  m32->set_lora(a);
  for (auto& t : a->parameters()) t.requires_grad_(true);
  auto lp16 = m16->sequence_logprobs(ids).logprobs;
  CATCH_CHECK(m16->forward(ids).scalar_type() == torch::kBFloat16);
  CATCH_CHECK(!torch::equal(lp16.detach(), base16));  // the adapter acts
  torch::Tensor lp32;
  {
    torch::NoGradGuard ng;
    lp32 = m32->sequence_logprobs(ids).logprobs;
  }
  CATCH_CHECK((lp16.detach() - lp32).abs().max().item<double>() < 0.1);  // bf16 rounding of the base only
  lp16.mean().backward();
  for (const auto& [n, t] : a->named_parameters()) {
    CATCH_INFO(n);
    CATCH_REQUIRE(t.grad().defined());
    CATCH_CHECK(t.grad().scalar_type() == torch::kFloat32);
  }
  // The trainer takes a bf16 base with LoRA (the float32 master weights are the adapter's).
  auto base = std::make_shared<Transformer>(cfg, nn::ModelOptions{torch::kBFloat16, torch::kCPU, false});
  base->init_random(6);
  trainer::TrainerOptions o;
  o.lora_rank = 2;
  o.bf16 = true;
  trainer::Trainer tr(base, nullptr, o);
  CATCH_CHECK(tr.lora()->parameters()[0].scalar_type() == torch::kFloat32);
  tr.train(batch());
  CATCH_CHECK(tr.step() == 1);
}
