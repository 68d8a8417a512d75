// config.json of a Hugging Face causal LM (Llama, Qwen2, Qwen3 families).
#pragma once
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace rl::model {

// rope_scaling from config.json; type "none" when absent or null.
struct RopeScaling {
  std::string type = "none";  // none | linear | llama3
  double factor = 1.0;
  double low_freq_factor = 1.0;   // llama3
  double high_freq_factor = 4.0;  // llama3
  int64_t original_max_position_embeddings = 8192;  // llama3
};

struct ModelConfig {
  std::string architecture;  // "LlamaForCausalLM", "Qwen2ForCausalLM", "Qwen3ForCausalLM"
  std::string model_type;    // "llama", "qwen2", "qwen3"
  int64_t vocab_size = 0;
  int64_t hidden_size = 0;
  int64_t intermediate_size = 0;
  int64_t num_hidden_layers = 0;
  int64_t num_attention_heads = 0;
  int64_t num_key_value_heads = 0;
  int64_t head_dim = 0;  // hidden_size / num_attention_heads when absent
  int64_t max_position_embeddings = 0;
  double rms_norm_eps = 1e-6;
  double rope_theta = 10000.0;
  RopeScaling rope_scaling;
  bool tie_word_embeddings = false;
  bool qkv_bias = false;   // q/k/v projections carry a bias (Qwen2 always; Llama attention_bias)
  bool o_bias = false;     // o_proj carries a bias (Llama attention_bias only)
  bool mlp_bias = false;   // Llama mlp_bias
  bool qk_norm = false;    // per-head RMSNorm on q and k (Qwen3)
  std::string hidden_act = "silu";
  std::string torch_dtype = "float32";  // float32 | float16 | bfloat16
  std::optional<int64_t> bos_token_id;
  std::vector<int64_t> eos_token_ids;   // config's eos_token_id, int or list
  nlohmann::json raw;                   // the file as read, written back on save

  // Parse and validate; `source` names the file in error messages.
  static ModelConfig from_json(const nlohmann::json& j, const std::string& source = "config.json");
  // `path` is a model directory or a config.json file.
  static ModelConfig load(const std::filesystem::path& path);
  // HF-compatible config.json contents (raw with the typed fields written over it).
  nlohmann::json to_json() const;

  // Every tensor an HF checkpoint of this config holds, with its shape,
  // e.g. {"model.layers.0.self_attn.q_proj.weight", {q_out, hidden}}.
  struct TensorSpec {
    std::string name;
    std::vector<int64_t> shape;
  };
  std::vector<TensorSpec> expected_tensors() const;
  int64_t num_parameters() const;

  static const std::vector<std::string>& supported_architectures();
};

}  // namespace rl::model
