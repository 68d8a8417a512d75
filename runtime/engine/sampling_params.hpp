// SGLang's `sampling_params`, validated. Parsing names the field and the valid
// range on bad input (the server answers 400 with the message).
//
// Log-probabilities: the engine reports, for each sampled token, its log-prob
// under softmax(logits / temperature) over the whole vocabulary — the same
// temperature-scaled distribution the trainer recomputes — before top-k, top-p
// and min-p filtering. Greedy requests (temperature 0) report log_softmax(logits).
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace rl::engine {

struct SamplingParams {
  double temperature = 1.0;  // 0 = greedy
  double top_p = 1.0;        // (0, 1]
  int64_t top_k = -1;        // -1 or 0 = off
  double min_p = 0.0;        // [0, 1]
  int64_t max_new_tokens = 128;
  int64_t min_new_tokens = 0;
  std::optional<uint64_t> seed;  // `sampling_seed` (SGLang) or `seed`; per request, deterministic
  std::vector<std::string> stop;
  std::vector<int32_t> stop_token_ids;
  bool ignore_eos = false;
  bool no_stop_trim = false;  // keep a matched stop string in the text
  bool skip_special_tokens = true;
  bool spaces_between_special_tokens = true;  // accepted; rlhost decodes without extra spaces
  int64_t n = 1;              // samples per prompt (the server fans out)

  bool greedy() const { return temperature <= 0.0 || top_k == 1; }

  // From SGLang's JSON object. Unknown keys and out-of-range values throw
  // rl::Error naming "sampling_params.<field>". Known SGLang knobs rlhost does
  // not implement (frequency_penalty, regex, ...) are accepted at their neutral
  // value and rejected otherwise, saying so.
  static SamplingParams from_json(const nlohmann::json& j, const std::string& where = "sampling_params");
  nlohmann::json to_json() const;
};

}  // namespace rl::engine
