#include "model/pretokenizer.hpp"

#include "model/unicode.hpp"

namespace rl::model {
namespace {

// The split regexes we know, as they appear in tokenizer.json.
constexpr std::string_view kGpt2Pattern =
    R"re('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)re";
constexpr std::string_view kQwen2Pattern =
    R"re((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)re";
constexpr std::string_view kLlama3Pattern =
    R"re((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)re";

using unicode::kLetter;
using unicode::kNumber;
using unicode::kWhiteSpace;

struct Char {
  char32_t cp;
  uint32_t len;
  uint8_t flags;
};

inline Char char_at(std::string_view s, size_t i) {
  const auto c = static_cast<unsigned char>(s[i]);
  if (c < 0x80) return {c, 1, unicode::detail::ascii_flags(c)};
  size_t j = i;
  const char32_t cp = unicode::decode(s, j);
  return {cp, static_cast<uint32_t>(j - i), unicode::flags(cp)};
}

// End of the run of characters starting at i whose flags intersect `mask`
// (or, with negate, do not), after at most `max` characters (0: unbounded).
inline size_t run_end(std::string_view s, size_t i, uint8_t mask, bool negate, int max = 0) {
  int count = 0;
  while (i < s.size() && (max == 0 || count < max)) {
    const Char c = char_at(s, i);
    if (((c.flags & mask) != 0) == negate) break;
    i += c.len;
    ++count;
  }
  return i;
}

// Case folding for the contraction letters under (?i): ASCII, plus U+017F LONG S,
// whose simple case fold is 's' (Oniguruma applies it).
inline char32_t fold(char32_t c, bool ci) {
  if (!ci) return c;
  if (c >= 'A' && c <= 'Z') return c + 32;
  if (c == 0x17F) return 's';
  return c;
}

}  // namespace

// ---- RegexScanner -----------------------------------------------------------------------
std::optional<RegexScanner> RegexScanner::for_pattern(std::string_view pattern) {
  RegexScanner r;
  if (pattern == kGpt2Pattern) return gpt2();
  if (pattern == kQwen2Pattern || pattern == kLlama3Pattern) {
    const bool llama3 = pattern == kLlama3Pattern;
    r.name_ = llama3 ? "llama3" : "qwen2";
    r.ci_contractions_ = true;
    r.any_letter_prefix_ = true;
    r.number_max_ = llama3 ? 3 : 1;
    r.punct_newlines_ = true;
    r.newline_run_ = true;
    return r;
  }
  return std::nullopt;
}

RegexScanner RegexScanner::gpt2() {
  RegexScanner r;
  r.name_ = "gpt2";
  r.number_space_prefix_ = true;
  return r;
}

std::string RegexScanner::known_patterns() {
  return "the GPT-2 pattern, the Qwen2/Qwen3 pattern and the Llama-3 pattern (exact text)";
}

size_t RegexScanner::match_at(std::string_view s, size_t i) const {
  const size_t n = s.size();
  const Char c = char_at(s, i);
  const size_t after = i + c.len;
  // 1. contractions: 's 't 're 've 'm 'll 'd
  if (c.cp == '\'' && after < n) {
    const Char c1 = char_at(s, after);
    const char32_t l1 = fold(c1.cp, ci_contractions_);
    if (l1 == 's' || l1 == 't' || l1 == 'm' || l1 == 'd') return after + c1.len;
    if ((l1 == 'r' || l1 == 'v' || l1 == 'l') && after + c1.len < n) {
      const Char c2 = char_at(s, after + c1.len);
      const char32_t l2 = fold(c2.cp, ci_contractions_);
      if ((l1 == 'l' && l2 == 'l') || (l1 != 'l' && l2 == 'e')) return after + c1.len + c2.len;
    }
  }
  // 2. letters, with an optional one-character prefix
  const bool prefix_ok = any_letter_prefix_ ? (c.flags & (kLetter | kNumber)) == 0 && c.cp != '\r' && c.cp != '\n'
                                            : c.cp == ' ';
  if (prefix_ok && after < n && (char_at(s, after).flags & kLetter)) return run_end(s, after, kLetter, false);
  if (c.flags & kLetter) return run_end(s, i, kLetter, false);
  // 3. numbers
  if (number_space_prefix_ && c.cp == ' ' && after < n && (char_at(s, after).flags & kNumber))
    return run_end(s, after, kNumber, false);
  if (c.flags & kNumber) return run_end(s, i, kNumber, false, number_max_);
  // 4. punctuation and symbols: ' ?[^\s\p{L}\p{N}]+' (+ '[\r\n]*')
  constexpr uint8_t kWordOrSpace = kLetter | kNumber | kWhiteSpace;
  size_t p = i;
  if (c.cp == ' ' && after < n && (char_at(s, after).flags & kWordOrSpace) == 0) p = after;
  if (p != i || (c.flags & kWordOrSpace) == 0) {
    size_t j = run_end(s, p, kWordOrSpace, true);
    if (punct_newlines_)
      while (j < n && (s[j] == '\r' || s[j] == '\n')) ++j;
    return j;
  }
  // 5-7. whitespace: '\s*[\r\n]+', '\s+(?!\S)', '\s+'
  if (c.flags & kWhiteSpace) {
    size_t j = i, last_start = i, last_newline = n;
    while (j < n) {
      const Char w = char_at(s, j);
      if (!(w.flags & kWhiteSpace)) break;
      if (w.cp == '\r' || w.cp == '\n') last_newline = j;
      last_start = j;
      j += w.len;
    }
    if (newline_run_ && last_newline != n) return last_newline + 1;
    if (j == n) return j;
    if (last_start > i) return last_start;  // leave the last space to the next word
    return j;
  }
  return i;
}

void RegexScanner::find_all(std::string_view s, std::vector<Span>& out) const {
  size_t i = 0;
  while (i < s.size()) {
    const size_t j = match_at(s, i);
    if (j > i) {
      out.push_back({static_cast<uint32_t>(i), static_cast<uint32_t>(j)});
      i = j;
    } else {
      i += char_at(s, i).len;  // no alternative matches here (cannot happen for these patterns)
    }
  }
}

// ---- splitting ------------------------------------------------------------------------------
namespace {

// Matches of one step inside `piece` (offsets relative to the piece).
void step_matches(const PreTokenizer::Step& step, std::string_view piece, std::vector<Span>& out) {
  using Kind = PreTokenizer::Step::Kind;
  out.clear();
  switch (step.kind) {
    case Kind::kSplitRegex:
      step.scanner->find_all(piece, out);
      break;
    case Kind::kSplitString:
    case Kind::kMetaspace: {
      if (step.literal.empty()) break;
      for (size_t at = piece.find(step.literal); at != std::string_view::npos;
           at = piece.find(step.literal, at + step.literal.size()))
        out.push_back({static_cast<uint32_t>(at), static_cast<uint32_t>(at + step.literal.size())});
      break;
    }
    case Kind::kDigits:
    case Kind::kWhitespaceSplit: {
      const uint8_t mask = step.kind == Kind::kDigits ? kNumber : kWhiteSpace;
      for (size_t i = 0; i < piece.size();) {
        const Char c = char_at(piece, i);
        if (c.flags & mask) out.push_back({static_cast<uint32_t>(i), static_cast<uint32_t>(i + c.len)});
        i += c.len;
      }
      break;
    }
    case Kind::kByteLevelPrefix:
      break;
  }
}

// HF's NormalizedString::split: the piece [b, e) becomes segments (match or not),
// then the behaviour decides which survive and what merges; empty pieces are dropped.
void split_one(uint32_t b, uint32_t e, const std::vector<Span>& matches, SplitBehavior behavior, bool invert,
               std::vector<Span>& out) {
  if (behavior == SplitBehavior::kIsolated) {  // the common case (every byte-level tokenizer): gaps and matches
    uint32_t prev = b;
    for (const Span& m : matches) {
      if (b + m.begin > prev) out.push_back({prev, b + m.begin});
      out.push_back({b + m.begin, b + m.end});
      prev = b + m.end;
    }
    if (prev < e) out.push_back({prev, e});
    return;  // invert changes nothing: every segment is kept as it is
  }
  struct Seg {
    uint32_t begin, end;
    bool match;
  };
  thread_local std::vector<Seg> segs;
  segs.clear();
  uint32_t prev = b;
  for (const Span& m : matches) {
    if (b + m.begin > prev) segs.push_back({prev, b + m.begin, false});
    segs.push_back({b + m.begin, b + m.end, true});
    prev = b + m.end;
  }
  if (prev < e) segs.push_back({prev, e, false});
  if (invert)
    for (Seg& s : segs) s.match = !s.match;
  auto emit = [&](uint32_t x, uint32_t y) {
    if (y > x) out.push_back({x, y});
  };
  switch (behavior) {
    case SplitBehavior::kIsolated:  // handled above
      break;
    case SplitBehavior::kRemoved:
      for (const Seg& s : segs)
        if (!s.match) emit(s.begin, s.end);
      break;
    case SplitBehavior::kContiguous:
    case SplitBehavior::kMergedWithPrevious: {
      const size_t first = out.size();
      bool previous_match = false;
      for (const Seg& s : segs) {
        const bool merge = behavior == SplitBehavior::kContiguous ? (s.match == previous_match)
                                                                  : (s.match && !previous_match);
        if (merge && out.size() > first) out.back().end = s.end;
        else out.push_back({s.begin, s.end});
        previous_match = s.match;
      }
      break;
    }
    case SplitBehavior::kMergedWithNext: {
      thread_local std::vector<Span> rev;
      rev.clear();
      bool previous_match = false;
      for (size_t k = segs.size(); k-- > 0;) {
        const Seg& s = segs[k];
        if (s.match && !previous_match && !rev.empty()) rev.back().begin = s.begin;
        else rev.push_back({s.begin, s.end});
        previous_match = s.match;
      }
      for (size_t k = rev.size(); k-- > 0;) emit(rev[k].begin, rev[k].end);
      break;
    }
  }
}

SplitBehavior parse_behavior(const JsonNode& node) {
  const std::string b = node.string();
  if (b == "Isolated") return SplitBehavior::kIsolated;
  if (b == "Removed") return SplitBehavior::kRemoved;
  if (b == "MergedWithPrevious") return SplitBehavior::kMergedWithPrevious;
  if (b == "MergedWithNext") return SplitBehavior::kMergedWithNext;
  if (b == "Contiguous") return SplitBehavior::kContiguous;
  node.fail("'" + b + "' is not a split behavior",
            "expected Isolated, Removed, MergedWithPrevious, MergedWithNext or Contiguous");
}

}  // namespace

// ---- PreTokenizer ------------------------------------------------------------------------------
PreTokenizer PreTokenizer::from_json(const JsonNode& node) {
  PreTokenizer p;
  if (!node.is_null()) p.add(node);
  return p;
}

void PreTokenizer::add(const JsonNode& node) {
  const std::string type = node.component_type();
  Step step{};
  if (type == "Sequence") {
    JsonNode list = node["pretokenizers"];
    list.expect_array();
    for (size_t i = 0; i < list.size(); ++i) add(list.at(i));
    return;
  }
  if (type == "Split") {
    JsonNode pattern = node["pattern"];
    pattern.expect_object();
    if (pattern.has("Regex")) {
      const std::string re = pattern["Regex"].string();
      step.kind = Step::Kind::kSplitRegex;
      step.scanner = RegexScanner::for_pattern(re);
      if (!step.scanner)
        pattern["Regex"].fail("is a regex rlhost has no scanner for: '" + re + "'",
                              "supported: " + RegexScanner::known_patterns());
    } else if (pattern.has("String")) {
      step.kind = Step::Kind::kSplitString;
      step.literal = pattern["String"].string();
    } else {
      pattern.fail("must have \"Regex\" or \"String\"");
    }
    step.behavior = parse_behavior(node["behavior"]);
    step.invert = node["invert"].boolean_or(false);
    steps_.push_back(std::move(step));
    return;
  }
  if (type == "ByteLevel") {
    byte_level_ = true;
    if (node["add_prefix_space"].boolean_or(true)) {
      step.kind = Step::Kind::kByteLevelPrefix;
      steps_.push_back(step);
    }
    if (node["use_regex"].boolean_or(true)) {
      Step split{};
      split.kind = Step::Kind::kSplitRegex;
      split.scanner = RegexScanner::gpt2();
      split.behavior = SplitBehavior::kIsolated;
      steps_.push_back(std::move(split));
    }
    return;
  }
  if (type == "Metaspace") {
    step.kind = Step::Kind::kMetaspace;
    step.literal = node["replacement"].string_or("\xE2\x96\x81");  // U+2581
    if (step.literal.empty()) node["replacement"].fail("must not be empty");
    step.flag = node["split"].boolean_or(true);
    step.prepend = node["add_prefix_space"].boolean_or(true) ? 2 : 0;
    if (!node["prepend_scheme"].is_null()) {
      const std::string scheme = node["prepend_scheme"].string();
      if (scheme == "always") step.prepend = 2;
      else if (scheme == "first") step.prepend = 1;
      else if (scheme == "never") step.prepend = 0;
      else node["prepend_scheme"].fail("'" + scheme + "' is not a prepend scheme", "expected always, first or never");
    }
    step.behavior = SplitBehavior::kMergedWithNext;
    steps_.push_back(std::move(step));
    return;
  }
  if (type == "Digits") {
    step.kind = Step::Kind::kDigits;
    step.flag = node["individual_digits"].boolean_or(false);
    step.behavior = step.flag ? SplitBehavior::kIsolated : SplitBehavior::kContiguous;
    steps_.push_back(step);
    return;
  }
  if (type == "WhitespaceSplit") {
    step.kind = Step::Kind::kWhitespaceSplit;
    step.behavior = SplitBehavior::kRemoved;
    steps_.push_back(step);
    return;
  }
  node["type"].fail("'" + type + "' is not a supported pre-tokenizer",
                    "supported: Sequence, Split, ByteLevel, Metaspace, Digits, WhitespaceSplit");
}

void PreTokenizer::run(std::string_view text, bool at_text_start, PieceList& out) const {
  out.text = text;
  out.current = -1;
  out.spans.clear();
  if (!text.empty()) out.spans.push_back({0, static_cast<uint32_t>(text.size())});
  for (const Step& step : steps_) {
    out.next.clear();
    if (step.kind == Step::Kind::kByteLevelPrefix || step.kind == Step::Kind::kMetaspace) {
      // rewrite: each piece is copied (space -> replacement, prefix added) into the other buffer
      const int target = out.current == 0 ? 1 : 0;
      std::string& buf = out.store[target];
      buf.clear();
      for (size_t k = 0; k < out.spans.size(); ++k) {
        std::string_view p = out.piece(k);
        const auto begin = static_cast<uint32_t>(buf.size());
        if (step.kind == Step::Kind::kByteLevelPrefix) {
          if (p.empty() || p[0] != ' ') buf += ' ';
          buf.append(p);
        } else {
          std::string replaced;
          for (char ch : p) {
            if (ch == ' ') replaced += step.literal;
            else replaced += ch;
          }
          const bool first = at_text_start && out.spans[k].begin == 0;
          if ((step.prepend == 2 || (step.prepend == 1 && first)) && replaced.rfind(step.literal, 0) != 0)
            buf += step.literal;
          buf += replaced;
        }
        out.next.push_back({begin, static_cast<uint32_t>(buf.size())});
      }
      out.text = buf;
      out.current = target;
      out.spans.swap(out.next);
      if (step.kind == Step::Kind::kByteLevelPrefix || !step.flag) continue;
      out.next.clear();
    }
    for (const Span& sp : out.spans) {
      step_matches(step, out.text.substr(sp.begin, sp.end - sp.begin), out.matches);
      split_one(sp.begin, sp.end, out.matches, step.behavior, step.invert, out.next);
    }
    out.spans.swap(out.next);
  }
}

}  // namespace rl::model
