// GGUF reading: the real stories260K.gguf against its HF conversion (bitwise),
// synthetic files for F16 / untied / qwen2 layouts and errors, and a fuzz of the
// parser (truncations, corrupt counts, random mutations).
#include <catch2/catch.hpp>

#include <cstring>
#include <random>
#include <set>
#include <string>

#include "checkpoint_test_support.hpp"
#include "model/tensor_files.hpp"

using Catch::Matchers::Contains;
using nlohmann::json;
using namespace rl::model;

namespace {

// Writes GGUF v3 files: metadata, tensor infos, aligned data.
class GgufBuilder {
 public:
  void kv_u32(const std::string& k, uint32_t v) { key(k, 4), pod(kv_, v); }
  void kv_f32(const std::string& k, float v) { key(k, 6), pod(kv_, v); }
  void kv_str(const std::string& k, const std::string& v) { key(k, 8), str(kv_, v); }
  void kv_str_array(const std::string& k, const std::vector<std::string>& v) {
    key(k, 9), pod(kv_, uint32_t(8)), pod(kv_, uint64_t(v.size()));
    for (const auto& s : v) str(kv_, s);
  }
  // `ne` in GGUF order (innermost first); `type` 0 F32, 1 F16, 2 Q4_0...
  void tensor(const std::string& name, std::vector<uint64_t> ne, uint32_t type, std::vector<std::byte> data) {
    tensors_.push_back({name, std::move(ne), type, std::move(data)});
  }
  std::vector<std::byte> build(uint32_t version = 3) const {
    std::vector<std::byte> out;
    out.insert(out.end(), {std::byte('G'), std::byte('G'), std::byte('U'), std::byte('F')});
    pod(out, version), pod(out, uint64_t(tensors_.size())), pod(out, n_kv_);
    out.insert(out.end(), kv_.begin(), kv_.end());
    uint64_t offset = 0;
    for (const auto& t : tensors_) {
      str(out, t.name), pod(out, uint32_t(t.ne.size()));
      for (uint64_t d : t.ne) pod(out, d);
      pod(out, t.type), pod(out, offset);
      offset += (t.data.size() + 31) / 32 * 32;
    }
    out.resize((out.size() + 31) / 32 * 32);
    for (const auto& t : tensors_) {
      out.insert(out.end(), t.data.begin(), t.data.end());
      out.resize((out.size() + 31) / 32 * 32);
    }
    return out;
  }

 private:
  struct T {
    std::string name;
    std::vector<uint64_t> ne;
    uint32_t type;
    std::vector<std::byte> data;
  };
  template <class V>
  static void pod(std::vector<std::byte>& o, V v) {
    const auto* p = reinterpret_cast<const std::byte*>(&v);
    o.insert(o.end(), p, p + sizeof v);
  }
  static void str(std::vector<std::byte>& o, const std::string& s) {
    pod(o, uint64_t(s.size()));
    const auto* p = reinterpret_cast<const std::byte*>(s.data());
    o.insert(o.end(), p, p + s.size());
  }
  void key(const std::string& k, uint32_t type) { str(kv_, k), pod(kv_, type), ++n_kv_; }
  std::vector<std::byte> kv_;
  uint64_t n_kv_ = 0;
  std::vector<T> tensors_;
};

// F16 tensor whose element (row, col) holds the bits row * 64 + col + salt:
// rows stay identifiable after re-ordering.
std::vector<std::byte> rows_f16(uint64_t rows, uint64_t cols, uint16_t salt = 0) {
  std::vector<std::byte> out(rows * cols * 2);
  for (uint64_t r = 0; r < rows; ++r)
    for (uint64_t c = 0; c < cols; ++c) {
      const uint16_t v = uint16_t(r * 64 + c + salt);
      std::memcpy(out.data() + (r * cols + c) * 2, &v, 2);
    }
  return out;
}

uint16_t f16_at(const TensorView& t, int64_t row, int64_t col) {
  uint16_t v;
  std::memcpy(&v, t.data + (row * t.shape[1] + col) * 2, 2);
  return v;
}

// A 1-layer model: hidden 8, 2 heads of 4, 1 KV head, ffn 12, vocab 16.
GgufBuilder tiny_model(const std::string& arch, bool untied_output) {
  GgufBuilder b;
  b.kv_str("general.architecture", arch);
  b.kv_str("general.name", "tiny");
  b.kv_str_array("tokenizer.ggml.tokens", std::vector<std::string>(70, "tok"));
  b.kv_u32("tokenizer.ggml.bos_token_id", 1);
  b.kv_u32("tokenizer.ggml.eos_token_id", 2);
  b.kv_u32(arch + ".context_length", 32);
  b.kv_u32(arch + ".embedding_length", 8);
  b.kv_u32(arch + ".feed_forward_length", 12);
  b.kv_u32(arch + ".block_count", 1);
  b.kv_u32(arch + ".attention.head_count", 2);
  b.kv_u32(arch + ".attention.head_count_kv", 1);
  b.kv_f32(arch + ".attention.layer_norm_rms_epsilon", 1e-6f);
  b.kv_f32(arch + ".rope.freq_base", 1e6f);
  b.tensor("token_embd.weight", {8, 16}, 1, rows_f16(16, 8));
  b.tensor("output_norm.weight", {8}, 1, rows_f16(1, 8));
  if (untied_output) b.tensor("output.weight", {8, 16}, 1, rows_f16(16, 8, 7));
  b.tensor("blk.0.attn_q.weight", {8, 8}, 1, rows_f16(8, 8));
  b.tensor("blk.0.attn_k.weight", {8, 4}, 1, rows_f16(4, 8));
  b.tensor("blk.0.attn_v.weight", {8, 4}, 1, rows_f16(4, 8));
  b.tensor("blk.0.attn_output.weight", {8, 8}, 1, rows_f16(8, 8));
  b.tensor("blk.0.attn_norm.weight", {8}, 1, rows_f16(1, 8));
  b.tensor("blk.0.ffn_norm.weight", {8}, 1, rows_f16(1, 8));
  b.tensor("blk.0.ffn_gate.weight", {8, 12}, 1, rows_f16(12, 8));
  b.tensor("blk.0.ffn_up.weight", {8, 12}, 1, rows_f16(12, 8));
  b.tensor("blk.0.ffn_down.weight", {12, 8}, 1, rows_f16(8, 12));
  if (arch == "qwen2") {
    b.tensor("blk.0.attn_q.bias", {8}, 1, rows_f16(1, 8));
    b.tensor("blk.0.attn_k.bias", {4}, 1, rows_f16(1, 4));
    b.tensor("blk.0.attn_v.bias", {4}, 1, rows_f16(1, 4));
  }
  return b;
}

std::string gguf_error(const std::vector<std::byte>& bytes) {
  try {
    parse_gguf(bytes.data(), bytes.size(), "tiny.gguf");
  } catch (const std::exception& e) {
    return e.what();
  }
  FAIL("expected an error");
  return {};
}

}  // namespace

TEST_CASE("gguf: stories260K.gguf equals its HF conversion bitwise", "[gguf]") {
  const auto gguf = read_gguf(rl::test::stories_dir() / "stories260K.gguf");
  const auto st = read_safetensors_dir(rl::test::stories_dir());
  const auto ref = ModelConfig::load(rl::test::stories_dir());

  const ModelConfig& c = gguf.config;
  CHECK(c.architecture == "LlamaForCausalLM");
  CHECK(c.vocab_size == ref.vocab_size);
  CHECK(c.hidden_size == ref.hidden_size);
  CHECK(c.intermediate_size == ref.intermediate_size);
  CHECK(c.num_hidden_layers == ref.num_hidden_layers);
  CHECK(c.num_attention_heads == ref.num_attention_heads);
  CHECK(c.num_key_value_heads == ref.num_key_value_heads);
  CHECK(c.head_dim == ref.head_dim);
  CHECK(c.rms_norm_eps == ref.rms_norm_eps);  // float32 1e-5 read back as 1e-05
  CHECK(c.rope_theta == ref.rope_theta);
  CHECK(c.tie_word_embeddings == ref.tie_word_embeddings);  // output.weight repeats token_embd: tied
  CHECK(c.bos_token_id == ref.bos_token_id);
  CHECK(c.eos_token_ids == ref.eos_token_ids);
  CHECK(c.torch_dtype == "float32");
  CHECK(c.max_position_embeddings == 2048);  // llama.context_length; config.json has the trained 512

  REQUIRE(gguf.tensors.tensors.size() == 47);
  REQUIRE(st.tensors.size() == 47);
  for (const auto& t : gguf.tensors.tensors) {
    INFO(t.name);
    const TensorView* s = st.find(t.name);
    REQUIRE(s);
    CHECK(t.dtype == s->dtype);
    CHECK(t.shape == s->shape);
    REQUIRE(t.nbytes == s->nbytes);
    CHECK(std::memcmp(t.data, s->data, t.nbytes) == 0);
  }
  CHECK_NOTHROW(validate_tensors(gguf.tensors, ref));

  CHECK(gguf.metadata.at("general.architecture") == "llama");
  CHECK(gguf.metadata.at("llama.block_count") == 5);
  CHECK(gguf.metadata.at("llama.attention.layer_norm_rms_epsilon") == 1e-5);
  CHECK(gguf.metadata.at("tokenizer.ggml.tokens") == json{{"array", "string"}, {"length", 512}});
  CHECK(gguf.tensors.metadata.at("general.name") == "llama");
}

TEST_CASE("gguf: F16, untied output, q/k rows from interleaved pairs to rotate_half", "[gguf]") {
  const auto bytes = tiny_model("llama", true).build();
  const auto m = parse_gguf(bytes.data(), bytes.size(), "tiny.gguf");
  CHECK(m.config.vocab_size == 16);
  CHECK(m.config.head_dim == 4);
  CHECK(m.config.num_key_value_heads == 1);
  CHECK_FALSE(m.config.tie_word_embeddings);
  CHECK(m.config.torch_dtype == "float16");
  CHECK(m.config.rms_norm_eps == 1e-6);
  CHECK(m.config.rope_theta == 1e6);
  CHECK(m.metadata.at("tokenizer.ggml.tokens") == json{{"array", "string"}, {"length", 70}});
  REQUIRE(m.tensors.tensors.size() == 12);

  const TensorView* lm = m.tensors.find("lm_head.weight");
  REQUIRE(lm);
  CHECK(lm->dtype == DType::F16);
  CHECK(f16_at(*lm, 3, 5) == 3 * 64 + 5 + 7);
  const TensorView* down = m.tensors.find("model.layers.0.mlp.down_proj.weight");
  REQUIRE(down);
  CHECK(down->shape == std::vector<int64_t>{8, 12});  // GGUF ne = [12, 8]
  CHECK(f16_at(*down, 7, 11) == 7 * 64 + 11);

  // Per head of 4 rows (2 pairs): HF row (p * 2 + i) = GGUF row (i * 2 + p).
  const TensorView* q = m.tensors.find("model.layers.0.self_attn.q_proj.weight");
  const TensorView* k = m.tensors.find("model.layers.0.self_attn.k_proj.weight");
  const TensorView* v = m.tensors.find("model.layers.0.self_attn.v_proj.weight");
  REQUIRE((q && k && v));
  const int q_rows[] = {0, 2, 1, 3, 4, 6, 5, 7};
  for (int r = 0; r < 8; ++r)
    for (int col = 0; col < 8; ++col) CHECK(f16_at(*q, r, col) == q_rows[r] * 64 + col);
  const int k_rows[] = {0, 2, 1, 3};
  for (int r = 0; r < 4; ++r) CHECK(f16_at(*k, r, 1) == k_rows[r] * 64 + 1);
  for (int r = 0; r < 4; ++r) CHECK(f16_at(*v, r, 1) == r * 64 + 1);  // v is not rotated
}

TEST_CASE("gguf: qwen2 keeps q/k rows as stored and carries q/k/v biases", "[gguf]") {
  const auto bytes = tiny_model("qwen2", false).build();
  const auto m = parse_gguf(bytes.data(), bytes.size(), "tiny.gguf");
  CHECK(m.config.architecture == "Qwen2ForCausalLM");
  CHECK(m.config.qkv_bias);
  CHECK(m.config.tie_word_embeddings);  // no output.weight
  const TensorView* q = m.tensors.find("model.layers.0.self_attn.q_proj.weight");
  REQUIRE(q);
  for (int r = 0; r < 8; ++r) CHECK(f16_at(*q, r, 0) == r * 64);
  REQUIRE(m.tensors.find("model.layers.0.self_attn.k_proj.bias"));
  CHECK(m.tensors.find("model.layers.0.self_attn.k_proj.bias")->shape == std::vector<int64_t>{4});
}

TEST_CASE("gguf: errors name the file, tensor and type", "[gguf]") {
  {
    auto b = tiny_model("llama", false);
    b.tensor("blk.0.extra.weight", {8}, 2, std::vector<std::byte>(18));
    CHECK_THAT(gguf_error(b.build()),
               Contains("tiny.gguf: tensor 'blk.0.extra.weight' has type Q4_0; only F32, F16 and BF16 are supported") &&
                   Contains("hint:"));
  }
  {
    auto b = tiny_model("llama", false);
    b.tensor("blk.0.attn_qkv.weight", {8, 16}, 0, std::vector<std::byte>(8 * 16 * 4));
    CHECK_THAT(gguf_error(b.build()), Contains("tensor 'blk.0.attn_qkv.weight' has no Hugging Face LlamaForCausalLM equivalent"));
  }
  CHECK_THAT(gguf_error(tiny_model("gpt2", false).build()),
             Contains("general.architecture 'gpt2' is not supported") && Contains("llama, qwen2, qwen3"));
  CHECK_THAT(gguf_error(tiny_model("llama", false).build(1)), Contains("GGUF version 1 is not supported"));
  auto bytes = tiny_model("llama", false).build();
  bytes[0] = std::byte('X');
  CHECK_THAT(gguf_error(bytes), Contains("not a GGUF file"));
  {
    GgufBuilder b;  // no metadata at all
    b.kv_str("general.architecture", "llama");
    b.tensor("token_embd.weight", {8, 16}, 0, std::vector<std::byte>(8 * 16 * 4));
    CHECK_THAT(gguf_error(b.build()), Contains("metadata key 'llama.embedding_length' is missing"));
  }
  {
    GgufBuilder b = tiny_model("llama", false);
    b.kv_u32("llama.block_count", 2);  // appears twice
    CHECK_THAT(gguf_error(b.build()), Contains("metadata key 'llama.block_count' appears twice"));
  }

  const auto real = rl::test::read_bytes(rl::test::stories_dir() / "stories260K.gguf");
  CHECK_THAT(gguf_error(std::vector<std::byte>(real.begin(), real.begin() + 100)), Contains("truncated"));
  CHECK_THAT(gguf_error(std::vector<std::byte>(real.begin(), real.end() - 1)),
             Contains("tensor 'blk.4.ffn_norm.weight': bytes [1170944, +256) exceed the data region (1171199 bytes)"));
  CHECK_THAT(([] {
               try {
                 read_gguf("/nonexistent/model.gguf");
               } catch (const std::exception& e) {
                 return std::string(e.what());
               }
               return std::string();
             }()),
             Contains("/nonexistent/model.gguf: no such file"));
}

TEST_CASE("gguf: parser fuzz (truncations, corrupt counts, mutations)", "[gguf][fuzz]") {
  const auto real = rl::test::read_bytes(rl::test::stories_dir() / "stories260K.gguf");
  const auto tiny = tiny_model("llama", true).build();
  size_t ok = 0, failed = 0;
  auto attempt = [&](const std::vector<std::byte>& input) {
    std::vector<std::byte> copy(input);  // exact size: ASan sees any over-read
    try {
      const auto m = parse_gguf(copy.data(), copy.size(), "fuzz.gguf");
      for (const auto& t : m.tensors.tensors) {
        unsigned sum = 0;
        for (size_t i = 0; i < t.nbytes; ++i) sum += unsigned(t.data[i]);
        (void)sum;
      }
      ++ok;
    } catch (const std::exception&) {
      ++failed;
    }
  };

  // Truncations: every 61 bytes through the header of the real file, some in its data.
  for (size_t cut = 0; cut < 14300; cut += 61) attempt(std::vector<std::byte>(real.begin(), real.begin() + long(cut)));
  for (size_t cut = 14300; cut < real.size(); cut += 150001) attempt(std::vector<std::byte>(real.begin(), real.begin() + long(cut)));
  for (size_t cut = 0; cut < tiny.size(); cut += 3) attempt(std::vector<std::byte>(tiny.begin(), tiny.begin() + long(cut)));

  // Corrupt counts and lengths: 64-bit fields set to huge values.
  const uint64_t huge[] = {~uint64_t(0), uint64_t(1) << 62, uint64_t(1) << 40, 0x7fffffff, 1000000};
  for (size_t at : {8, 16, 24, 32}) {  // tensor count, kv count, first key length, key bytes
    for (uint64_t h : huge) {
      auto m = tiny;
      std::memcpy(m.data() + at, &h, 8);
      attempt(m);
    }
  }

  // Random byte edits in the header region of the tiny file.
  std::mt19937_64 rng(777);
  for (int iter = 0; iter < 1000; ++iter) {
    auto m = tiny;
    for (int e = 1 + int(rng() % 3); e > 0; --e) {
      const size_t at = rng() % std::min<size_t>(m.size(), 1400);
      switch (rng() % 3) {
        case 0: m[at] = std::byte(rng()); break;
        case 1: m[at] ^= std::byte(1u << (rng() % 8)); break;
        default: m[at] = std::byte(0xff); break;
      }
    }
    attempt(m);
  }
  INFO("parsed " << ok << ", rejected " << failed);
  CHECK(ok > 0);
  CHECK(failed > 0);
}
