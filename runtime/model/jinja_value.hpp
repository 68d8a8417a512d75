// Values of the chat-template interpreter (private to runtime/model).
// Python semantics as Jinja2 sees them: int/float/bool/None/str, lists and tuples,
// insertion-ordered dicts, Jinja's Undefined, namespace() objects, the loop
// object, callables (globals, filters bound as methods, macros) and one-shot
// iterators (what Jinja's map/select/reverse filters return).
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <variant>
#include <vector>

namespace rl::model::jinja {

// A failure while evaluating, without a location yet: the evaluator adds
// "<name>:<line>:<col>: " at the innermost expression that raised it.
class EvalError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// raise_exception(msg) from a template: propagates with exactly `msg`, as
// transformers' TemplateError does.
class RaisedError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class Value;
class Evaluator;

// Containers know how deeply they nest, so that templates cannot build values
// whose destruction, printing or comparison would recurse past the C++ stack.
constexpr int kMaxValueDepth = 512;

struct ListData {
  std::vector<Value> items;
  bool is_tuple = false;
  int depth = 1;  // 1 + the deepest item's depth (see value_depth)
};

// Python dict with string keys, in insertion order (HF templates print tool
// schemas with tojson and rely on that order).
class DictData {
 public:
  const Value* find(std::string_view key) const;
  void set(std::string key, Value value);  // insert or overwrite (keeps position)
  const std::vector<std::pair<std::string, Value>>& items() const { return items_; }
  size_t size() const { return items_.size(); }
  int depth() const { return depth_; }

 private:
  std::vector<std::pair<std::string, Value>> items_;
  int depth_ = 1;
  std::unordered_map<std::string, size_t> index_;  // built once the dict grows past a few keys
};

// namespace(...) objects: the one mutable value (`{% set ns.attr = ... %}`).
struct NamespaceData {
  DictData attrs;
};

// Jinja's LoopContext: one per loop, advanced in place each iteration.
struct LoopData {
  std::shared_ptr<const ListData> items;
  size_t index0 = 0;
  std::shared_ptr<Value> changed_last;  // loop.changed() state
};

struct CallArgs {
  std::vector<Value> args;
  std::vector<std::pair<std::string, Value>> kwargs;
};

using NativeFn = std::function<Value(Evaluator&, CallArgs&)>;

struct CallableData {
  std::string name;  // "namespace", "raise_exception", "str.startswith", "macro 'm'"
  NativeFn fn;
  int depth = 1;  // bound methods: 1 + the depth of the value they hold
};

// A generator / reverse iterator: its items are materialised, but it can be
// consumed only once, has no len() and is always true, as in Python.
struct IteratorData {
  std::shared_ptr<const ListData> items;
  size_t pos = 0;
  std::string type_name;  // "generator", "list_reverseiterator"
};

class Value {
 public:
  enum class Kind : uint8_t {
    Undefined,
    None,
    Bool,
    Int,
    Float,
    String,
    List,
    Dict,
    Namespace,
    Loop,
    Callable,
    Iterator
  };

  Value() = default;  // undefined
  Value(std::string s) : v_(std::move(s)) {}
  Value(const char* s) : v_(std::string(s)) {}
  Value(std::string_view s) : v_(std::string(s)) {}

  static Value undefined(std::string hint) {
    Value v;
    v.v_ = UndefinedData{std::move(hint)};
    return v;
  }
  static Value none() {
    Value v;
    v.v_ = nullptr;
    return v;
  }
  static Value boolean(bool b) {
    Value v;
    v.v_ = b;
    return v;
  }
  static Value integer(int64_t i) {
    Value v;
    v.v_ = i;
    return v;
  }
  static Value floating(double d) {
    Value v;
    v.v_ = d;
    return v;
  }
  static Value list(std::vector<Value> items, bool is_tuple = false);
  static Value list(std::shared_ptr<const ListData> data) {
    Value v;
    v.v_ = std::move(data);
    return v;
  }
  static Value dict(DictData d);
  static Value dict(std::shared_ptr<const DictData> d) {
    Value v;
    v.v_ = std::move(d);
    return v;
  }
  static Value ns(std::shared_ptr<NamespaceData> n) {
    Value v;
    v.v_ = std::move(n);
    return v;
  }
  static Value loop(std::shared_ptr<LoopData> l) {
    Value v;
    v.v_ = std::move(l);
    return v;
  }
  static Value callable(std::string name, NativeFn fn, int depth = 1);
  static Value iterator(std::vector<Value> items, std::string type_name);

  Kind kind() const { return static_cast<Kind>(v_.index()); }
  bool is_undefined() const { return kind() == Kind::Undefined; }
  bool is_none() const { return kind() == Kind::None; }
  bool is_bool() const { return kind() == Kind::Bool; }
  bool is_int() const { return kind() == Kind::Int; }
  bool is_float() const { return kind() == Kind::Float; }
  bool is_number() const { return is_int() || is_float() || is_bool(); }  // bool is an int in Python
  bool is_string() const { return kind() == Kind::String; }
  bool is_list() const { return kind() == Kind::List; }
  bool is_dict() const { return kind() == Kind::Dict; }

  const std::string& undefined_hint() const { return std::get<UndefinedData>(v_).hint; }
  bool as_bool() const { return std::get<bool>(v_); }
  int64_t as_int() const { return is_bool() ? int64_t(as_bool()) : std::get<int64_t>(v_); }  // bool or int
  double as_float() const { return is_float() ? std::get<double>(v_) : double(as_int()); }   // any number
  const std::string& as_string() const { return std::get<std::string>(v_); }
  const ListData& as_list() const { return *std::get<std::shared_ptr<const ListData>>(v_); }
  const std::shared_ptr<const ListData>& list_ptr() const { return std::get<std::shared_ptr<const ListData>>(v_); }
  const DictData& as_dict() const { return *std::get<std::shared_ptr<const DictData>>(v_); }
  NamespaceData& as_namespace() const { return *std::get<std::shared_ptr<NamespaceData>>(v_); }
  const std::shared_ptr<NamespaceData>& namespace_ptr() const { return std::get<std::shared_ptr<NamespaceData>>(v_); }
  LoopData& as_loop() const { return *std::get<std::shared_ptr<LoopData>>(v_); }
  const CallableData& as_callable() const { return *std::get<std::shared_ptr<const CallableData>>(v_); }
  IteratorData& as_iterator() const { return *std::get<std::shared_ptr<IteratorData>>(v_); }
  // Identity of shared objects (Python `is` for namespace/loop/callables).
  const void* identity() const;

 private:
  struct UndefinedData {
    std::string hint;  // the UndefinedError message raised when it is used
  };
  std::variant<UndefinedData, std::nullptr_t, bool, int64_t, double, std::string, std::shared_ptr<const ListData>,
               std::shared_ptr<const DictData>, std::shared_ptr<NamespaceData>, std::shared_ptr<LoopData>,
               std::shared_ptr<const CallableData>, std::shared_ptr<IteratorData>>
      v_;
};

// ---- Python semantics (jinja_value.cpp) ----------------------------------------
[[noreturn]] void throw_undefined(const Value& v);  // UndefinedError with the value's hint
int value_depth(const Value& v);        // 0 for scalars and namespaces; nesting of containers, bound methods, loops
void check_depth(int depth);            // throws past kMaxValueDepth
std::string type_name(const Value& v);  // Python's: 'str', 'dict', 'NoneType', 'Undefined', ...
bool truthy(const Value& v);
std::string to_str(const Value& v);  // str(v); Undefined is ""
void append_str(std::string& out, const Value& v);
std::string repr(const Value& v);                                  // repr(v), used for list/dict printing
std::string format_float(double d);                                // float.__repr__: 0.1, 1e+16, 1.0, inf
std::string repr_string(std::string_view s);                       // 'it''s' quoting rules of Python
bool equals(const Value& a, const Value& b);                       // ==, with 1 == 1.0 == True
int compare(const Value& a, const Value& b, std::string_view op);  // <0, 0, >0; TypeError for unorderable
// Materialises what `for x in v` iterates over: list items, dict keys, string
// characters, an iterator's remaining items (consuming it), nothing for Undefined.
std::shared_ptr<const ListData> iterate(const Value& v);
size_t length(const Value& v);  // len(v); TypeError where Python has none

// ---- JSON (jinja_json.cpp) --------------------------------------------------------
// JSON in: objects keep their key order when the source is ordered_json.
Value from_json(const nlohmann::json& j);
Value from_json(const nlohmann::ordered_json& j);

// json.dumps(v, ensure_ascii, indent, separators, sort_keys) as transformers' tojson filter.
struct JsonOptions {
  bool ensure_ascii = false;
  int indent = -1;         // -1: None (one line)
  std::string indent_str;  // indent given as a string
  std::string item_sep = ", ";
  std::string key_sep = ": ";
  bool sort_keys = false;
};
void dump_json(std::string& out, const Value& v, const JsonOptions& opts, int depth = 0);

// ---- operators (jinja_ops.cpp) --------------------------------------------------
enum class BinOp : uint8_t;
constexpr size_t kMaxStringBytes = size_t(64) << 20;        // results of `*`, output size
Value binary_op(BinOp op, const Value& a, const Value& b);  // + - * / // % ** ~ with Python rules
Value negate(const Value& v);                               // unary -
Value unary_plus(const Value& v);                           // unary +
bool contains(const Value& container, const Value& item);   // `item in container`

}  // namespace rl::model::jinja
