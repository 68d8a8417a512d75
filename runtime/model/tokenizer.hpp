// tokenizer.json (Hugging Face `tokenizers` format): byte-level BPE (GPT-2/Qwen) and
// SentencePiece-style BPE (Llama, byte fallback), added/special tokens, decoding,
// incremental decoding, and the chat template from tokenizer_config.json.
// Ids equal HF `tokenizers`' (docs/model.md, "Tokenizer", lists what is supported).
//
// Thread safety: a Tokenizer is immutable after loading; every const member may be
// called from any number of threads at once. An IncrementalDecoder serves one stream.
// Errors (bad files, unsupported components) are rl::Error naming file, JSON path, hint.
#pragma once
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace rl::model {

class ChatTemplate;

struct EncodeOptions {
  bool add_special_tokens = true;  // BOS/EOS from the post-processor (none for Qwen)
};
struct DecodeOptions {
  bool skip_special_tokens = false;
};

class Tokenizer {
 public:
  // `path` is a model directory (tokenizer.json + optional tokenizer_config.json) or a tokenizer.json.
  static Tokenizer load(const std::filesystem::path& path);
  static Tokenizer from_json(const nlohmann::json& tokenizer_json, const nlohmann::json& tokenizer_config = nullptr,
                             const std::string& source = "tokenizer.json");
  // The text of a tokenizer.json (what load() reads; streams the big vocab/merges
  // arrays instead of building a DOM for them).
  static Tokenizer from_json_text(std::string_view tokenizer_json, const nlohmann::json& tokenizer_config = nullptr,
                                  const std::string& source = "tokenizer.json");
  ~Tokenizer();
  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;

  std::vector<int32_t> encode(std::string_view text, const EncodeOptions& opts = {}) const;
  std::string decode(const std::vector<int32_t>& ids, const DecodeOptions& opts = {}) const;

  int32_t vocab_size() const;  // highest id + 1 (model vocab plus added tokens)
  std::optional<int32_t> token_to_id(std::string_view token) const;
  std::optional<std::string> id_to_token(int32_t id) const;
  bool is_special(int32_t id) const;
  std::optional<int32_t> bos_token_id() const;
  std::vector<int32_t> eos_token_ids() const;  // tokenizer_config eos_token (+ config.json's when known)
  std::optional<int32_t> pad_token_id() const;
  const std::string& source() const;  // the tokenizer.json path (or the `source` given)

  // tokenizer_config.json's chat_template; nullptr when there is none.
  const ChatTemplate* chat_template() const;
  // messages: [{role, content, ...}]; kwargs: extra template variables
  // (add_generation_prompt, enable_thinking, tools, ...). bos/eos tokens filled in.
  // Key order of messages/kwargs is kept (tool schemas are rendered with tojson).
  std::string apply_chat_template(const nlohmann::ordered_json& messages,
                                  const nlohmann::ordered_json& kwargs = nlohmann::ordered_json::object()) const;

  struct Impl;
 private:
  explicit Tokenizer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
  friend class IncrementalDecoder;
};

// Streaming detokenizer: feed ids one at a time, get text that is safe to show
// (never a partial UTF-8 character, never text a later token would change).
// The concatenation of push() results and finish() equals tok.decode(ids).
// `tok` must outlive the decoder.
class IncrementalDecoder {
 public:
  IncrementalDecoder(const Tokenizer& tok, DecodeOptions opts = {});
  std::string push(int32_t id);  // new text (possibly empty)
  std::string finish();          // whatever is held back at the end
 private:
  const Tokenizer* tok_;
  DecodeOptions opts_;
  std::vector<int32_t> ids_;
  size_t prefix_offset_ = 0;
  size_t read_offset_ = 0;
};

}  // namespace rl::model
