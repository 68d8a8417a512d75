// Prompt (input) log-probs in the engine (GenerateRequest::logprob_start_len, SGLang's
// API): bit for bit the log-probs the engine reports for the same tokens when it
// samples them (teacher forcing) and the training path's, whatever else shares the
// step, however the prompt is split by the prefill budget, after a prefix-cache hit,
// and under the overlap schedule; max_new_tokens 0 scores without generating.
#include <torch/torch.h>

#define CATCH_CONFIG_PREFIX_ALL
#include <catch2/catch.hpp>

#include <condition_variable>
#include <map>
#include <mutex>

#include "base/errors.hpp"
#include "engine/engine.hpp"
#include "engine_fixtures.hpp"
#include "model_fixtures.hpp"
#include "nn/transformer.hpp"

using namespace rl::engine;
using rl::test::prompt_of;
using rl::test::request;
using rl::test::stories_options;

namespace {

GenerateRequest scoring(std::vector<int32_t> ids, int64_t start, const std::string& rid, int64_t max_new = 0,
                        double temperature = 0.0) {
  GenerateRequest r = request(std::move(ids), max_new, temperature, rid);
  r.logprob_start_len = start;
  return r;
}


// The training path's log p(ids[j] | ids[<j]) for j = 1 .. n-1.
std::vector<float> trainer_logprobs(rl::nn::Transformer& model, const std::vector<int32_t>& ids, double t) {
  std::vector<int64_t> all(ids.begin(), ids.end());
  auto lp = model.sequence_logprobs(torch::tensor(all, torch::kInt64).unsqueeze(0), t).logprobs[0].contiguous();
  return std::vector<float>(lp.data_ptr<float>(), lp.data_ptr<float>() + lp.numel());
}

RequestOutput run_one(Engine& engine, GenerateRequest r) {
  rl::test::Collector c;
  const std::string rid = r.rid;
  engine.submit(std::move(r), c.fn());
  c.wait(1);
  return c.done[rid];
}

}  // namespace

CATCH_TEST_CASE("engine: prompt log-probs equal the sampled ones and the training path's bit for bit", "[engine]") {
  auto engine = Engine::create(stories_options());
  auto model = rl::nn::Transformer::from_pretrained(rl::test::stories_dir());
  for (double t : {0.0, 0.7}) {
    CATCH_INFO("temperature " << t);
    // Generate 12 tokens, then score prompt + those tokens without generating.
    auto gen = scoring(prompt_of(20, 1), -1, "gen", 12, t);
    gen.params.seed = 3;
    const RequestOutput g = run_one(*engine, gen);
    CATCH_REQUIRE(g.output_ids.size() == 12);
    CATCH_CHECK(g.input_logprobs.empty());  // logprob_start_len -1: none
    std::vector<int32_t> all = prompt_of(20, 1);
    all.insert(all.end(), g.output_ids.begin(), g.output_ids.end());
    const RequestOutput s = run_one(*engine, scoring(all, 0, "score", 0, t));
    CATCH_CHECK(s.finished);
    CATCH_CHECK(s.output_ids.empty());
    CATCH_CHECK(s.output_logprobs.empty());
    CATCH_CHECK(s.finish_reason.type == "length");
    CATCH_CHECK(s.finish_reason.length == 0);
    // Positions 1..31 (position 0, logprob_start_len itself, has none).
    CATCH_REQUIRE(s.input_logprobs.size() == all.size() - 1);
    // (a) teacher forcing: the last 12 are the sampled tokens' reported log-probs.
    const std::vector<float> tail(s.input_logprobs.end() - 12, s.input_logprobs.end());
    CATCH_CHECK(tail == g.output_logprobs);
    // (b) the trainer's log-probs of the same tokens, every position.
    CATCH_CHECK(s.input_logprobs == trainer_logprobs(*model, all, t == 0.0 ? 1.0 : t));
    for (float lp : s.input_logprobs) CATCH_CHECK(lp <= 0.0f);
  }
}

CATCH_TEST_CASE("engine: prompt log-probs from a position, in a batch, past the prefill budget, after a cache hit",
                "[engine]") {
  auto model = rl::nn::Transformer::from_pretrained(rl::test::stories_dir());
  const auto p40 = prompt_of(40, 2), p25 = prompt_of(25, 3), p9 = prompt_of(9, 4);
  const auto ref40 = trainer_logprobs(*model, p40, 1.0), ref25 = trainer_logprobs(*model, p25, 1.0),
             ref9 = trainer_logprobs(*model, p9, 1.0);
  // ref[j - 1] is position j's log-prob: from logprob_start_len k, positions k+1.. are reported.
  auto from = [](const std::vector<float>& ref, int64_t k) { return std::vector<float>(ref.begin() + k, ref.end()); };

  // A budget of 8 prompt tokens per step (every prompt here is longer: each prefills
  // alone, beside the others' decoding), or the default one (all prefill in one step).
  for (auto [budget, overlap] : {std::pair<int64_t, const char*>{8, "off"}, {8, "on"}, {8192, "on"}}) {
    CATCH_INFO("max_prefill_tokens " << budget << ", overlap " << overlap);
    auto opts = stories_options();
    opts.max_prefill_tokens = budget;
    opts.block_size = 4;
    opts.overlap_schedule = overlap;
    auto engine = Engine::create(opts);
    // Alone, each request's generated tokens: the batch must not change them.
    const RequestOutput alone = run_one(*engine, scoring(p9, -1, "alone", 10));

    // One batch: per-request starts, generating and scoring-only ones, and a request
    // without prompt log-probs beside them.
    rl::test::Collector c;
    engine->submit(scoring(p40, 0, "k0", 0), c.fn());
    engine->submit(scoring(p25, 11, "k11", 5), c.fn());
    engine->submit(scoring(p9, -1, "plain", 10), c.fn());
    engine->submit(scoring(p9, 8, "last", 3), c.fn());  // the last position: one null entry, no values
    auto top = scoring(p25, 20, "top", 0);
    top.top_logprobs_num = 3;
    engine->submit(top, c.fn());
    c.wait(5);
    CATCH_CHECK(c.done["k0"].input_logprobs == from(ref40, 0));
    CATCH_CHECK(c.done["k0"].output_ids.empty());
    CATCH_CHECK(c.done["k11"].input_logprobs == from(ref25, 11));
    CATCH_CHECK(c.done["k11"].output_ids.size() == 5);
    CATCH_CHECK(c.done["plain"].input_logprobs.empty());
    CATCH_CHECK(c.done["plain"].output_ids == alone.output_ids);
    CATCH_CHECK(c.done["plain"].output_logprobs == alone.output_logprobs);
    CATCH_CHECK(c.done["last"].input_logprobs.empty());
    CATCH_CHECK(c.done["last"].output_ids.size() == 3);
    // Top log-probs per scored position: sorted, the best at least the prompt token's.
    const RequestOutput& tp = c.done["top"];
    CATCH_CHECK(tp.input_logprobs == from(ref25, 20));
    CATCH_REQUIRE(tp.input_top_logprobs.size() == tp.input_logprobs.size());
    for (size_t j = 0; j < tp.input_top_logprobs.size(); ++j) {
      const auto& row = tp.input_top_logprobs[j];
      CATCH_REQUIRE(row.size() == 3);
      CATCH_CHECK(row[0].second >= row[1].second);
      CATCH_CHECK(row[1].second >= row[2].second);
      CATCH_CHECK(row[0].second >= tp.input_logprobs[j]);
      if (row[0].first == p25[20 + 1 + j]) CATCH_CHECK(row[0].second == tp.input_logprobs[j]);
    }

    // The prefix cache holds p40 now (committed by the scoring request). A request for
    // its log-probs from position 30 reuses blocks only up to position 30, and is exact.
    const RequestOutput hit = run_one(*engine, scoring(p40, 30, "hit", 0));
    CATCH_CHECK(hit.cached_tokens == 28);  // whole blocks of 4 before position 30
    CATCH_CHECK(hit.input_logprobs == from(ref40, 30));
    const RequestOutput zero = run_one(*engine, scoring(p40, 0, "zero", 2));
    CATCH_CHECK(zero.cached_tokens == 0);
    CATCH_CHECK(zero.input_logprobs == from(ref40, 0));
    // ... and still serves requests that want none: all but the last token's block.
    const RequestOutput plain = run_one(*engine, scoring(p40, -1, "plain40", 2));
    CATCH_CHECK(plain.cached_tokens == 36);
    CATCH_CHECK(engine->stats().kv_tokens_used == 0);
  }
}

CATCH_TEST_CASE("engine: logprob_start_len out of the prompt is refused naming it", "[engine]") {
  auto engine = Engine::create(stories_options());
  rl::test::Collector c;
  for (int64_t k : {int64_t{5}, int64_t{9}, int64_t{-2}}) {
    CATCH_INFO(k);
    CATCH_CHECK_THROWS_WITH(engine->submit(scoring(prompt_of(5, 1), k, ""), c.fn()),
                            Catch::Contains("logprob_start_len: " + std::to_string(k)));
  }
  // Without return_logprob nothing is scored (SGLang ignores it), and max_new_tokens 0
  // finishes at once.
  auto r = scoring(prompt_of(5, 1), 0, "nolp", 0);
  r.return_logprob = false;
  const RequestOutput o = run_one(*engine, r);
  CATCH_CHECK(o.input_logprobs.empty());
  CATCH_CHECK(o.finish_reason.type == "length");
}
