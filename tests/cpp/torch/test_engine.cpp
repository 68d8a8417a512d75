// The engine core: block accounting and prefix reuse, stop strings, sampling,
// and whole-engine runs on stories260K checked against the golden greedy ids,
// the training path's log-probs, and runs without batching.
#include <torch/torch.h>

#define CATCH_CONFIG_PREFIX_ALL
#include <catch2/catch.hpp>

#include <condition_variable>
#include <cstring>
#include <fstream>
#include <map>
#include <mutex>
#include <random>

#include "engine/block_manager.hpp"
#include "engine/engine.hpp"
#include "engine/engine_weights.hpp"
#include "engine/output_text.hpp"
#include "engine/gpu_step.hpp"
#include "engine/sampler.hpp"
#include "engine/step_batch.hpp"
#include "model/tokenizer.hpp"
#include "engine_fixtures.hpp"
#include "model_fixtures.hpp"
#include "nn/transformer.hpp"
#include "nn/weights_digest.hpp"

using namespace rl::engine;
using rl::test::Collector;
using rl::test::prompt_of;
using rl::test::request;
using rl::test::stories_options;

namespace {

nlohmann::json read_json(const std::filesystem::path& p) {
  std::ifstream in(p);
  return nlohmann::json::parse(in);
}

}  // namespace

CATCH_TEST_CASE("BlockManager reuses committed prefixes and evicts the oldest free ones", "[engine]") {
  BlockManager bm(4, 2);
  std::vector<int32_t> toks{1, 2, 3, 4, 5};
  CATCH_CHECK(bm.match(toks, 4).blocks == 0);
  std::vector<int32_t> a;
  for (int i = 0; i < 3; ++i) a.push_back(*bm.allocate());
  int64_t committed = 0;
  bm.commit(toks, a, 5, committed);  // two full blocks
  CATCH_CHECK(committed == 4);
  auto m = bm.match(toks, 4);
  CATCH_CHECK(m.blocks == 2);
  CATCH_CHECK(m.reused_free == 0);
  bm.release(a);
  CATCH_CHECK(bm.num_free() == 4);
  CATCH_CHECK(bm.num_cached_free() == 2);
  m = bm.match(toks, 4);
  CATCH_CHECK(m.blocks == 2);
  CATCH_CHECK(m.reused_free == 2);
  // A different second block: one block of prefix.
  std::vector<int32_t> other{1, 2, 9, 9, 9};
  CATCH_CHECK(bm.match(other, 4).blocks == 1);
  auto b = bm.acquire_prefix(toks, 2);
  CATCH_CHECK(b == std::vector<int32_t>{a[0], a[1]});
  CATCH_CHECK(bm.num_used() == 2);
  bm.release(b);
  // Allocating everything evicts the cached blocks (the later one first).
  std::vector<int32_t> all;
  for (int i = 0; i < 4; ++i) all.push_back(*bm.allocate());
  CATCH_CHECK_FALSE(bm.allocate().has_value());
  CATCH_CHECK(bm.match(toks, 4).blocks == 0);
  bm.release(all);
  CATCH_CHECK_THROWS(bm.release(std::vector<int32_t>{all[0]}));
  bm.flush();
  CATCH_CHECK(bm.num_cached_free() == 0);
}

CATCH_TEST_CASE("OutputText stops on stop strings, trims them and holds back partial matches", "[engine]") {
  auto tok = rl::model::Tokenizer::load(rl::test::stories_dir());
  auto ids = tok.encode("Once upon a time, there was a girl", {.add_special_tokens = false});
  OutputText t(&tok, {"there was"}, true, false);
  std::optional<std::string> hit;
  size_t i = 0;
  for (; i < ids.size() && !hit; ++i) hit = t.push(ids[i]);
  CATCH_REQUIRE(hit.has_value());
  CATCH_CHECK(*hit == "there was");
  CATCH_CHECK(t.visible() == "Once upon a time, ");
  OutputText keep(&tok, {"there was"}, true, true);
  for (int32_t id : ids)
    if (keep.push(id)) break;
  CATCH_CHECK(keep.visible() == "Once upon a time, there was");
  // Held back while it could still become a stop string.
  OutputText hold(&tok, {"time, there"}, true, false);
  auto pre = tok.encode("Once upon a time", {.add_special_tokens = false});
  for (int32_t id : pre) hold.push(id);
  CATCH_CHECK(hold.visible() == "Once upon a ");
  hold.finish();
  CATCH_CHECK(hold.visible() == "Once upon a time");
}

CATCH_TEST_CASE("sampling: greedy picks the first of tied maxima at any row length", "[engine]") {
  torch::manual_seed(9);
  SamplingParams greedy;
  greedy.temperature = 0;
  std::mt19937_64 rng(1);
  for (int64_t V : {1, 5, 15, 16, 17, 31, 33, 100, 1000, 32003}) {
    for (int trial = 0; trial < 8; ++trial) {
      // Few distinct values: many ties, the maximum anywhere (lanes, tail, first slot).
      auto row = torch::randint(0, trial < 4 ? 3 : 50, {1, V}).to(torch::kFloat32) - 1;
      if (trial == 2) row.index_put_({0, V - 1}, 100.0f);
      if (trial == 3) row.index_put_({0, 0}, 100.0f);
      const float* r = row.data_ptr<float>();
      int64_t want = 0;
      for (int64_t i = 1; i < V; ++i)
        if (r[i] > r[want]) want = i;
      CATCH_INFO("V " << V << " trial " << trial);
      CATCH_CHECK(sample_tokens(row, {{&greedy, &rng}}).tokens[0] == want);
    }
  }
}

CATCH_TEST_CASE("sampling: greedy, filters, seeds and temperature-scaled log-probs", "[engine]") {
  torch::manual_seed(3);
  auto logits = torch::randn({3, 50}) * 3;
  SamplingParams greedy;
  greedy.temperature = 0;
  SamplingParams hot;
  hot.temperature = 0.7;
  hot.seed = 42;
  std::mt19937_64 r1(42), r2(42), r3(42);
  auto out = sample_tokens(logits, {{&greedy, &r1}, {&hot, &r2}, {&hot, &r3}});
  CATCH_CHECK(out.tokens[0] == logits[0].argmax().item<int64_t>());
  auto lp0 = torch::log_softmax(logits[0], -1)[out.tokens[0]].item<float>();
  CATCH_CHECK(std::abs(out.logprobs[0] - lp0) < 1e-6);
  auto lp1 = torch::log_softmax(logits[1] / 0.7, -1)[out.tokens[1]].item<float>();
  CATCH_CHECK(std::abs(out.logprobs[1] - lp1) < 1e-6);
  // Same seed, same row distribution -> same draws.
  std::mt19937_64 a(7), b(7);
  for (int k = 0; k < 20; ++k) {
    auto x = sample_tokens(logits.slice(0, 1, 2), {{&hot, &a}});
    auto y = sample_tokens(logits.slice(0, 1, 2), {{&hot, &b}});
    CATCH_CHECK(x.tokens == y.tokens);
  }
  // Filters: top_k keeps k tokens; top_p the smallest head reaching p; min_p a floor.
  SamplingParams k3;
  k3.top_k = 3;
  CATCH_CHECK((filtered_probs(logits[0], k3) > 0).sum().item<int64_t>() == 3);
  SamplingParams p;
  p.top_p = 0.5;
  auto probs = torch::softmax(logits[0], -1);
  auto sorted = std::get<0>(probs.sort(-1, true));
  int64_t need = (sorted.cumsum(0) < 0.5).sum().item<int64_t>() + 1;
  CATCH_CHECK((filtered_probs(logits[0], p) > 0).sum().item<int64_t>() == need);
  SamplingParams mp;
  mp.min_p = 0.1;
  int64_t above = (probs >= 0.1 * probs.max()).sum().item<int64_t>();
  CATCH_CHECK((filtered_probs(logits[0], mp) > 0).sum().item<int64_t>() == above);
  CATCH_CHECK(std::abs(filtered_probs(logits[0], p).sum().item<float>() - 1) < 1e-5);
  // Sampled frequencies follow the filtered distribution.
  SamplingParams t1;
  t1.top_k = 4;
  auto target = filtered_probs(logits[2], t1);
  std::mt19937_64 g(1);
  std::vector<int> counts(50);
  for (int k = 0; k < 4000; ++k) ++counts[sample_tokens(logits.slice(0, 2, 3), {{&t1, &g}}).tokens[0]];
  for (int v = 0; v < 50; ++v) CATCH_CHECK(std::abs(counts[v] / 4000.0 - target[v].item<double>()) < 0.03);
}

// The GPU step's batch buffer (runtime/engine/step_batch.hpp), checked on the host: a
// prefix-cached prefill and a decode, padding rows, the per-request draw.
CATCH_TEST_CASE("step batch: slots, contexts, tables, padding and draws for the GPU step", "[engine]") {
  Sequence a, b;
  a.tokens = {5, 6, 7, 8, 9}, a.num_computed = 3, a.blocks = {4, 9};  // two new tokens, 3 cached
  b.tokens = {1, 2, 3, 4, 5, 6}, b.num_computed = 5, b.blocks = {1, 2};  // decodes one
  SamplingParams greedy, warm;
  greedy.temperature = 0;
  warm.temperature = 0.7;
  std::mt19937_64 ra(1), rb(42), reference(42);
  std::vector<SampleRow> rows{{&greedy, &ra}, {&warm, &rb}};
  const StepLayout L{4, 3, 2};
  std::vector<int32_t> h(static_cast<size_t>(L.total()), 77);
  const int64_t max_pos = fill_step_batch(h.data(), L, {&a, &b}, rows, {0, 0}, 4, 4, 3);
  CATCH_CHECK(max_pos == 5);
  auto at = [&](int64_t off, int64_t n) { return std::vector<int32_t>(h.begin() + off, h.begin() + off + n); };
  CATCH_CHECK(at(L.ids(), 4) == std::vector<int32_t>{8, 9, 6, 0});
  CATCH_CHECK(at(L.pos(), 4) == std::vector<int32_t>{3, 4, 5, 0});
  CATCH_CHECK(at(L.slot(), 4) == std::vector<int32_t>{4 * 4 + 3, 9 * 4 + 0, 2 * 4 + 1, -1});
  CATCH_CHECK(at(L.seq(), 4) == std::vector<int32_t>{0, 0, 1, 0});
  CATCH_CHECK(at(L.ctx(), 4) == std::vector<int32_t>{4, 5, 6, 0});
  CATCH_CHECK(at(L.last(), 3) == std::vector<int32_t>{1, 2, 0});
  CATCH_CHECK(at(L.tables(), 4) == std::vector<int32_t>{4, 9, 1, 2});
  float t[3], u[3];
  std::memcpy(t, h.data() + L.temp(), sizeof t);
  std::memcpy(u, h.data() + L.u(), sizeof u);
  CATCH_CHECK(t[0] == 0.0f);
  CATCH_CHECK(t[1] == 0.7f);
  CATCH_CHECK(t[2] == 0.0f);
  CATCH_CHECK(u[0] == 0.0f);  // greedy: no draw, its generator untouched
  CATCH_CHECK(ra() == std::mt19937_64(1)());
  CATCH_CHECK(u[1] == static_cast<float>(std::uniform_real_distribution<double>(0.0, 1.0)(reference)));
  CATCH_CHECK(u[2] == 0.0f);
  // A row the CPU sampler takes draws nothing here (that sampler draws from the same generator).
  std::mt19937_64 rc(42);
  rows[1].rng = &rc;
  fill_step_batch(h.data(), L, {&a, &b}, rows, {0, 1}, 4, 4, 3);
  std::memcpy(u, h.data() + L.u(), sizeof u);
  CATCH_CHECK(u[1] == 0.0f);
  CATCH_CHECK(rc() == std::mt19937_64(42)());
}

CATCH_TEST_CASE("GPU step: which rows the CPU sampler keeps, and the graph buckets", "[engine]") {
  SamplingParams plain, top_p, greedy_top_p, top_k_all;
  top_p.top_p = 0.9;
  greedy_top_p.temperature = 0, greedy_top_p.top_p = 0.9;
  top_k_all.top_k = 1000;
  const std::vector<int32_t> banned{3}, none;
  CATCH_CHECK_FALSE(needs_cpu_sampler({&plain, nullptr}, 1000));
  CATCH_CHECK(needs_cpu_sampler({&top_p, nullptr}, 1000));
  CATCH_CHECK_FALSE(needs_cpu_sampler({&greedy_top_p, nullptr}, 1000));  // greedy ignores filters
  CATCH_CHECK_FALSE(needs_cpu_sampler({&top_k_all, nullptr}, 1000));    // top-k over the whole vocabulary
  CATCH_CHECK(needs_cpu_sampler({&plain, nullptr, 2}, 1000));           // top log-probs
  CATCH_CHECK(needs_cpu_sampler({&plain, nullptr, 0, &banned}, 1000));
  CATCH_CHECK_FALSE(needs_cpu_sampler({&plain, nullptr, 0, &none}, 1000));
  const std::vector<std::pair<int64_t, int64_t>> buckets{{1, 1},   {2, 2},   {3, 4},   {5, 8},   {9, 16}, {63, 64},
                                                          {65, 80}, {200, 208}, {256, 256}, {300, 304}};
  for (auto [n, b] : buckets) CATCH_CHECK(GpuStepper::bucket_for(n) == b);
}

CATCH_TEST_CASE("SamplingParams rejects bad values naming the field", "[engine]") {
  using nlohmann::json;
  CATCH_CHECK_THROWS_WITH(SamplingParams::from_json(json{{"temperature", -1}}),
                          Catch::Contains("sampling_params.temperature"));
  CATCH_CHECK_THROWS_WITH(SamplingParams::from_json(json{{"top_p", 0}}), Catch::Contains("sampling_params.top_p"));
  CATCH_CHECK_THROWS_WITH(SamplingParams::from_json(json{{"bogus", 1}}), Catch::Contains("unknown sampling parameter"));
  CATCH_CHECK_THROWS_WITH(SamplingParams::from_json(json{{"frequency_penalty", 0.5}}),
                          Catch::Contains("not supported"));
  CATCH_CHECK_THROWS_WITH(SamplingParams::from_json(json{{"max_new_tokens", "ten"}}),
                          Catch::Contains("sampling_params.max_new_tokens"));
  auto p = SamplingParams::from_json(json{{"temperature", 0.5}, {"stop", "x"}, {"frequency_penalty", 0}, {"top_k", 0}});
  CATCH_CHECK(p.stop == std::vector<std::string>{"x"});
  CATCH_CHECK(p.top_k == -1);
}

CATCH_TEST_CASE("engine: greedy decoding reproduces the stories260K reference", "[engine]") {
  auto ref = read_json(rl::test::stories_dir() / "reference_outputs.json")["greedy"];
  auto engine = Engine::create(stories_options());
  Collector c;
  std::vector<int32_t> prompt = ref["prompt_ids"].get<std::vector<int32_t>>();
  engine->submit(request(prompt, ref["max_new_tokens"].get<int64_t>(), 0.0, "g"), c.fn());
  c.wait(1);
  auto want = ref["ids"].get<std::vector<int32_t>>();
  std::vector<int32_t> got = prompt;
  got.insert(got.end(), c.done["g"].output_ids.begin(), c.done["g"].output_ids.end());
  CATCH_CHECK(got == want);
  CATCH_CHECK(c.done["g"].finish_reason.type == "length");
  CATCH_CHECK(c.done["g"].text == ref["text"].get<std::string>().substr(0, c.done["g"].text.size()));
}

CATCH_TEST_CASE("engine: sampled log-probs equal the training path's bit for bit", "[engine]") {
  // Engine and trainer run the same batch-invariant float32 kernels
  // (nn/batch_invariant_ops.hpp): the incremental decode over the KV cache and the
  // full-sequence forward compute every hidden state and log-prob with the same
  // operations in the same order, under any ATEN_CPU_CAPABILITY (ctest runs this
  // file under each one the host offers).
  auto engine = Engine::create(stories_options());
  auto model = rl::nn::Transformer::from_pretrained(rl::test::stories_dir());
  Collector c;
  for (double t : {1.0, 0.7}) {
    auto r = request(prompt_of(20, 1), 40, t, "t" + std::to_string(t));
    r.params.seed = 5;
    engine->submit(r, c.fn());
  }
  c.wait(2);
  for (double t : {1.0, 0.7}) {
    const auto& o = c.done["t" + std::to_string(t)];
    std::vector<int64_t> all;
    for (int32_t id : prompt_of(20, 1)) all.push_back(id);
    for (int32_t id : o.output_ids) all.push_back(id);
    auto ids = torch::tensor(all, torch::kInt64).unsqueeze(0);
    auto lp = model->sequence_logprobs(ids, t).logprobs[0];  // [T-1]
    double worst = 0;
    for (size_t i = 0; i < o.output_ids.size(); ++i)
      worst = std::max(worst, std::abs(lp[19 + static_cast<int64_t>(i)].item<double>() - o.output_logprobs[i]));
    CATCH_INFO("temperature " << t << " worst " << worst);
    CATCH_CHECK(worst == 0.0);
    // The trainer's path with gradients (autograd functions, packed panels kept across
    // calls) computes the same bits, and the engine's weights digest, reported with its
    // log-probs, is the training layout's own: what lets the trainer take them as its own.
    model->set_requires_grad(true);
    auto lp_grad = model->sequence_logprobs(ids, t).logprobs[0].detach();
    model->set_requires_grad(false);
    CATCH_CHECK(torch::equal(lp_grad, lp));
    CATCH_CHECK(o.weights_digest.size() == 32);
    CATCH_CHECK(o.weights_digest == model->exact_weights_digest());
  }
}

CATCH_TEST_CASE("weights digest: by value whatever the layout, and any change of a weight changes it", "[engine]") {
  rl::nn::ModelOptions inf;
  inf.inference_layout = true;
  auto train = rl::nn::Transformer::from_pretrained(rl::test::stories_dir());
  auto engine_layout = rl::nn::Transformer::from_pretrained(rl::test::stories_dir(), inf);
  const auto d = train->exact_weights_digest();
  CATCH_CHECK(d == engine_layout->exact_weights_digest());
  CATCH_CHECK(d == rl::nn::weights_digest(train->named_parameters()));
  // One ulp of one element of one matrix, in either layout.
  std::string changed;
  for (auto* m : {train.get(), engine_layout.get()}) {
    torch::NoGradGuard ng;
    auto w = m->parameter("model.layers.1.mlp.up_proj.weight");
    const float before = w[3][5].item<float>();
    w[3][5].fill_(std::nextafter(before, 1.0f));
    m->weights_changed();
    CATCH_CHECK(m->exact_weights_digest() != d);
    CATCH_CHECK((changed.empty() || changed == m->exact_weights_digest()));  // same change, same digest
    changed = m->exact_weights_digest();
    w[3][5].fill_(before);
    m->weights_changed();
    CATCH_CHECK(m->exact_weights_digest() == d);
  }
  // The same values under other names, or swapped between two tensors, are other weights.
  auto params = train->named_parameters();
  torch::Tensor* q = nullptr;
  torch::Tensor* o = nullptr;
  for (auto& [name, t] : params) {
    if (name == "model.layers.0.self_attn.q_proj.weight") q = &t;
    if (name == "model.layers.0.self_attn.o_proj.weight") o = &t;
  }
  CATCH_REQUIRE((q && o && q->sizes() == o->sizes()));
  std::swap(*q, *o);
  CATCH_CHECK(rl::nn::weights_digest(params) != d);
  // A log-prob digest also names the temperature; greedy log-probs are those of temperature 1.
  CATCH_CHECK(rl::nn::logprob_digest(d, 1.0) != rl::nn::logprob_digest(d, 0.7));
  CATCH_CHECK(rl::nn::logprob_digest(d, 0.0) == rl::nn::logprob_digest(d, 1.0));
  CATCH_CHECK(rl::nn::logprob_digest(d, 1.0) != rl::nn::logprob_digest(changed, 1.0));
}

CATCH_TEST_CASE("engine: a request's tokens and log-probs do not depend on what else is in the batch", "[engine]") {
  auto run = [](int others, int threads = 1) {
    auto opts = stories_options();
    opts.threads = threads;
    auto engine = Engine::create(opts);
    Collector c;
    auto r = request(prompt_of(17, 3), 30, 0.8, "me");
    r.params.seed = 9;
    engine->submit(r, c.fn());
    for (int k = 0; k < others; ++k) {
      auto o = request(prompt_of(5 + 11 * k, 20 + k), 25 + k, 1.0, "o" + std::to_string(k));
      o.params.seed = k;
      engine->submit(o, c.fn());
    }
    c.wait(static_cast<size_t>(1 + others));
    return c.done["me"];
  };
  auto alone = run(0), crowded = run(7);
  CATCH_CHECK(alone.output_ids == crowded.output_ids);
  CATCH_CHECK(alone.output_logprobs == crowded.output_logprobs);
  // Nor on the scheduler thread's intra-op thread count.
  auto two = run(7, 2);
  CATCH_CHECK(alone.output_ids == two.output_ids);
  CATCH_CHECK(alone.output_logprobs == two.output_logprobs);
}

CATCH_TEST_CASE("engine: continuous batching, prefix sharing and preemption keep outputs exact", "[engine]") {
  // Reference: each prompt alone.
  std::map<std::string, std::vector<int32_t>> alone;
  {
    auto engine = Engine::create(stories_options());
    for (int k = 0; k < 6; ++k) {
      Collector c;
      engine->submit(request(prompt_of(10 + 7 * k, k), 30, 0.0, "a"), c.fn());
      c.wait(1);
      alone["r" + std::to_string(k)] = c.done["a"].output_ids;
    }
  }
  // Together, with a KV budget too small for all at once: preemption happens.
  auto opts = stories_options();
  opts.kv_cache_tokens = 160;
  opts.block_size = 8;
  auto engine = Engine::create(opts);
  Collector c;
  for (int k = 0; k < 6; ++k) engine->submit(request(prompt_of(10 + 7 * k, k), 30, 0.0, "r" + std::to_string(k)), c.fn());
  c.wait(6);
  for (auto& [rid, ids] : alone) CATCH_CHECK(c.done[rid].output_ids == ids);
  CATCH_CHECK(engine->stats().preemptions_total > 0);
  CATCH_CHECK(engine->stats().kv_tokens_used == 0);

  // A GRPO group: 8 copies of one prompt are prefilled once.
  auto opts2 = stories_options();
  opts2.block_size = 16;
  auto e2 = Engine::create(opts2);
  Collector g;
  auto prompt = prompt_of(100, 9);
  for (int k = 0; k < 8; ++k) {
    auto r = request(prompt, 8, 1.0, "s" + std::to_string(k));
    r.params.seed = k;
    e2->submit(r, g.fn());
  }
  g.wait(8);
  auto st = e2->stats();
  CATCH_CHECK(st.prefill_tokens_computed <= 100 + 7 * 4);  // 96 shared, 4 each
  int64_t cached = 0;
  for (auto& [rid, o] : g.done) cached += o.cached_tokens;
  CATCH_CHECK(cached == 7 * 96);
  CATCH_CHECK(st.cache_hit_rate > 0.8);
}

// The overlap schedule launches a decode step before the previous one's tokens are
// on the host (on the CPU it computes at once; the bookkeeping is the GPU's). With
// the batch-invariant kernels a request's tokens do not depend on its batch, so every
// output must equal stepping one at a time, bit for bit, through stops, preemption,
// streaming, filters and an abort.
CATCH_TEST_CASE("engine: the overlap schedule gives the outputs of one step at a time", "[engine]") {
  auto run = [](const std::string& overlap, int64_t* ahead_steps) {
    auto opts = stories_options();
    opts.overlap_schedule = overlap;
    opts.kv_cache_tokens = 384;  // tight: preemption happens
    opts.block_size = 8;
    opts.max_running_requests = 6;
    auto engine = Engine::create(opts);
    Collector c;
    for (int k = 0; k < 10; ++k) {
      auto r = request(prompt_of(5 + 9 * k, k), 20 + 7 * (k % 4), k % 3 == 0 ? 0.0 : 0.8, "r" + std::to_string(k));
      r.params.seed = 100 + k;
      if (k == 1) r.params.stop_token_ids = {403, 407, 411, 417, 423};
      if (k == 2) r.params.stop = {"the", "a"};
      if (k == 3) r.params.min_new_tokens = 6, r.params.ignore_eos = false, r.params.stop_token_ids = {403, 407};
      if (k == 4) r.top_logprobs_num = 3;
      if (k == 5) r.params.top_p = 0.8;
      if (k == 6) r.stream = true;
      engine->submit(r, c.fn());
    }
    c.wait(10);
    *ahead_steps = engine->stats().overlap_steps;
    CATCH_CHECK(engine->stats().kv_tokens_used == 0);
    CATCH_CHECK(engine->idle());
    return c.done;
  };
  int64_t off_ahead = 0, on_ahead = 0;
  auto off = run("off", &off_ahead);
  auto on = run("on", &on_ahead);
  CATCH_CHECK(off_ahead == 0);
  CATCH_CHECK(on_ahead > 20);  // it did run ahead
  for (auto& [rid, o] : off) {
    CATCH_INFO(rid);
    CATCH_CHECK(on[rid].output_ids == o.output_ids);
    CATCH_CHECK(on[rid].output_logprobs == o.output_logprobs);
    CATCH_CHECK(on[rid].finish_reason.type == o.finish_reason.type);
    CATCH_CHECK(on[rid].text == o.text);
    CATCH_CHECK(on[rid].output_top_logprobs.size() == o.output_top_logprobs.size());
  }
  // A streamed request's updates carry its tokens in order.
  CATCH_CHECK(on["r6"].output_ids.size() == 20 + 7 * 2);

  // An abort while steps run ahead, and a weight update between steps, mid-decode.
  auto opts = stories_options();
  opts.overlap_schedule = "on";
  auto engine = Engine::create(opts);
  Collector c;
  engine->submit(request({1}, 300, 0.0, "long"), c.fn());
  engine->submit(request({1, 5}, 300, 0.0, "other"), c.fn());
  std::this_thread::sleep_for(std::chrono::milliseconds(30));
  CATCH_CHECK(engine->abort("long"));
  engine->flush_cache();  // a command: drains the step in flight first
  c.wait(2);
  CATCH_CHECK(c.done["long"].finish_reason.type == "abort");
  CATCH_CHECK(c.done["other"].output_ids.size() == 300);
  CATCH_CHECK(engine->stats().overlap_steps > 0);
  CATCH_CHECK(engine->stats().kv_tokens_used == 0);
}

// Asynchronous RL swaps weights while sequences decode: each token records the version
// it was sampled under, and (batch-invariant kernels) its log-prob equals the training
// path's at that version bit for bit — with the KV recomputed after the swap, for every
// token; with the old KV kept, for the tokens before it. A prompt that extends a sequence
// decoded across the swap never reuses KV computed under the old weights: the
// continuation's log-probs equal the new model's exactly.
CATCH_TEST_CASE("engine: weights swapped mid-generation, per-token versions, no stale prefix reuse", "[engine]") {
  auto old_model = rl::nn::Transformer::from_pretrained(rl::test::stories_dir());
  auto new_model = rl::nn::Transformer::from_pretrained(rl::test::stories_dir());
  std::vector<std::pair<std::string, torch::Tensor>> perturbed;
  {
    torch::NoGradGuard ng;
    torch::manual_seed(11);
    for (const auto& [name, t] : new_model->named_parameters()) {
      t.add_(torch::randn(t.sizes()) * 0.02);
      perturbed.emplace_back(name, t.clone());
    }
    new_model->weights_changed();
  }
  auto logprobs = [](rl::nn::Transformer& m, const std::vector<int32_t>& prompt, const std::vector<int32_t>& out) {
    std::vector<int64_t> all(prompt.begin(), prompt.end());
    all.insert(all.end(), out.begin(), out.end());
    return m.sequence_logprobs(torch::tensor(all, torch::kInt64).unsqueeze(0), 1.0).logprobs[0];
  };
  for (bool recompute : {false, true}) {
    CATCH_INFO("recompute_kv_on_weight_update " << recompute);
    auto opts = stories_options();
    opts.recompute_kv_on_weight_update = recompute;
    opts.block_size = 8;
    auto engine = Engine::create(opts);
    Collector c;
    const auto prompt = prompt_of(20, 3);
    auto a = request(prompt, 60, 0.0, "a");
    a.stream = true;
    engine->submit(a, c.fn());
    for (int i = 0; i < 2000; ++i) {  // swap once about ten tokens are out
      {
        std::lock_guard<std::mutex> lock(c.mu);
        if (c.updates["a"] >= 10) break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    update_weights(*engine, perturbed, std::string("v1"));
    c.wait(1);
    const auto& o = c.done["a"];
    CATCH_REQUIRE(o.output_ids.size() == 60);
    CATCH_REQUIRE(o.weight_version_spans.size() == 2);
    CATCH_CHECK(o.weight_version_spans[0] == std::make_pair(int64_t{0}, std::string("default")));
    CATCH_CHECK(o.weight_version_spans[1].second == "v1");
    const int64_t k = o.weight_version_spans[1].first;
    CATCH_CHECK(k > 0);
    CATCH_CHECK(k < 60);
    auto lp_old = logprobs(*old_model, prompt, o.output_ids), lp_new = logprobs(*new_model, prompt, o.output_ids);
    int64_t after_equal = 0;
    for (int64_t j = 0; j < 60; ++j) {
      const double e = o.output_logprobs[static_cast<size_t>(j)];
      if (j < k) CATCH_CHECK(e == lp_old[19 + j].item<double>());
      else if (recompute) CATCH_CHECK(e == lp_new[19 + j].item<double>());
      else after_equal += e == lp_new[19 + j].item<double>();
    }
    if (!recompute) CATCH_CHECK(after_equal < 60 - k);  // the kept KV came from the old weights
    // A prompt that extends the sequence: nothing computed under the old weights is reused.
    std::vector<int32_t> longer = prompt;
    longer.insert(longer.end(), o.output_ids.begin(), o.output_ids.begin() + 48);
    engine->submit(request(longer, 6, 0.0, "b"), c.fn());
    c.wait(2);
    const auto& b = c.done["b"];
    if (!recompute) CATCH_CHECK(b.cached_tokens == 0);
    auto lp_b = logprobs(*new_model, longer, b.output_ids);
    for (size_t j = 0; j < b.output_ids.size(); ++j)
      CATCH_CHECK(b.output_logprobs[j] == lp_b[static_cast<int64_t>(longer.size()) - 1 + static_cast<int64_t>(j)].item<double>());
    CATCH_CHECK(b.weight_version_spans == std::vector<std::pair<int64_t, std::string>>{{0, "v1"}});
  }
}

CATCH_TEST_CASE("engine: abort, stop conditions, streaming and validation", "[engine]") {
  auto engine = Engine::create(stories_options());
  // Validation errors name the field.
  Collector none;
  CATCH_CHECK_THROWS_WITH(engine->submit(request({}, 5), none.fn()), Catch::Contains("input_ids"));
  CATCH_CHECK_THROWS_WITH(engine->submit(request({1, 9999}, 5), none.fn()), Catch::Contains("input_ids[1]"));
  CATCH_CHECK_THROWS_WITH(engine->submit(request({1, 2}, 600), none.fn()), Catch::Contains("max_new_tokens"));

  Collector c;
  auto longreq = request({1}, 400, 0.0, "long");
  longreq.stream = true;
  engine->submit(longreq, c.fn());
  // stop_token_ids: greedy from BOS emits 403 first.
  auto st = request({1}, 50, 0.0, "stoptok");
  st.params.stop_token_ids = {407};
  engine->submit(st, c.fn());
  auto ss = request({1}, 50, 0.0, "stopstr");
  ss.params.stop = {"little girl"};
  engine->submit(ss, c.fn());
  auto zero = request({1}, 0, 0.0, "zero");
  engine->submit(zero, c.fn());
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  CATCH_CHECK(engine->abort("long"));
  c.wait(4);
  CATCH_CHECK(c.done["long"].finish_reason.type == "abort");
  CATCH_CHECK(c.done["long"].output_ids.size() < 400);
  CATCH_CHECK(c.updates["long"] >= static_cast<int>(c.done["long"].output_ids.size()));
  CATCH_CHECK(c.done["stoptok"].finish_reason.type == "stop");
  CATCH_CHECK(c.done["stoptok"].finish_reason.matched_token == 407);
  CATCH_CHECK(c.done["stoptok"].output_ids == std::vector<int32_t>{403, 407});
  CATCH_CHECK(c.done["stopstr"].finish_reason.matched_str == std::string("little girl"));
  CATCH_CHECK(c.done["stopstr"].text == "Once upon a time, there was a ");
  CATCH_CHECK(c.done["zero"].output_ids.empty());
  CATCH_CHECK(c.done["zero"].finish_reason.type == "length");
  CATCH_CHECK_FALSE(engine->abort("long"));
  CATCH_CHECK(engine->idle());
}

CATCH_TEST_CASE("engine: weight updates, memory release and resume", "[engine]") {
  auto engine = Engine::create(stories_options());
  auto run = [&](const std::string& rid) {
    Collector c;
    engine->submit(request({1}, 10, 0.0, rid), c.fn());
    c.wait(1);
    return c.done[rid];
  };
  auto before = run("a");
  CATCH_CHECK(before.weight_version == "default");
  // New weights from disk: a random model of the same shape.
  auto dir = std::filesystem::temp_directory_path() / ("rlhost_engine_w_" + std::to_string(getpid()));
  auto other = std::make_unique<rl::nn::Transformer>(rl::model::ModelConfig::load(rl::test::stories_dir()));
  other->init_random(1);
  other->save(dir);
  engine->update_weights_from_disk(dir);
  auto after = run("b");
  CATCH_CHECK(after.weight_version == "1");
  CATCH_CHECK(after.output_ids != before.output_ids);
  // In memory: back to the original weights.
  auto orig = rl::nn::Transformer::from_pretrained(rl::test::stories_dir());
  update_weights(*engine, orig->named_parameters(), std::string("v7"));
  auto back = run("c");
  CATCH_CHECK(back.output_ids == before.output_ids);
  CATCH_CHECK(back.weight_version == "v7");
  CATCH_CHECK_THROWS_WITH(update_weights(*engine, {{"nope", torch::zeros({1})}}), Catch::Contains("nope"));
  // Release and resume: requests queue meanwhile and finish after resume.
  engine->release_memory({"kv_cache"});
  CATCH_CHECK(engine->stats().memory_released);
  Collector c;
  engine->submit(request({1}, 5, 0.0, "queued"), c.fn());
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  CATCH_CHECK(c.done.empty());
  engine->resume_memory({"kv_cache"});
  c.wait(1);
  CATCH_CHECK(c.done["queued"].output_ids.size() == 5);
  engine->release_memory({});
  engine->resume_memory({});
  // The last update was in memory (nothing on disk has it): the model's own weights come
  // back, under the version they had at start, not the older directory's.
  auto d = run("d");
  CATCH_CHECK(d.output_ids == before.output_ids);
  CATCH_CHECK(d.weight_version == "default");
  // The last update came from a directory that still exists: those weights, that version.
  engine->update_weights_from_disk(dir, std::string("v9"));
  auto e = run("e");
  engine->release_memory({"weights"});
  engine->resume_memory({"weights"});
  auto f = run("f");
  CATCH_CHECK(f.output_ids == e.output_ids);
  CATCH_CHECK(f.output_ids != before.output_ids);
  CATCH_CHECK(f.weight_version == "v9");
  CATCH_CHECK_THROWS_WITH(engine->release_memory({"gpu"}), Catch::Contains("tags"));
  std::filesystem::remove_all(dir);
}
