// Parser of the chat-template interpreter, expressions: Jinja's precedence
// (ternary < or < and < not < comparisons/in < + - < ~ < * / // % < ** < unary,
// with filters, tests, calls, attributes and subscripts binding tightest), its
// tuple rules and its test-argument rules. Unknown filters and tests fail here.
#include "model/jinja_builtins.hpp"
#include "model/jinja_parser.hpp"

namespace rl::model::jinja {

// ---- expressions --------------------------------------------------------------------
bool Parser::is_tuple_end(const std::vector<std::string_view>& extra) const {
  const Token& t = cur();
  if (t.type == Tok::VarEnd || t.type == Tok::BlockEnd || t.is_op(")")) return true;
  return t.type == Tok::Name && std::find(extra.begin(), extra.end(), t.text) != extra.end();
}

ExprPtr Parser::parse_tuple(bool with_condexpr, const std::vector<std::string_view>& extra, bool explicit_parens) {
  const Loc loc = cur().loc;
  std::vector<ExprPtr> items;
  bool is_tuple = false;
  while (true) {
    if (!items.empty()) expect_op(",");
    if (is_tuple_end(extra)) break;
    items.push_back(parse_expression(with_condexpr));
    if (is_op(","))
      is_tuple = true;
    else
      break;
  }
  if (!is_tuple) {
    if (!items.empty()) return std::move(items.front());
    if (!explicit_parens) fail(cur().loc, "expected an expression, got " + describe(cur()));
  }
  return node(ExprKind::Tuple, loc, std::move(items));
}

ExprPtr Parser::parse_condexpr() {
  ExprPtr e = parse_or();
  while (is_name("if")) {
    const Loc loc = advance().loc;
    ExprPtr test = parse_or();
    ExprPtr otherwise = skip_name("else") ? parse_condexpr() : nullptr;
    e = node(ExprKind::CondExpr, loc, vec(std::move(test), std::move(e), std::move(otherwise)));
  }
  return e;
}

ExprPtr Parser::parse_or() {
  ExprPtr e = parse_and();
  while (is_name("or")) {
    const Loc loc = advance().loc;
    e = node(ExprKind::Or, loc, vec(std::move(e), parse_and()));
  }
  return e;
}

ExprPtr Parser::parse_and() {
  ExprPtr e = parse_not();
  while (is_name("and")) {
    const Loc loc = advance().loc;
    e = node(ExprKind::And, loc, vec(std::move(e), parse_not()));
  }
  return e;
}

ExprPtr Parser::parse_not() {
  if (is_name("not")) {
    const Loc loc = advance().loc;
    Nest nest(*this, loc);
    return node(ExprKind::Not, loc, vec(parse_not()));
  }
  return parse_compare();
}

ExprPtr Parser::parse_compare() {
  const Loc loc = cur().loc;
  ExprPtr first = parse_math1();
  std::vector<CmpOp> ops;
  std::vector<ExprPtr> operands;
  operands.push_back(std::move(first));
  while (true) {
    const Token& t = cur();
    if (t.type == Tok::Op && one_of(t.text, {"==", "!=", "<", "<=", ">", ">="})) {
      const std::string& o = advance().text;
      ops.push_back(o == "=="   ? CmpOp::Eq
                    : o == "!=" ? CmpOp::Ne
                    : o == "<"  ? CmpOp::Lt
                    : o == "<=" ? CmpOp::Le
                    : o == ">"  ? CmpOp::Gt
                                : CmpOp::Ge);
    } else if (t.is_name("in")) {
      advance();
      ops.push_back(CmpOp::In);
    } else if (t.is_name("not") && look().is_name("in")) {
      advance();
      advance();
      ops.push_back(CmpOp::NotIn);
    } else {
      break;
    }
    operands.push_back(parse_math1());
  }
  if (ops.empty()) return std::move(operands.front());
  ExprPtr e = node(ExprKind::Compare, loc, std::move(operands));
  e->ops = std::move(ops);
  return e;
}

ExprPtr Parser::binary(BinOp op, Loc loc, ExprPtr a, ExprPtr b) {
  ExprPtr e = node(ExprKind::Binary, loc, vec(std::move(a), std::move(b)));
  e->op = op;
  return e;
}

ExprPtr Parser::parse_math1() {
  ExprPtr e = parse_concat();
  while (is_op("+") || is_op("-")) {
    const Token& t = advance();
    const BinOp op = t.text == "+" ? BinOp::Add : BinOp::Sub;
    e = binary(op, t.loc, std::move(e), parse_concat());
  }
  return e;
}

ExprPtr Parser::parse_concat() {
  ExprPtr e = parse_math2();
  while (is_op("~")) {
    const Loc loc = advance().loc;
    e = binary(BinOp::Concat, loc, std::move(e), parse_math2());
  }
  return e;
}

ExprPtr Parser::parse_math2() {
  ExprPtr e = parse_pow();
  while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
    const Token& t = advance();
    const BinOp op = t.text == "*"    ? BinOp::Mul
                     : t.text == "/"  ? BinOp::Div
                     : t.text == "//" ? BinOp::FloorDiv
                                      : BinOp::Mod;
    e = binary(op, t.loc, std::move(e), parse_pow());
  }
  return e;
}

// Left-associative in Jinja: 2 ** 3 ** 2 == 64.
ExprPtr Parser::parse_pow() {
  ExprPtr e = parse_unary(true);
  while (is_op("**")) {
    const Loc loc = advance().loc;
    e = binary(BinOp::Pow, loc, std::move(e), parse_unary(true));
  }
  return e;
}

ExprPtr Parser::parse_unary(bool with_filter) {
  const Loc loc = cur().loc;
  Nest nest(*this, loc);
  ExprPtr e;
  if (skip_op("-"))
    e = node(ExprKind::Neg, loc, vec(parse_unary(false)));
  else if (skip_op("+"))
    e = node(ExprKind::Pos, loc, vec(parse_unary(false)));
  else
    e = parse_primary();
  e = parse_postfix(std::move(e));
  if (with_filter) e = parse_filter_expr(std::move(e));
  return e;
}

ExprPtr Parser::parse_primary() {
  const Token& t = cur();
  if (t.type == Tok::Name) {
    advance();
    if (one_of(t.text, {"true", "True", "false", "False"})) {
      ExprPtr e = node(ExprKind::Const, t.loc);
      e->value = Value::boolean(t.text == "true" || t.text == "True");
      return e;
    }
    ExprPtr e = node(ExprKind::Const, t.loc);
    if (one_of(t.text, {"none", "None"})) {
      e->value = Value::none();
      return e;
    }
    e->kind = ExprKind::Name;
    e->name = t.text;
    if (!macro_refs_.empty() && t.text == "varargs") macro_refs_.back().first = true;
    if (!macro_refs_.empty() && t.text == "kwargs") macro_refs_.back().second = true;
    return e;
  }
  if (t.type == Tok::String) {
    ExprPtr e = node(ExprKind::Const, t.loc);
    std::string s = advance().text;
    while (cur().type == Tok::String) s += advance().text;  // adjacent literals concatenate
    e->value = Value(std::move(s));
    return e;
  }
  if (t.type == Tok::Int || t.type == Tok::Float) {
    ExprPtr e = node(ExprKind::Const, t.loc);
    e->value = t.type == Tok::Int ? Value::integer(t.int_value) : Value::floating(t.float_value);
    advance();
    return e;
  }
  if (t.is_op("(")) {
    advance();
    ExprPtr e = parse_tuple(true, {}, true);
    expect_op(")");
    return e;
  }
  if (t.is_op("[")) {
    advance();
    std::vector<ExprPtr> items;
    while (!is_op("]")) {
      if (!items.empty()) {
        expect_op(",");
        if (is_op("]")) break;
      }
      items.push_back(parse_expression(true));
    }
    expect_op("]");
    return node(ExprKind::List, t.loc, std::move(items));
  }
  if (t.is_op("{")) {
    advance();
    std::vector<ExprPtr> items;
    while (!is_op("}")) {
      if (!items.empty()) {
        expect_op(",");
        if (is_op("}")) break;
      }
      items.push_back(parse_expression(true));
      expect_op(":");
      items.push_back(parse_expression(true));
    }
    expect_op("}");
    return node(ExprKind::Dict, t.loc, std::move(items));
  }
  fail(t.loc, "unexpected " + describe(t));
}

ExprPtr Parser::parse_postfix(ExprPtr e) {
  while (true) {
    if (is_op(".") || is_op("["))
      e = parse_subscript(std::move(e));
    else if (is_op("("))
      e = parse_call(std::move(e));
    else
      return e;
  }
}

ExprPtr Parser::parse_filter_expr(ExprPtr e) {
  while (true) {
    if (is_op("|"))
      e = parse_filter(std::move(e), false);
    else if (is_name("is"))
      e = parse_test(std::move(e));
    else if (is_op("("))
      e = parse_call(std::move(e));
    else
      return e;
  }
}

// Postfix nodes take the position of the expression they apply to, so an error
// in `messages[0].content.strip()` points at `messages`.
ExprPtr Parser::parse_subscript(ExprPtr obj) {
  const Loc loc = obj->loc;
  const Token& t = advance();
  if (t.text == ".") {
    const Token& attr = cur();
    if (attr.type == Tok::Name) {
      ExprPtr e = node(ExprKind::Getattr, loc, vec(std::move(obj)));
      e->name = advance().text;
      return e;
    }
    if (attr.type != Tok::Int) fail(attr.loc, "expected an attribute name or number after '.', got " + describe(attr));
    ExprPtr index = node(ExprKind::Const, attr.loc);
    index->value = Value::integer(advance().int_value);
    return node(ExprKind::Getitem, loc, vec(std::move(obj), std::move(index)));
  }
  // '[': one index or slice (tuple keys are not used by chat templates)
  std::vector<ExprPtr> parts;
  if (!is_op(":")) {
    parts.push_back(parse_expression(true));
    if (!is_op(":")) {
      if (is_op(",")) fail(cur().loc, "unsupported construct: tuple subscripts");
      expect_op("]");
      return node(ExprKind::Getitem, loc, vec(std::move(obj), std::move(parts.front())));
    }
  } else {
    parts.push_back(nullptr);
  }
  advance();  // ':'
  parts.push_back(is_op(":") || is_op("]") ? nullptr : parse_expression(true));
  if (skip_op(":"))
    parts.push_back(is_op("]") ? nullptr : parse_expression(true));
  else
    parts.push_back(nullptr);
  expect_op("]");
  return node(ExprKind::Slice, loc, vec(std::move(obj), std::move(parts[0]), std::move(parts[1]), std::move(parts[2])));
}

void Parser::parse_call_args(Expr& e) {
  expect_op("(");
  bool need_comma = false;
  while (!is_op(")")) {
    if (need_comma) {
      expect_op(",");
      if (is_op(")")) break;
    }
    if (is_op("*") || is_op("**")) fail(cur().loc, "unsupported construct: *args / **kwargs in a call");
    if (cur().type == Tok::Name && look().is_op("=")) {
      std::string key = advance().text;
      advance();
      e.kwargs.emplace_back(std::move(key), parse_expression(true));
    } else {
      if (!e.kwargs.empty()) fail(cur().loc, "positional argument follows keyword argument");
      e.args.push_back(parse_expression(true));
    }
    need_comma = true;
  }
  expect_op(")");
  finish(e);
}

ExprPtr Parser::parse_call(ExprPtr callee) {
  const Loc loc = callee->loc;
  ExprPtr e = node(ExprKind::Call, loc, vec(std::move(callee)));
  parse_call_args(*e);
  return e;
}

std::string Parser::dotted_name() {
  std::string n = expect_name();
  while (skip_op(".")) n += "." + expect_name();
  return n;
}

ExprPtr Parser::parse_filter(ExprPtr operand, bool start_inline) {
  while (is_op("|") || start_inline) {
    if (!start_inline) advance();
    start_inline = false;
    const Loc loc = cur().loc;
    ExprPtr e = node(ExprKind::Filter, loc, vec(std::move(operand)));
    e->name = dotted_name();
    if (!find_filter(e->name))
      fail(loc, (is_jinja_filter(e->name) ? "unsupported filter '" : "unknown filter '") + e->name + "'");
    if (is_op("(")) parse_call_args(*e);
    operand = std::move(e);
  }
  return operand;
}

ExprPtr Parser::parse_test(ExprPtr operand) {
  const Loc loc = advance().loc;  // 'is'
  const bool negated = skip_name("not");
  const Loc name_loc = cur().loc;
  ExprPtr e = node(ExprKind::Test, loc, vec(std::move(operand)));
  e->negated = negated;
  e->name = dotted_name();
  if (!find_test(e->name))
    fail(name_loc, (is_jinja_test(e->name) ? "unsupported test '" : "unknown test '") + e->name + "'");
  const Token& t = cur();
  if (t.is_op("(")) {
    parse_call_args(*e);
  } else if ((t.type == Tok::Name || t.type == Tok::String || t.type == Tok::Int || t.type == Tok::Float ||
              t.is_op("[") || t.is_op("{")) &&
             !t.is_name("else") && !t.is_name("or") && !t.is_name("and")) {
    if (t.is_name("is")) fail(t.loc, "you cannot chain multiple tests with 'is'");
    e->args.push_back(parse_postfix(parse_primary()));
    finish(*e);
  }
  return e;
}

}  // namespace rl::model::jinja
