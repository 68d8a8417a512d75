// tokenizer.json "pre_tokenizer": splits normalized text into words for the model.
//
// Supported types: Sequence, Split (String patterns, and the Regex patterns of
// GPT-2, Qwen2/Qwen3 and Llama-3 through a hand-written scanner per pattern),
// ByteLevel, Metaspace, Digits, WhitespaceSplit. Anything else is an error that
// names the JSON path. No std::regex anywhere: the scanners reproduce the
// leftmost-first alternation of the Oniguruma regexes HF `tokenizers` runs.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "model/json_node.hpp"

namespace rl::model {

struct Span {
  uint32_t begin = 0, end = 0;
};

// A hand-written matcher for one known split regex.
class RegexScanner {
 public:
  // The scanner for `pattern` (exact text of tokenizer.json), or nullopt.
  static std::optional<RegexScanner> for_pattern(std::string_view pattern);
  static RegexScanner gpt2();  // what ByteLevel(use_regex=true) splits with
  // Appends the non-overlapping matches in `text`, left to right. `text` must be valid UTF-8.
  void find_all(std::string_view text, std::vector<Span>& out) const;
  const char* name() const { return name_; }
  static std::string known_patterns();  // for error hints

 private:
  size_t match_at(std::string_view s, size_t i) const;  // end of the match at i, or i
  const char* name_ = "";
  bool ci_contractions_ = false;    // (?i:'s|'t|...) vs 's|'t|...
  bool any_letter_prefix_ = false;  // [^\r\n\p{L}\p{N}]?\p{L}+ vs ' ?\p{L}+'
  int number_max_ = 0;              // \p{N}{1,max}; 0: unbounded
  bool number_space_prefix_ = false;  // ' ?\p{N}+'
  bool punct_newlines_ = false;     // ' ?[^\s\p{L}\p{N}]+[\r\n]*'
  bool newline_run_ = false;        // '\s*[\r\n]+'
};

enum class SplitBehavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };

// Words being produced: spans into `text`, which is the caller's string or one of
// the two owned buffers when a step rewrote the text.
struct PieceList {
  std::string_view text;
  std::vector<Span> spans;
  std::string_view piece(size_t k) const { return text.substr(spans[k].begin, spans[k].end - spans[k].begin); }
  // scratch
  std::string store[2];
  int current = -1;
  std::vector<Span> next;
  std::vector<Span> matches;
};

class PreTokenizer {
 public:
  // `node` is tokenizer.json's "pre_tokenizer" (null: none).
  static PreTokenizer from_json(const JsonNode& node);
  // True when a ByteLevel step maps bytes to the GPT-2 alphabet: the model then
  // receives raw bytes (see BpeModel::finalize).
  bool byte_level() const { return byte_level_; }
  // Splits `text` into out.spans (out.text set). `at_text_start`: the text begins
  // the input (Metaspace's prepend_scheme "first").
  void run(std::string_view text, bool at_text_start, PieceList& out) const;

  struct Step {
    enum class Kind { kSplitRegex, kSplitString, kByteLevelPrefix, kMetaspace, kDigits, kWhitespaceSplit } kind;
    std::optional<RegexScanner> scanner;
    std::string literal;  // Split String pattern; Metaspace replacement
    SplitBehavior behavior = SplitBehavior::kIsolated;
    bool invert = false;
    bool flag = false;  // Metaspace split / Digits individual_digits
    int prepend = 0;    // Metaspace: 0 never, 1 first, 2 always
  };

 private:
  void add(const JsonNode& node);
  std::vector<Step> steps_;
  bool byte_level_ = false;
};

}  // namespace rl::model
