// The transformer against golden data (stories260K), the cached path against the
// full forward, and checkpoint round trips. Parity with Hugging Face transformers
// is tests/e2e/test_model_parity.py.
#include <torch/torch.h>

#define CATCH_CONFIG_PREFIX_ALL
#include <catch2/catch.hpp>

#include <cstring>
#include <fstream>
#include <limits>

#include "model_fixtures.hpp"
#include "nn/greedy.hpp"
#include "nn/transformer.hpp"
#include "nn/weights.hpp"

using rl::nn::CachedBatch;
using rl::nn::Transformer;

namespace {

nlohmann::json read_json(const std::filesystem::path& p) {
  std::ifstream in(p);
  return nlohmann::json::parse(in);
}

torch::Tensor ids_tensor(const std::vector<int64_t>& ids) { return torch::tensor(ids, torch::kInt64).unsqueeze(0); }

Transformer& stories() {
  static auto m = Transformer::from_pretrained(rl::test::stories_dir());
  return *m;
}

std::unique_ptr<Transformer> tiny(const std::string& family, uint64_t seed = 7) {
  auto m = std::make_unique<Transformer>(rl::test::tiny_config(family));
  m->init_random(seed);
  return m;
}

}  // namespace

CATCH_TEST_CASE("stories260K logits match the float64 reference to 1e-4", "[model]") {
  auto ref = read_json(rl::test::stories_dir() / "reference_outputs.json")["logits"];
  auto ids = ref["input_ids"].get<std::vector<int64_t>>();
  torch::NoGradGuard no_grad;
  auto logits = stories().logits(stories().forward(ids_tensor(ids)))[0];
  std::vector<std::vector<float>> values = ref["values"];
  auto expected = torch::empty({static_cast<int64_t>(values.size()), 512});
  for (size_t i = 0; i < values.size(); ++i) expected[i] = torch::tensor(values[i]);
  const double max_diff = (logits - expected).abs().max().item<double>();
  CATCH_INFO("max |logit - reference| = " << max_diff);
  CATCH_CHECK(max_diff < 1e-4);
  auto argmax = logits.argmax(-1);
  auto lse = torch::logsumexp(logits, -1);
  for (size_t t = 0; t < ids.size(); ++t) {
    CATCH_CHECK(argmax[t].item<int64_t>() == ref["argmax"][t].get<int64_t>());
    CATCH_CHECK(std::abs(lse[t].item<double>() - ref["logsumexp"][t].get<double>()) < 1e-4);
  }
}

CATCH_TEST_CASE("stories260K greedy decoding through the KV cache reproduces the reference ids", "[model]") {
  auto ref = read_json(rl::test::stories_dir() / "reference_outputs.json")["greedy"];
  auto prompt = ref["prompt_ids"].get<std::vector<int64_t>>();
  auto expected = ref["ids"].get<std::vector<int64_t>>();
  auto got = rl::nn::greedy_generate(stories(), prompt, ref["max_new_tokens"].get<int64_t>());
  got.insert(got.begin(), prompt.begin(), prompt.end());
  CATCH_CHECK(got == expected);
}

CATCH_TEST_CASE("the GGUF and the safetensors of stories260K give the same logits", "[model]") {
  auto gguf = Transformer::from_pretrained(rl::test::stories_dir() / "stories260K.gguf");
  CATCH_CHECK(gguf->config().num_hidden_layers == 5);
  CATCH_CHECK(gguf->config().tie_word_embeddings);
  torch::NoGradGuard no_grad;
  auto ids = ids_tensor({1, 365, 191, 260, 3, 17, 99, 400});
  auto a = stories().logits(stories().forward(ids));
  auto b = gguf->logits(gguf->forward(ids));
  CATCH_CHECK(torch::equal(a, b));
}

CATCH_TEST_CASE("cached incremental forward equals the full forward", "[model]") {
  for (std::string family : {"qwen3", "qwen2", "llama"}) {
    CATCH_SECTION(family) {
      auto m = tiny(family);
      torch::NoGradGuard no_grad;
      auto gen = at::make_generator<at::CPUGeneratorImpl>(3);
      auto a = torch::randint(0, 97, {1, 23}, gen, torch::kInt64);
      auto b = torch::randint(0, 97, {1, 17}, gen, torch::kInt64);
      auto full_a = m->forward(a)[0];
      auto full_b = m->forward(b)[0];

      // Two sequences in one paged cache, blocks interleaved and out of order.
      const int64_t bs = 4;
      auto cache = m->new_kv_cache(16, bs);
      std::vector<int64_t> table_a = {9, 2, 14, 5, 0, 11}, table_b = {3, 15, 7, 1, 12};
      auto slots = [&](const std::vector<int64_t>& table, int64_t from, int64_t to) {
        std::vector<int64_t> s;
        for (int64_t p = from; p < to; ++p) s.push_back(table[p / bs] * bs + p % bs);
        return s;
      };
      // Step 1: prefill 10 tokens of a and 6 of b together. Then: a decodes one token
      // at a time while b prefills the rest in chunks of 5.
      int64_t done_a = 0, done_b = 0;
      auto step = [&](int64_t na, int64_t nb) {
        struct Part { const torch::Tensor* ids; const std::vector<int64_t>* table; int64_t* done; int64_t n;
                      const torch::Tensor* full; };
        std::vector<Part> parts;
        if (na > 0) parts.push_back({&a, &table_a, &done_a, na, &full_a});
        if (nb > 0) parts.push_back({&b, &table_b, &done_b, nb, &full_b});
        CachedBatch batch;
        std::vector<int64_t> ids, pos, slot;
        std::vector<std::vector<int64_t>> tables;
        for (auto& p : parts) {
          for (int64_t i = *p.done; i < *p.done + p.n; ++i) ids.push_back((*p.ids)[0][i].item<int64_t>()), pos.push_back(i);
          auto s = slots(*p.table, *p.done, *p.done + p.n);
          slot.insert(slot.end(), s.begin(), s.end());
          batch.query_lens.push_back(p.n);
          batch.context_lens.push_back(*p.done + p.n);
          tables.push_back(*p.table);
        }
        batch.input_ids = torch::tensor(ids, torch::kInt64);
        batch.positions = torch::tensor(pos, torch::kInt64);
        batch.slot_mapping = torch::tensor(slot, torch::kInt64);
        batch.context_slots = CachedBatch::slots_from_blocks(tables, batch.context_lens, bs);
        auto h = m->forward_cached(batch, cache);
        int64_t off = 0;
        for (auto& p : parts) {
          auto diff = (h.narrow(0, off, p.n) - p.full->narrow(0, *p.done, p.n)).abs().max().item<double>();
          CATCH_CHECK(diff < 1e-5);
          off += p.n;
          *p.done += p.n;
        }
      };
      step(10, 6);
      while (done_a < 23 || done_b < 17) step(done_a < 23 ? 1 : 0, std::min<int64_t>(5, 17 - done_b));
    }
  }
}

CATCH_TEST_CASE("chunked token log-probs and their gradients match the direct formula", "[model]") {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(11);
  auto hidden = torch::randn({13, 8}, gen, torch::kFloat64).to(torch::kFloat32).requires_grad_(true);
  auto weight = torch::randn({29, 8}, gen, torch::kFloat64).to(torch::kFloat32).requires_grad_(true);
  auto targets = torch::randint(0, 29, {13}, gen, torch::kInt64);
  auto g_lp = torch::randn({13}, gen, torch::kFloat64).to(torch::kFloat32);
  auto g_ent = torch::randn({13}, gen, torch::kFloat64).to(torch::kFloat32);
  struct Case {
    double temperature;
    int64_t chunk, keep;  // chunk 0: one chunk; keep 0: recompute each chunk in backward, -1: keep them all
    bool entropy;
  };
  for (auto c : {Case{1.0, 4, 0, true}, Case{0.7, 4, 0, true}, Case{0.7, 4, -1, true}, Case{0.7, 0, -1, true},
                 Case{1.0, 4, 0, false}, Case{0.7, 4, -1, false}}) {
    CATCH_INFO("temperature " << c.temperature << ", chunk " << c.chunk << ", keep " << c.keep << ", entropy "
                              << c.entropy);
    auto got = rl::nn::token_logprobs(hidden, weight, targets, c.temperature, c.entropy, c.chunk, c.keep);
    auto logp = torch::log_softmax(torch::matmul(hidden, weight.t()) / c.temperature, -1);
    auto want_lp = logp.gather(1, targets.unsqueeze(1)).squeeze(1);
    auto want_ent = -(logp.exp() * logp).sum(-1);
    CATCH_CHECK(torch::allclose(got.logprobs, want_lp, 1e-5, 1e-5));
    if (c.entropy) CATCH_CHECK(torch::allclose(got.entropy, want_ent, 1e-5, 1e-5));
    const double e = c.entropy ? 1.0 : 0.0;
    auto got_ent = c.entropy ? got.entropy : torch::zeros_like(want_ent);
    auto g1 = torch::autograd::grad({(got.logprobs * g_lp).sum() + (got_ent * g_ent).sum() * e}, {hidden, weight});
    auto g2 = torch::autograd::grad({(want_lp * g_lp).sum() + (want_ent * g_ent).sum() * e}, {hidden, weight});
    CATCH_CHECK(torch::allclose(g1[0], g2[0], 1e-5, 1e-5));
    CATCH_CHECK(torch::allclose(g1[1], g2[1], 1e-5, 1e-5));
  }
  CATCH_CHECK_THROWS_WITH(rl::nn::token_logprobs(hidden, weight, torch::full({13}, 29, torch::kInt64)),
                          Catch::Contains("target id 29 outside the vocabulary [0, 29)"));
}

CATCH_TEST_CASE("token log-probs' gradients with a long vocabulary and several chunks match float64", "[model]") {
  // A vocabulary past the backward GEMM's blocks of k (bi::gemm_grad runs k = V in
  // blocks of 2048 beyond 4096), a hidden size past one 48-column panel and not a
  // multiple of it, and chunks whose weight gradients add up in place.
  auto gen = at::make_generator<at::CPUGeneratorImpl>(12);
  auto hidden = torch::randn({21, 72}, gen, torch::kFloat64).to(torch::kFloat32).requires_grad_(true);
  auto weight = (torch::randn({5003, 72}, gen, torch::kFloat64) * 0.2).to(torch::kFloat32).requires_grad_(true);
  auto targets = torch::randint(0, 5003, {21}, gen, torch::kInt64);
  auto g_lp = torch::randn({21}, gen, torch::kFloat64).to(torch::kFloat32);
  auto g_ent = torch::randn({21}, gen, torch::kFloat64).to(torch::kFloat32);
  auto h64 = hidden.detach().to(torch::kFloat64).requires_grad_(true);
  auto w64 = weight.detach().to(torch::kFloat64).requires_grad_(true);
  auto logp = torch::log_softmax(torch::matmul(h64, w64.t()) / 0.8, -1);
  auto want_lp = logp.gather(1, targets.unsqueeze(1)).squeeze(1);
  auto want_ent = -(logp.exp() * logp).sum(-1);
  auto objective = (want_lp * g_lp.to(torch::kFloat64)).sum() + (want_ent * g_ent.to(torch::kFloat64)).sum();
  auto want = torch::autograd::grad({objective}, {h64, w64});
  for (int64_t chunk : {0, 8}) {
    for (int64_t keep : {int64_t{-1}, int64_t{0}}) {
      CATCH_INFO("chunk " << chunk << ", keep " << keep);
      auto got = rl::nn::token_logprobs(hidden, weight, targets, 0.8, true, chunk, keep);
      CATCH_CHECK(torch::allclose(got.logprobs.to(torch::kFloat64), want_lp, 1e-4, 1e-4));
      auto g = torch::autograd::grad({(got.logprobs * g_lp).sum() + (got.entropy * g_ent).sum()}, {hidden, weight});
      for (int i = 0; i < 2; ++i) {
        const double scale = want[i].abs().max().item<double>();
        CATCH_CHECK((g[i].to(torch::kFloat64) - want[i]).abs().max().item<double>() < 1e-5 * scale);
      }
    }
  }
}

CATCH_TEST_CASE("sequence log-probs agree with log_softmax of the logits", "[model]") {
  auto m = tiny("qwen3");
  auto ids = torch::randint(0, 97, {2, 9}, at::make_generator<at::CPUGeneratorImpl>(5), torch::kInt64);
  torch::NoGradGuard no_grad;
  auto lp = m->sequence_logprobs(ids).logprobs;
  auto logits = m->logits(m->forward(ids)).narrow(1, 0, 8);
  auto want = torch::log_softmax(logits, -1).gather(2, ids.narrow(1, 1, 8).unsqueeze(2)).squeeze(2);
  CATCH_CHECK(lp.sizes() == want.sizes());
  CATCH_CHECK(torch::allclose(lp, want, 1e-5, 1e-5));
}

CATCH_TEST_CASE("save and load round-trip bit for bit, sharded or not", "[model]") {
  auto m = tiny("qwen3", 42);
  auto dir = std::filesystem::temp_directory_path() / ("rlhost_model_rt_" + std::to_string(::getpid()));
  for (size_t shard : {size_t(5) << 30, size_t(20000)}) {
    std::filesystem::remove_all(dir);
    m->save(dir, shard);
    CATCH_CHECK(std::filesystem::exists(dir / (shard < 100000 ? "model.safetensors.index.json" : "model.safetensors")));
    auto back = Transformer::from_pretrained(dir);
    for (const auto& [name, t] : m->named_parameters()) CATCH_CHECK(torch::equal(t, back->parameter(name)));
  }
  std::filesystem::remove_all(dir);
}

CATCH_TEST_CASE("random initialisation is deterministic per seed and follows HF's scheme", "[model]") {
  auto a = tiny("qwen2", 1), b = tiny("qwen2", 1), c = tiny("qwen2", 2);
  auto q = a->parameter("model.layers.0.self_attn.q_proj.weight");
  CATCH_CHECK(torch::equal(q, b->parameter("model.layers.0.self_attn.q_proj.weight")));
  CATCH_CHECK(!torch::equal(q, c->parameter("model.layers.0.self_attn.q_proj.weight")));
  CATCH_CHECK(std::abs(q.std().item<double>() - 0.02) < 0.005);
  CATCH_CHECK(torch::equal(a->parameter("model.layers.1.input_layernorm.weight"), torch::ones({32})));
  CATCH_CHECK(torch::equal(a->parameter("model.layers.1.self_attn.k_proj.bias"), torch::zeros({16})));
}

CATCH_TEST_CASE("lay_out: sequences end to end or right-padded, each one's rows, the same hidden states", "[model]") {
  const std::vector<int64_t> a = {5, 6, 7}, b = {8}, c = {9, 10, 11, 12, 13};
  const std::vector<const std::vector<int64_t>*> seqs = {&a, &b, &c};
  auto packed = rl::nn::lay_out(seqs, true);
  CATCH_CHECK(torch::equal(packed.ids, torch::tensor({5, 6, 7, 8, 9, 10, 11, 12, 13}, torch::kInt64).view({1, 9})));
  CATCH_CHECK(packed.lens == std::vector<int64_t>{3, 1, 5});
  CATCH_CHECK(packed.starts == std::vector<int64_t>{0, 3, 4});
  auto padded = rl::nn::lay_out(seqs, false, 6);
  CATCH_CHECK(padded.ids.sizes() == torch::IntArrayRef{3, 6});  // the longest, or min_len when longer
  CATCH_CHECK(padded.lens.empty());
  CATCH_CHECK(padded.starts == std::vector<int64_t>{0, 6, 12});
  CATCH_CHECK(torch::equal(padded.ids[2], torch::tensor({9, 10, 11, 12, 13, 0}, torch::kInt64)));
  CATCH_CHECK(rl::nn::lay_out(seqs, false).ids.size(1) == 5);
  auto m = tiny("qwen3", 4);
  torch::NoGradGuard no_grad;
  auto hp = m->forward(packed).view({9, -1}), hq = m->forward(padded).view({18, -1});
  for (size_t i = 0; i < seqs.size(); ++i) {
    const int64_t n = static_cast<int64_t>(seqs[i]->size());
    CATCH_CHECK(torch::allclose(hp.narrow(0, packed.starts[i], n), hq.narrow(0, padded.starts[i], n), 1e-5, 1e-5));
  }
}

CATCH_TEST_CASE("sequences packed end to end: the padded forward's bits and gradients", "[model]") {
  const std::vector<int64_t> lens = {7, 1, 19, 12};
  const int64_t L = 19, total = 39;
  auto packed = torch::randint(0, 97, {1, total}, at::make_generator<at::CPUGeneratorImpl>(5), torch::kInt64);
  auto padded = torch::zeros({4, L}, torch::kInt64);
  for (int64_t s = 0, start = 0; s < 4; start += lens[s++])
    padded[s].narrow(0, 0, lens[s]).copy_(packed[0].narrow(0, start, lens[s]));
  for (std::string family : {"qwen3", "qwen2", "llama"}) {
    CATCH_SECTION(family) {
      auto m = tiny(family);
      // A loss over the real tokens only (padding never reaches it).
      auto probe = torch::randn({total, m->config().hidden_size}, at::make_generator<at::CPUGeneratorImpl>(6));
      auto loss_of = [&](const torch::Tensor& h, bool is_packed) {
        std::vector<torch::Tensor> rows;
        for (int64_t s = 0, start = 0; s < 4; start += lens[s++])
          rows.push_back(is_packed ? h[0].narrow(0, start, lens[s]) : h[s].narrow(0, 0, lens[s]));
        return (torch::cat(rows) * probe).sum();
      };
      auto grads_of = [&](bool is_packed, torch::Tensor* hidden) {
        m->set_requires_grad(true);
        for (auto& [name, p] : m->named_parameters()) p.mutable_grad() = torch::Tensor();
        auto h = is_packed ? m->forward_packed(packed, lens) : m->forward(padded);
        loss_of(h, is_packed).backward();
        *hidden = h.detach();
        std::vector<torch::Tensor> g;
        for (auto& [name, p] : m->named_parameters())  // lm_head: untouched by forward()
          g.push_back(p.grad().defined() ? p.grad().clone() : torch::zeros_like(p));
        m->set_requires_grad(false);
        return g;
      };
      torch::Tensor hp, hk;
      auto gp = grads_of(false, &hp);
      auto gk = grads_of(true, &hk);
      CATCH_REQUIRE(hk.sizes() == torch::IntArrayRef({1, total, m->config().hidden_size}));
      for (int64_t s = 0, start = 0; s < 4; start += lens[s++])
        CATCH_CHECK(torch::equal(hk[0].narrow(0, start, lens[s]), hp[s].narrow(0, 0, lens[s])));
      for (size_t i = 0; i < gp.size(); ++i) {
        CATCH_INFO(m->named_parameters()[i].first);
        CATCH_CHECK((gk[i] - gp[i]).abs().max().item<double>() <= 1e-5 * (1 + gp[i].abs().max().item<double>()));
      }
    }
  }
  // ATen's kernels (bfloat16 is never batch-invariant): each sequence attends on its own.
  auto f32 = tiny("qwen3", 9);
  auto dir = std::filesystem::temp_directory_path() / ("rlhost_model_packed_" + std::to_string(::getpid()));
  f32->save(dir);
  auto bf16 = Transformer::from_pretrained(dir, {torch::kBFloat16, torch::kCPU});
  std::filesystem::remove_all(dir);
  torch::NoGradGuard no_grad;
  auto hp = bf16->forward(padded).to(torch::kFloat32);
  auto hk = bf16->forward_packed(packed, lens).to(torch::kFloat32);
  for (int64_t s = 0, start = 0; s < 4; start += lens[s++])
    CATCH_CHECK((hk[0].narrow(0, start, lens[s]) - hp[s].narrow(0, 0, lens[s])).abs().max().item<double>() < 0.05);
  CATCH_CHECK_THROWS_WITH(f32->forward_packed(packed, {7, 1, 19}), Catch::Contains("add up to 27 tokens"));
  CATCH_CHECK_THROWS_WITH(f32->forward_packed(padded, lens), Catch::Contains("[1, total]"));
}

CATCH_TEST_CASE("bfloat16 weights run and stay close to float32", "[model]") {
  auto f32 = tiny("qwen3", 9);
  auto dir = std::filesystem::temp_directory_path() / ("rlhost_model_bf16_" + std::to_string(::getpid()));
  f32->save(dir);
  auto bf16 = Transformer::from_pretrained(dir, {torch::kBFloat16, torch::kCPU});
  CATCH_CHECK(bf16->parameter("model.norm.weight").scalar_type() == torch::kBFloat16);
  torch::NoGradGuard no_grad;
  auto ids = torch::randint(0, 97, {1, 12}, at::make_generator<at::CPUGeneratorImpl>(4), torch::kInt64);
  auto a = f32->logits(f32->forward(ids)).to(torch::kFloat32);
  auto b = bf16->logits(bf16->forward(ids)).to(torch::kFloat32);
  CATCH_CHECK((a - b).abs().max().item<double>() < 0.05);
  std::filesystem::remove_all(dir);
}

CATCH_TEST_CASE("token ids outside the vocabulary are a clear error", "[model]") {
  auto m = tiny("qwen3");
  CATCH_CHECK_THROWS_WITH(m->forward(torch::tensor({{1, 97}}, torch::kInt64)),
                          Catch::Contains("token id 97 outside the vocabulary [0, 97)"));
}

CATCH_TEST_CASE("the inference layout (transposed, fused q/k/v and gate/up) computes the same model", "[model]") {
  for (std::string family : {"qwen3", "qwen2", "llama"}) {
    auto cfg = rl::test::tiny_config(family);
    if (family == "llama") {
      auto j = cfg.raw;
      j["mlp_bias"] = true;
      j["attention_bias"] = true;
      cfg = rl::model::ModelConfig::from_json(j, "tiny llama with biases");
    }
    Transformer ref(cfg);
    ref.init_random(11);
    Transformer fast(cfg, rl::nn::ModelOptions{torch::kFloat32, torch::kCPU, true});
    fast.init_random(11);  // same values, other storage
    for (const auto& [name, t] : ref.named_parameters())
      CATCH_CHECK(torch::equal(t, fast.parameter(name)));
    // Biases are random too: write them through the parameters (views into the fused storage).
    {
      torch::NoGradGuard ng;
      auto gen = at::make_generator<at::CPUGeneratorImpl>(5);
      for (const auto& [name, t] : ref.named_parameters()) {
        if (name.size() < 5 || name.compare(name.size() - 5, 5, ".bias") != 0) continue;
        auto r = torch::randn(t.sizes(), gen);
        t.copy_(r);
        fast.parameter(name).copy_(r);
      }
    }
    auto ids = torch::randint(0, cfg.vocab_size, {2, 9});
    CATCH_INFO(family);
    CATCH_CHECK((ref.logits(ref.forward(ids)) - fast.logits(fast.forward(ids))).abs().max().item<double>() < 1e-5);
    // Cached path: prefill 5, then 4 single steps, against the full forward.
    auto cache = fast.new_kv_cache(4, 4);
    std::vector<torch::Tensor> hs;
    for (int64_t p : {0, 5, 6, 7, 8}) {
      const int64_t q0 = p, q1 = p == 0 ? 5 : p + 1;
      CachedBatch b;
      b.input_ids = ids[0].slice(0, q0, q1);
      b.positions = torch::arange(q0, q1);
      b.slot_mapping = torch::arange(q0, q1);
      b.query_lens = {q1 - q0};
      b.context_lens = {q1};
      b.context_slots = torch::arange(q1).unsqueeze(0);
      hs.push_back(fast.forward_cached(b, cache));
    }
    auto cached = fast.logits(torch::cat(hs, 0));
    auto full = ref.logits(ref.forward(ids.slice(0, 0, 1)))[0];
    CATCH_CHECK((cached - full).abs().max().item<double>() < 1e-5);
    // Tied embeddings: the lm_head copy follows weights_changed().
    if (cfg.tie_word_embeddings) {
      torch::NoGradGuard ng;
      fast.parameter("model.embed_tokens.weight").mul_(2);
      fast.weights_changed();
      ref.parameter("model.embed_tokens.weight").mul_(2);
      CATCH_CHECK((ref.logits(ref.forward(ids)) - fast.logits(fast.forward(ids))).abs().max().item<double>() < 1e-5);
    }
  }
}

CATCH_TEST_CASE("copy_weight writes the inference layout exactly as copy_ does", "[model]") {
  for (auto dtype : {torch::kFloat32, torch::kBFloat16}) {
    for (auto [rows, cols] : {std::pair<int64_t, int64_t>{130, 67}, {64, 64}, {1, 9}, {3, 200}, {300, 203}}) {
      auto src = torch::randn({rows, cols}).to(dtype);
      // a transposed view, and a narrow of a wider fused matrix (the q/k/v layout)
      auto plain = torch::zeros({cols, rows}, dtype).t();
      auto fused = torch::zeros({cols, rows + 5}, dtype);
      auto part = fused.narrow(1, 3, rows).t();
      rl::nn::copy_weight(plain, src);
      rl::nn::copy_weight(part, src);
      CATCH_CHECK(torch::equal(plain, src));
      CATCH_CHECK(torch::equal(part, src));
      CATCH_CHECK(fused.narrow(1, 0, 3).abs().sum().item<double>() == 0);  // neighbours untouched
      CATCH_CHECK(fused.narrow(1, rows + 3, 2).abs().sum().item<double>() == 0);
    }
  }
  // weights straight from a mapped file: a view when aligned, a copy when not
  std::vector<std::byte> bytes(4 * 6 + 1);
  const float values[6] = {1.5f, -2.f, 3.25f, 4.f, -5.5f, 6.f};
  for (size_t off : {size_t(0), size_t(1)}) {
    std::memcpy(bytes.data() + off, values, sizeof values);
    rl::model::TensorView view;
    view.name = "w";
    view.shape = {2, 3};
    view.data = bytes.data() + off;
    view.nbytes = sizeof values;
    auto t = rl::nn::tensor_over_view(view);
    CATCH_CHECK(torch::equal(t, torch::tensor({1.5f, -2.f, 3.25f, 4.f, -5.5f, 6.f}).view({2, 3})));
    CATCH_CHECK((t.data_ptr() == static_cast<const void*>(view.data)) == (off == 0));
    view.nbytes = 4 * 5;  // a truncated tensor is an error, not a read past its end
    CATCH_CHECK_THROWS_WITH(rl::nn::tensor_over_view(view), Catch::Contains("its shape needs 24"));
  }
  // other layouts fall back to copy_
  auto dst = torch::zeros({4, 5});
  auto src = torch::randn({4, 5}, torch::kFloat64);
  rl::nn::copy_weight(dst, src);
  CATCH_CHECK(torch::allclose(dst, src.to(torch::kFloat32)));
  // float32 into a transposed bfloat16 matrix (a bf16 engine): rounded exactly as copy_
  // rounds (ties to even, infinities kept, NaN stays NaN), SIMD blocks and ragged edges
  auto f32 = torch::randn({70, 33});
  auto acc = f32.accessor<float, 2>();
  const float specials[] = {1.0f + 1.0f / 256,  // a tie, rounds down to even
                            1.0f + 3.0f / 256,  // a tie, rounds up to even
                            std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                            std::numeric_limits<float>::quiet_NaN(), 3.4e38f, -0.0f, 1e-40f};
  for (int i = 0; i < 8; ++i) acc[i % 4][i] = specials[i], acc[69 - i][32 - i] = specials[i];
  auto bt = torch::zeros({33, 70}, torch::kBFloat16).t();
  rl::nn::copy_weight(bt, f32);
  auto want = f32.to(torch::kBFloat16);
  auto nan = torch::isnan(f32);
  CATCH_CHECK(torch::equal(torch::isnan(bt), nan));
  CATCH_CHECK(torch::equal(bt.masked_fill(nan, 0), want.masked_fill(nan, 0)));
  CATCH_CHECK(bt[0][0].item<float>() == 1.0f);  // spot checks of the ties
  CATCH_CHECK(bt[1][1].item<float>() == 1.0f + 4.0f / 256);
}
