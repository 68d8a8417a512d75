// Evaluator of the chat-template interpreter. Scoping follows Jinja2 at run
// time: each loop iteration, macro call and with block gets a fresh scope whose
// parent is the enclosing one; `set` writes to the current scope, so a value set
// inside a loop is gone after it (hence namespace()); `if` opens no scope.
#include "model/jinja_eval.hpp"

#include <algorithm>

#include "model/jinja_builtins.hpp"

namespace rl::model::jinja {
namespace {

// Counts nesting on the C++ stack; the limit keeps hostile templates from
// overflowing it (the parser bounds each tree, this bounds them combined).
struct NestGuard {
  int& n;
  NestGuard(int& counter, int limit) : n(counter) {
    if (++n > limit) {
      --n;
      throw EvalError("RecursionError: template evaluation nested deeper than " + std::to_string(limit) + " levels");
    }
  }
  ~NestGuard() { --n; }
};

}  // namespace

Evaluator::~Evaluator() {
  // All namespaces are still held here: emptying them one by one destroys only
  // what each held besides namespaces (bounded by kMaxValueDepth).
  for (auto& ns : namespaces_) ns->attrs = DictData();
}

std::string Evaluator::render(const Body& body, DictData context) {
  root_ = std::make_shared<Frame>();
  root_->vars = std::move(context);
  std::string out;
  out_ = &out;
  exec(body, root_);
  out_ = nullptr;
  return out;
}

void Evaluator::step() {
  if (++steps_ > limits_.max_steps)
    throw EvalError("template exceeded " + std::to_string(limits_.max_steps) +
                    " steps (loop iterations, statements and macro calls); runaway loop?");
}

void Evaluator::emit(std::string_view text) {
  if (out_->size() + text.size() > limits_.max_output)
    throw EvalError("rendered text exceeds " + std::to_string(limits_.max_output >> 20) + " MiB");
  out_->append(text);
}

std::string Evaluator::capture(const Body& body, const FramePtr& frame) {
  std::string text;
  std::string* saved = out_;
  out_ = &text;
  try {
    const Flow flow = exec(body, frame);
    out_ = saved;
    if (flow != Flow::Normal)
      throw EvalError("unsupported construct: break/continue out of a macro, set or filter block");
  } catch (...) {
    out_ = saved;
    throw;
  }
  return text;
}

// ---- statements ------------------------------------------------------------------------
Evaluator::Flow Evaluator::exec(const Body& body, const FramePtr& frame) {
  for (const auto& s : body) {
    const Flow flow = exec_stmt(*s, frame);
    if (flow != Flow::Normal) return flow;
  }
  return Flow::Normal;
}

Evaluator::Flow Evaluator::exec_stmt(const Stmt& s, const FramePtr& frame) {
  try {
    NestGuard guard(nesting_, limits_.max_nesting);
    step();
    switch (s.kind) {
      case StmtKind::Data:
        emit(s.text);
        break;
      case StmtKind::Print: {
        const Value v = eval(*s.exprs[0], frame);
        if (v.is_string())
          emit(v.as_string());
        else
          emit(to_str(v));
        break;
      }
      case StmtKind::If:
        for (size_t i = 0; i < s.exprs.size(); ++i)
          if (truthy(eval(*s.exprs[i], frame))) return exec(s.bodies[i], frame);
        if (s.has_else) return exec(s.bodies.back(), frame);
        break;
      case StmtKind::For:
        exec_for(s, frame);
        break;
      case StmtKind::Set:
      case StmtKind::SetNs:
        exec_set(s, frame);
        break;
      case StmtKind::SetBlock: {
        auto inner = std::make_shared<Frame>();
        inner->parent = frame;
        Value v(capture(s.bodies[0], inner));
        if (s.filter) v = apply_filters(*s.filter, std::move(v), frame);
        frame->vars.set(s.targets[0], std::move(v));
        break;
      }
      case StmtKind::Macro:
        define_macro(s, frame);
        break;
      case StmtKind::Break:
        return Flow::Break;
      case StmtKind::Continue:
        return Flow::Continue;
      case StmtKind::With: {
        auto inner = std::make_shared<Frame>();
        inner->parent = frame;
        for (size_t i = 0; i < s.targets.size(); ++i) inner->vars.set(s.targets[i], eval(*s.exprs[i], frame));
        return exec(s.bodies[0], inner);
      }
      case StmtKind::FilterBlock: {
        const Value v = apply_filters(*s.filter, Value(capture(s.bodies[0], frame)), frame);
        emit(to_str(v));
        break;
      }
      case StmtKind::Generation:
        return exec(s.bodies[0], frame);
    }
  } catch (const EvalError& e) {
    throw TemplateError(name_, s.loc, e.what());
  }
  return Flow::Normal;
}

void Evaluator::assign(const std::vector<std::string>& targets, const Value& value, Frame& frame) {
  if (targets.size() == 1) {
    frame.vars.set(targets[0], value);
    return;
  }
  const auto items = iterate(value);
  if (items->items.size() != targets.size())
    throw EvalError("ValueError: " + std::string(items->items.size() > targets.size() ? "too many" : "not enough") +
                    " values to unpack (expected " + std::to_string(targets.size()) + ", got " +
                    std::to_string(items->items.size()) + ")");
  for (size_t i = 0; i < targets.size(); ++i) frame.vars.set(targets[i], items->items[i]);
}

void Evaluator::exec_set(const Stmt& s, const FramePtr& frame) {
  Value v = eval(*s.exprs[0], frame);
  if (s.kind == StmtKind::Set) {
    assign(s.targets, v, *frame);
    return;
  }
  const Value* target = frame->find(s.text);
  if (!target) throw EvalError("UndefinedError: '" + s.text + "' is undefined");
  if (target->kind() != Value::Kind::Namespace)
    throw EvalError("cannot assign attribute '" + s.attr + "' on non-namespace object '" + s.text + "' (" +
                    type_name(*target) + "); create it with namespace()");
  target->as_namespace().attrs.set(s.attr, std::move(v));
}

void Evaluator::exec_for(const Stmt& s, const FramePtr& frame) {
  auto items = iterate(eval(*s.exprs[0], frame));
  if (s.has_loop_filter) {  // `for x in xs if cond`: cond sees the loop variables, not `loop`
    auto kept = std::make_shared<ListData>();
    for (const auto& item : items->items) {
      auto probe = std::make_shared<Frame>();
      probe->parent = frame;
      assign(s.targets, item, *probe);
      if (truthy(eval(*s.exprs[1], probe))) kept->items.push_back(item);
    }
    items = std::move(kept);
  }
  if (items->items.empty()) {
    if (s.has_else) {  // in a scope of its own, as in Jinja
      auto inner = std::make_shared<Frame>();
      inner->parent = frame;
      exec(s.bodies[1], inner);
    }
    return;
  }
  auto loop = std::make_shared<LoopData>();
  loop->items = items;
  const Value loop_value = Value::loop(loop);
  struct ResetLoop {  // loop.changed() may hold values that refer back to the loop
    LoopData& l;
    ~ResetLoop() { l.changed_last.reset(); }
  } reset{*loop};
  for (size_t i = 0; i < items->items.size(); ++i) {
    step();
    loop->index0 = i;
    auto iteration = std::make_shared<Frame>();
    iteration->parent = frame;
    assign(s.targets, items->items[i], *iteration);
    iteration->vars.set("loop", loop_value);
    if (exec(s.bodies[0], iteration) == Flow::Break) break;
  }
}

void Evaluator::define_macro(const Stmt& s, const FramePtr& frame) {
  // The macro sees its defining scope by reference (later `set`s there are
  // visible, as in Jinja) but does not keep it alive: no cycle scope -> macro -> scope.
  std::weak_ptr<Frame> scope = frame;
  const Stmt* def = &s;
  frame->vars.set(s.text, Value::callable("macro '" + s.text + "'", [def, scope](Evaluator& ev, CallArgs& args) {
                    return ev.call_macro(*def, scope, args);
                  }));
}

Value Evaluator::call_macro(const Stmt& m, const std::weak_ptr<Frame>& scope, CallArgs& args) {
  if (call_depth_ >= limits_.max_call_depth)
    throw EvalError("RecursionError: macro calls nested deeper than " + std::to_string(limits_.max_call_depth) +
                    " (runaway recursion?)");
  step();
  const auto& params = m.targets;
  const std::string who = "macro '" + m.text + "'";
  if (args.args.size() > params.size() && !m.uses_varargs)
    throw EvalError("TypeError: " + who + " takes not more than " + std::to_string(params.size()) + " argument(s)");
  auto frame = std::make_shared<Frame>();
  frame->parent = scope.lock();
  if (!frame->parent) frame->parent = root_;
  std::vector<bool> given(params.size(), false);
  for (size_t i = 0; i < args.args.size() && i < params.size(); ++i) {
    frame->vars.set(params[i], args.args[i]);
    given[i] = true;
  }
  DictData extra_kwargs;
  for (auto& [key, value] : args.kwargs) {
    const auto it = std::find(params.begin(), params.end(), key);
    if (it != params.end()) {
      const auto idx = static_cast<size_t>(it - params.begin());
      if (given[idx]) throw EvalError("TypeError: " + who + " got multiple values for argument '" + key + "'");
      frame->vars.set(key, value);
      given[idx] = true;
    } else if (m.uses_kwargs) {
      extra_kwargs.set(key, value);
    } else {
      throw EvalError("TypeError: " + who + " takes no keyword argument '" + key + "'");
    }
  }
  const size_t first_default = params.size() - m.exprs.size();
  for (size_t i = 0; i < params.size(); ++i) {
    if (given[i]) continue;
    frame->vars.set(params[i], i >= first_default ? eval(*m.exprs[i - first_default], frame)
                                                  : Value::undefined("'" + params[i] + "' is undefined"));
  }
  if (m.uses_varargs) {
    std::vector<Value> rest;
    for (size_t i = params.size(); i < args.args.size(); ++i) rest.push_back(args.args[i]);
    frame->vars.set("varargs", Value::list(std::move(rest), true));
  }
  if (m.uses_kwargs) frame->vars.set("kwargs", Value::dict(std::move(extra_kwargs)));
  ++call_depth_;
  struct Depth {
    int& d;
    ~Depth() { --d; }
  } depth{call_depth_};
  return Value(capture(m.bodies[0], frame));
}

Value Evaluator::call(const Value& callee, CallArgs& args) {
  if (callee.kind() == Value::Kind::Callable) return callee.as_callable().fn(*this, args);
  if (callee.is_undefined()) throw_undefined(callee);
  throw EvalError("TypeError: '" + type_name(callee) + "' object is not callable");
}

Value Evaluator::apply_filters(const Expr& chain, Value input, const FramePtr& frame) {
  const Value* saved = placeholder_;
  placeholder_ = &input;
  try {
    Value out = eval(chain, frame);
    placeholder_ = saved;
    return out;
  } catch (...) {
    placeholder_ = saved;
    throw;
  }
}

// ---- expressions ------------------------------------------------------------------------
Value Evaluator::eval(const Expr& e, const FramePtr& frame) {
  try {
    NestGuard guard(nesting_, limits_.max_nesting);
    return eval_inner(e, frame);
  } catch (const EvalError& err) {  // the innermost expression names the position
    throw TemplateError(name_, e.loc, err.what());
  }
}

CallArgs Evaluator::eval_args(const Expr& e, size_t first, const FramePtr& frame) {
  CallArgs a;
  a.args.reserve(e.args.size() - first);
  for (size_t i = first; i < e.args.size(); ++i) a.args.push_back(eval(*e.args[i], frame));
  for (const auto& [k, v] : e.kwargs) a.kwargs.emplace_back(k, eval(*v, frame));
  return a;
}

Value Evaluator::eval_compare(const Expr& e, const FramePtr& frame) {
  Value left = eval(*e.args[0], frame);
  for (size_t i = 0; i < e.ops.size(); ++i) {
    Value right = eval(*e.args[i + 1], frame);
    bool ok = false;
    switch (e.ops[i]) {
      case CmpOp::Eq:
        ok = equals(left, right);
        break;
      case CmpOp::Ne:
        ok = !equals(left, right);
        break;
      case CmpOp::Lt:
        ok = compare(left, right, "<") < 0;
        break;
      case CmpOp::Le:
        ok = compare(left, right, "<=") <= 0;
        break;
      case CmpOp::Gt:
        ok = compare(left, right, ">") > 0;
        break;
      case CmpOp::Ge:
        ok = compare(left, right, ">=") >= 0;
        break;
      case CmpOp::In:
        ok = contains(right, left);
        break;
      case CmpOp::NotIn:
        ok = !contains(right, left);
        break;
    }
    if (!ok) return Value::boolean(false);
    left = std::move(right);
  }
  return Value::boolean(true);
}

Value Evaluator::eval_inner(const Expr& e, const FramePtr& frame) {
  switch (e.kind) {
    case ExprKind::Const:
      return e.value;
    case ExprKind::Name:
      if (const Value* v = frame->find(e.name)) return *v;
      return global(e.name);
    case ExprKind::List:
    case ExprKind::Tuple: {
      std::vector<Value> items;
      items.reserve(e.args.size());
      for (const auto& a : e.args) items.push_back(eval(*a, frame));
      return Value::list(std::move(items), e.kind == ExprKind::Tuple);
    }
    case ExprKind::Dict: {
      DictData d;
      for (size_t i = 0; i + 1 < e.args.size(); i += 2) {
        Value key = eval(*e.args[i], frame);
        if (!key.is_string())
          throw EvalError("unsupported construct: dict literal with a " + type_name(key) + " key (only string keys)");
        d.set(key.as_string(), eval(*e.args[i + 1], frame));
      }
      return Value::dict(std::move(d));
    }
    case ExprKind::Getattr: {
      const Value obj = eval(*e.args[0], frame);
      if (obj.is_undefined()) throw_undefined(obj);
      return get_attr(obj, e.name);
    }
    case ExprKind::Getitem: {
      const Value obj = eval(*e.args[0], frame);
      const Value key = eval(*e.args[1], frame);
      if (obj.is_undefined()) throw_undefined(obj);
      return get_item(obj, key);
    }
    case ExprKind::Slice: {
      const Value obj = eval(*e.args[0], frame);
      Value parts[3];
      for (int i = 0; i < 3; ++i) parts[i] = e.args[i + 1] ? eval(*e.args[i + 1], frame) : Value::none();
      if (obj.is_undefined()) throw_undefined(obj);
      return get_slice(obj, parts[0], parts[1], parts[2]);
    }
    case ExprKind::Call: {
      const Value callee = eval(*e.args[0], frame);
      CallArgs args = eval_args(e, 1, frame);
      return call(callee, args);
    }
    case ExprKind::Filter: {
      const Value operand = eval(*e.args[0], frame);
      CallArgs args = eval_args(e, 1, frame);
      return find_filter(e.name)(*this, operand, args);
    }
    case ExprKind::Test: {
      const Value operand = eval(*e.args[0], frame);
      CallArgs args = eval_args(e, 1, frame);
      return Value::boolean(find_test(e.name)(*this, operand, args) != e.negated);
    }
    case ExprKind::Not:
      return Value::boolean(!truthy(eval(*e.args[0], frame)));
    case ExprKind::Neg:
      return negate(eval(*e.args[0], frame));
    case ExprKind::Pos:
      return unary_plus(eval(*e.args[0], frame));
    case ExprKind::Binary: {
      const Value a = eval(*e.args[0], frame);
      return binary_op(e.op, a, eval(*e.args[1], frame));
    }
    case ExprKind::And: {
      Value a = eval(*e.args[0], frame);
      return truthy(a) ? eval(*e.args[1], frame) : a;
    }
    case ExprKind::Or: {
      Value a = eval(*e.args[0], frame);
      return truthy(a) ? a : eval(*e.args[1], frame);
    }
    case ExprKind::Compare:
      return eval_compare(e, frame);
    case ExprKind::CondExpr:
      if (truthy(eval(*e.args[0], frame))) return eval(*e.args[1], frame);
      if (e.args[2]) return eval(*e.args[2], frame);
      return Value::undefined("the inline if-expression on line " + std::to_string(e.loc.line) +
                              " evaluated to false and no else section was defined");
    case ExprKind::Placeholder:
      return placeholder_ ? *placeholder_ : Value();
  }
  return Value();
}

}  // namespace rl::model::jinja
