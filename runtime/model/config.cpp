// config.json of Llama / Qwen2 / Qwen3 causal LMs, with the defaults and the
// derived fields (head_dim, biases, q/k norm) Hugging Face transformers applies.
#include "model/config.hpp"

#include <cmath>
#include <fstream>
#include <limits>
#include <sstream>

#include "base/errors.hpp"
#include "base/json_input.hpp"
#include "model/tensor_files_io.hpp"

namespace rl::model {
namespace {

using nlohmann::json;

// Per-architecture facts: HF config class defaults for keys a config.json may
// omit, and which optional weights the modeling code creates.
struct ArchInfo {
  const char* architecture;
  const char* model_type;
  int64_t default_max_position_embeddings;
  std::optional<int64_t> default_head_dim;  // Qwen3Config(head_dim=128); others hidden/heads
  bool qkv_bias_always;                     // Qwen2: q/k/v Linear(bias=True)
  bool has_attention_bias_key;              // Llama, Qwen3: attention_bias
  bool has_mlp_bias_key;                    // Llama: mlp_bias
  bool qk_norm;                             // Qwen3
};

const ArchInfo kArchs[] = {
    {"LlamaForCausalLM", "llama", 2048, std::nullopt, false, true, true, false},
    {"Qwen2ForCausalLM", "qwen2", 32768, std::nullopt, true, false, false, false},
    {"Qwen3ForCausalLM", "qwen3", 32768, int64_t(128), false, true, false, true},
};

std::string join(const std::vector<std::string>& v, const char* sep = ", ") {
  std::string out;
  for (size_t i = 0; i < v.size(); ++i) out += (i ? sep : "") + v[i];
  return out;
}

std::string type_of(const json& v) {
  if (v.is_number_integer()) return "integer " + v.dump();
  if (v.is_number_float()) return "number " + v.dump();
  if (v.is_structured()) return detail::json_brief(v);
  return std::string(v.type_name()) + " " + detail::json_brief(v);
}

// Typed access to config keys; every error names the source file and the key.
class Fields {
 public:
  Fields(const json& j, std::string source) : j_(j), source_(std::move(source)) {}

  [[noreturn]] void fail(const std::string& what, const std::string& hint = {}) const {
    throw Error(source_ + ": " + what, hint);
  }

  // Present and not null.
  bool has(const char* key) const { return j_.contains(key) && !j_.at(key).is_null(); }

  int64_t integer(const char* key, std::optional<int64_t> fallback = std::nullopt) const {
    if (!has(key)) {
      if (fallback) return *fallback;
      fail(std::string("missing required key '") + key + "'",
           "a Hugging Face config.json of this architecture always sets it; is this the right file?");
    }
    return as_integer(j_.at(key), key);
  }

  int64_t as_integer(const json& v, const std::string& key) const {
    if (v.is_number_unsigned()) {
      if (v.get<uint64_t>() > uint64_t(std::numeric_limits<int64_t>::max())) fail(key + " is too large (" + v.dump() + ")");
      return int64_t(v.get<uint64_t>());
    }
    if (v.is_number_integer()) return v.get<int64_t>();
    if (v.is_number_float()) {
      double d = v.get<double>();
      if (std::isfinite(d) && d == std::floor(d) && std::fabs(d) < 9.0e15) return int64_t(d);
    }
    fail(key + " must be an integer (got " + type_of(v) + ")");
  }

  double number(const char* key, double fallback) const {
    if (!has(key)) return fallback;
    return as_number(j_.at(key), key);
  }

  double as_number(const json& v, const std::string& key) const {
    if (!v.is_number()) fail(key + " must be a number (got " + type_of(v) + ")");
    return v.get<double>();
  }

  bool boolean(const char* key, bool fallback) const {
    if (!has(key)) return fallback;
    const json& v = j_.at(key);
    if (!v.is_boolean()) fail(std::string(key) + " must be true or false (got " + type_of(v) + ")");
    return v.get<bool>();
  }

  std::string string(const char* key, const std::string& fallback) const {
    if (!has(key)) return fallback;
    const json& v = j_.at(key);
    if (!v.is_string()) fail(std::string(key) + " must be a string (got " + type_of(v) + ")");
    return v.get<std::string>();
  }

  const json& j() const { return j_; }
  const std::string& source() const { return source_; }

 private:
  const json& j_;
  std::string source_;
};

const ArchInfo& pick_architecture(const Fields& f) {
  std::string arch;
  if (f.has("architectures")) {
    const json& a = f.j().at("architectures");
    if (!a.is_array() || a.empty() || !a[0].is_string())
      f.fail("architectures must be a non-empty list of strings (got " + type_of(a) + ")",
             "e.g. \"architectures\": [\"LlamaForCausalLM\"]");
    arch = a[0].get<std::string>();
  }
  const std::string model_type = f.string("model_type", "");
  if (arch.empty()) {
    for (const auto& info : kArchs)
      if (model_type == info.model_type) return info;
    f.fail("neither 'architectures' nor a known 'model_type' (got '" + model_type + "')",
           "supported architectures: " + join(ModelConfig::supported_architectures()));
  }
  for (const auto& info : kArchs) {
    if (arch != info.architecture) continue;
    if (!model_type.empty() && model_type != info.model_type)
      f.fail("architectures[0] is " + arch + " but model_type is '" + model_type + "'",
             std::string("expected model_type '") + info.model_type + "'");
    return info;
  }
  f.fail("unsupported architecture '" + arch + "'",
         "supported architectures: " + join(ModelConfig::supported_architectures()));
}

// rope_scaling (HF) or rope_parameters (transformers >= 5, which also carries rope_theta).
RopeScaling parse_rope_scaling(const Fields& f, double* rope_theta) {
  RopeScaling rs;
  const char* key = f.has("rope_scaling") ? "rope_scaling" : f.has("rope_parameters") ? "rope_parameters" : nullptr;
  if (!key) return rs;
  const json& r = f.j().at(key);
  if (!r.is_object()) f.fail(std::string(key) + " must be an object or null (got " + type_of(r) + ")");
  Fields rf(r, f.source());
  const std::string prefix = std::string(key) + ".";
  const std::string type = rf.has("rope_type") ? rf.string("rope_type", "") : rf.string("type", "default");
  auto rope_field = [&](const char* name, std::optional<double> fallback) {
    if (!rf.has(name)) {
      if (fallback) return *fallback;
      f.fail(prefix + name + " is missing for rope type '" + type + "'",
             "see transformers' rope_config_validation for the keys each type needs");
    }
    return rf.as_number(r.at(name), prefix + name);
  };
  if (std::string(key) == "rope_parameters" && rf.has("rope_theta")) *rope_theta = rope_field("rope_theta", {});
  if (type == "default" || type == "none") return rs;
  rs.type = type;
  if (type == "linear") {
    rs.factor = rope_field("factor", {});
  } else if (type == "llama3") {
    rs.factor = rope_field("factor", {});
    rs.low_freq_factor = rope_field("low_freq_factor", {});
    rs.high_freq_factor = rope_field("high_freq_factor", {});
    double orig = rope_field("original_max_position_embeddings", {});
    rs.original_max_position_embeddings = int64_t(orig);
    if (rs.low_freq_factor <= 0 || rs.high_freq_factor <= rs.low_freq_factor)
      f.fail(prefix + "high_freq_factor (" + std::to_string(rs.high_freq_factor) + ") must exceed low_freq_factor (" +
             std::to_string(rs.low_freq_factor) + ") > 0");
    if (rs.original_max_position_embeddings <= 0) f.fail(prefix + "original_max_position_embeddings must be positive");
  } else {
    f.fail(prefix + "type '" + type + "' is not supported",
           "supported rope scaling types: default (none), linear, llama3");
  }
  if (!(rs.factor > 0)) f.fail(prefix + "factor must be positive (got " + std::to_string(rs.factor) + ")");
  return rs;
}

std::vector<int64_t> parse_eos(const Fields& f) {
  if (!f.has("eos_token_id")) return {};
  const json& v = f.j().at("eos_token_id");
  std::vector<int64_t> out;
  if (v.is_array()) {
    for (size_t i = 0; i < v.size(); ++i) out.push_back(f.as_integer(v[i], "eos_token_id[" + std::to_string(i) + "]"));
  } else {
    out.push_back(f.as_integer(v, "eos_token_id"));
  }
  return out;
}

// Sizes past these bounds are corrupt input, not models; rejecting them keeps
// expected_tensors() and parameter counts from overflowing or allocating wildly.
constexpr int64_t kMaxDim = int64_t(1) << 24;
constexpr int64_t kMaxLayers = 4096;

void check_positive(const Fields& f, const char* key, int64_t v) {
  if (v <= 0) f.fail(std::string(key) + " must be positive (got " + std::to_string(v) + ")");
  const int64_t limit = std::string(key) == "num_hidden_layers" ? kMaxLayers : kMaxDim;
  if (v > limit)
    f.fail(std::string(key) + " (" + std::to_string(v) + ") is implausibly large (limit " + std::to_string(limit) + ")",
           "the file is probably corrupt");
}

const ArchInfo& arch_info(const std::string& architecture) {
  for (const auto& info : kArchs)
    if (architecture == info.architecture) return info;
  throw Error("ModelConfig: unsupported architecture '" + architecture + "'",
              "supported architectures: " + join(ModelConfig::supported_architectures()));
}

}  // namespace

const std::vector<std::string>& ModelConfig::supported_architectures() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> v;
    for (const auto& info : kArchs) v.emplace_back(info.architecture);
    return v;
  }();
  return names;
}

ModelConfig ModelConfig::from_json(const nlohmann::json& j, const std::string& source) {
  if (!j.is_object()) throw Error(source + ": expected a JSON object (got " + std::string(j.type_name()) + ")");
  Fields f(j, source);
  const ArchInfo& info = pick_architecture(f);

  ModelConfig c;
  c.raw = j;
  c.architecture = info.architecture;
  c.model_type = info.model_type;
  c.vocab_size = f.integer("vocab_size");
  c.hidden_size = f.integer("hidden_size");
  c.intermediate_size = f.integer("intermediate_size");
  c.num_hidden_layers = f.integer("num_hidden_layers");
  c.num_attention_heads = f.integer("num_attention_heads");
  for (auto [key, v] : {std::pair{"vocab_size", c.vocab_size}, {"hidden_size", c.hidden_size},
                        {"intermediate_size", c.intermediate_size}, {"num_hidden_layers", c.num_hidden_layers},
                        {"num_attention_heads", c.num_attention_heads}})
    check_positive(f, key, v);
  c.num_key_value_heads = f.integer("num_key_value_heads", c.num_attention_heads);
  check_positive(f, "num_key_value_heads", c.num_key_value_heads);
  if (c.num_attention_heads % c.num_key_value_heads != 0)
    f.fail("num_attention_heads (" + std::to_string(c.num_attention_heads) + ") is not a multiple of num_key_value_heads (" +
               std::to_string(c.num_key_value_heads) + ")",
           "grouped-query attention shares each key/value head among a whole number of query heads");

  if (f.has("head_dim")) {
    c.head_dim = f.integer("head_dim");
    check_positive(f, "head_dim", c.head_dim);
  } else if (info.default_head_dim) {
    c.head_dim = *info.default_head_dim;
  } else {
    if (c.hidden_size % c.num_attention_heads != 0)
      f.fail("hidden_size (" + std::to_string(c.hidden_size) + ") is not a multiple of num_attention_heads (" +
                 std::to_string(c.num_attention_heads) + ")",
             "set head_dim explicitly when the heads do not split hidden_size evenly");
    c.head_dim = c.hidden_size / c.num_attention_heads;
  }
  if (c.head_dim % 2 != 0)
    f.fail("head_dim (" + std::to_string(c.head_dim) + ") must be even", "rotary embeddings rotate pairs of dimensions");

  c.max_position_embeddings = f.integer("max_position_embeddings", info.default_max_position_embeddings);
  check_positive(f, "max_position_embeddings", c.max_position_embeddings);
  c.rms_norm_eps = f.number("rms_norm_eps", 1e-6);
  if (!(c.rms_norm_eps > 0) || !std::isfinite(c.rms_norm_eps))
    f.fail("rms_norm_eps must be a positive number (got " + std::to_string(c.rms_norm_eps) + ")");
  c.rope_theta = f.number("rope_theta", 10000.0);
  c.rope_scaling = parse_rope_scaling(f, &c.rope_theta);
  if (!(c.rope_theta > 0) || !std::isfinite(c.rope_theta))
    f.fail("rope_theta must be a positive number (got " + std::to_string(c.rope_theta) + ")");

  c.tie_word_embeddings = f.boolean("tie_word_embeddings", false);
  const bool attention_bias = info.has_attention_bias_key && f.boolean("attention_bias", false);
  c.qkv_bias = info.qkv_bias_always || attention_bias;
  c.o_bias = attention_bias;
  c.mlp_bias = info.has_mlp_bias_key && f.boolean("mlp_bias", false);
  c.qk_norm = info.qk_norm;

  c.hidden_act = f.string("hidden_act", "silu");
  if (c.hidden_act == "swish") c.hidden_act = "silu";
  if (c.hidden_act != "silu")
    f.fail("hidden_act '" + c.hidden_act + "' is not supported", "these architectures use a SiLU-gated MLP: \"silu\"");

  // transformers >= 4.56 writes "dtype"; older ones "torch_dtype".
  c.torch_dtype = f.has("torch_dtype") ? f.string("torch_dtype", "float32") : f.string("dtype", "float32");
  if (c.torch_dtype.rfind("torch.", 0) == 0) c.torch_dtype = c.torch_dtype.substr(6);
  if (c.torch_dtype != "float32" && c.torch_dtype != "float16" && c.torch_dtype != "bfloat16")
    f.fail("torch_dtype '" + c.torch_dtype + "' is not supported", "expected float32, float16 or bfloat16");

  if (f.has("bos_token_id")) c.bos_token_id = f.integer("bos_token_id");
  c.eos_token_ids = parse_eos(f);
  return c;
}

ModelConfig ModelConfig::load(const std::filesystem::path& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::path file = fs::is_directory(path, ec) ? path / "config.json" : path;
  std::ifstream in(file, std::ios::binary);
  if (!in) {
    if (!fs::exists(file, ec))
      throw Error(file.string() + ": no such file",
                  fs::is_directory(path, ec) ? "the model directory has no config.json" : "pass a model directory or its config.json");
    throw Error(file.string() + ": cannot be opened for reading");
  }
  std::stringstream ss;
  ss << in.rdbuf();
  json j;
  j = json_input::parse(ss.str(), file.string(), json_input::file_limits());
  return from_json(j, file.string());
}

nlohmann::json ModelConfig::to_json() const {
  const ArchInfo& info = arch_info(architecture);
  json j = raw.is_object() ? raw : json::object();
  j["architectures"] = json::array({architecture});
  j["model_type"] = model_type;
  j["vocab_size"] = vocab_size;
  j["hidden_size"] = hidden_size;
  j["intermediate_size"] = intermediate_size;
  j["num_hidden_layers"] = num_hidden_layers;
  j["num_attention_heads"] = num_attention_heads;
  j["num_key_value_heads"] = num_key_value_heads;
  j["head_dim"] = head_dim;
  j["max_position_embeddings"] = max_position_embeddings;
  j["rms_norm_eps"] = rms_norm_eps;
  j["hidden_act"] = hidden_act;
  j["tie_word_embeddings"] = tie_word_embeddings;
  if (info.has_attention_bias_key) j["attention_bias"] = o_bias;
  if (info.has_mlp_bias_key) j["mlp_bias"] = mlp_bias;

  json rope = nullptr;
  if (rope_scaling.type == "linear") {
    rope = {{"rope_type", "linear"}, {"factor", rope_scaling.factor}};
  } else if (rope_scaling.type == "llama3") {
    rope = {{"rope_type", "llama3"},
            {"factor", rope_scaling.factor},
            {"low_freq_factor", rope_scaling.low_freq_factor},
            {"high_freq_factor", rope_scaling.high_freq_factor},
            {"original_max_position_embeddings", rope_scaling.original_max_position_embeddings}};
  }
  if (j.contains("rope_parameters") && j["rope_parameters"].is_object()) {
    json& rp = j["rope_parameters"];
    rp["rope_theta"] = rope_theta;
    if (rope.is_object()) rp.update(rope);
    else rp["rope_type"] = "default";
  } else {
    j["rope_theta"] = rope_theta;
    j["rope_scaling"] = rope;
  }

  if (j.contains("dtype")) j["dtype"] = torch_dtype;
  j["torch_dtype"] = torch_dtype;
  j["bos_token_id"] = bos_token_id ? json(*bos_token_id) : json(nullptr);
  if (eos_token_ids.empty()) j["eos_token_id"] = nullptr;
  else if (eos_token_ids.size() == 1) j["eos_token_id"] = eos_token_ids[0];
  else j["eos_token_id"] = eos_token_ids;
  return j;
}

std::vector<ModelConfig::TensorSpec> ModelConfig::expected_tensors() const {
  const int64_t q_out = num_attention_heads * head_dim;
  const int64_t kv_out = num_key_value_heads * head_dim;
  std::vector<TensorSpec> out;
  out.reserve(size_t(num_hidden_layers) * 16 + 3);
  out.push_back({"model.embed_tokens.weight", {vocab_size, hidden_size}});
  auto linear = [&](const std::string& name, int64_t out_f, int64_t in_f, bool bias) {
    out.push_back({name + ".weight", {out_f, in_f}});
    if (bias) out.push_back({name + ".bias", {out_f}});
  };
  for (int64_t i = 0; i < num_hidden_layers; ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".";
    out.push_back({p + "input_layernorm.weight", {hidden_size}});
    linear(p + "self_attn.q_proj", q_out, hidden_size, qkv_bias);
    linear(p + "self_attn.k_proj", kv_out, hidden_size, qkv_bias);
    linear(p + "self_attn.v_proj", kv_out, hidden_size, qkv_bias);
    linear(p + "self_attn.o_proj", hidden_size, q_out, o_bias);
    if (qk_norm) {
      out.push_back({p + "self_attn.q_norm.weight", {head_dim}});
      out.push_back({p + "self_attn.k_norm.weight", {head_dim}});
    }
    out.push_back({p + "post_attention_layernorm.weight", {hidden_size}});
    linear(p + "mlp.gate_proj", intermediate_size, hidden_size, mlp_bias);
    linear(p + "mlp.up_proj", intermediate_size, hidden_size, mlp_bias);
    linear(p + "mlp.down_proj", hidden_size, intermediate_size, mlp_bias);
  }
  out.push_back({"model.norm.weight", {hidden_size}});
  if (!tie_word_embeddings) out.push_back({"lm_head.weight", {vocab_size, hidden_size}});
  return out;
}

int64_t ModelConfig::num_parameters() const {
  int64_t total = 0;
  for (const auto& t : expected_tensors()) {
    int64_t n = 1;
    for (int64_t d : t.shape) n *= d;
    total += n;
  }
  return total;
}

}  // namespace rl::model
