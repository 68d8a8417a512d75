// Evaluator of the chat-template interpreter (private to runtime/model): runs
// the syntax tree with Jinja2's scoping (a fresh scope per loop iteration,
// macro and with block; `if` and `set` write to the current one), loop
// controls, macros, and guards against runaway templates.
#pragma once
#include <cstddef>
#include <memory>
#include <string>

#include "model/jinja_ast.hpp"

namespace rl::model::jinja {

struct Frame {
  std::shared_ptr<Frame> parent;
  DictData vars;

  const Value* find(std::string_view name) const {
    for (const Frame* f = this; f; f = f->parent.get())
      if (const Value* v = f->vars.find(name)) return v;
    return nullptr;
  }
};

struct Limits {
  size_t max_steps = 10'000'000;        // loop iterations + macro calls + statements per render
  size_t max_output = kMaxStringBytes;  // bytes of any rendered text
  int max_call_depth = 64;              // nested macro calls
  int max_nesting = 400;                // nested statements + expressions being evaluated
};

class Evaluator {
 public:
  Evaluator(const std::string& name, Limits limits = {}) : name_(name), limits_(limits) {}

  // Renders `body` with `context` (the template variables) as the outermost scope.
  std::string render(const Body& body, DictData context);

  ~Evaluator();

  // Calls a template value (macro, global, bound method) with evaluated arguments.
  Value call(const Value& callee, CallArgs& args);
  Value call_macro(const Stmt& s, const std::weak_ptr<Frame>& scope, CallArgs& args);
  // namespace() objects are the only mutable values, so the only way to build a
  // reference cycle or an unbounded chain. The evaluator keeps every one alive
  // for the render and empties them all at its end, so that none is destroyed
  // recursively and no cycle leaks.
  void track(const std::shared_ptr<NamespaceData>& ns) { namespaces_.push_back(ns); }

 private:
  enum class Flow { Normal, Break, Continue };
  using FramePtr = std::shared_ptr<Frame>;

  Flow exec(const Body& body, const FramePtr& frame);
  Flow exec_stmt(const Stmt& s, const FramePtr& frame);
  void exec_for(const Stmt& s, const FramePtr& frame);
  void exec_set(const Stmt& s, const FramePtr& frame);
  void define_macro(const Stmt& s, const FramePtr& frame);
  std::string capture(const Body& body, const FramePtr& frame);
  Value apply_filters(const Expr& chain, Value input, const FramePtr& frame);
  void emit(std::string_view text);
  void step();

  Value eval(const Expr& e, const FramePtr& frame);
  Value eval_inner(const Expr& e, const FramePtr& frame);
  Value eval_compare(const Expr& e, const FramePtr& frame);
  CallArgs eval_args(const Expr& e, size_t first, const FramePtr& frame);
  void assign(const std::vector<std::string>& targets, const Value& value, Frame& frame);

  const std::string& name_;
  Limits limits_;
  std::string* out_ = nullptr;
  FramePtr root_;
  size_t steps_ = 0;
  int call_depth_ = 0;
  int nesting_ = 0;                     // statements + expressions being evaluated (stack guard)
  const Value* placeholder_ = nullptr;  // input of the filter chain being applied
  std::vector<std::shared_ptr<NamespaceData>> namespaces_;
};

}  // namespace rl::model::jinja
