// Turns the last-position logits of a step into tokens: greedy or temperature
// sampling with top-k, top-p and min-p filtering, per-request seeded RNGs, and
// the log-probabilities the engine reports (of sampled tokens, and of prompt
// tokens for prompt log-probs).
//
// The reported log-prob of a token is log_softmax(logits / temperature)[token]
// over the whole vocabulary, before any filtering (temperature 1 for greedy
// requests) — the quantity the trainer recomputes, so the two agree.
#pragma once
#include <cstdint>
#include <random>
#include <utility>
#include <vector>

#include <torch/torch.h>

#include "engine/sampling_params.hpp"

namespace rl::engine {

struct SampleRow {
  const SamplingParams* params = nullptr;
  std::mt19937_64* rng = nullptr;       // the request's generator (seeded per request)
  int64_t top_logprobs_num = 0;
  const std::vector<int32_t>* banned = nullptr;  // tokens that may not be sampled now (min_new_tokens)
  bool need_logprob = true;  // false: a greedy row's log-prob is not computed (reported as 0)
};

struct SampleOutput {
  std::vector<int32_t> tokens;
  std::vector<float> logprobs;
  std::vector<std::vector<std::pair<int32_t, float>>> top_logprobs;  // per row, empty unless asked
  // Prompt log-probs the step scored (score_tokens): per row, in position order;
  // empty for rows that asked for none.
  std::vector<std::vector<float>> input_logprobs;
  std::vector<std::vector<std::vector<std::pair<int32_t, float>>>> input_top_logprobs;
};

// One known token scored under one row of logits (a prompt position's log-prob).
struct ScoreRow {
  size_t row = 0;                       // the step's row (sequence) it belongs to
  const SamplingParams* params = nullptr;  // its temperature (1 when greedy), as for sampled tokens
  int32_t target = 0;                   // the token whose log-prob is taken
  int64_t top_logprobs_num = 0;
};

// logits: [S, V], any float dtype, any device (copied to CPU float32).
SampleOutput sample_tokens(const torch::Tensor& logits, const std::vector<SampleRow>& rows);

// Appends to out.input_logprobs[r.row] (and input_top_logprobs) the log-prob of each
// row's target under logits [R, V] (one row per ScoreRow): the arithmetic of
// sample_tokens' reported log-probs exactly, so a prompt token scores the bits it
// would have had as a sampled token. out's per-row vectors must be sized.
void score_tokens(const torch::Tensor& logits, const std::vector<ScoreRow>& rows, SampleOutput& out);

// The filtered, renormalised distribution of one row (for tests): probs [V].
torch::Tensor filtered_probs(const torch::Tensor& logits_row, const SamplingParams& p);

}  // namespace rl::engine
