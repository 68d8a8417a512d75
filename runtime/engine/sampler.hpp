// Turns the last-position logits of a step into tokens: greedy or temperature
// sampling with top-k, top-p and min-p filtering, per-request seeded RNGs, and
// the log-probabilities the engine reports.
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
};

// logits: [S, V], any float dtype, any device (copied to CPU float32).
SampleOutput sample_tokens(const torch::Tensor& logits, const std::vector<SampleRow>& rows);

// The filtered, renormalised distribution of one row (for tests): probs [V].
torch::Tensor filtered_probs(const torch::Tensor& logits_row, const SamplingParams& p);

}  // namespace rl::engine
