// Tokenizer of the chat-template interpreter (private to runtime/model). It
// reproduces Jinja2's lexer with the environment transformers uses:
// trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=False, `-`/`+`
// whitespace control on every tag, newlines normalised to "\n".
#pragma once
#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace rl::model::jinja {

struct Loc {
  int line = 1;
  int col = 1;
};

// The error every syntax or evaluation failure ends up as:
// "<template name>:<line>:<col>: <what>".
class TemplateError : public std::runtime_error {
 public:
  TemplateError(const std::string& name, Loc loc, const std::string& what)
      : std::runtime_error(name + ":" + std::to_string(loc.line) + ":" + std::to_string(loc.col) + ": " + what) {}
};

enum class Tok : uint8_t { Data, VarBegin, VarEnd, BlockBegin, BlockEnd, Name, String, Int, Float, Op, Eof };

struct Token {
  Tok type = Tok::Eof;
  std::string text;  // data, name, decoded string literal, operator
  int64_t int_value = 0;
  double float_value = 0;
  Loc loc;

  bool is_op(std::string_view op) const { return type == Tok::Op && text == op; }
  bool is_name(std::string_view name) const { return type == Tok::Name && text == name; }
};

// Throws TemplateError for unterminated tags, comments, strings, raw blocks and
// unexpected characters.
std::vector<Token> tokenize(std::string_view source, const std::string& name);

// Human description of a token for messages: "'endfor'", "end of template", "'}}'".
std::string describe(const Token& t);

}  // namespace rl::model::jinja
