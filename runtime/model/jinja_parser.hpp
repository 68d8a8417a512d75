// Parser of the chat-template interpreter (private to runtime/model): a
// recursive-descent transcription of jinja2/parser.py. Statements are in
// jinja_parser.cpp, expressions in jinja_parse_expr.cpp.
#pragma once
#include <algorithm>
#include <initializer_list>
#include <string>
#include <string_view>
#include <vector>

#include "model/jinja_ast.hpp"

namespace rl::model::jinja {

inline constexpr int kMaxNesting = 100;     // statements inside statements, parentheses inside parentheses
inline constexpr int kMaxExprHeight = 256;  // a + b + c ... chains build deep trees without recursion here

template <class... E>
inline std::vector<ExprPtr> vec(E&&... e) {
  std::vector<ExprPtr> v;
  (v.push_back(std::forward<E>(e)), ...);
  return v;
}

inline bool one_of(std::string_view s, std::initializer_list<std::string_view> set) {
  return std::find(set.begin(), set.end(), s) != set.end();
}

class Parser {
 public:
  Parser(std::vector<Token> toks, const std::string& name) : toks_(std::move(toks)), name_(name) {}

  Body parse() { return subparse({}, "", {}); }

 private:
  struct Nest {  // recursion guard
    Parser& p;
    Nest(Parser& parser, Loc loc) : p(parser) {
      if (++p.nesting_ > kMaxNesting) p.fail(loc, "template nested too deeply (more than 100 levels)");
    }
    ~Nest() { --p.nesting_; }
  };
  const Token& cur() const { return toks_[pos_]; }
  const Token& look(size_t n = 1) const { return toks_[std::min(pos_ + n, toks_.size() - 1)]; }
  const Token& advance() {
    const Token& t = toks_[pos_];
    if (pos_ + 1 < toks_.size()) ++pos_;
    return t;
  }
  [[noreturn]] void fail(Loc loc, const std::string& what) const { throw TemplateError(name_, loc, what); }
  bool is_op(std::string_view op) const { return cur().is_op(op); }
  bool is_name(std::string_view n) const { return cur().is_name(n); }
  bool skip_op(std::string_view op) { return is_op(op) ? (advance(), true) : false; }
  bool skip_name(std::string_view n) { return is_name(n) ? (advance(), true) : false; }
  void expect_op(std::string_view op) {
    if (!skip_op(op)) fail(cur().loc, "expected '" + std::string(op) + "', got " + describe(cur()));
  }
  void expect(Tok type, const char* what) {
    if (cur().type != type) fail(cur().loc, std::string("expected ") + what + ", got " + describe(cur()));
    advance();
  }
  std::string expect_name() {
    if (cur().type != Tok::Name) fail(cur().loc, "expected a name, got " + describe(cur()));
    return advance().text;
  }

  ExprPtr node(ExprKind kind, Loc loc, std::vector<ExprPtr> args = {}) {
    auto e = std::make_unique<Expr>();
    e->kind = kind;
    e->loc = loc;
    e->args = std::move(args);
    finish(*e);
    return e;
  }
  void finish(Expr& e) const {
    int h = 0;
    for (const auto& a : e.args)
      if (a) h = std::max(h, a->depth);
    for (const auto& kv : e.kwargs) h = std::max(h, kv.second->depth);
    e.depth = h + 1;
    if (e.depth > kMaxExprHeight) fail(e.loc, "expression nested too deeply (more than 256 levels)");
  }
  StmtPtr stmt(StmtKind kind, Loc loc) {
    auto s = std::make_unique<Stmt>();
    s->kind = kind;
    s->loc = loc;
    return s;
  }

  // statements (jinja_parser.cpp)
  Body subparse(const std::vector<std::string_view>& ends, std::string_view opener, Loc opener_loc);
  Body parse_body(const std::vector<std::string_view>& ends, std::string_view opener, Loc opener_loc);
  StmtPtr parse_statement(const std::vector<std::string_view>& ends);
  std::vector<std::string> parse_targets();
  StmtPtr parse_for();
  StmtPtr parse_if();
  StmtPtr parse_set();
  StmtPtr parse_macro();
  StmtPtr parse_with();
  StmtPtr parse_filter_block();
  StmtPtr parse_generation();

  // expressions (jinja_parse_expr.cpp)
  bool is_tuple_end(const std::vector<std::string_view>& extra) const;
  ExprPtr parse_tuple(bool with_condexpr, const std::vector<std::string_view>& extra, bool explicit_parens);
  ExprPtr parse_expression(bool with_condexpr) { return with_condexpr ? parse_condexpr() : parse_or(); }
  ExprPtr parse_condexpr();
  ExprPtr parse_or();
  ExprPtr parse_and();
  ExprPtr parse_not();
  ExprPtr parse_compare();
  ExprPtr binary(BinOp op, Loc loc, ExprPtr a, ExprPtr b);
  ExprPtr parse_math1();
  ExprPtr parse_concat();
  ExprPtr parse_math2();
  ExprPtr parse_pow();
  ExprPtr parse_unary(bool with_filter);
  ExprPtr parse_primary();
  ExprPtr parse_postfix(ExprPtr e);
  ExprPtr parse_filter_expr(ExprPtr e);
  ExprPtr parse_subscript(ExprPtr obj);
  void parse_call_args(Expr& e);
  ExprPtr parse_call(ExprPtr callee);
  std::string dotted_name();
  ExprPtr parse_filter(ExprPtr operand, bool start_inline);
  ExprPtr parse_test(ExprPtr operand);

  std::vector<Token> toks_;
  const std::string& name_;
  size_t pos_ = 0;
  int nesting_ = 0;
  int loop_depth_ = 0;
  std::vector<std::pair<bool, bool>> macro_refs_;  // per macro being parsed: reads varargs, kwargs
};

}  // namespace rl::model::jinja
