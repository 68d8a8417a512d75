// GGUF v2/v3 (llama.cpp) reader: metadata, tensor infos, F32/F16/BF16 data,
// mapped to Hugging Face names, layout and config. Every count and length read
// from the file is checked against the bytes left before anything is allocated.
#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstring>
#include <set>

#include "base/errors.hpp"
#include "model/tensor_files.hpp"
#include "model/tensor_files_io.hpp"

namespace rl::model {
namespace {

using nlohmann::json;

constexpr const char* kCorruptHint = "the file is truncated or corrupt";
constexpr size_t kMaxArrayShown = 64;
constexpr int kMaxArrayDepth = 4;
constexpr uint32_t kMaxDims = 4;  // GGML_MAX_DIMS

enum ValueType : uint32_t { U8, I8, U16, I16, U32, I32, F32, BOOL, STRING, ARRAY, U64, I64, F64, kNumValueTypes };
constexpr const char* kValueTypeNames[] = {"uint8", "int8",   "uint16", "int16",  "uint32", "int32", "float32",
                                           "bool",  "string", "array",  "uint64", "int64",  "float64"};
constexpr size_t kScalarSize[] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};

std::string ggml_type_name(uint32_t t) {
  static const std::map<uint32_t, const char*> names = {
      {0, "F32"},     {1, "F16"},     {2, "Q4_0"},    {3, "Q4_1"},   {6, "Q5_0"},    {7, "Q5_1"},   {8, "Q8_0"},
      {9, "Q8_1"},    {10, "Q2_K"},   {11, "Q3_K"},   {12, "Q4_K"},  {13, "Q5_K"},   {14, "Q6_K"},  {15, "Q8_K"},
      {16, "IQ2_XXS"}, {17, "IQ2_XS"}, {18, "IQ3_XXS"}, {19, "IQ1_S"}, {20, "IQ4_NL"}, {21, "IQ3_S"}, {22, "IQ2_S"},
      {23, "IQ4_XS"}, {24, "I8"},     {25, "I16"},    {26, "I32"},   {27, "I64"},    {28, "F64"},   {29, "IQ1_M"},
      {30, "BF16"},   {34, "TQ1_0"},  {35, "TQ2_0"},  {39, "MXFP4"}};
  auto it = names.find(t);
  return it != names.end() ? it->second : "unknown type " + std::to_string(t);
}

// float32 metadata (1e-5 stored as 9.99999974738e-06) read back as the decimal
// the converter wrote: the shortest string that round-trips the float.
double float_to_double(float f) {
  if (!std::isfinite(f)) return double(f);
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof buf, f);
  double d = f;
  std::from_chars(buf, r.ptr, d);
  return d;
}

bool valid_utf8(const std::string& s) {
  size_t i = 0;
  while (i < s.size()) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    size_t n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (n == 0 || i + n > s.size()) return false;
    for (size_t k = 1; k < n; ++k)
      if ((static_cast<unsigned char>(s[i + k]) >> 6) != 2) return false;
    i += n;
  }
  return true;
}

class Cursor {
 public:
  Cursor(const std::byte* data, size_t size, const std::string& name) : data_(data), size_(size), name_(name) {}

  [[noreturn]] void fail(const std::string& what, const std::string& hint = kCorruptHint) const {
    throw Error(name_ + ": " + what, hint);
  }
  size_t left() const { return size_ - pos_; }
  size_t pos() const { return pos_; }

  // What is being read, for messages ("metadata key 'llama.block_count'");
  // `what` names the field within it. Both are only formatted on failure.
  void about(std::string subject) { subject_ = std::move(subject); }

  void need(uint64_t n, const char* what) const {
    if (n > left())
      fail("truncated: " + std::string(what) + (subject_.empty() ? "" : " of " + subject_) + " needs " + std::to_string(n) +
           " bytes at offset " + std::to_string(pos_) + ", " + std::to_string(left()) + " left");
  }
  template <class T>
  T read(const char* what) {
    need(sizeof(T), what);
    T v;
    std::memcpy(&v, data_ + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }
  std::string str(const char* what) {
    const uint64_t n = read<uint64_t>(what);
    need(n, what);
    std::string s(reinterpret_cast<const char*>(data_ + pos_), size_t(n));
    pos_ += size_t(n);
    return s;
  }
  void skip(uint64_t n, const char* what) {
    need(n, what);
    pos_ += size_t(n);
  }

 private:
  const std::byte* data_;
  size_t size_;
  size_t pos_ = 0;
  const std::string& name_;
  std::string subject_;
};

json read_value(Cursor& c, uint32_t type, const std::string& key, int depth);

json read_array(Cursor& c, const std::string& key, int depth) {
  if (depth >= kMaxArrayDepth) c.fail("key '" + key + "': arrays nested deeper than " + std::to_string(kMaxArrayDepth));
  const uint32_t et = c.read<uint32_t>("array type");
  if (et >= kNumValueTypes) c.fail("key '" + key + "': unknown array element type " + std::to_string(et));
  const uint64_t n = c.read<uint64_t>("array length");
  // Smallest encoding of one element: a scalar's size, a string's length field,
  // a nested array's type and count.
  const uint64_t min_elem = et == STRING ? 8 : et == ARRAY ? 12 : kScalarSize[et];
  if (n > c.left() / min_elem)
    c.fail("key '" + key + "': array of " + std::to_string(n) + " " + kValueTypeNames[et] + " cannot fit in the " +
           std::to_string(c.left()) + " bytes left");
  if (n > kMaxArrayShown) {
    if (et == STRING) {
      for (uint64_t i = 0; i < n; ++i) c.skip(c.read<uint64_t>("string length"), "string");
    } else if (et == ARRAY) {
      for (uint64_t i = 0; i < n; ++i) read_array(c, key, depth + 1);
    } else {
      c.skip(n * min_elem, "array");
    }
    return {{"array", kValueTypeNames[et]}, {"length", n}};
  }
  json out = json::array();
  for (uint64_t i = 0; i < n; ++i) out.push_back(read_value(c, et, key, depth + 1));
  return out;
}

json read_value(Cursor& c, uint32_t type, const std::string& key, int depth) {
  const char* what = "value";
  switch (type) {
    case U8: return c.read<uint8_t>(what);
    case I8: return c.read<int8_t>(what);
    case U16: return c.read<uint16_t>(what);
    case I16: return c.read<int16_t>(what);
    case U32: return c.read<uint32_t>(what);
    case I32: return c.read<int32_t>(what);
    case U64: return c.read<uint64_t>(what);
    case I64: return c.read<int64_t>(what);
    case F32: return float_to_double(c.read<float>(what));
    case F64: return c.read<double>(what);
    case BOOL: {
      uint8_t b = c.read<uint8_t>(what);
      if (b > 1) c.fail("key '" + key + "': bool value " + std::to_string(b) + " is neither 0 nor 1");
      return b == 1;
    }
    case STRING: {
      std::string s = c.str(what);
      if (!valid_utf8(s)) return "<" + std::to_string(s.size()) + " bytes, not UTF-8>";
      return s;
    }
    case ARRAY: return read_array(c, key, depth);
    default: c.fail("key '" + key + "': unknown value type " + std::to_string(type));
  }
}

struct TensorInfo {
  std::string name;
  std::vector<int64_t> shape;  // row-major (GGUF dims reversed)
  uint32_t type = 0;
  uint64_t offset = 0, nbytes = 0;
};

// llama.cpp tensor names -> Hugging Face names; nullopt when there is none.
std::optional<std::string> hf_name(const std::string& g, int64_t n_layers) {
  if (g == "token_embd.weight") return "model.embed_tokens.weight";
  if (g == "output_norm.weight") return "model.norm.weight";
  if (g == "output.weight") return "lm_head.weight";
  if (g.rfind("blk.", 0) != 0) return std::nullopt;
  const size_t dot = g.find('.', 4);
  if (dot == std::string::npos || dot == 4 || dot - 4 > 6 || (g[4] == '0' && dot > 5)) return std::nullopt;
  int64_t layer = 0;
  for (size_t i = 4; i < dot; ++i) {
    if (g[i] < '0' || g[i] > '9') return std::nullopt;
    layer = layer * 10 + (g[i] - '0');
  }
  if (layer >= n_layers) return std::nullopt;
  const size_t dot2 = g.rfind('.');
  const std::string part = g.substr(dot + 1, dot2 - dot - 1), kind = g.substr(dot2 + 1);
  if (dot2 <= dot || (kind != "weight" && kind != "bias")) return std::nullopt;
  static const std::map<std::string, std::string> parts = {
      {"attn_q", "self_attn.q_proj"},       {"attn_k", "self_attn.k_proj"},
      {"attn_v", "self_attn.v_proj"},       {"attn_output", "self_attn.o_proj"},
      {"attn_q_norm", "self_attn.q_norm"},  {"attn_k_norm", "self_attn.k_norm"},
      {"attn_norm", "input_layernorm"},     {"ffn_norm", "post_attention_layernorm"},
      {"ffn_gate", "mlp.gate_proj"},        {"ffn_up", "mlp.up_proj"},
      {"ffn_down", "mlp.down_proj"}};
  auto it = parts.find(part);
  if (it == parts.end()) return std::nullopt;
  return "model.layers." + std::to_string(layer) + "." + it->second + "." + kind;
}

// GGUF (Meta / llama.cpp) keeps q and k rows in interleaved RoPE pairs; HF uses
// rotate_half halves. As transformers' convert_llama_weights_to_hf.py does:
// w.reshape(n_heads, d_out/n_heads/2, 2, d_in).transpose(1, 2).reshape(d_out, d_in).
std::vector<std::byte> unpermute_rows(const std::byte* src, int64_t d_out, size_t row_bytes, int64_t n_heads) {
  std::vector<std::byte> dst(size_t(d_out) * row_bytes);
  const int64_t head = d_out / n_heads, half = head / 2;
  for (int64_t h = 0; h < n_heads; ++h)
    for (int64_t p = 0; p < 2; ++p)
      for (int64_t i = 0; i < half; ++i) {
        const int64_t to = h * head + p * half + i, from = h * head + i * 2 + p;
        std::memcpy(dst.data() + size_t(to) * row_bytes, src + size_t(from) * row_bytes, row_bytes);
      }
  return dst;
}

struct Owner {
  std::shared_ptr<void> file;
  std::vector<std::vector<std::byte>> buffers;
};

class MetaReader {
 public:
  MetaReader(const json& kv, std::string name) : kv_(kv), name_(std::move(name)) {}
  bool has(const std::string& key) const { return kv_.contains(key); }
  int64_t integer(const std::string& key) const {
    if (!has(key)) throw Error(name_ + ": metadata key '" + key + "' is missing", "the GGUF does not describe a complete model");
    const json& v = kv_.at(key);
    if (v.is_number_unsigned() && v.get<uint64_t>() <= uint64_t(INT64_MAX)) return int64_t(v.get<uint64_t>());
    if (v.is_number_integer()) return v.get<int64_t>();
    throw Error(name_ + ": metadata key '" + key + "' must be an integer, got " + v.dump(), kCorruptHint);
  }
  double number(const std::string& key, double fallback) const {
    if (!has(key)) return fallback;
    if (!kv_.at(key).is_number()) throw Error(name_ + ": metadata key '" + key + "' must be a number", kCorruptHint);
    return kv_.at(key).get<double>();
  }
  std::string string(const std::string& key, const std::string& fallback) const {
    if (!has(key)) return fallback;
    if (!kv_.at(key).is_string()) throw Error(name_ + ": metadata key '" + key + "' must be a string", kCorruptHint);
    return kv_.at(key).get<std::string>();
  }

 private:
  const json& kv_;
  std::string name_;
};

// The header's metadata entries (n_kv of them), each key once.
json read_metadata(Cursor& c, uint64_t n_kv) {
  if (n_kv > c.left() / 12)  // key length + value type at least
    c.fail("metadata count " + std::to_string(n_kv) + " cannot fit in the " + std::to_string(c.left()) + " bytes left");
  json metadata = json::object();
  for (uint64_t i = 0; i < n_kv; ++i) {
    c.about("metadata entry #" + std::to_string(i));
    std::string key = c.str("key");
    if (!valid_utf8(key)) c.fail("metadata key #" + std::to_string(i) + " is not UTF-8");
    if (metadata.contains(key)) c.fail("metadata key '" + key + "' appears twice");
    c.about("metadata key '" + key + "'");
    const uint32_t type = c.read<uint32_t>("value type");
    metadata[key] = read_value(c, type, key, 0);
  }
  return metadata;
}

uint64_t read_alignment(Cursor& c, const MetaReader& meta) {
  if (!meta.has("general.alignment")) return 32;
  const int64_t a = meta.integer("general.alignment");
  if (a <= 0 || (a & (a - 1)) != 0 || a > (int64_t(1) << 20))
    c.fail("general.alignment " + std::to_string(a) + " is not a power of two", kCorruptHint);
  return uint64_t(a);
}

// Tensor infos: name, dims, type, offset (at least 8 + 4 + 4 + 8 bytes each); only
// F32, F16 and BF16 tensors.
std::vector<TensorInfo> read_tensor_infos(Cursor& c, uint64_t n_tensors, const std::string& name) {
  if (n_tensors > c.left() / 24)
    c.fail("tensor count " + std::to_string(n_tensors) + " cannot fit in the " + std::to_string(c.left()) + " bytes left");
  std::vector<TensorInfo> infos(n_tensors);
  std::set<std::string> names;
  for (size_t i = 0; i < infos.size(); ++i) {
    TensorInfo& t = infos[i];
    c.about("tensor info #" + std::to_string(i));
    t.name = c.str("tensor name");
    c.about("tensor '" + t.name + "'");
    if (!valid_utf8(t.name)) c.fail("a tensor name is not UTF-8");
    if (!names.insert(t.name).second) c.fail("tensor '" + t.name + "' appears twice");
    const uint32_t n_dims = c.read<uint32_t>("dimension count");
    if (n_dims == 0 || n_dims > kMaxDims)
      c.fail("tensor '" + t.name + "' has " + std::to_string(n_dims) + " dimensions (1 to 4 expected)");
    uint64_t numel = 1;
    t.shape.assign(n_dims, 0);
    for (uint32_t d = 0; d < n_dims; ++d) {
      const uint64_t n = c.read<uint64_t>("dimension");
      if (n > uint64_t(INT64_MAX) || detail::mul_overflows(numel, n, &numel))
        c.fail("tensor '" + t.name + "' has an impossible shape");
      t.shape[n_dims - 1 - d] = int64_t(n);  // ne[0] varies fastest: last in row-major order
    }
    t.type = c.read<uint32_t>("type");
    t.offset = c.read<uint64_t>("offset");
    if (t.type != 0 && t.type != 1 && t.type != 30)
      throw Error(name + ": tensor '" + t.name + "' has type " + ggml_type_name(t.type) + "; only F32, F16 and BF16 are supported",
                  "quantized GGUF weights cannot be trained; convert the model with llama.cpp's convert_hf_to_gguf.py "
                  "--outtype f32/f16, or load the Hugging Face safetensors");
    if (detail::mul_overflows(numel, t.type == 0 ? 4 : 2, &t.nbytes)) c.fail("tensor '" + t.name + "' has an impossible shape");
  }
  return infos;
}

void check_offsets(Cursor& c, const std::vector<TensorInfo>& infos, uint64_t alignment, uint64_t data_len) {
  for (const auto& t : infos) {
    if (t.offset % alignment != 0)
      c.fail("tensor '" + t.name + "': offset " + std::to_string(t.offset) + " is not a multiple of the alignment (" +
             std::to_string(alignment) + ")");
    if (t.offset > data_len || t.nbytes > data_len - t.offset)
      c.fail("tensor '" + t.name + "': bytes [" + std::to_string(t.offset) + ", +" + std::to_string(t.nbytes) +
             ") exceed the data region (" + std::to_string(data_len) + " bytes)");
  }
}

const TensorInfo* find_info(const std::vector<TensorInfo>& infos, const std::string& n) {
  for (const auto& t : infos)
    if (t.name == n) return &t;
  return nullptr;
}

// config.json from the <arch>.* keys and the tensors present (embd: token_embd.weight;
// tied: the classifier is the embedding).
json config_from_metadata(Cursor& c, const MetaReader& meta, const std::vector<TensorInfo>& infos, const std::string& arch,
                          const TensorInfo& embd, bool tied) {
  static const std::map<std::string, std::string> kArch = {
      {"llama", "LlamaForCausalLM"}, {"qwen2", "Qwen2ForCausalLM"}, {"qwen3", "Qwen3ForCausalLM"}};
  if (meta.has(arch + ".rope.scaling.type") && meta.string(arch + ".rope.scaling.type", "") != "none" &&
      meta.string(arch + ".rope.scaling.type", "") != "linear")
    c.fail(arch + ".rope.scaling.type '" + meta.string(arch + ".rope.scaling.type", "") + "' is not supported",
           "supported: none, linear; load the Hugging Face checkpoint instead");
  if (find_info(infos, "rope_freqs.weight"))
    c.fail("tensor 'rope_freqs.weight' (llama3 rope scaling) cannot be mapped to a Hugging Face config",
           "load the Hugging Face checkpoint, whose config.json carries rope_scaling");
  const std::string p = arch + ".";
  json cfg = {{"architectures", json::array({kArch.at(arch)})},
              {"model_type", arch},
              {"vocab_size", embd.shape[0]},
              {"hidden_size", meta.integer(p + "embedding_length")},
              {"intermediate_size", meta.integer(p + "feed_forward_length")},
              {"num_hidden_layers", meta.integer(p + "block_count")},
              {"num_attention_heads", meta.integer(p + "attention.head_count")},
              {"max_position_embeddings", meta.integer(p + "context_length")},
              {"rms_norm_eps", meta.number(p + "attention.layer_norm_rms_epsilon", 1e-6)},
              {"rope_theta", meta.number(p + "rope.freq_base", 10000.0)},
              {"hidden_act", "silu"},
              {"tie_word_embeddings", tied},
              {"torch_dtype", embd.type == 0 ? "float32" : embd.type == 1 ? "float16" : "bfloat16"}};
  cfg["num_key_value_heads"] =
      meta.has(p + "attention.head_count_kv") ? json(meta.integer(p + "attention.head_count_kv")) : cfg["num_attention_heads"];
  const int64_t heads = cfg["num_attention_heads"].get<int64_t>(), hidden = cfg["hidden_size"].get<int64_t>();
  if (meta.has(p + "attention.key_length")) cfg["head_dim"] = meta.integer(p + "attention.key_length");
  else if (heads > 0 && hidden % heads == 0) cfg["head_dim"] = hidden / heads;
  if (meta.string(p + "rope.scaling.type", "none") == "linear")
    cfg["rope_scaling"] = {{"rope_type", "linear"}, {"factor", meta.number(p + "rope.scaling.factor", 1.0)}};
  if (arch == "llama") {
    cfg["attention_bias"] = find_info(infos, "blk.0.attn_q.bias") != nullptr;
    cfg["mlp_bias"] = find_info(infos, "blk.0.ffn_gate.bias") != nullptr;
  } else if (arch == "qwen3") {
    cfg["attention_bias"] = find_info(infos, "blk.0.attn_q.bias") != nullptr;
  }
  for (const char* tok : {"bos", "eos"}) {
    const std::string key = std::string("tokenizer.ggml.") + tok + "_token_id";
    if (meta.has(key) && meta.integer(key) >= 0 && meta.integer(key) < embd.shape[0]) cfg[std::string(tok) + "_token_id"] = meta.integer(key);
  }
  return cfg;
}

// The tensors under Hugging Face names (a tied classifier left out), sorted, each name once.
void add_tensors(Cursor& c, GgufModel& model, const std::vector<TensorInfo>& infos, const TensorInfo* skip,
                 const std::byte* data, const std::string& name) {
  const ModelConfig& mc = model.config;
  for (const auto& t : infos) {
    if (&t == skip) continue;
    const auto hf = hf_name(t.name, mc.num_hidden_layers);
    if (!hf)
      throw Error(name + ": tensor '" + t.name + "' has no Hugging Face " + mc.architecture + " equivalent",
                  "only plain llama/qwen2/qwen3 GGUF checkpoints are supported");
    TensorView v;
    v.name = *hf;
    v.dtype = t.type == 0 ? DType::F32 : t.type == 1 ? DType::F16 : DType::BF16;
    v.shape = t.shape;
    v.data = data + t.offset;
    v.nbytes = size_t(t.nbytes);
    v.file = name;
    model.tensors.tensors.push_back(std::move(v));
  }
  std::sort(model.tensors.tensors.begin(), model.tensors.tensors.end(),
            [](const TensorView& a, const TensorView& b) { return a.name < b.name; });
  for (size_t i = 1; i < model.tensors.tensors.size(); ++i)
    if (model.tensors.tensors[i].name == model.tensors.tensors[i - 1].name)
      c.fail("two tensors map to '" + model.tensors.tensors[i].name + "'");
}

// llama: q and k rows un-permuted into buffers the owner keeps.
void unpermute_llama_qk(GgufModel& model, Owner& owner) {
  const ModelConfig& mc = model.config;
  for (auto& v : model.tensors.tensors) {
    const bool is_q = v.name.find(".q_proj.") != std::string::npos, is_k = v.name.find(".k_proj.") != std::string::npos;
    if (!is_q && !is_k) continue;
    const int64_t d_out = v.shape[0];
    owner.buffers.push_back(
        unpermute_rows(v.data, d_out, v.nbytes / size_t(d_out), is_q ? mc.num_attention_heads : mc.num_key_value_heads));
    v.data = owner.buffers.back().data();
  }
}

}  // namespace

GgufModel parse_gguf(const void* data, size_t size, const std::string& name, std::shared_ptr<void> owner_in) {
  const auto* bytes = static_cast<const std::byte*>(data);
  Cursor c(bytes, size, name);
  if (size < 4 || std::memcmp(bytes, "GGUF", 4) != 0)
    c.fail("not a GGUF file (no 'GGUF' magic)", "expected a llama.cpp .gguf file");
  c.skip(4, "magic");
  const uint32_t version = c.read<uint32_t>("version");
  if (version != 2 && version != 3)
    c.fail("GGUF version " + std::to_string(version) + " is not supported",
           version == 1 ? "GGUF v1 is obsolete; re-convert with a current llama.cpp"
                        : "versions 2 and 3 (little-endian) are supported");
  const uint64_t n_tensors = c.read<uint64_t>("tensor count");
  const uint64_t n_kv = c.read<uint64_t>("metadata count");

  GgufModel model;
  model.metadata = read_metadata(c, n_kv);
  const MetaReader meta(model.metadata, name);
  for (const auto& [k, v] : model.metadata.items())
    if (k.rfind("general.", 0) == 0) model.tensors.metadata[k] = v.is_string() ? v.get<std::string>() : v.dump();
  const uint64_t alignment = read_alignment(c, meta);
  const std::vector<TensorInfo> infos = read_tensor_infos(c, n_tensors, name);
  const uint64_t data_start = (uint64_t(c.pos()) + alignment - 1) / alignment * alignment;
  check_offsets(c, infos, alignment, data_start <= size ? size - data_start : 0);

  const std::string arch = meta.string("general.architecture", "");
  if (arch != "llama" && arch != "qwen2" && arch != "qwen3")
    throw Error(name + ": general.architecture '" + arch + "' is not supported",
                "supported GGUF architectures: llama, qwen2, qwen3");
  const TensorInfo* embd = find_info(infos, "token_embd.weight");
  if (!embd || embd->shape.size() != 2) c.fail("no 2-D tensor 'token_embd.weight'", "the GGUF does not hold a complete model");
  const TensorInfo* output = find_info(infos, "output.weight");
  const std::byte* tensor_data = bytes + data_start;
  // llama.cpp's llama2.c converter writes the shared classifier out again:
  // identical bytes mean the embeddings are tied.
  const bool tied = !output || (output->shape == embd->shape && output->type == embd->type &&
                                std::memcmp(tensor_data + output->offset, tensor_data + embd->offset, size_t(embd->nbytes)) == 0);
  model.config = ModelConfig::from_json(config_from_metadata(c, meta, infos, arch, *embd, tied), name + " (GGUF metadata)");
  const std::string p = arch + ".";
  if (meta.has(p + "rope.dimension_count") && meta.integer(p + "rope.dimension_count") != model.config.head_dim)
    c.fail(p + "rope.dimension_count (" + std::to_string(meta.integer(p + "rope.dimension_count")) +
               ") differs from head_dim (" + std::to_string(model.config.head_dim) + ")",
           "partial rotary embeddings are not supported");

  // The tensors under HF names, checked against the config; then llama q/k rows
  // un-permuted into owned buffers.
  auto owner = std::make_shared<Owner>();
  owner->file = std::move(owner_in);
  add_tensors(c, model, infos, tied ? output : nullptr, tensor_data, name);
  validate_tensors(model.tensors, model.config);  // shapes now match the config
  if (arch == "llama") unpermute_llama_qk(model, *owner);
  model.tensors.owner = owner;
  return model;
}

GgufModel read_gguf(const std::filesystem::path& file) {
  auto mapping = detail::map_file(file);
  return parse_gguf(mapping->data(), mapping->size(), file.string(), mapping);
}

}  // namespace rl::model
