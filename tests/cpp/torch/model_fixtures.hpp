// Shared fixtures for the model tests: tiny random configs (data paths: test_support.hpp).
#pragma once
#include <string>

#include <nlohmann/json.hpp>

#include "../test_support.hpp"
#include "model/config.hpp"

namespace rl::test {

// A tiny Qwen3-shaped config (q/k norm, GQA, separate lm_head) or Qwen2-shaped
// (q/k/v bias, tied embeddings), small enough for exhaustive checks.
inline model::ModelConfig tiny_config(const std::string& family) {
  nlohmann::json j = {
      {"vocab_size", 97},          {"hidden_size", 32},           {"intermediate_size", 48},
      {"num_hidden_layers", 2},    {"num_attention_heads", 4},    {"num_key_value_heads", 2},
      {"max_position_embeddings", 128}, {"rms_norm_eps", 1e-6},   {"rope_theta", 10000.0},
      {"torch_dtype", "float32"},
  };
  if (family == "qwen3") {
    j["architectures"] = {"Qwen3ForCausalLM"};
    j["model_type"] = "qwen3";
    j["head_dim"] = 16;  // != hidden / heads, as in real Qwen3 models
    j["tie_word_embeddings"] = false;
  } else if (family == "qwen2") {
    j["architectures"] = {"Qwen2ForCausalLM"};
    j["model_type"] = "qwen2";
    j["tie_word_embeddings"] = true;
  } else {
    j["architectures"] = {"LlamaForCausalLM"};
    j["model_type"] = "llama";
    j["rope_scaling"] = {{"rope_type", "llama3"}, {"factor", 8.0}, {"low_freq_factor", 1.0},
                         {"high_freq_factor", 4.0}, {"original_max_position_embeddings", 32}};
  }
  return model::ModelConfig::from_json(j, "tiny " + family + " config");
}

}  // namespace rl::test
