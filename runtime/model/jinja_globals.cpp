// Tests (`x is defined`), template globals (range, namespace, dict,
// raise_exception, strftime_now) and Python's `str % args` for the
// chat-template interpreter.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <ctime>

#include "model/jinja_ast.hpp"
#include "model/jinja_builtins.hpp"
#include "model/jinja_eval.hpp"
#include "model/jinja_text.hpp"

namespace rl::model::jinja {
namespace {

// ---- tests --------------------------------------------------------------------------------
const Value& one_arg(std::string_view test, CallArgs& args) {
  auto a = bind_args(test, args, {"other"}, 1);
  args.args.assign(1, std::move(*a[0]));
  args.kwargs.clear();
  return args.args[0];
}

Value mod2(const Value& v) {
  if (v.is_undefined()) throw_undefined(v);
  if (!v.is_number()) throw EvalError("TypeError: odd/even test needs a number, got " + type_name(v));
  return binary_op(BinOp::Mod, v, Value::integer(2));
}

bool same_object(const Value& a, const Value& b) {  // Python `is`, for the values a template can hold
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case Value::Kind::Undefined:
      return false;
    case Value::Kind::None:
      return true;
    case Value::Kind::Bool:
      return a.as_bool() == b.as_bool();
    case Value::Kind::Int:
      return a.as_int() == b.as_int() && a.as_int() >= -5 && a.as_int() <= 256;  // small-int cache
    case Value::Kind::String:
    case Value::Kind::Float:
      return false;
    default:
      return a.identity() == b.identity();
  }
}

// Tests are predicates over the value (and one argument for the comparing ones);
// the templates below check the argument count like Python would.
template <bool (*Pred)(const Value&)>
bool unary(Evaluator&, const Value& v, CallArgs& a) {
  bind_args("test", a, {});
  return Pred(v);
}

template <bool (*Pred)(const Value&, const Value&)>
bool binary(Evaluator&, const Value& v, CallArgs& a) {
  return Pred(v, one_arg("test", a));
}

using K = Value::Kind;
bool t_defined(const Value& v) { return !v.is_undefined(); }
bool t_undefined(const Value& v) { return v.is_undefined(); }
bool t_none(const Value& v) { return v.is_none(); }
bool t_boolean(const Value& v) { return v.is_bool(); }
bool t_true(const Value& v) { return v.is_bool() && v.as_bool(); }
bool t_false(const Value& v) { return v.is_bool() && !v.as_bool(); }
bool t_integer(const Value& v) { return v.is_int(); }
bool t_float(const Value& v) { return v.is_float(); }
bool t_number(const Value& v) { return v.is_number(); }
bool t_string(const Value& v) { return v.is_string(); }
bool t_mapping(const Value& v) { return v.is_dict(); }
bool t_iterable(const Value& v) {
  return v.is_string() || v.is_list() || v.is_dict() || v.is_undefined() || v.kind() == K::Iterator ||
         v.kind() == K::Loop;
}
bool t_sequence(const Value& v) { return v.is_string() || v.is_list() || v.is_dict() || v.is_undefined(); }
bool t_callable(const Value& v) {  // Jinja's Undefined and LoopContext define __call__
  return v.kind() == K::Callable || v.is_undefined() || v.kind() == K::Loop;
}
bool t_escaped(const Value&) { return false; }  // no Markup values here
bool t_odd(const Value& v) { return equals(mod2(v), Value::integer(1)); }
bool t_even(const Value& v) { return equals(mod2(v), Value::integer(0)); }
bool t_lower(const Value& v) {
  const std::string s = to_str(v);
  return str_lower(s) == s && str_upper(s) != s;
}
bool t_upper(const Value& v) {
  const std::string s = to_str(v);
  return str_upper(s) == s && str_lower(s) != s;
}
bool t_filter(const Value& v) { return v.is_string() && find_filter(v.as_string()) != nullptr; }
bool t_test(const Value& v);
bool t_divisibleby(const Value& v, const Value& n) {
  if (v.is_undefined()) throw_undefined(v);
  return equals(binary_op(BinOp::Mod, v, n), Value::integer(0));
}
bool t_in(const Value& v, const Value& seq) { return contains(seq, v); }
bool t_eq(const Value& v, const Value& o) { return equals(v, o); }
bool t_ne(const Value& v, const Value& o) { return !equals(v, o); }
bool t_lt(const Value& v, const Value& o) { return compare(v, o, "<") < 0; }
bool t_le(const Value& v, const Value& o) { return compare(v, o, "<=") <= 0; }
bool t_gt(const Value& v, const Value& o) { return compare(v, o, ">") > 0; }
bool t_ge(const Value& v, const Value& o) { return compare(v, o, ">=") >= 0; }

struct TestEntry {
  std::string_view name;
  TestFn fn;
};

const TestEntry kTests[] = {
    {"defined", unary<t_defined>},
    {"undefined", unary<t_undefined>},
    {"none", unary<t_none>},
    {"boolean", unary<t_boolean>},
    {"true", unary<t_true>},
    {"false", unary<t_false>},
    {"integer", unary<t_integer>},
    {"float", unary<t_float>},
    {"number", unary<t_number>},
    {"string", unary<t_string>},
    {"mapping", unary<t_mapping>},
    {"iterable", unary<t_iterable>},
    {"sequence", unary<t_sequence>},
    {"callable", unary<t_callable>},
    {"escaped", unary<t_escaped>},
    {"odd", unary<t_odd>},
    {"even", unary<t_even>},
    {"lower", unary<t_lower>},
    {"upper", unary<t_upper>},
    {"filter", unary<t_filter>},
    {"test", unary<t_test>},
    {"divisibleby", binary<t_divisibleby>},
    {"sameas", binary<same_object>},
    {"in", binary<t_in>},
    {"eq", binary<t_eq>},
    {"equalto", binary<t_eq>},
    {"ne", binary<t_ne>},
    {"lt", binary<t_lt>},
    {"lessthan", binary<t_lt>},
    {"le", binary<t_le>},
    {"gt", binary<t_gt>},
    {"greaterthan", binary<t_gt>},
    {"ge", binary<t_ge>},
};

bool t_test(const Value& v) { return v.is_string() && find_test(v.as_string()) != nullptr; }

// ---- globals --------------------------------------------------------------------------------
Value range_fn(Evaluator&, CallArgs& args) {
  if (!args.kwargs.empty()) throw EvalError("TypeError: range() takes no keyword arguments");
  if (args.args.empty() || args.args.size() > 3)
    throw EvalError("TypeError: range expected 1 to 3 arguments, got " + std::to_string(args.args.size()));
  int64_t start = 0, stop = 0, step = 1;
  if (args.args.size() == 1) {
    stop = int_arg("range", "stop", args.args[0]);
  } else {
    start = int_arg("range", "start", args.args[0]);
    stop = int_arg("range", "stop", args.args[1]);
    if (args.args.size() == 3) step = int_arg("range", "step", args.args[2]);
  }
  if (step == 0) throw EvalError("ValueError: range() arg 3 must not be zero");
  const long double span = step > 0 ? (long double)stop - start : (long double)start - stop;
  const long double count = span <= 0 ? 0 : std::ceil(span / std::abs((long double)step));
  if (count > 100000)  // the sandbox's MAX_RANGE
    throw EvalError("OverflowError: Range too big. The sandbox blocks ranges larger than MAX_RANGE (100000).");
  std::vector<Value> items;
  for (int64_t i = 0, v = start; i < (int64_t)count; ++i, v += step) items.push_back(Value::integer(v));
  return Value::list(std::move(items));
}

DictData dict_from_args(std::string_view fn, CallArgs& args) {
  DictData d;
  if (args.args.size() > 1)
    throw EvalError("TypeError: " + std::string(fn) + "() expected at most 1 positional argument");
  if (!args.args.empty()) {
    const Value& src = args.args[0];
    if (src.is_dict()) {
      for (const auto& [k, v] : src.as_dict().items()) d.set(k, v);
    } else {
      const auto seq = iterate(src);
      for (const auto& pair : seq->items) {
        if (!pair.is_list() || pair.as_list().items.size() != 2 || !pair.as_list().items[0].is_string())
          throw EvalError("TypeError: " + std::string(fn) + "() needs a dict or (str, value) pairs");
        d.set(pair.as_list().items[0].as_string(), pair.as_list().items[1]);
      }
    }
  }
  for (auto& [k, v] : args.kwargs) d.set(k, std::move(v));
  return d;
}

Value namespace_fn(Evaluator& ev, CallArgs& args) {
  auto ns = std::make_shared<NamespaceData>();
  ns->attrs = dict_from_args("namespace", args);
  ev.track(ns);
  return Value::ns(std::move(ns));
}

Value dict_fn(Evaluator&, CallArgs& args) { return Value::dict(dict_from_args("dict", args)); }

Value raise_exception_fn(Evaluator&, CallArgs& args) {
  auto a = bind_args("raise_exception", args, {"message"}, 1);
  throw RaisedError(to_str(*a[0]));
}

Value strftime_now_fn(Evaluator&, CallArgs& args) {
  auto a = bind_args("strftime_now", args, {"format"}, 1);
  const std::string& fmt = str_arg("strftime_now", "format", *a[0]);
  const std::time_t now = std::time(nullptr);
  std::tm local{};
  localtime_r(&now, &local);
  for (size_t cap = 256; cap <= (size_t(1) << 20); cap *= 4) {
    std::string buf(cap, '\0');
    const size_t n = std::strftime(buf.data(), buf.size(), fmt.c_str(), &local);
    if (n > 0 || fmt.empty()) return Value(buf.substr(0, n));
  }
  return Value(std::string());  // a format that renders to nothing (e.g. "%p" in some locales)
}

}  // namespace

TestFn find_test(std::string_view name) {
  for (const auto& t : kTests)
    if (t.name == name) return t.fn;
  return nullptr;
}

bool is_jinja_test(std::string_view name) {
  return find_test(name) != nullptr;  // every Jinja2 test is provided
}

Value global(std::string_view name) {
  static const Value range = Value::callable("range", range_fn);
  static const Value ns = Value::callable("namespace", namespace_fn);
  static const Value dict = Value::callable("dict", dict_fn);
  static const Value raise = Value::callable("raise_exception", raise_exception_fn);
  static const Value strftime = Value::callable("strftime_now", strftime_now_fn);
  if (name == "range") return range;
  if (name == "namespace") return ns;
  if (name == "dict") return dict;
  if (name == "raise_exception") return raise;
  if (name == "strftime_now") return strftime;
  if (name == "lipsum" || name == "cycler" || name == "joiner")
    return Value::undefined("'" + std::string(name) + "' is undefined (the Jinja global is not supported here)");
  return Value::undefined("'" + std::string(name) + "' is undefined");
}

// ---- str % args ----------------------------------------------------------------------------
std::string percent_format(const std::string& fmt, const Value& args) {
  std::vector<Value> positional;
  const DictData* mapping = nullptr;
  bool mapping_like = false;  // Python skips the "all arguments converted" check for these
  if (args.is_list() && args.as_list().is_tuple) {
    positional = args.as_list().items;
  } else {
    positional.push_back(args);
    if (args.is_dict()) mapping = &args.as_dict();
    mapping_like = args.is_dict() || args.is_list() || args.is_undefined();  // anything subscriptable
  }
  size_t next = 0;
  std::string out;
  for (size_t i = 0; i < fmt.size(); ++i) {
    if (fmt[i] != '%') {
      out.push_back(fmt[i]);
      continue;
    }
    if (++i >= fmt.size()) throw EvalError("ValueError: incomplete format");
    const Value* arg = nullptr;
    if (fmt[i] == '(') {
      const size_t close = fmt.find(')', i);
      if (!mapping || close == std::string::npos) throw EvalError("TypeError: format requires a mapping");
      const std::string key = fmt.substr(i + 1, close - i - 1);
      arg = mapping->find(key);
      if (!arg) throw EvalError("KeyError: '" + key + "'");
      i = close + 1;
    }
    std::string spec = "%";
    while (i < fmt.size() && std::string_view("-+ 0#").find(fmt[i]) != std::string_view::npos) spec += fmt[i++];
    while (i < fmt.size() && fmt[i] >= '0' && fmt[i] <= '9') spec += fmt[i++];
    if (i < fmt.size() && fmt[i] == '.') {
      spec += fmt[i++];
      while (i < fmt.size() && fmt[i] >= '0' && fmt[i] <= '9') spec += fmt[i++];
    }
    if (i >= fmt.size()) throw EvalError("ValueError: incomplete format");
    const char conv = fmt[i];
    if (conv == '%') {
      out.push_back('%');
      continue;
    }
    if (!arg) {
      if (next >= positional.size()) throw EvalError("TypeError: not enough arguments for format string");
      arg = &positional[next++];
    }
    auto c_format = [&](const std::string& f, auto value) {  // snprintf into a string of the right size
      const int n = std::snprintf(nullptr, 0, f.c_str(), value);
      std::string buf(static_cast<size_t>(std::max(n, 0)) + 1, '\0');
      std::snprintf(buf.data(), buf.size(), f.c_str(), value);
      buf.resize(static_cast<size_t>(std::max(n, 0)));
      return buf;
    };
    if (spec.size() > 8 || spec.find('#') != std::string::npos)
      throw EvalError("unsupported construct: '%" + spec.substr(1) + conv + "' (the '#' flag or a width above 999)");
    if (conv == 's' || conv == 'r') {
      if (spec.size() > 1)
        throw EvalError("unsupported construct: width/precision in '%" + spec.substr(1) + conv + "'");
      out += conv == 's' ? to_str(*arg) : repr(*arg);
    } else if (std::string_view("dioxXu").find(conv) != std::string_view::npos) {
      if (!arg->is_number())
        throw EvalError(std::string("TypeError: %") + conv + " format: a real number is required, not " +
                        type_name(*arg));
      const bool radix = conv == 'o' || conv == 'x' || conv == 'X';
      if (arg->is_float() && radix)
        throw EvalError(std::string("TypeError: %") + conv + " format: an integer is required, not float");
      const long long v = arg->is_float() ? static_cast<long long>(std::trunc(arg->as_float())) : arg->as_int();
      const std::string f = spec + "ll" + (radix ? conv : 'd');
      if (radix && v < 0) {  // Python writes -ff where C writes the two's complement
        if (spec.size() > 1)
          throw EvalError("unsupported construct: flags or width with a negative '%" + std::string(1, conv) + "'");
        out += "-" + c_format(f, static_cast<unsigned long long>(-(v + 1)) + 1);
      } else {
        out += c_format(f, v);
      }
    } else if (std::string_view("feEgG").find(conv) != std::string_view::npos) {
      if (!arg->is_number()) throw EvalError("TypeError: must be real number, not " + type_name(*arg));
      out += c_format(spec + conv, arg->as_float());
    } else {
      throw EvalError(std::string("unsupported construct: '%") + conv + "' in string formatting");
    }
  }
  if (!mapping_like && next < positional.size())
    throw EvalError("TypeError: not all arguments converted during string formatting");
  return out;
}

}  // namespace rl::model::jinja
