// Tokenizer of the chat-template interpreter: a transcription of Jinja2's
// lexer rules (jinja2/lexer.py) for trim_blocks + lstrip_blocks, so that the
// whitespace a template produces is byte-identical to transformers'.
#include "model/jinja_lexer.hpp"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <optional>

#include "model/jinja_text.hpp"

namespace rl::model::jinja {
namespace {

bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_name_start(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool is_name_char(char c) { return is_name_start(c) || is_digit(c); }
bool is_hex(char c) { return is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); }

// Length of the Python whitespace (`\s`) run at `pos` (code-point aware).
size_t space_run(std::string_view s, size_t pos) {
  size_t p = pos;
  while (p < s.size()) {
    const auto c = static_cast<unsigned char>(s[p]);
    if (c < 0x80) {
      if (!is_py_space(c)) break;
      ++p;
      continue;
    }
    const size_t len = (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 1;
    const std::u32string cp = utf8_decode(s.substr(p, len));
    if (cp.size() != 1 || !is_py_space(cp[0])) break;
    p += len;
  }
  return p - pos;
}

bool all_space(std::string_view s) { return space_run(s, 0) == s.size(); }

// `(\d+_)*\d+` at pos: returns its length (0 when absent).
size_t digits_run(std::string_view s, size_t pos) {
  size_t p = pos;
  if (p >= s.size() || !is_digit(s[p])) return 0;
  while (true) {
    while (p < s.size() && is_digit(s[p])) ++p;
    if (p + 1 < s.size() && s[p] == '_' && is_digit(s[p + 1])) {
      ++p;
      continue;
    }
    return p - pos;
  }
}

// Jinja's float_re: digits ((.digits)? e[+-]?digits | .digits), not after a '.'.
size_t match_float(std::string_view s, size_t pos) {
  if (pos > 0 && s[pos - 1] == '.') return 0;
  size_t p = pos + digits_run(s, pos);
  if (p == pos) return 0;
  size_t frac = 0;
  if (p < s.size() && s[p] == '.') frac = digits_run(s, p + 1);
  size_t q = frac ? p + 1 + frac : p;
  if (q < s.size() && (s[q] == 'e' || s[q] == 'E')) {
    size_t r = q + 1;
    if (r < s.size() && (s[r] == '+' || s[r] == '-')) ++r;
    if (size_t exp = digits_run(s, r)) return r + exp - pos;
  }
  return frac ? p + 1 + frac - pos : 0;
}

// Jinja's integer_re: 0b / 0o / 0x literals, decimals without a leading 0, or 0.
size_t match_int(std::string_view s, size_t pos) {
  auto prefixed = [&](char letter, auto is_digit_of) -> size_t {
    if (pos + 2 >= s.size() || s[pos] != '0' || (s[pos + 1] | 0x20) != letter) return 0;
    size_t p = pos + 2;
    while (true) {
      if (p < s.size() && is_digit_of(s[p]))
        ++p;
      else if (p + 1 < s.size() && s[p] == '_' && is_digit_of(s[p + 1]))
        p += 2;
      else
        break;
    }
    return p > pos + 2 ? p - pos : 0;
  };
  if (size_t n = prefixed('b', [](char c) { return c == '0' || c == '1'; })) return n;
  if (size_t n = prefixed('o', [](char c) { return c >= '0' && c <= '7'; })) return n;
  if (size_t n = prefixed('x', is_hex)) return n;
  if (pos >= s.size() || !is_digit(s[pos])) return 0;
  if (s[pos] != '0') return digits_run(s, pos);
  size_t p = pos + 1;
  while (true) {
    if (p < s.size() && s[p] == '0')
      ++p;
    else if (p + 1 < s.size() && s[p] == '_' && s[p + 1] == '0')
      p += 2;
    else
      break;
  }
  return p - pos;
}

class Lexer {
 public:
  Lexer(std::string_view source, const std::string& name) : name_(name) {
    // keep_trailing_newline=False and newline_sequence="\n", as Jinja does first.
    src_.reserve(source.size());
    for (size_t i = 0; i < source.size(); ++i) {
      if (source[i] == '\r') {
        src_.push_back('\n');
        if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
      } else {
        src_.push_back(source[i]);
      }
    }
    if (!src_.empty() && src_.back() == '\n') src_.pop_back();
    line_starts_.push_back(0);
    for (size_t i = 0; i < src_.size(); ++i)
      if (src_[i] == '\n') line_starts_.push_back(i + 1);
  }

  std::vector<Token> run() {
    while (pos_ < src_.size()) lex_root();
    Token eof;
    eof.type = Tok::Eof;
    eof.loc = loc(src_.size());
    out_.push_back(std::move(eof));
    return std::move(out_);
  }

 private:
  Loc loc(size_t pos) const {
    auto it = std::upper_bound(line_starts_.begin(), line_starts_.end(), pos);
    const size_t line = static_cast<size_t>(it - line_starts_.begin());
    return Loc{static_cast<int>(line), static_cast<int>(pos - line_starts_[line - 1] + 1)};
  }

  [[noreturn]] void fail(size_t pos, const std::string& what) const { throw TemplateError(name_, loc(pos), what); }

  void emit(Tok type, size_t start, std::string text) {
    Token t;
    t.type = type;
    t.text = std::move(text);
    t.loc = loc(start);
    out_.push_back(std::move(t));
  }

  void emit_data(size_t start, std::string_view text) {
    if (!text.empty()) emit(Tok::Data, start, std::string(text));
  }

  // Jinja's OptionalLStrip: '-' strips all whitespace before the tag; otherwise
  // lstrip_blocks removes spaces between the last newline and a block/comment tag.
  std::string_view strip_before_tag(std::string_view text, char sign, bool is_variable) const {
    if (sign == '-') {
      size_t e = text.size();
      while (e > 0) {  // Python str.rstrip(): walk back over whitespace code points
        size_t b = e - 1;
        while (b > 0 && (static_cast<unsigned char>(text[b]) & 0xC0) == 0x80) --b;
        if (space_run(text.substr(0, e), b) != e - b) break;
        e = b;
      }
      return text.substr(0, e);
    }
    if (sign == '+' || is_variable) return text;
    const size_t rn = text.rfind('\n');
    const size_t l_pos = rn == std::string_view::npos ? 0 : rn + 1;
    if ((l_pos > 0 || line_starting_) && l_pos < text.size() && all_space(text.substr(l_pos)))
      return text.substr(0, l_pos);
    return text;
  }

  // `{%[-+]?\s*raw\s*(-%}\s*|%})` at `tag`; returns the end of the match.
  std::optional<size_t> match_raw_begin(size_t tag) const {
    size_t p = tag + 2;
    if (p < src_.size() && (src_[p] == '-' || src_[p] == '+')) ++p;
    p += space_run(src_, p);
    if (src_.compare(p, 3, "raw") != 0) return std::nullopt;
    p += 3;
    p += space_run(src_, p);
    if (src_.compare(p, 3, "-%}") == 0) return p + 3 + space_run(src_, p + 3);
    if (src_.compare(p, 2, "%}") == 0) return p + 2;
    return std::nullopt;
  }

  void lex_root() {
    size_t tag = pos_;
    while (true) {
      tag = src_.find('{', tag);
      if (tag == std::string::npos || tag + 1 >= src_.size()) {
        emit_data(pos_, std::string_view(src_).substr(pos_));
        pos_ = src_.size();
        return;
      }
      const char k = src_[tag + 1];
      if (k == '{' || k == '%' || k == '#') break;
      ++tag;
    }
    const char kind = src_[tag + 1];
    size_t after = tag + 2;
    char sign = 0;
    if (after < src_.size() && (src_[after] == '-' || src_[after] == '+')) sign = src_[after++];
    const std::optional<size_t> raw_end = kind == '%' ? match_raw_begin(tag) : std::nullopt;
    emit_data(pos_, strip_before_tag(std::string_view(src_).substr(pos_, tag - pos_), sign, kind == '{'));
    if (raw_end) {
      pos_ = *raw_end;
      line_starting_ = src_[pos_ - 1] == '\n';
      lex_raw(tag);
      return;
    }
    line_starting_ = false;
    pos_ = after;
    if (kind == '#') {
      lex_comment(tag);
    } else {
      emit(kind == '{' ? Tok::VarBegin : Tok::BlockBegin, tag, kind == '{' ? "{{" : "{%");
      lex_tag(kind == '%', tag);
    }
  }

  void lex_comment(size_t tag) {
    const size_t q = src_.find("#}", pos_);
    if (q == std::string::npos) fail(tag, "missing end of comment tag '#}'");
    size_t end = q + 2;
    if (q > pos_ && src_[q - 1] == '-')
      end += space_run(src_, end);
    else if (!(q > pos_ && src_[q - 1] == '+') && end < src_.size() && src_[end] == '\n')
      ++end;  // trim_blocks
    pos_ = end;
    line_starting_ = src_[pos_ - 1] == '\n';
  }

  void lex_raw(size_t tag) {
    for (size_t p = src_.find("{%", pos_); p != std::string::npos; p = src_.find("{%", p + 1)) {
      size_t q = p + 2;
      char sign = 0;
      if (q < src_.size() && (src_[q] == '-' || src_[q] == '+')) sign = src_[q++];
      q += space_run(src_, q);
      if (src_.compare(q, 6, "endraw") != 0) continue;
      q += 6;
      q += space_run(src_, q);
      size_t end;
      if (src_.compare(q, 3, "+%}") == 0)
        end = q + 3;
      else if (src_.compare(q, 3, "-%}") == 0)
        end = q + 3 + space_run(src_, q + 3);
      else if (src_.compare(q, 2, "%}") == 0)
        end = q + 2 + (q + 2 < src_.size() && src_[q + 2] == '\n');
      else
        continue;
      emit_data(pos_, strip_before_tag(std::string_view(src_).substr(pos_, p - pos_), sign, false));
      pos_ = end;
      line_starting_ = src_[pos_ - 1] == '\n';
      return;
    }
    fail(tag, "missing end of raw directive '{% endraw %}'");
  }

  // Inside {{ }} or {% %}: the end rule first (only with balanced brackets), then
  // whitespace, float, integer, name, string, operator, as Jinja orders them.
  void lex_tag(bool block, size_t tag) {
    std::vector<char> brackets;
    while (true) {
      if (pos_ >= src_.size())
        fail(tag, std::string("unexpected end of template: missing '") + (block ? "%}" : "}}") + "' for this tag");
      if (brackets.empty() && end_of_tag(block)) return;
      const size_t start = pos_;
      if (size_t n = space_run(src_, pos_)) {
        pos_ += n;
      } else if (size_t n = match_float(src_, pos_)) {
        std::string digits;
        for (char c : std::string_view(src_).substr(pos_, n))
          if (c != '_') digits.push_back(c);
        emit(Tok::Float, start, src_.substr(pos_, n));
        out_.back().float_value = std::strtod(digits.c_str(), nullptr);
        pos_ += n;
      } else if (size_t n = match_int(src_, pos_)) {
        lex_int(start, n);
      } else if (is_name_start(src_[pos_])) {
        size_t e = pos_;
        while (e < src_.size() && is_name_char(src_[e])) ++e;
        emit(Tok::Name, start, src_.substr(pos_, e - pos_));
        pos_ = e;
      } else if (src_[pos_] == '\'' || src_[pos_] == '"') {
        lex_string();
      } else {
        lex_operator(brackets);
      }
    }
  }

  bool end_of_tag(bool block) {
    const size_t start = pos_;
    if (block) {
      if (src_.compare(pos_, 3, "+%}") == 0) {
        pos_ += 3;
      } else if (src_.compare(pos_, 3, "-%}") == 0) {
        pos_ += 3;
        pos_ += space_run(src_, pos_);
      } else if (src_.compare(pos_, 2, "%}") == 0) {
        pos_ += 2;
        if (pos_ < src_.size() && src_[pos_] == '\n') ++pos_;  // trim_blocks
      } else {
        return false;
      }
    } else {
      if (src_.compare(pos_, 3, "-}}") == 0) {
        pos_ += 3;
        pos_ += space_run(src_, pos_);
      } else if (src_.compare(pos_, 2, "}}") == 0) {
        pos_ += 2;
      } else {
        return false;
      }
    }
    emit(block ? Tok::BlockEnd : Tok::VarEnd, start, block ? "%}" : "}}");
    line_starting_ = src_[pos_ - 1] == '\n';
    return true;
  }

  void lex_int(size_t start, size_t n) {
    std::string digits;
    for (char c : std::string_view(src_).substr(pos_, n))
      if (c != '_') digits.push_back(c);
    int base = 10;
    std::string body = digits;
    if (digits.size() > 2 && digits[0] == '0' && digits[1] != '0') {
      const char p = static_cast<char>(digits[1] | 0x20);
      base = p == 'b' ? 2 : p == 'o' ? 8 : 16;
      body = digits.substr(2);
    }
    errno = 0;
    char* end = nullptr;
    const unsigned long long v = std::strtoull(body.c_str(), &end, base);
    if (errno == ERANGE || v > static_cast<unsigned long long>(INT64_MAX))
      fail(start, "integer literal " + digits + " does not fit in 64 bits");
    emit(Tok::Int, start, src_.substr(pos_, n));
    out_.back().int_value = static_cast<int64_t>(v);
    pos_ += n;
  }

  // Python string literal, decoded like Jinja: unicode-escape over the
  // ASCII-backslash-replaced text.
  void lex_string() {
    const size_t start = pos_;
    const char quote = src_[pos_++];
    std::string value;
    while (true) {
      if (pos_ >= src_.size()) fail(start, "unterminated string literal");
      const char c = src_[pos_];
      if (c == quote) {
        ++pos_;
        break;
      }
      if (c != '\\') {
        value.push_back(c);
        ++pos_;
        continue;
      }
      if (pos_ + 1 >= src_.size()) fail(start, "unterminated string literal");
      decode_escape(value, start);
    }
    emit(Tok::String, start, std::move(value));
  }

  void decode_escape(std::string& value, size_t start) {
    const char e = src_[pos_ + 1];
    pos_ += 2;
    auto hex = [&](int n) -> char32_t {
      if (pos_ + n > src_.size()) fail(start, "truncated \\x/\\u/\\U escape in string literal");
      char32_t v = 0;
      for (int i = 0; i < n; ++i) {
        const char h = src_[pos_ + i];
        if (!is_hex(h)) fail(start, "truncated \\x/\\u/\\U escape in string literal");
        v = v * 16 + static_cast<char32_t>(is_digit(h) ? h - '0' : (h | 0x20) - 'a' + 10);
      }
      pos_ += n;
      return v;
    };
    switch (e) {
      case '\n':
        return;  // line continuation
      case '\\':
        value.push_back('\\');
        return;
      case '\'':
        value.push_back('\'');
        return;
      case '"':
        value.push_back('"');
        return;
      case 'a':
        value.push_back('\a');
        return;
      case 'b':
        value.push_back('\b');
        return;
      case 'f':
        value.push_back('\f');
        return;
      case 'n':
        value.push_back('\n');
        return;
      case 'r':
        value.push_back('\r');
        return;
      case 't':
        value.push_back('\t');
        return;
      case 'v':
        value.push_back('\v');
        return;
      case 'x':
        utf8_append(value, hex(2));
        return;
      case 'u':
        utf8_append(value, hex(4));
        return;
      case 'U': {
        const char32_t cp = hex(8);
        if (cp > 0x10FFFF) fail(start, "\\U escape out of range in string literal");
        utf8_append(value, cp);
        return;
      }
      case 'N':
        fail(start, "unsupported escape \\N{...} in string literal");
      default:
        break;
    }
    if (e >= '0' && e <= '7') {
      char32_t v = static_cast<char32_t>(e - '0');
      for (int i = 0; i < 2 && pos_ < src_.size() && src_[pos_] >= '0' && src_[pos_] <= '7'; ++i)
        v = v * 8 + static_cast<char32_t>(src_[pos_++] - '0');
      utf8_append(value, v);
      return;
    }
    if (static_cast<unsigned char>(e) >= 0x80) {
      // Jinja first turns the character into \xNN / \uNNNN / \UNNNNNNNN, so the
      // backslash escapes the backslash of that text.
      size_t len = 1;
      const auto c0 = static_cast<unsigned char>(e);
      len = (c0 >> 5) == 0x6 ? 2 : (c0 >> 4) == 0xE ? 3 : (c0 >> 3) == 0x1E ? 4 : 1;
      const std::u32string cp = utf8_decode(std::string_view(src_).substr(pos_ - 1, len));
      char buf[16];
      const unsigned u = cp.empty() ? c0 : unsigned(cp[0]);
      std::snprintf(buf, sizeof buf, u < 0x100 ? "\\x%02x" : u < 0x10000 ? "\\u%04x" : "\\U%08x", u);
      value += buf;
      pos_ += len - 1;
      return;
    }
    value.push_back('\\');  // unknown escapes keep the backslash
    value.push_back(e);
  }

  void lex_operator(std::vector<char>& brackets) {
    static constexpr std::string_view kTwo[] = {"**", "//", "==", "!=", ">=", "<="};
    const size_t start = pos_;
    for (auto op : kTwo) {
      if (src_.compare(pos_, 2, op) == 0) {
        emit(Tok::Op, start, std::string(op));
        pos_ += 2;
        return;
      }
    }
    const char c = src_[pos_];
    if (std::string_view("+-/*%~[](){}><=.:|,;").find(c) == std::string_view::npos) {
      std::string shown;
      utf8_append(shown, utf8_decode(std::string_view(src_).substr(pos_, 4)).front());
      fail(start, "unexpected character '" + shown + "' in tag");
    }
    if (c == '(' || c == '[' || c == '{') {
      brackets.push_back(c == '(' ? ')' : c == '[' ? ']' : '}');
    } else if (c == ')' || c == ']' || c == '}') {
      if (brackets.empty()) fail(start, std::string("unexpected '") + c + "'");
      if (brackets.back() != c) fail(start, std::string("unexpected '") + c + "', expected '" + brackets.back() + "'");
      brackets.pop_back();
    }
    emit(Tok::Op, start, std::string(1, c));
    ++pos_;
  }

  std::string src_;
  const std::string& name_;
  size_t pos_ = 0;
  bool line_starting_ = true;
  std::vector<size_t> line_starts_;
  std::vector<Token> out_;
};

}  // namespace

std::vector<Token> tokenize(std::string_view source, const std::string& name) { return Lexer(source, name).run(); }

std::string describe(const Token& t) {
  switch (t.type) {
    case Tok::Eof:
      return "end of template";
    case Tok::Data:
      return "template data";
    case Tok::VarBegin:
      return "'{{'";
    case Tok::VarEnd:
      return "end of print statement '}}'";
    case Tok::BlockBegin:
      return "'{%'";
    case Tok::BlockEnd:
      return "end of statement block '%}'";
    case Tok::String:
      return "string literal";
    case Tok::Int:
      return "integer " + t.text;
    case Tok::Float:
      return "float " + t.text;
    default:
      return "'" + t.text + "'";
  }
}

}  // namespace rl::model::jinja
