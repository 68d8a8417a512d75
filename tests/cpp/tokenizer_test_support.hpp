// Helpers shared by the tokenizer tests (test_tokenizer.cpp, test_tokenizer_parity.cpp).
// Each real tokenizer is loaded once per test binary (the Qwen3 file is 11 MB): the
// loaders are inline functions with function-local statics, shared by both files.
#pragma once

#include <catch2/catch.hpp>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "model/bpe.hpp"
#include "model/tokenizer.hpp"
#include "model/unicode.hpp"

#include "test_support.hpp"

namespace rl::test::tok {

namespace fs = std::filesystem;
using nlohmann::json;
using rl::model::Tokenizer;

inline fs::path data_dir() { return rl::test::test_data(); }

inline const Tokenizer& qwen3() {
  static const Tokenizer t = Tokenizer::load(data_dir() / "tokenizers" / "qwen");
  return t;
}
inline const Tokenizer& qwen25() {
  static const Tokenizer t = Tokenizer::load(data_dir() / "tokenizers" / "qwen" / "qwen2.5");
  return t;
}
inline const Tokenizer& stories() {
  static const Tokenizer t = Tokenizer::load(data_dir() / "models" / "stories260K");
  return t;
}

inline std::vector<json> read_jsonl(const fs::path& path) {
  std::ifstream in(path);
  REQUIRE(in.good());
  std::vector<json> rows;
  std::string line;
  while (std::getline(in, line))
    if (!line.empty()) rows.push_back(json::parse(line));
  return rows;
}

inline std::string read_text(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Streams ids through an IncrementalDecoder; every piece must be valid UTF-8.
inline std::string stream_decode(const Tokenizer& tok, const std::vector<int32_t>& ids, bool skip_special) {
  rl::model::IncrementalDecoder dec(tok, rl::model::DecodeOptions{skip_special});
  std::string out;
  for (int32_t id : ids) {
    const std::string piece = dec.push(id);
    CHECK(rl::model::unicode::is_valid_utf8(piece));
    out += piece;
  }
  const std::string tail = dec.finish();
  CHECK(rl::model::unicode::is_valid_utf8(tail));
  return out + tail;
}

// The message of what `fn` throws ("" when it does not throw).
template <class Fn>
inline std::string error_of(Fn&& fn) {
  try {
    fn();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

// Runs the reference_encodings.jsonl parity check for one Qwen tokenizer.
inline void check_qwen_parity(const Tokenizer& tok, const fs::path& file) {
  const auto rows = read_jsonl(file);
  REQUIRE(rows.size() > 100);
  size_t checked = 0;
  for (const json& row : rows) {
    const std::string text = row["text"];
    const auto expected = row["ids"].get<std::vector<int32_t>>();
    INFO(row["category"].get<std::string>() << ": " << row["text"].dump());
    const auto ids = tok.encode(text, rl::model::EncodeOptions{false});
    CHECK(ids == expected);
    const std::string decoded = tok.decode(expected);
    CHECK(decoded == rl::model::unicode::nfc(text));
    CHECK(stream_decode(tok, expected, false) == decoded);
    CHECK(stream_decode(tok, expected, true) == tok.decode(expected, rl::model::DecodeOptions{true}));
    ++checked;
  }
  CHECK(checked == rows.size());
}

// A small byte-level BPE tokenizer (Qwen-style pipeline) with added tokens that use
// every flag; the same as the one the expected ids below came from (HF tokenizers 0.23).
inline json tiny_tokenizer_json() {
  json vocab = json::object();
  for (int b = 0; b < 256; ++b) {
    std::string ch;
    rl::model::unicode::append_utf8(ch, rl::model::byte_level_char(static_cast<uint8_t>(b)));
    vocab[ch] = b;
  }
  const std::vector<std::pair<std::string, std::string>> merges = {
      {"h", "e"},  {"l", "l"},  {"he", "ll"},      {"hell", "o"}, {"\xC4\xA0", "w"}, {"o", "r"},
      {"\xC4\xA0w", "or"}, {"l", "d"},  {"\xC4\xA0wor", "ld"}, {"w", "or"},   {"wor", "d"}};
  int next = 256;
  json merge_list = json::array();
  for (const auto& [a, b] : merges) {
    if (!vocab.contains(a + b)) vocab[a + b] = next++;
    merge_list.push_back({a, b});
  }
  auto added = [](int id, const std::string& content, bool special, bool lstrip, bool rstrip, bool single_word,
                  bool normalized) {
    return json{{"id", id},         {"content", content}, {"special", special},      {"lstrip", lstrip},
                {"rstrip", rstrip}, {"single_word", single_word}, {"normalized", normalized}};
  };
  const char* qwen_regex =
      R"re((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)re";
  json byte_level = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", false}, {"use_regex", false}};
  return json{
      {"version", "1.0"},
      {"added_tokens",
       {added(267, "<|end|>", true, false, false, false, false), added(268, "<|end|>x", true, false, false, false, false),
        added(269, "<L>", true, true, false, false, false), added(270, "<R>", true, false, true, false, false),
        added(271, "hi", false, false, false, true, false), added(272, "<n>", false, false, false, false, true)}},
      {"normalizer", {{"type", "NFC"}}},
      {"pre_tokenizer",
       {{"type", "Sequence"},
        {"pretokenizers",
         {{{"type", "Split"}, {"pattern", {{"Regex", qwen_regex}}}, {"behavior", "Isolated"}, {"invert", false}},
          byte_level}}}},
      {"post_processor", byte_level},
      {"decoder", byte_level},
      {"model",
       {{"type", "BPE"}, {"dropout", nullptr}, {"unk_token", nullptr}, {"continuing_subword_prefix", ""},
        {"end_of_word_suffix", ""}, {"fuse_unk", false}, {"byte_fallback", false}, {"vocab", vocab},
        {"merges", merge_list}}}};
}

}  // namespace rl::test::tok
