// Tokenizer::Impl: the parts of a loaded tokenizer.json. Private to runtime/model
// (tokenizer.cpp: encode/decode/API, tokenizer_load.cpp: building it).
#pragma once
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "model/added_tokens.hpp"
#include "model/bpe.hpp"
#include "model/decoder.hpp"
#include "model/normalizer.hpp"
#include "model/post_processor.hpp"
#include "model/pretokenizer.hpp"
#include "model/tokenizer.hpp"

namespace rl::model {

struct Tokenizer::Impl {
  Impl();
  ~Impl();

  std::string source;  // for messages: the tokenizer.json path (or "tokenizer.json")
  BpeModel model;
  AddedVocabulary added;
  Normalizer normalizer;
  PreTokenizer pre_tokenizer;
  PostProcessor post_processor;
  Decoder decoder;
  int32_t vocab_size = 0;

  // from tokenizer_config.json (and config.json / generation_config.json for eos)
  std::optional<int32_t> bos_id, pad_id;
  std::vector<int32_t> eos_ids;
  nlohmann::json special_token_strings = nlohmann::json::object();  // bos_token, eos_token, ... for templates
  std::optional<std::string> chat_template_source;
  std::string chat_template_name = "chat_template";
  std::string config_source = "tokenizer_config.json";  // its path when load() read it
  mutable std::mutex template_mutex;
  mutable std::unique_ptr<ChatTemplate> chat_template;  // parsed on first use

  // Plain ByteLevel decoder: every id's bytes, precomputed (offsets has vocab_size + 1 entries).
  bool fast_decode = false;
  std::string decoded_arena;
  std::vector<uint32_t> decoded_offsets;

  int32_t token_to_id(std::string_view token) const {
    const int32_t a = added.by_content(token);
    return a >= 0 ? a : model.token_to_id(token);
  }
  std::optional<std::string_view> id_to_token(int32_t id) const {
    if (const AddedToken* t = added.by_id(id)) return std::string_view(t->text);
    return model.id_to_token(id);
  }
};

// tokenizer_load.cpp
std::unique_ptr<Tokenizer::Impl> build_tokenizer_from_text(std::string_view text, const nlohmann::json& config,
                                                            const std::string& source);
std::unique_ptr<Tokenizer::Impl> build_tokenizer_from_json(const nlohmann::json& tokenizer_json,
                                                            const nlohmann::json& config, const std::string& source);

}  // namespace rl::model
