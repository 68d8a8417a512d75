#include "engine/sampling_params.hpp"

#include <cmath>
#include <limits>

#include "base/errors.hpp"
#include "base/json_input.hpp"

namespace rl::engine {
namespace {

using json = nlohmann::json;

[[noreturn]] void bad(const std::string& where, const std::string& key, const std::string& what) {
  throw Error(where + "." + json_input::excerpt(key, 80) + ": " + what);  // key may be any client key
}

double get_number(const json& v, const std::string& where, const std::string& key) {
  if (!v.is_number()) bad(where, key, "expected a number, got " + std::string(v.type_name()));
  double d = v.get<double>();
  if (!std::isfinite(d)) bad(where, key, "must be finite");
  return d;
}

int64_t get_int(const json& v, const std::string& where, const std::string& key) {
  if (v.is_number_integer() || v.is_number_unsigned()) return v.get<int64_t>();
  if (v.is_number_float()) {
    double d = v.get<double>();
    if (std::isfinite(d) && d == std::floor(d) && std::fabs(d) < 9e15) return static_cast<int64_t>(d);
  }
  bad(where, key, "expected an integer, got " + json_input::brief(v));
}

bool get_bool(const json& v, const std::string& where, const std::string& key) {
  if (!v.is_boolean()) bad(where, key, "expected true or false, got " + json_input::brief(v));
  return v.get<bool>();
}

// Knobs SGLang has and rlhost does not implement: accepted at their neutral value.
bool neutral_unsupported(const std::string& key, const json& v) {
  if (v.is_null()) return true;
  if (key == "frequency_penalty" || key == "presence_penalty") return v.is_number() && v.get<double>() == 0.0;
  if (key == "repetition_penalty") return v.is_number() && v.get<double>() == 1.0;
  if (key == "stream_interval") return v.is_number();
  if (key == "logit_bias" || key == "custom_params") return v.is_object() && v.empty();
  if (key == "regex" || key == "json_schema" || key == "ebnf" || key == "structural_tag" || key == "stop_regex")
    return (v.is_string() && v.get<std::string>().empty()) || (v.is_array() && v.empty());
  return false;
}

// Stop conditions a request may carry: the engine checks every stop string at each
// step of each sequence (and, while streaming, holds back any text that may still
// become one), so their number and length bound that work.
constexpr size_t kMaxStopStrings = 64;
constexpr size_t kMaxStopBytes = 256;
constexpr size_t kMaxStopTokenIds = 1024;
// Below this a temperature divides logits into infinities (NaN log-probs): such a
// request samples greedily, as vLLM and SGLang treat it.
constexpr double kMinTemperature = 1e-5;

const char* kUnsupported[] = {"frequency_penalty", "presence_penalty", "repetition_penalty", "stream_interval",
                              "logit_bias", "custom_params", "regex", "json_schema", "ebnf", "structural_tag",
                              "stop_regex"};

}  // namespace

SamplingParams SamplingParams::from_json(const json& j, const std::string& where) {
  SamplingParams p;
  if (j.is_null()) return p;
  if (!j.is_object()) throw Error(where + ": expected an object, got " + std::string(j.type_name()));
  for (const auto& [key, v] : j.items()) {
    if (key == "temperature") {
      p.temperature = v.is_null() ? 1.0 : get_number(v, where, key);
      if (p.temperature < 0) bad(where, key, "must be >= 0 (0 = greedy), got " + json_input::brief(v));
      if (p.temperature < kMinTemperature) p.temperature = 0;
    } else if (key == "top_p") {
      p.top_p = v.is_null() ? 1.0 : get_number(v, where, key);
      if (!(p.top_p > 0 && p.top_p <= 1)) bad(where, key, "must be in (0, 1], got " + json_input::brief(v));
    } else if (key == "top_k") {
      p.top_k = v.is_null() ? -1 : get_int(v, where, key);
      if (p.top_k < -1) bad(where, key, "must be -1 (off) or a positive integer, got " + json_input::brief(v));
      if (p.top_k == 0) p.top_k = -1;
    } else if (key == "min_p") {
      p.min_p = v.is_null() ? 0.0 : get_number(v, where, key);
      if (p.min_p < 0 || p.min_p > 1) bad(where, key, "must be in [0, 1], got " + json_input::brief(v));
    } else if (key == "max_new_tokens") {
      p.max_new_tokens = v.is_null() ? std::numeric_limits<int64_t>::max() : get_int(v, where, key);
      if (p.max_new_tokens < 0) bad(where, key, "must be >= 0, got " + json_input::brief(v));
    } else if (key == "min_new_tokens") {
      p.min_new_tokens = v.is_null() ? 0 : get_int(v, where, key);
      if (p.min_new_tokens < 0) bad(where, key, "must be >= 0, got " + json_input::brief(v));
    } else if (key == "sampling_seed" || key == "seed") {
      if (v.is_null()) continue;
      int64_t s = get_int(v, where, key);
      if (s < 0) bad(where, key, "must be >= 0, got " + json_input::brief(v));
      p.seed = static_cast<uint64_t>(s);
    } else if (key == "stop") {
      p.stop.clear();
      if (v.is_null()) continue;
      if (v.is_string()) {
        p.stop.push_back(v.get<std::string>());
      } else if (v.is_array()) {
        if (v.size() > kMaxStopStrings)
          bad(where, key, std::to_string(v.size()) + " stop strings, more than the " + std::to_string(kMaxStopStrings) +
                              " a request may give");
        for (const auto& s : v) {
          if (!s.is_string()) bad(where, key, "expected a string or a list of strings, got " + json_input::brief(v));
          p.stop.push_back(s.get<std::string>());
        }
      } else {
        bad(where, key, "expected a string or a list of strings, got " + json_input::brief(v));
      }
      for (const auto& s : p.stop) {
        if (s.empty()) bad(where, key, "stop strings must not be empty");
        if (s.size() > kMaxStopBytes)
          bad(where, key, "a stop string of " + std::to_string(s.size()) + " bytes, longer than the " +
                              std::to_string(kMaxStopBytes) + " allowed: " + json_input::excerpt(s, 40));
      }
    } else if (key == "stop_token_ids") {
      p.stop_token_ids.clear();
      if (v.is_null()) continue;
      if (!v.is_array()) bad(where, key, "expected a list of token ids, got " + json_input::brief(v));
      if (v.size() > kMaxStopTokenIds)
        bad(where, key, std::to_string(v.size()) + " stop token ids, more than the " + std::to_string(kMaxStopTokenIds) +
                            " a request may give");
      for (const auto& t : v) {
        int64_t id = get_int(t, where, key);
        if (id < 0 || id > std::numeric_limits<int32_t>::max()) bad(where, key, "token id out of range: " + json_input::brief(t));
        p.stop_token_ids.push_back(static_cast<int32_t>(id));
      }
    } else if (key == "ignore_eos") {
      p.ignore_eos = v.is_null() ? false : get_bool(v, where, key);
    } else if (key == "no_stop_trim") {
      p.no_stop_trim = v.is_null() ? false : get_bool(v, where, key);
    } else if (key == "skip_special_tokens") {
      p.skip_special_tokens = v.is_null() ? true : get_bool(v, where, key);
    } else if (key == "spaces_between_special_tokens") {
      p.spaces_between_special_tokens = v.is_null() ? true : get_bool(v, where, key);
    } else if (key == "n") {
      p.n = v.is_null() ? 1 : get_int(v, where, key);
      if (p.n < 1 || p.n > 1024) bad(where, key, "must be in [1, 1024], got " + json_input::brief(v));
    } else {
      bool known = false;
      for (const char* k : kUnsupported) known = known || key == k;
      if (!known)
        bad(where, key,
            "unknown sampling parameter (known: temperature, top_p, top_k, min_p, max_new_tokens, min_new_tokens, "
            "sampling_seed, stop, stop_token_ids, ignore_eos, no_stop_trim, skip_special_tokens, "
            "spaces_between_special_tokens, n)");
      if (!neutral_unsupported(key, v)) bad(where, key, "not supported by the rlhost engine (leave it unset)");
    }
  }
  return p;
}

json SamplingParams::to_json() const {
  json j = {{"temperature", temperature},
            {"top_p", top_p},
            {"top_k", top_k},
            {"min_p", min_p},
            {"max_new_tokens", max_new_tokens},
            {"min_new_tokens", min_new_tokens},
            {"stop", stop},
            {"stop_token_ids", stop_token_ids},
            {"ignore_eos", ignore_eos},
            {"no_stop_trim", no_stop_trim},
            {"skip_special_tokens", skip_special_tokens},
            {"spaces_between_special_tokens", spaces_between_special_tokens},
            {"n", n}};
  j["sampling_seed"] = seed ? json(*seed) : json(nullptr);
  return j;
}

}  // namespace rl::engine
