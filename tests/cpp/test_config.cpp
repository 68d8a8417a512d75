// rl::model::ModelConfig against real config.json files (stories260K, and the
// published Qwen2.5-0.5B / Qwen3-0.6B / Llama-3.2-1B configs inline), with
// parameter counts checked against the numbers the model cards state.
#include <catch2/catch.hpp>

#include <map>
#include <string>

#include "checkpoint_test_support.hpp"
#include "model/config.hpp"

using Catch::Matchers::Contains;
using nlohmann::json;
using rl::model::ModelConfig;

namespace {

// Qwen/Qwen2.5-0.5B-Instruct config.json (as published).
const char* kQwen25 = R"({
  "architectures": ["Qwen2ForCausalLM"], "attention_dropout": 0.0, "bos_token_id": 151643,
  "eos_token_id": 151645, "hidden_act": "silu", "hidden_size": 896, "initializer_range": 0.02,
  "intermediate_size": 4864, "max_position_embeddings": 32768, "max_window_layers": 21,
  "model_type": "qwen2", "num_attention_heads": 14, "num_hidden_layers": 24, "num_key_value_heads": 2,
  "rms_norm_eps": 1e-06, "rope_theta": 1000000.0, "sliding_window": 32768, "tie_word_embeddings": true,
  "torch_dtype": "bfloat16", "transformers_version": "4.43.1", "use_cache": true,
  "use_sliding_window": false, "vocab_size": 151936})";

// Qwen/Qwen3-0.6B config.json (as published).
const char* kQwen3 = R"({
  "architectures": ["Qwen3ForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
  "bos_token_id": 151643, "eos_token_id": 151645, "head_dim": 128, "hidden_act": "silu",
  "hidden_size": 1024, "initializer_range": 0.02, "intermediate_size": 3072,
  "max_position_embeddings": 40960, "max_window_layers": 28, "model_type": "qwen3",
  "num_attention_heads": 16, "num_hidden_layers": 28, "num_key_value_heads": 8, "rms_norm_eps": 1e-06,
  "rope_scaling": null, "rope_theta": 1000000, "sliding_window": null, "tie_word_embeddings": true,
  "torch_dtype": "bfloat16", "transformers_version": "4.51.0", "use_cache": true,
  "use_sliding_window": false, "vocab_size": 151936})";

// meta-llama/Llama-3.2-1B config.json (as published).
const char* kLlama32 = R"({
  "architectures": ["LlamaForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
  "bos_token_id": 128000, "eos_token_id": 128001, "head_dim": 64, "hidden_act": "silu",
  "hidden_size": 2048, "initializer_range": 0.02, "intermediate_size": 8192,
  "max_position_embeddings": 131072, "mlp_bias": false, "model_type": "llama",
  "num_attention_heads": 32, "num_hidden_layers": 16, "num_key_value_heads": 8, "pretraining_tp": 1,
  "rms_norm_eps": 1e-05,
  "rope_scaling": {"factor": 32.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
                   "original_max_position_embeddings": 8192, "rope_type": "llama3"},
  "rope_theta": 500000.0, "tie_word_embeddings": true, "torch_dtype": "bfloat16",
  "transformers_version": "4.45.0.dev0", "use_cache": true, "vocab_size": 128256})";

std::map<std::string, std::vector<int64_t>> spec_map(const ModelConfig& c) {
  std::map<std::string, std::vector<int64_t>> m;
  for (const auto& t : c.expected_tensors()) m[t.name] = t.shape;
  return m;
}

// The message of the exception from_json throws for `j`.
std::string error_of(const json& j, const std::string& source = "config.json") {
  try {
    ModelConfig::from_json(j, source);
  } catch (const std::exception& e) {
    return e.what();
  }
  FAIL("expected an error for " << j.dump());
  return {};
}

json tiny_llama() {
  return json::parse(R"({"architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": 32,
    "hidden_size": 16, "intermediate_size": 24, "num_hidden_layers": 2, "num_attention_heads": 4})");
}

}  // namespace

TEST_CASE("config: stories260K config.json", "[config]") {
  const auto c = ModelConfig::load(rl::test::stories_dir());
  CHECK(c.architecture == "LlamaForCausalLM");
  CHECK(c.model_type == "llama");
  CHECK(c.vocab_size == 512);
  CHECK(c.hidden_size == 64);
  CHECK(c.intermediate_size == 172);
  CHECK(c.num_hidden_layers == 5);
  CHECK(c.num_attention_heads == 8);
  CHECK(c.num_key_value_heads == 4);
  CHECK(c.head_dim == 8);
  CHECK(c.max_position_embeddings == 512);
  CHECK(c.rms_norm_eps == 1e-5);
  CHECK(c.rope_theta == 10000.0);
  CHECK(c.rope_scaling.type == "none");
  CHECK(c.tie_word_embeddings);
  CHECK_FALSE(c.qkv_bias);
  CHECK_FALSE(c.o_bias);
  CHECK_FALSE(c.mlp_bias);
  CHECK_FALSE(c.qk_norm);
  CHECK(c.torch_dtype == "float32");
  CHECK(c.bos_token_id == 1);
  CHECK(c.eos_token_ids == std::vector<int64_t>{2});

  const auto specs = c.expected_tensors();
  REQUIRE(specs.size() == 47);
  const auto m = spec_map(c);
  CHECK(m.at("model.embed_tokens.weight") == std::vector<int64_t>{512, 64});
  CHECK(m.at("model.layers.4.self_attn.k_proj.weight") == std::vector<int64_t>{32, 64});
  CHECK(m.at("model.layers.0.mlp.down_proj.weight") == std::vector<int64_t>{64, 172});
  CHECK(m.count("lm_head.weight") == 0);
  CHECK(c.num_parameters() == 260032);  // SOURCE.md: 260,032 parameters

  // Loading the file itself works the same.
  CHECK(ModelConfig::load(rl::test::stories_dir() / "config.json").hidden_size == 64);
}

TEST_CASE("config: Qwen2.5 has q/k/v biases and no o_proj bias", "[config]") {
  const auto c = ModelConfig::from_json(json::parse(kQwen25));
  CHECK(c.architecture == "Qwen2ForCausalLM");
  CHECK(c.head_dim == 64);  // 896 / 14
  CHECK(c.qkv_bias);
  CHECK_FALSE(c.o_bias);
  CHECK_FALSE(c.qk_norm);
  CHECK(c.torch_dtype == "bfloat16");
  CHECK(c.rope_theta == 1e6);
  const auto m = spec_map(c);
  CHECK(m.at("model.layers.0.self_attn.q_proj.bias") == std::vector<int64_t>{896});
  CHECK(m.at("model.layers.23.self_attn.k_proj.bias") == std::vector<int64_t>{128});
  CHECK(m.at("model.layers.0.self_attn.v_proj.bias") == std::vector<int64_t>{128});
  CHECK(m.count("model.layers.0.self_attn.o_proj.bias") == 0);
  CHECK(m.count("model.layers.0.mlp.gate_proj.bias") == 0);
  CHECK(m.count("lm_head.weight") == 0);
  CHECK(m.size() == 1 + 24 * 12 + 1);
  CHECK(c.num_parameters() == 494032768);  // Qwen2.5-0.5B: 0.49B
}

TEST_CASE("config: Qwen3 has q_norm/k_norm and head_dim apart from hidden/heads", "[config]") {
  const auto c = ModelConfig::from_json(json::parse(kQwen3));
  CHECK(c.architecture == "Qwen3ForCausalLM");
  CHECK(c.head_dim == 128);
  CHECK(c.qk_norm);
  CHECK_FALSE(c.qkv_bias);
  CHECK_FALSE(c.o_bias);
  const auto m = spec_map(c);
  CHECK(m.at("model.layers.0.self_attn.q_proj.weight") == std::vector<int64_t>{2048, 1024});
  CHECK(m.at("model.layers.0.self_attn.k_proj.weight") == std::vector<int64_t>{1024, 1024});
  CHECK(m.at("model.layers.0.self_attn.o_proj.weight") == std::vector<int64_t>{1024, 2048});
  CHECK(m.at("model.layers.27.self_attn.q_norm.weight") == std::vector<int64_t>{128});
  CHECK(m.at("model.layers.27.self_attn.k_norm.weight") == std::vector<int64_t>{128});
  CHECK(m.count("model.layers.0.self_attn.q_proj.bias") == 0);
  CHECK(c.num_parameters() == 596049920);  // Qwen3-0.6B: 0.6B total, 0.44B without embeddings

  // Qwen3Config's own default head_dim is 128, not hidden / heads.
  json j = json::parse(kQwen3);
  j.erase("head_dim");
  j["hidden_size"] = 512;
  CHECK(ModelConfig::from_json(j).head_dim == 128);
  // attention_bias puts a bias on all four projections.
  j["attention_bias"] = true;
  const auto biased = spec_map(ModelConfig::from_json(j));
  CHECK(biased.count("model.layers.0.self_attn.q_proj.bias") == 1);
  CHECK(biased.count("model.layers.0.self_attn.o_proj.bias") == 1);
}

TEST_CASE("config: Llama 3.2 with llama3 rope scaling; attention_bias and mlp_bias", "[config]") {
  const auto c = ModelConfig::from_json(json::parse(kLlama32));
  CHECK(c.rope_scaling.type == "llama3");
  CHECK(c.rope_scaling.factor == 32.0);
  CHECK(c.rope_scaling.low_freq_factor == 1.0);
  CHECK(c.rope_scaling.high_freq_factor == 4.0);
  CHECK(c.rope_scaling.original_max_position_embeddings == 8192);
  CHECK(c.rope_theta == 500000.0);
  CHECK(c.num_parameters() == 1235814400);  // Llama-3.2-1B: 1.24B

  json j = tiny_llama();
  j["attention_bias"] = true;
  j["mlp_bias"] = true;
  const auto m = spec_map(ModelConfig::from_json(j));
  for (const char* p : {"q_proj", "k_proj", "v_proj", "o_proj"})
    CHECK(m.count(std::string("model.layers.1.self_attn.") + p + ".bias") == 1);
  CHECK(m.at("model.layers.1.mlp.down_proj.bias") == std::vector<int64_t>{16});
  CHECK(m.at("model.layers.1.mlp.gate_proj.bias") == std::vector<int64_t>{24});
}

TEST_CASE("config: HF defaults and accepted spellings", "[config]") {
  json j = tiny_llama();
  auto c = ModelConfig::from_json(j);
  CHECK(c.num_key_value_heads == 4);  // defaults to the attention heads
  CHECK(c.head_dim == 4);             // hidden / heads
  CHECK_FALSE(c.tie_word_embeddings);
  CHECK(c.max_position_embeddings == 2048);
  CHECK(c.rms_norm_eps == 1e-6);
  CHECK(c.expected_tensors().back().name == "lm_head.weight");
  CHECK_FALSE(c.bos_token_id.has_value());
  CHECK(c.eos_token_ids.empty());

  j["eos_token_id"] = {128001, 128008, 128009};
  j["dtype"] = "bfloat16";  // transformers >= 4.56 spelling
  j["num_key_value_heads"] = nullptr;
  j["head_dim"] = nullptr;
  c = ModelConfig::from_json(j);
  CHECK(c.eos_token_ids == std::vector<int64_t>{128001, 128008, 128009});
  CHECK(c.torch_dtype == "bfloat16");
  CHECK(c.num_key_value_heads == 4);

  // architectures absent: model_type decides.
  j.erase("architectures");
  j["model_type"] = "qwen2";
  CHECK(ModelConfig::from_json(j).architecture == "Qwen2ForCausalLM");

  // rope_scaling: "type" (old) and "rope_type" (new), "default" means none.
  j = tiny_llama();
  j["rope_scaling"] = {{"type", "linear"}, {"factor", 2.0}};
  c = ModelConfig::from_json(j);
  CHECK(c.rope_scaling.type == "linear");
  CHECK(c.rope_scaling.factor == 2.0);
  j["rope_scaling"] = {{"rope_type", "default"}};
  CHECK(ModelConfig::from_json(j).rope_scaling.type == "none");
  // transformers 5 rope_parameters carry rope_theta.
  j.erase("rope_scaling");
  j["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", 500000.0}};
  CHECK(ModelConfig::from_json(j).rope_theta == 500000.0);
}

TEST_CASE("config: to_json round-trips and keeps unknown keys", "[config]") {
  json src = json::parse(kLlama32);
  src["my_extra_key"] = "kept";
  const auto c = ModelConfig::from_json(src);
  const json out = c.to_json();
  CHECK(out.at("my_extra_key") == "kept");
  CHECK(out.at("rope_scaling").at("rope_type") == "llama3");
  const auto back = ModelConfig::from_json(out);
  CHECK(back.expected_tensors().size() == c.expected_tensors().size());
  CHECK(back.rope_scaling.factor == 32.0);
  CHECK(back.head_dim == 64);
  CHECK(back.eos_token_ids == c.eos_token_ids);
  CHECK(back.to_json() == out);

  const auto q = ModelConfig::from_json(json::parse(kQwen25)).to_json();
  CHECK_FALSE(q.contains("attention_bias"));  // Qwen2 has no such key
  CHECK(q.at("rope_scaling").is_null());
}

TEST_CASE("config: errors name the file, the key and a hint", "[config]") {
  json j = tiny_llama();
  j["num_attention_heads"] = 7;
  j["num_key_value_heads"] = 2;
  j["head_dim"] = 4;
  CHECK_THAT(error_of(j, "/m/config.json"),
             Contains("/m/config.json: num_attention_heads (7) is not a multiple of num_key_value_heads (2)") &&
                 Contains("hint:"));

  j = tiny_llama();
  j["num_attention_heads"] = 5;  // 16 % 5
  CHECK_THAT(error_of(j), Contains("hidden_size (16) is not a multiple of num_attention_heads (5)") && Contains("head_dim"));

  j = tiny_llama();
  j["architectures"] = {"MistralForCausalLM"};
  CHECK_THAT(error_of(j), Contains("unsupported architecture 'MistralForCausalLM'") && Contains("LlamaForCausalLM") &&
                              Contains("Qwen2ForCausalLM") && Contains("Qwen3ForCausalLM"));

  j = tiny_llama();
  j.erase("architectures");
  j["model_type"] = "gpt2";
  CHECK_THAT(error_of(j), Contains("model_type") && Contains("Qwen3ForCausalLM"));

  j = tiny_llama();
  j["hidden_size"] = "16";
  CHECK_THAT(error_of(j), Contains("config.json: hidden_size must be an integer (got string \"16\")"));

  j = tiny_llama();
  j["intermediate_size"] = -1;
  CHECK_THAT(error_of(j), Contains("intermediate_size must be positive (got -1)"));

  j = tiny_llama();
  j.erase("vocab_size");
  CHECK_THAT(error_of(j), Contains("missing required key 'vocab_size'"));

  j = tiny_llama();
  j["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 4.0}};
  CHECK_THAT(error_of(j), Contains("rope_scaling.type 'yarn' is not supported") && Contains("linear, llama3"));

  j = tiny_llama();
  j["rope_scaling"] = {{"rope_type", "llama3"}, {"factor", 8.0}};
  CHECK_THAT(error_of(j), Contains("rope_scaling.low_freq_factor is missing"));

  j = tiny_llama();
  j["torch_dtype"] = "int8";
  CHECK_THAT(error_of(j), Contains("torch_dtype 'int8' is not supported"));

  j = tiny_llama();
  j["eos_token_id"] = {2, "x"};
  CHECK_THAT(error_of(j), Contains("eos_token_id[1] must be an integer"));

  j = tiny_llama();
  j["num_hidden_layers"] = int64_t(1) << 40;
  CHECK_THAT(error_of(j), Contains("implausibly large"));

  CHECK_THAT(error_of(json::array()), Contains("expected a JSON object"));
}

TEST_CASE("config: load errors for missing files and bad JSON", "[config]") {
  rl::test::TempDir dir("config");
  try {
    ModelConfig::load(dir.path());
    FAIL("expected an error");
  } catch (const std::exception& e) {
    CHECK_THAT(std::string(e.what()), Contains((dir / "config.json").string() + ": no such file") &&
                                          Contains("no config.json"));
  }
  rl::test::write_text(dir / "config.json", "{\"hidden_size\": 64,");
  try {
    ModelConfig::load(dir.path());
    FAIL("expected an error");
  } catch (const std::exception& e) {
    CHECK_THAT(std::string(e.what()), Contains((dir / "config.json").string() + ": invalid JSON"));
  }
}
