// rl::model::Tokenizer: Unicode tables and NFC, the special-token API, added-token
// flags (ids from HF tokenizers), streaming decode, concurrency, loader errors, and
// fuzzing of the loader and of encode/decode. Parity with the HF reference files is
// in test_tokenizer_parity.cpp.
#include <catch2/catch.hpp>

#include <filesystem>
#include <string>
#include <vector>
#include <cstring>
#include <random>
#include <thread>

#include "model/pretokenizer.hpp"
#include "model/tokenizer.hpp"
#include "model/unicode.hpp"
#include "tokenizer_test_support.hpp"

using Catch::Matchers::Contains;
using nlohmann::json;
using rl::model::DecodeOptions;
using rl::model::EncodeOptions;
using rl::model::IncrementalDecoder;
using rl::model::Tokenizer;
using namespace rl::test::tok;
namespace unicode = rl::model::unicode;
namespace fs = std::filesystem;

// ---- Unicode ----------------------------------------------------------------------------------
TEST_CASE("unicode: UTF-8 decoding replaces each maximal invalid subpart with U+FFFD", "[tokenizer][unicode]") {
  CHECK(unicode::to_valid_utf8("abc") == "abc");
  CHECK(unicode::to_valid_utf8("\xE4\xB8") == "\xEF\xBF\xBD");                    // truncated 3-byte sequence
  CHECK(unicode::to_valid_utf8("a\xFF" "b") == "a\xEF\xBF\xBD" "b");              // invalid byte
  CHECK(unicode::to_valid_utf8("\xC0\xAF") == "\xEF\xBF\xBD\xEF\xBF\xBD");      // overlong: two subparts
  CHECK(unicode::to_valid_utf8("\xED\xA0\x80") == "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");  // surrogate
  CHECK(unicode::to_valid_utf8("\xF0\x9F\x98") == "\xEF\xBF\xBD");                // truncated emoji
  CHECK_FALSE(unicode::is_valid_utf8("\xF4\x90\x80\x80"));                          // above U+10FFFF
  std::string s;
  unicode::append_utf8(s, 0x1F600);
  CHECK(s == "\xF0\x9F\x98\x80");
  size_t i = 0;
  CHECK(unicode::decode(s, i) == 0x1F600);
  CHECK(i == 4);
}

TEST_CASE("unicode: character classes follow the regex semantics HF uses", "[tokenizer][unicode]") {
  CHECK(unicode::is_letter(U'a'));
  CHECK(unicode::is_letter(0x4F60));   // 你
  CHECK(unicode::is_letter(0x05D0));   // Hebrew alef
  CHECK_FALSE(unicode::is_letter(0x0301));  // combining acute (Mn)
  CHECK_FALSE(unicode::is_letter(0x094D));  // Devanagari virama (Mn)
  CHECK(unicode::is_number(U'7'));
  CHECK(unicode::is_number(0x00B2));   // superscript two (No)
  CHECK(unicode::is_number(0x2167));   // Roman numeral eight (Nl)
  CHECK(unicode::is_number(0x0663));   // Arabic-Indic three
  CHECK(unicode::is_whitespace(0x00A0));
  CHECK(unicode::is_whitespace(0x3000));
  CHECK(unicode::is_whitespace(0x0085));
  CHECK_FALSE(unicode::is_whitespace(0x200B));  // ZWSP is not White_Space
  CHECK_FALSE(unicode::is_whitespace(0xFEFF));
  CHECK_FALSE(unicode::is_whitespace(0x001C));  // Python's isspace() says yes; \s does not
  CHECK(unicode::combining_class(0x0301) == 230);
  CHECK(std::string(unicode::unicode_version()) == "14.0.0");
}

TEST_CASE("unicode: NFC composes, reorders and respects exclusions", "[tokenizer][unicode]") {
  CHECK(unicode::nfc("cafe\xCC\x81") == "caf\xC3\xA9");                      // e + U+0301 -> é
  CHECK(unicode::nfc("\xE2\x84\xAB") == "\xC3\x85");                          // U+212B ANGSTROM -> Å
  CHECK(unicode::nfc("\xE1\x84\x80\xE1\x85\xA1") == "\xEA\xB0\x80");          // Hangul L+V -> 가
  CHECK(unicode::nfc("\xE0\xA5\x98") == "\xE0\xA4\x95\xE0\xA4\xBC");          // U+0958 is excluded
  CHECK(unicode::nfc("a\xCC\x9B\xCC\x81\xCC\xA3") == "\xE1\xBA\xA1\xCC\x9B\xCC\x81");  // reorder, then a+U+0323
  CHECK(unicode::nfc("\xEF\xAC\x81") == "\xEF\xAC\x81");                      // ﬁ: compatibility only
  CHECK(unicode::nfc("\xCC\x81" "a") == "\xCC\x81" "a");                      // leading combining mark
  CHECK(unicode::nfc("") == "");
  CHECK(unicode::is_nfc_quick("plain ascii and \xE4\xBD\xA0\xE5\xA5\xBD"));
}

TEST_CASE("stories260K: added tokens in text, per-piece normalization, decoding specials", "[tokenizer]") {
  const Tokenizer& tok = stories();
  // HF: "Hi<s>there </s> x" -> <s> ▁H i <s> ▁there ▁ </s> ▁ ▁ x
  CHECK(tok.encode("Hi<s>there </s> x") == std::vector<int32_t>{1, 320, 417, 1, 383, 410, 2, 410, 410, 444});
  CHECK(tok.decode({1, 403, 2, 403, 1, 407}) == "<s> Once</s> Once<s> upon");
  CHECK(tok.decode({1, 403, 2, 403, 1, 407}, DecodeOptions{true}) == "Once Once upon");
  CHECK(tok.encode("", EncodeOptions{true}) == std::vector<int32_t>{1});
  CHECK(tok.encode("", EncodeOptions{false}).empty());
}

TEST_CASE("Qwen3: special token API and decoding of added tokens", "[tokenizer]") {
  const Tokenizer& tok = qwen3();
  CHECK(tok.vocab_size() == 151669);
  CHECK(tok.token_to_id("<|im_start|>") == 151644);
  CHECK(tok.token_to_id("<think>") == 151667);
  CHECK(tok.token_to_id("Hello") == 9707);
  CHECK_FALSE(tok.token_to_id("no such token").has_value());
  CHECK(tok.id_to_token(151645) == std::optional<std::string>("<|im_end|>"));
  CHECK(tok.id_to_token(9707) == std::optional<std::string>("Hello"));
  CHECK_FALSE(tok.id_to_token(-1).has_value());
  CHECK_FALSE(tok.id_to_token(200000).has_value());
  CHECK(tok.is_special(151644));
  CHECK_FALSE(tok.is_special(151667));  // <think> is an added token, not special
  CHECK_FALSE(tok.bos_token_id().has_value());
  CHECK(tok.eos_token_ids() == std::vector<int32_t>{151645});
  CHECK(tok.pad_token_id() == 151643);
  CHECK(tok.decode({151644, 9707, 151667}, DecodeOptions{true}) == "Hello<think>");
  CHECK(tok.decode({9707, 151644, 151667}) == "Hello<|im_start|><think>");
  CHECK(tok.decode({9707, -5, 99999999, 0}) == "Hello!");  // unknown ids are skipped
  CHECK(tok.encode("hi<|im_start|>user<think>x</think>", EncodeOptions{true}) ==
        std::vector<int32_t>{6023, 151644, 872, 151667, 87, 151668});

  const Tokenizer& s = stories();
  CHECK(s.vocab_size() == 512);
  CHECK(s.bos_token_id() == 1);
  CHECK(s.eos_token_ids() == std::vector<int32_t>{2});
  CHECK_FALSE(s.pad_token_id().has_value());
}

TEST_CASE("added tokens: lstrip, rstrip, single_word, normalized, longest match", "[tokenizer]") {
  const Tokenizer tok = Tokenizer::from_json(tiny_tokenizer_json());
  struct Case {
    std::string text;
    std::vector<int32_t> ids;  // HF tokenizers 0.23.3
    std::string decoded;       // skip_special_tokens = false
  };
  const std::vector<Case> cases = {
      {"hello world", {259, 264}, "hello world"},
      {"hello <L> world", {259, 269, 264}, "hello<L> world"},
      {"a <R>  b", {97, 32, 270, 98}, "a <R>b"},
      {"shi hi his hi", {115, 104, 105, 32, 271, 32, 104, 105, 115, 32, 271}, "shi hi his hi"},
      {"x<|end|>x<|end|>", {120, 268, 267}, "x<|end|>x<|end|>"},
      {"<n>hello", {272, 259}, "<n>hello"},
      {"hello  <L><R> x", {259, 269, 270, 120}, "hello<L><R>x"},
      {"<|end|>xx", {268, 120}, "<|end|>xx"},
      {"caf\xC3\xA9 <n>", {99, 97, 102, 195, 169, 32, 272}, "caf\xC3\xA9 <n>"},
      {"  <L>", {269}, "<L>"},
      {"<R>", {270}, "<R>"},
  };
  for (const Case& c : cases) {
    INFO(c.text);
    CHECK(tok.encode(c.text, EncodeOptions{false}) == c.ids);
    CHECK(tok.decode(c.ids) == c.decoded);
  }
  // the text path (SAX loader) builds the same tokenizer
  const Tokenizer again = Tokenizer::from_json_text(tiny_tokenizer_json().dump());
  CHECK(again.encode("hello <L> world hi", EncodeOptions{false}) == tok.encode("hello <L> world hi", EncodeOptions{false}));
}

// ---- streaming ----------------------------------------------------------------------------------
TEST_CASE("IncrementalDecoder never splits a UTF-8 character", "[tokenizer]") {
  const Tokenizer& tok = qwen3();
  const std::string text = "\xF0\x9F\x91\xA8\xE2\x80\x8D\xF0\x9F\x91\xA9 \xE4\xBD\xA0\xE5\xA5\xBD caf\xC3\xA9";
  const auto ids = tok.encode(text, EncodeOptions{false});
  IncrementalDecoder dec(tok);
  std::string out;
  size_t held = 0;  // pushes that returned nothing (a character still incomplete)
  for (int32_t id : ids) {
    const std::string piece = dec.push(id);
    REQUIRE(unicode::is_valid_utf8(piece));
    if (piece.empty()) ++held;
    out += piece;
  }
  out += dec.finish();
  CHECK(out == text);
  CHECK(held > 0);
  // stories: byte fallback pieces of 你 arrive one byte at a time
  const Tokenizer& s = stories();
  const auto sids = s.encode("\xE4\xBD\xA0\xE5\xA5\xBD!", EncodeOptions{false});
  CHECK(stream_decode(s, sids, false) == "\xE4\xBD\xA0\xE5\xA5\xBD!");
}

// ---- concurrency ----------------------------------------------------------------------------------
TEST_CASE("a Tokenizer is safe for concurrent const use", "[tokenizer]") {
  const Tokenizer& tok = qwen3();
  const auto rows = read_jsonl(data_dir() / "tokenizers" / "qwen" / "reference_encodings.jsonl");
  std::vector<std::vector<int32_t>> expected;
  for (const json& r : rows) expected.push_back(r["ids"].get<std::vector<int32_t>>());
  std::vector<int> failures(4, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      for (int round = 0; round < 3; ++round)
        for (size_t k = 0; k < rows.size(); ++k) {
          const size_t i = (k * 7 + static_cast<size_t>(t) * 13 + static_cast<size_t>(round)) % rows.size();
          if (tok.encode(rows[i]["text"].get<std::string>(), EncodeOptions{false}) != expected[i]) ++failures[t];
        }
    });
  for (auto& th : threads) th.join();
  CHECK(failures == std::vector<int>(4, 0));
}

// ---- loader errors ----------------------------------------------------------------------------------
TEST_CASE("tokenizer loader errors name the file, the JSON path and a hint", "[tokenizer][errors]") {
  const fs::path stories_file = data_dir() / "models" / "stories260K" / "tokenizer.json";
  const json base = json::parse(read_text(stories_file));

  SECTION("missing file or directory") {
    CHECK_THAT(error_of([] { Tokenizer::load("/nonexistent/tokenizer.json"); }),
               Contains("cannot open /nonexistent/tokenizer.json") && Contains("No such file"));
    CHECK_THAT(error_of([] { Tokenizer::load(fs::temp_directory_path()); }), Contains("has no tokenizer.json"));
  }
  SECTION("broken JSON") {
    CHECK_THAT(error_of([] { Tokenizer::from_json_text("{\"model\": {\"type\": \"BPE\", "); }),
               Contains("tokenizer.json: invalid JSON"));
    CHECK_THAT(error_of([] { Tokenizer::from_json_text("[1, 2]"); }), Contains("must be an object"));
  }
  SECTION("malformed merges, in both loaders") {
    for (const json& bad : {json("a"), json("a b c"), json::array({"a"}), json(12), json::array({"a", 1})}) {
      json j = base;
      j["model"]["merges"][12] = bad;
      INFO(bad.dump());
      const std::string expected = "tokenizer.json: model.merges[12] is not a pair";
      CHECK_THAT(error_of([&] { Tokenizer::from_json(j); }), Contains(expected) && Contains("expected 'a b'"));
      CHECK_THAT(error_of([&] { Tokenizer::from_json_text(j.dump()); }), Contains(expected));
    }
    json j = base;
    j["model"]["merges"] = json::array({"x y"});  // legacy strings
    CHECK_THAT(error_of([&] { Tokenizer::from_json_text(j.dump()); }), Contains("model.merges[0]"));
  }
  SECTION("a merge that references an unknown token") {
    json j = base;
    j["model"]["merges"][3] = json::array({"\xE2\x96\x81", "nosuchtoken"});
    CHECK_THAT(error_of([&] { Tokenizer::from_json(j); }),
               Contains("model.merges[3]") && Contains("'nosuchtoken' is not in model.vocab"));
    CHECK_THAT(error_of([&] { Tokenizer::from_json_text(j.dump()); }), Contains("'nosuchtoken' is not in model.vocab"));
  }
  SECTION("unsupported model and component types name the JSON path") {
    json j = base;
    j["model"]["type"] = "Unigram";
    CHECK_THAT(error_of([&] { Tokenizer::from_json(j); }),
               Contains("model.type 'Unigram' is not a supported model type"));
    CHECK_THAT(error_of([&] { Tokenizer::from_json_text(j.dump()); }), Contains("'Unigram' is not a supported"));
    j = base;
    j["normalizer"]["normalizers"][1]["type"] = "NFKD";
    CHECK_THAT(error_of([&] { Tokenizer::from_json(j); }),
               Contains("normalizer.normalizers[1].type 'NFKD' is not a supported normalizer"));
    j = base;
    j["decoder"]["decoders"][0] = {{"type", "CTC"}};
    CHECK_THAT(error_of([&] { Tokenizer::from_json(j); }), Contains("decoder.decoders[0].type 'CTC'"));
    j = base;
    j["pre_tokenizer"] = {{"type", "Split"}, {"pattern", {{"Regex", "\\w+"}}}, {"behavior", "Isolated"}};
    CHECK_THAT(error_of([&] { Tokenizer::from_json(j); }),
               Contains("pre_tokenizer.pattern.Regex is a regex rlhost has no scanner for: '\\w+'"));
    j = base;
    j["post_processor"]["type"] = "Nonsense";
    CHECK_THAT(error_of([&] { Tokenizer::from_json(j); }), Contains("post_processor.type 'Nonsense'"));
  }
  SECTION("bad vocabulary entries") {
    json j = base;
    j["model"]["vocab"]["<unk>"] = "zero";
    CHECK_THAT(error_of([&] { Tokenizer::from_json_text(j.dump()); }),
               Contains("model.vocab['<unk>'] must be an integer id"));
    j["model"]["vocab"]["<unk>"] = -3;
    CHECK_THAT(error_of([&] { Tokenizer::from_json(j); }), Contains("model.vocab['<unk>'] has id -3"));
    j = base;
    j["model"]["unk_token"] = "<nope>";
    CHECK_THAT(error_of([&] { Tokenizer::from_json(j); }), Contains("model.unk_token '<nope>' is not in model.vocab"));
  }
  SECTION("tokenizer_config.json problems") {
    CHECK_THAT(error_of([&] { Tokenizer::from_json(base, json{{"eos_token", "<nope>"}}); }),
               Contains("tokenizer_config.json: eos_token is '<nope>'"));
    CHECK_THAT(error_of([&] { Tokenizer::from_json(base, json{{"chat_template", 3}}); }),
               Contains("tokenizer_config.json: chat_template must be a string or a list"));
    const Tokenizer t = Tokenizer::from_json(base, json{{"eos_token", {{"content", "</s>"}}}});
    CHECK(t.eos_token_ids() == std::vector<int32_t>{2});
    CHECK(t.chat_template() == nullptr);
    CHECK_THAT(error_of([&] { t.apply_chat_template(json::array()); }), Contains("has no chat template"));
  }
}

// ---- fuzzing -----------------------------------------------------------------------------------------
namespace {

// Picks a random node of `j` (by value path) and mutates it.
void mutate(json& j, std::mt19937& rng) {
  json* node = &j;
  json* parent = nullptr;
  std::string key;
  size_t index = 0;
  const int depth = static_cast<int>(rng() % 6);
  for (int d = 0; d < depth && (node->is_object() || node->is_array()) && !node->empty(); ++d) {
    parent = node;
    if (node->is_object()) {
      auto it = node->begin();
      std::advance(it, static_cast<long>(rng() % node->size()));
      key = it.key();
      node = &*it;
    } else {
      index = rng() % node->size();
      node = &(*node)[index];
    }
  }
  static const std::vector<json> values = {
      nullptr, true, false, 0, -1, 7, 1 << 30, -2147483648LL, 9223372036854775807LL, 0.5, -1e300,
      "", "BPE", "Sequence", "ByteLevel", "NFC", "Split", "Metaspace", "TemplateProcessing", "Replace",
      "Strip", "Fuse", "ByteFallback", "\xE2\x96\x81", "<s>", "a b", "Isolated", "Contiguous",
      json::array(), json::object(), json::array({"a", "b"}), json{{"String", " "}}, json{{"Regex", "x"}},
      json{{"type", "Sequence"}}, json{{"type", "Digits"}, {"individual_digits", true}},
      json{{"type", "Metaspace"}, {"replacement", "\xE2\x96\x81"}, {"prepend_scheme", "first"}}};
  switch (rng() % 4) {
    case 0:  // drop
      if (parent && parent->is_object()) parent->erase(key);
      else if (parent && parent->is_array()) parent->erase(index);
      else *node = values[rng() % values.size()];
      break;
    case 1:
    case 2:  // replace
      *node = values[rng() % values.size()];
      break;
    default:  // duplicate into an array, or random string
      if (node->is_array() && !node->empty()) node->push_back((*node)[rng() % node->size()]);
      else if (node->is_string()) {
        std::string s = node->get<std::string>();
        if (!s.empty()) s[rng() % s.size()] = static_cast<char>('a' + rng() % 26);
        *node = s;
      } else {
        *node = values[rng() % values.size()];
      }
  }
}

void exercise(const Tokenizer& t, std::mt19937& rng) {
  for (const char* text : {"Once upon a time", " two  spaces\n\nx", "caf\xC3\xA9 \xE4\xBD\xA0 123", "<s>x</s>", ""}) {
    const auto ids = t.encode(text);
    const std::string back = t.decode(ids);
    CHECK(unicode::is_valid_utf8(back));
    IncrementalDecoder dec(t);
    for (int32_t id : ids) dec.push(id);
    dec.finish();
  }
  std::vector<int32_t> junk;
  for (int k = 0; k < 20; ++k) junk.push_back(static_cast<int32_t>(rng() % 1200) - 100);
  CHECK(unicode::is_valid_utf8(t.decode(junk)));
}

}  // namespace

TEST_CASE("fuzz: mutated tokenizer.json files load or throw, never crash", "[tokenizer][fuzz]") {
  const json bases[] = {json::parse(read_text(data_dir() / "models" / "stories260K" / "tokenizer.json")),
                        tiny_tokenizer_json()};
  std::mt19937 rng(20240611);
  int loaded = 0, rejected = 0;
  for (int iter = 0; iter < 240; ++iter) {
    json j = bases[iter % 2];
    const int mutations = 1 + static_cast<int>(rng() % 3);
    for (int m = 0; m < mutations; ++m) mutate(j, rng);
    INFO("iteration " << iter);
    for (int path = 0; path < 2; ++path) {
      try {
        const Tokenizer t = path == 0 ? Tokenizer::from_json(j) : Tokenizer::from_json_text(j.dump());
        exercise(t, rng);
        ++loaded;
      } catch (const std::exception& e) {
        CHECK(std::string(e.what()).size() > 0);
        ++rejected;
      }
    }
  }
  CHECK(loaded > 0);
  CHECK(rejected > 0);
}

TEST_CASE("fuzz: random bytes encode and decode without crashing", "[tokenizer][fuzz]") {
  std::mt19937 rng(7);
  const Tokenizer* toks[] = {&qwen3(), &stories()};
  const char* alphabet[] = {"a", " ", "\n", "\t", "\xC3\xA9", "e\xCC\x81", "\xE4\xBD\xA0", "\xF0\x9F\x98\x80",
                            "1", "'s", "<|im_end|>", "<s>", "\xE2\x96\x81", "\xFF", "\xC3", "\xE2\x82", "\x00"};
  for (int iter = 0; iter < 1500; ++iter) {
    std::string s;
    const size_t len = rng() % 48;
    for (size_t k = 0; k < len; ++k) {
      if (rng() % 2) s += static_cast<char>(rng() % 256);
      else if (const char* piece = alphabet[rng() % std::size(alphabet)]; *piece) s += piece;
      else s += '\0';
    }
    for (const Tokenizer* t : toks) {
      INFO("iteration " << iter);
      const auto ids = t->encode(s, EncodeOptions{false});
      const std::string back = t->decode(ids);
      REQUIRE(unicode::is_valid_utf8(back));
      if (t == toks[0] && s.find('<') == std::string::npos)  // byte-level: lossless up to repair + NFC
        CHECK(back == unicode::nfc(unicode::to_valid_utf8(s)));
      std::vector<int32_t> random_ids;
      for (int k = 0; k < 8; ++k) random_ids.push_back(static_cast<int32_t>(rng() % 200000) - 1000);
      CHECK(unicode::is_valid_utf8(t->decode(random_ids)));
      CHECK(unicode::is_valid_utf8(stream_decode(*t, random_ids, rng() % 2)));
    }
  }
}
