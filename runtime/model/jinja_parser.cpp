// Parser of the chat-template interpreter, statements: a transcription of
// jinja2/parser.py for the tags chat templates use (for, if, set, macro, with,
// filter, print, break/continue, transformers' generation). Other tags fail
// here, at load time, with their name and position.
#include "model/jinja_parser.hpp"

#include "model/jinja_builtins.hpp"

namespace rl::model::jinja {
namespace {

std::string quoted_list(const std::vector<std::string_view>& names) {
  std::string out;
  for (size_t i = 0; i < names.size(); ++i) {
    out += i == 0 ? "'" : i + 1 == names.size() ? " or '" : ", '";
    out += std::string(names[i]) + "'";
  }
  return out;
}

}  // namespace

// ---- statements ------------------------------------------------------------------
Body Parser::subparse(const std::vector<std::string_view>& ends, std::string_view opener, Loc opener_loc) {
  Nest nest(*this, cur().loc);
  Body body;
  while (true) {
    const Token& t = cur();
    if (t.type == Tok::Data) {
      auto s = stmt(StmtKind::Data, t.loc);
      s->text = t.text;
      body.push_back(std::move(s));
      advance();
    } else if (t.type == Tok::VarBegin) {
      advance();
      auto s = stmt(StmtKind::Print, cur().loc);  // errors while printing point at the expression
      s->exprs.push_back(parse_tuple(true, {}, false));
      expect(Tok::VarEnd, "end of print statement '}}'");
      body.push_back(std::move(s));
    } else if (t.type == Tok::BlockBegin) {
      advance();
      if (cur().type == Tok::Name && std::find(ends.begin(), ends.end(), cur().text) != ends.end()) return body;
      body.push_back(parse_statement(ends));
      expect(Tok::BlockEnd, "end of statement block '%}'");
    } else if (t.type == Tok::Eof) {
      if (!ends.empty())
        fail(t.loc, "unexpected end of template: '{% " + std::string(opener) + " %}' opened at " +
                        std::to_string(opener_loc.line) + ":" + std::to_string(opener_loc.col) +
                        " is not closed (expected " + quoted_list(ends) + ")");
      return body;
    } else {
      fail(t.loc, "unexpected " + describe(t));
    }
  }
}

// The body of a block statement: after its tag's '%}' (an optional ':' first, as
// Jinja allows) up to one of `ends`.
Body Parser::parse_body(const std::vector<std::string_view>& ends, std::string_view opener, Loc opener_loc) {
  skip_op(":");
  expect(Tok::BlockEnd, "end of statement block '%}'");
  return subparse(ends, opener, opener_loc);
}

StmtPtr Parser::parse_statement(const std::vector<std::string_view>& ends) {
  const Token& t = cur();
  if (t.type != Tok::Name) fail(t.loc, "tag name expected, got " + describe(t));
  Nest nest(*this, t.loc);
  const std::string& tag = t.text;
  if (tag == "for") return parse_for();
  if (tag == "if") return parse_if();
  if (tag == "set") return parse_set();
  if (tag == "macro") return parse_macro();
  if (tag == "with") return parse_with();
  if (tag == "filter") return parse_filter_block();
  if (tag == "generation") return parse_generation();
  if (tag == "print") {
    auto s = stmt(StmtKind::Print, advance().loc);
    s->exprs.push_back(parse_tuple(true, {}, false));
    return s;
  }
  if (tag == "break" || tag == "continue") {
    if (loop_depth_ == 0) fail(t.loc, "'" + tag + "' outside of a for loop");
    return stmt(tag == "break" ? StmtKind::Break : StmtKind::Continue, advance().loc);
  }
  if (one_of(tag, {"endfor", "endif", "endset", "endmacro", "else", "elif", "endwith", "endfilter", "endgeneration",
                   "endraw", "endcall", "endblock", "endautoescape"}))
    fail(t.loc, "unexpected tag '" + tag + "'" + (ends.empty() ? "" : "; expected " + quoted_list(ends)));
  if (one_of(tag, {"block", "extends", "include", "import", "from", "call", "autoescape", "do", "trans", "raw"}))
    fail(t.loc, "unsupported tag '" + tag + "'");
  fail(t.loc, "unknown tag '" + tag + "'");
}

// Names assigned by for/set/with: `x`, `a, b`, `(a, b)`.
std::vector<std::string> Parser::parse_targets() {
  std::vector<std::string> names;
  const bool paren = skip_op("(");
  while (true) {
    const Token& t = cur();
    if (t.type != Tok::Name || one_of(t.text, {"true", "false", "none", "True", "False", "None", "in"}))
      fail(t.loc, "expected a variable name to assign to, got " + describe(t));
    names.push_back(advance().text);
    if (!is_op(",")) break;
    advance();
    if (is_op("(")) fail(cur().loc, "unsupported construct: nested unpacking in assignment targets");
    if (cur().type != Tok::Name || is_name("in")) break;  // trailing comma
  }
  if (paren) expect_op(")");
  return names;
}

StmtPtr Parser::parse_for() {
  auto s = stmt(StmtKind::For, advance().loc);
  s->targets = parse_targets();
  if (!skip_name("in")) fail(cur().loc, "expected 'in' after the loop variables, got " + describe(cur()));
  s->exprs.push_back(parse_tuple(false, {"recursive"}, false));
  if (skip_name("if")) {
    s->exprs.push_back(parse_expression(true));
    s->has_loop_filter = true;
  }
  if (is_name("recursive")) fail(cur().loc, "unsupported construct: recursive for loops");
  ++loop_depth_;
  s->bodies.push_back(parse_body({"endfor", "else"}, "for", s->loc));
  --loop_depth_;
  if (advance().text == "else") {
    s->has_else = true;
    s->bodies.push_back(parse_body({"endfor"}, "for", s->loc));
    advance();
  }
  return s;
}

StmtPtr Parser::parse_if() {
  auto s = stmt(StmtKind::If, advance().loc);
  while (true) {
    s->exprs.push_back(parse_tuple(false, {}, false));
    s->bodies.push_back(parse_body({"elif", "else", "endif"}, "if", s->loc));
    const std::string& tag = advance().text;
    if (tag == "elif") continue;
    if (tag == "else") {
      s->has_else = true;
      s->bodies.push_back(parse_body({"endif"}, "if", s->loc));
      advance();
    }
    return s;
  }
}

StmtPtr Parser::parse_set() {
  const Loc loc = advance().loc;
  if (cur().type == Tok::Name && look().is_op(".")) {  // namespace attribute
    auto s = stmt(StmtKind::SetNs, loc);
    s->text = advance().text;
    advance();
    s->attr = expect_name();
    if (!skip_op("=")) fail(cur().loc, "unsupported construct: block set of a namespace attribute");
    s->exprs.push_back(parse_tuple(true, {}, false));
    return s;
  }
  auto targets = parse_targets();
  if (skip_op("=")) {
    auto s = stmt(StmtKind::Set, loc);
    s->targets = std::move(targets);
    s->exprs.push_back(parse_tuple(true, {}, false));
    return s;
  }
  if (targets.size() != 1) fail(loc, "a block set assigns exactly one name");
  auto s = stmt(StmtKind::SetBlock, loc);
  s->targets = std::move(targets);
  if (is_op("|")) s->filter = parse_filter(node(ExprKind::Placeholder, cur().loc), false);
  s->bodies.push_back(parse_body({"endset"}, "set", loc));
  advance();
  return s;
}

StmtPtr Parser::parse_macro() {
  auto s = stmt(StmtKind::Macro, advance().loc);
  s->text = expect_name();
  expect_op("(");
  while (!is_op(")")) {
    if (!s->targets.empty()) {
      expect_op(",");
      if (is_op(")")) break;
    }
    s->targets.push_back(expect_name());
    if (skip_op("="))
      s->exprs.push_back(parse_expression(true));
    else if (!s->exprs.empty())
      fail(cur().loc, "non-default argument follows default argument");
  }
  expect_op(")");
  const int saved_loops = loop_depth_;
  loop_depth_ = 0;
  macro_refs_.push_back({false, false});
  s->bodies.push_back(parse_body({"endmacro"}, "macro", s->loc));
  advance();
  s->uses_varargs = macro_refs_.back().first;
  s->uses_kwargs = macro_refs_.back().second;
  macro_refs_.pop_back();
  loop_depth_ = saved_loops;
  return s;
}

StmtPtr Parser::parse_with() {
  auto s = stmt(StmtKind::With, advance().loc);
  while (cur().type != Tok::BlockEnd) {
    if (!s->targets.empty()) expect_op(",");
    s->targets.push_back(expect_name());
    expect_op("=");
    s->exprs.push_back(parse_expression(true));
  }
  s->bodies.push_back(parse_body({"endwith"}, "with", s->loc));
  advance();
  return s;
}

StmtPtr Parser::parse_filter_block() {
  auto s = stmt(StmtKind::FilterBlock, advance().loc);
  s->filter = parse_filter(node(ExprKind::Placeholder, cur().loc), true);
  s->bodies.push_back(parse_body({"endfilter"}, "filter", s->loc));
  advance();
  return s;
}

StmtPtr Parser::parse_generation() {
  auto s = stmt(StmtKind::Generation, advance().loc);
  s->bodies.push_back(parse_body({"endgeneration"}, "generation", s->loc));
  advance();
  return s;
}

Body parse_template(std::string_view source, const std::string& name) {
  return Parser(tokenize(source, name), name).parse();
}

}  // namespace rl::model::jinja
