// Syntax tree of the chat-template interpreter (private to runtime/model), and
// the parser entry point. Node shapes follow jinja2.nodes.
#pragma once
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "model/jinja_lexer.hpp"
#include "model/jinja_value.hpp"

namespace rl::model::jinja {

enum class ExprKind : uint8_t {
  Const,        // value
  Name,         // name
  List,         // args: items
  Tuple,        // args: items
  Dict,         // args: key0, value0, key1, value1, ...
  Getattr,      // args[0].name
  Getitem,      // args[0][args[1]]
  Slice,        // args[0][args[1]:args[2]:args[3]] (null parts are omitted bounds)
  Call,         // args[0](args[1..], kwargs)
  Filter,       // args[0] | name(args[1..], kwargs); args[0] is a Placeholder in filter blocks
  Test,         // args[0] is [not] name(args[1..], kwargs)
  Not,          // not args[0]
  Neg,          // -args[0]
  Pos,          // +args[0]
  Binary,       // args[0] op args[1]
  And,          // args[0] and args[1]
  Or,           // args[0] or args[1]
  Compare,      // args[0] ops[0] args[1] ops[1] args[2] ... (chained)
  CondExpr,     // args[1] if args[0] else args[2] (args[2] may be null: Undefined)
  Placeholder,  // the rendered body of a filter block / set block
};

enum class BinOp : uint8_t { Add, Sub, Mul, Div, FloorDiv, Mod, Pow, Concat };
enum class CmpOp : uint8_t { Eq, Ne, Lt, Le, Gt, Ge, In, NotIn };

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct Expr {
  ExprKind kind = ExprKind::Const;
  Loc loc;
  Value value;                                          // Const
  std::string name;                                     // Name, Getattr attribute, Filter/Test name
  std::vector<ExprPtr> args;                            // operands, see ExprKind
  std::vector<std::pair<std::string, ExprPtr>> kwargs;  // Call/Filter/Test keyword arguments
  std::vector<CmpOp> ops;                               // Compare
  BinOp op = BinOp::Add;                                // Binary
  bool negated = false;                                 // Test: `is not`
  int depth = 1;                                        // height of this subtree (bounded by the parser)
};

enum class StmtKind : uint8_t {
  Data,      // text
  Print,     // exprs: the printed expressions ({{ }} or {% print %})
  If,        // exprs: conditions; bodies: one per condition, then else
  For,       // targets: loop variables; exprs[0] iterable, exprs[1] optional filter; bodies: body, else
  Set,       // targets = exprs[0]
  SetNs,     // text.attr = exprs[0] (namespace attribute)
  SetBlock,  // targets[0] = filter(rendered bodies[0])
  Macro,     // text: name; targets: parameters; exprs: defaults of the last parameters; bodies[0]
  Break,
  Continue,
  With,         // targets = exprs, in a new scope around bodies[0]
  FilterBlock,  // filter(rendered bodies[0])
  Generation,   // transformers' {% generation %}: renders bodies[0]
};

struct Stmt;
using StmtPtr = std::unique_ptr<Stmt>;
using Body = std::vector<StmtPtr>;

struct Stmt {
  StmtKind kind = StmtKind::Data;
  Loc loc;
  std::string text;                  // Data text, Macro name, SetNs namespace variable
  std::string attr;                  // SetNs attribute
  std::vector<std::string> targets;  // assigned names / macro parameters
  std::vector<ExprPtr> exprs;
  std::vector<Body> bodies;
  ExprPtr filter;                // SetBlock / FilterBlock: filter chain over a Placeholder
  bool has_else = false;         // If / For
  bool has_loop_filter = false;  // For: `for x in xs if cond`
  bool uses_varargs = false;     // Macro: the body reads `varargs`
  bool uses_kwargs = false;      // Macro: the body reads `kwargs`
};

// Parses a whole template; throws TemplateError for syntax errors and
// constructs this interpreter does not support.
Body parse_template(std::string_view source, const std::string& name);

}  // namespace rl::model::jinja
