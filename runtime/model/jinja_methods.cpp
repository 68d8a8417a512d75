// Attribute, item and method access of the chat-template interpreter, as
// Jinja2's ImmutableSandboxedEnvironment resolves them: `x.name` tries the
// Python attribute (a method) before the dict key, `x[key]` the key before the
// attribute; what is missing is Undefined; methods that mutate are "unsafe"
// (Undefined that raises when used); Python methods not provided here raise
// "unsupported method" when called.
#include <algorithm>

#include "model/jinja_builtins.hpp"
#include "model/jinja_text.hpp"

namespace rl::model::jinja {
namespace {

template <class Set>
bool in_set(std::string_view s, const Set& set) {
  return std::find(std::begin(set), std::end(set), s) != std::end(set);
}
bool one_of(std::string_view s, std::initializer_list<std::string_view> set) { return in_set(s, set); }

Value unsafe(std::string_view type, std::string_view name) {
  return Value::undefined("SecurityError: access to attribute '" + std::string(name) + "' of '" + std::string(type) +
                          "' object is unsafe (templates cannot modify values)");
}

Value missing_attr(const Value& obj, std::string_view name) {
  return Value::undefined("'" + type_name(obj) + " object' has no attribute '" + std::string(name) + "'");
}

Value unsupported_method(std::string_view type, std::string_view name) {
  std::string what = "unsupported method '" + std::string(name) + "' of " + std::string(type);
  return Value::callable(std::string(type) + "." + std::string(name),
                         [what](Evaluator&, CallArgs&) -> Value { throw EvalError(what); });
}

std::optional<std::string> opt_str(std::string_view fn, std::string_view param, const std::optional<Value>& v) {
  if (!v || v->is_none()) return std::nullopt;
  return str_arg(fn, param, *v);
}

// ---- str methods ---------------------------------------------------------------------
bool affix_match(const std::string& s, const Value& affix, bool prefix, std::string_view fn) {
  auto test = [&](const Value& a) {
    const std::string& x = str_arg(fn, "prefix", a);
    if (x.size() > s.size()) return false;
    return prefix ? s.compare(0, x.size(), x) == 0 : s.compare(s.size() - x.size(), x.size(), x) == 0;
  };
  if (affix.is_list() && affix.as_list().is_tuple) {
    for (const auto& a : affix.as_list().items)
      if (test(a)) return true;
    return false;
  }
  return test(affix);
}

bool python_title_cased(char32_t c) { return to_upper(c) != c || to_lower(c) != c; }

std::string python_title(const std::string& s) {  // str.title(): words are runs of cased letters
  std::u32string u = utf8_decode(s);
  bool prev_cased = false;
  for (auto& c : u) {
    const bool cased = python_title_cased(c);
    if (cased) c = prev_cased ? to_lower(c) : to_upper(c);
    prev_cased = cased;
  }
  return utf8_encode(u);
}

template <class Pred>
Value all_chars(const std::string& s, Pred pred) {
  if (s.empty()) return Value::boolean(false);
  for (char32_t c : utf8_decode(s))
    if (!pred(c)) return Value::boolean(false);
  return Value::boolean(true);
}

std::string str_format(const std::string& fmt, CallArgs& args) {
  std::string out;
  size_t auto_index = 0;
  for (size_t i = 0; i < fmt.size(); ++i) {
    const char c = fmt[i];
    if (c == '}') {
      if (i + 1 < fmt.size() && fmt[i + 1] == '}')
        ++i;
      else
        throw EvalError("ValueError: single '}' encountered in format string");
      out.push_back('}');
      continue;
    }
    if (c != '{') {
      out.push_back(c);
      continue;
    }
    if (i + 1 < fmt.size() && fmt[i + 1] == '{') {
      out.push_back('{');
      ++i;
      continue;
    }
    const size_t close = fmt.find('}', i);
    if (close == std::string::npos) throw EvalError("ValueError: single '{' encountered in format string");
    std::string field = fmt.substr(i + 1, close - i - 1);
    i = close;
    char conversion = 0;
    if (const size_t bang = field.find('!'); bang != std::string::npos) {
      if (bang + 2 != field.size()) throw EvalError("unsupported format field '{" + field + "}' in str.format");
      conversion = field.back();
      field.resize(bang);
    }
    if (field.find_first_of(":.[") != std::string::npos)
      throw EvalError("unsupported format field '{" + field + "}' in str.format (format specs, attributes, indexes)");
    const Value* v = nullptr;
    if (field.empty() || std::all_of(field.begin(), field.end(), [](char d) { return d >= '0' && d <= '9'; })) {
      const size_t idx = field.empty() ? auto_index++ : std::stoul(field);
      if (idx >= args.args.size())
        throw EvalError("IndexError: Replacement index " + std::to_string(idx) + " out of range");
      v = &args.args[idx];
    } else {
      for (const auto& [k, kv] : args.kwargs)
        if (k == field) v = &kv;
      if (!v) throw EvalError("KeyError: '" + field + "'");
    }
    if (conversion == 'r')
      out += repr(*v);
    else if (conversion == 's' || conversion == 0)
      append_str(out, *v);
    else
      throw EvalError(std::string("ValueError: Unknown conversion specifier ") + conversion);
  }
  return out;
}

Value call_str_method(const std::string& s, std::string_view name, CallArgs& args) {
  const std::string fn = "str." + std::string(name);
  if (name == "startswith" || name == "endswith") {
    auto a = bind_args(fn, args, {"prefix"}, 1);
    return Value::boolean(affix_match(s, *a[0], name == "startswith", fn));
  }
  if (name == "strip" || name == "lstrip" || name == "rstrip") {
    auto a = bind_args(fn, args, {"chars"});
    return Value(str_strip(s, opt_str(fn, "chars", a[0]), name != "rstrip", name != "lstrip"));
  }
  if (name == "split" || name == "rsplit") {
    auto a = bind_args(fn, args, {"sep", "maxsplit"});
    const int64_t maxsplit = a[1] ? int_arg(fn, "maxsplit", *a[1]) : -1;
    std::vector<Value> parts;
    for (auto& p : str_split(s, opt_str(fn, "sep", a[0]), maxsplit, name == "rsplit")) parts.emplace_back(std::move(p));
    return Value::list(std::move(parts));
  }
  if (name == "splitlines") {
    auto a = bind_args(fn, args, {"keepends"});
    std::vector<Value> parts;
    for (auto& p : str_splitlines(s, a[0] && truthy(*a[0]))) parts.emplace_back(std::move(p));
    return Value::list(std::move(parts));
  }
  if (name == "replace") {
    auto a = bind_args(fn, args, {"old", "new", "count"}, 2);
    return Value(
        str_replace(s, str_arg(fn, "old", *a[0]), str_arg(fn, "new", *a[1]), a[2] ? int_arg(fn, "count", *a[2]) : -1));
  }
  if (one_of(name, {"upper", "lower", "title", "capitalize", "isdigit", "isalpha", "isalnum", "isspace", "islower",
                    "isupper"})) {
    bind_args(fn, args, {});
    if (name == "upper") return Value(str_upper(s));
    if (name == "lower") return Value(str_lower(s));
    if (name == "title") return Value(python_title(s));
    if (name == "capitalize") return Value(str_capitalize(s));
    if (name == "isdigit") return all_chars(s, [](char32_t c) { return c >= '0' && c <= '9'; });
    if (name == "isspace") return all_chars(s, is_py_space);
    if (name == "isalpha") return all_chars(s, [](char32_t c) { return python_title_cased(c); });
    if (name == "isalnum")
      return all_chars(s, [](char32_t c) { return (c >= '0' && c <= '9') || python_title_cased(c); });
    const std::u32string u = utf8_decode(s);
    const bool any_cased = std::any_of(u.begin(), u.end(), python_title_cased);
    const bool ok = std::none_of(u.begin(), u.end(),
                                 [&](char32_t c) { return name == "islower" ? to_lower(c) != c : to_upper(c) != c; });
    return Value::boolean(any_cased && ok);
  }
  if (name == "find" || name == "rfind" || name == "index" || name == "rindex" || name == "count") {
    auto a = bind_args(fn, args, {"sub"}, 1);
    const std::string& sub = str_arg(fn, "sub", *a[0]);
    if (name == "count") return Value::integer(str_count(s, sub));
    const int64_t at = str_find(s, sub, name[0] == 'r');
    if (at < 0 && (name == "index" || name == "rindex")) throw EvalError("ValueError: substring not found");
    return Value::integer(at);
  }
  if (name == "removeprefix" || name == "removesuffix") {
    auto a = bind_args(fn, args, {"affix"}, 1);
    const std::string& x = str_arg(fn, "affix", *a[0]);
    if (name == "removeprefix") return Value(s.compare(0, x.size(), x) == 0 ? s.substr(x.size()) : s);
    const bool ends = x.size() <= s.size() && s.compare(s.size() - x.size(), x.size(), x) == 0;
    return Value(ends ? s.substr(0, s.size() - x.size()) : s);
  }
  if (name == "join") {
    auto a = bind_args(fn, args, {"iterable"}, 1);
    std::string out;
    bool first = true;
    const auto seq = iterate(*a[0]);
    for (const auto& item : seq->items) {
      if (!item.is_string())
        throw EvalError("TypeError: sequence item: expected str instance, " + type_name(item) + " found");
      if (!first) out += s;
      first = false;
      out += item.as_string();
    }
    return Value(std::move(out));
  }
  if (name == "format") return Value(str_format(s, args));
  throw EvalError("unsupported method '" + std::string(name) + "' of str");
}

constexpr std::string_view kStrMethods[] = {"startswith",   "endswith",     "strip",   "lstrip",  "rstrip",  "split",
                                            "rsplit",       "splitlines",   "replace", "upper",   "lower",   "title",
                                            "capitalize",   "isdigit",      "isalpha", "isalnum", "isspace", "islower",
                                            "isupper",      "find",         "rfind",   "index",   "rindex",  "count",
                                            "removeprefix", "removesuffix", "join",    "format"};
constexpr std::string_view kStrOtherMethods[] = {"casefold",   "center",    "encode",       "expandtabs", "format_map",
                                                 "isascii",    "isdecimal", "isidentifier", "isnumeric",  "isprintable",
                                                 "istitle",    "ljust",     "maketrans",    "partition",  "rjust",
                                                 "rpartition", "swapcase",  "translate",    "zfill"};

// ---- dict / list methods ---------------------------------------------------------------
Value call_dict_method(const Value& self, std::string_view name, CallArgs& args) {
  const std::string fn = "dict." + std::string(name);
  const DictData& d = self.as_dict();
  if (name == "get") {
    auto a = bind_args(fn, args, {"key", "default"}, 1);
    const Value* v = a[0]->is_string() ? d.find(a[0]->as_string()) : nullptr;
    return v ? *v : (a[1] ? *a[1] : Value::none());
  }
  bind_args(fn, args, {});
  std::vector<Value> out;
  out.reserve(d.size());
  for (const auto& [k, v] : d.items()) {
    if (name == "keys")
      out.emplace_back(k);
    else if (name == "values")
      out.push_back(v);
    else
      out.push_back(Value::list({Value(k), v}, true));
  }
  return Value::list(std::move(out));
}

Value call_list_method(const Value& self, std::string_view name, CallArgs& args) {
  const std::string fn = "list." + std::string(name);
  auto a = bind_args(fn, args, {"value"}, 1);
  const auto& items = self.as_list().items;
  if (name == "count")
    return Value::integer(std::count_if(items.begin(), items.end(), [&](const Value& v) { return equals(v, *a[0]); }));
  for (size_t i = 0; i < items.size(); ++i)
    if (equals(items[i], *a[0])) return Value::integer(static_cast<int64_t>(i));
  throw EvalError("ValueError: " + repr(*a[0]) + " is not in list");
}

Value bound(const Value& self, std::string_view name, Value (*method)(const Value&, std::string_view, CallArgs&)) {
  std::string n(name);
  return Value::callable(
      type_name(self) + "." + n, [self, n, method](Evaluator&, CallArgs& args) { return method(self, n, args); },
      value_depth(self) + 1);
}

Value loop_attr(const Value& obj, std::string_view name) {
  LoopData& l = obj.as_loop();
  const auto& items = l.items->items;
  const auto n = static_cast<int64_t>(items.size());
  const auto i = static_cast<int64_t>(l.index0);
  if (name == "index") return Value::integer(i + 1);
  if (name == "index0") return Value::integer(i);
  if (name == "revindex") return Value::integer(n - i);
  if (name == "revindex0") return Value::integer(n - i - 1);
  if (name == "first") return Value::boolean(i == 0);
  if (name == "last") return Value::boolean(i == n - 1);
  if (name == "length") return Value::integer(n);
  if (name == "depth") return Value::integer(1);
  if (name == "depth0") return Value::integer(0);
  if (name == "previtem") return i > 0 ? items[l.index0 - 1] : Value::undefined("there is no previous item");
  if (name == "nextitem") return i + 1 < n ? items[l.index0 + 1] : Value::undefined("there is no next item");
  if (name == "cycle") {
    const size_t index0 = l.index0;
    return Value::callable("loop.cycle", [index0](Evaluator&, CallArgs& args) {
      if (args.args.empty()) throw EvalError("TypeError: no items for cycling given");
      return args.args[index0 % args.args.size()];
    });
  }
  if (name == "changed") {
    auto state = obj;  // keeps the loop alive while the bound method is
    return Value::callable(
        "loop.changed",
        [state](Evaluator&, CallArgs& args) {
          Value now = Value::list(args.args, true);
          auto& last = state.as_loop().changed_last;
          if (last && equals(*last, now)) return Value::boolean(false);
          last = std::make_shared<Value>(std::move(now));
          return Value::boolean(true);
        },
        value_depth(obj) + 1);
  }
  return Value::undefined("'LoopContext object' has no attribute '" + std::string(name) + "'");
}

}  // namespace

Value get_attr(const Value& obj, std::string_view name) {
  switch (obj.kind()) {
    case Value::Kind::Undefined:
      throw_undefined(obj);
    case Value::Kind::Dict:
      if (one_of(name, {"items", "keys", "values", "get"})) return bound(obj, name, call_dict_method);
      if (one_of(name, {"clear", "pop", "popitem", "setdefault", "update"})) return unsafe("dict", name);
      if (one_of(name, {"copy", "fromkeys"})) return unsupported_method("dict", name);
      if (const Value* v = obj.as_dict().find(name)) return *v;
      return missing_attr(obj, name);
    case Value::Kind::String:
      if (in_set(name, kStrMethods))
        return bound(obj, name, [](const Value& self, std::string_view n, CallArgs& a) {
          return call_str_method(self.as_string(), n, a);
        });
      if (in_set(name, kStrOtherMethods)) return unsupported_method("str", name);
      return missing_attr(obj, name);
    case Value::Kind::List:
      if (one_of(name, {"index", "count"})) return bound(obj, name, call_list_method);
      if (one_of(name, {"append", "extend", "insert", "pop", "remove", "reverse", "sort", "clear"}))
        return unsafe(type_name(obj), name);
      if (name == "copy") return unsupported_method("list", name);
      return missing_attr(obj, name);
    case Value::Kind::Namespace:
      if (const Value* v = obj.as_namespace().attrs.find(name)) return *v;
      return Value::undefined("'Namespace object' has no attribute '" + std::string(name) + "'");
    case Value::Kind::Loop:
      return loop_attr(obj, name);
    default:
      return missing_attr(obj, name);
  }
}

Value get_item(const Value& obj, const Value& key) {
  switch (obj.kind()) {
    case Value::Kind::Undefined:
      throw_undefined(obj);
    case Value::Kind::Dict:
      if (key.is_string()) {
        if (const Value* v = obj.as_dict().find(key.as_string())) return *v;
        return get_attr(obj, key.as_string());
      }
      return Value::undefined("'dict object' has no element " + repr(key));
    case Value::Kind::List:
    case Value::Kind::String:
      if (key.is_int() || key.is_bool()) {
        int64_t i = key.as_int();
        if (obj.is_string()) {
          if (auto ch = str_index(obj.as_string(), i)) return Value(std::move(*ch));
        } else {
          const auto& items = obj.as_list().items;
          const auto n = static_cast<int64_t>(items.size());
          if (i < 0) i += n;
          if (i >= 0 && i < n) return items[static_cast<size_t>(i)];
        }
        return Value::undefined("'" + type_name(obj) + " object' has no element " + std::to_string(key.as_int()));
      }
      break;
    default:
      break;
  }
  if (key.is_string()) return get_attr(obj, key.as_string());
  return Value::undefined("'" + type_name(obj) + " object' has no element " + repr(key));
}

// Jinja compiles slices to plain Python subscripts (no sandbox getitem), so a
// bad slice raises instead of giving Undefined.
Value get_slice(const Value& obj, const Value& start, const Value& stop, const Value& step) {
  if (obj.is_undefined()) throw_undefined(obj);
  auto bound_of = [](const Value& v) -> std::optional<int64_t> {
    if (v.is_none()) return std::nullopt;
    if (v.is_undefined()) throw_undefined(v);
    if (!v.is_int() && !v.is_bool())
      throw EvalError("TypeError: slice indices must be integers or None or have an __index__ method");
    return v.as_int();
  };
  if (obj.is_dict()) throw EvalError("TypeError: unhashable type: 'slice'");
  if (!obj.is_string() && !obj.is_list())
    throw EvalError("TypeError: '" + type_name(obj) + "' object is not subscriptable");
  const auto b = bound_of(start), e = bound_of(stop), s = bound_of(step);
  if (obj.is_string()) return Value(str_slice(obj.as_string(), b, e, s.value_or(1)));
  const auto& items = obj.as_list().items;
  std::vector<Value> out;
  for (size_t i : slice_indices(items.size(), b, e, s.value_or(1))) out.push_back(items[i]);
  return Value::list(std::move(out), obj.as_list().is_tuple);
}

std::vector<std::optional<Value>> bind_args(std::string_view fn, CallArgs& args,
                                            std::initializer_list<std::string_view> params, size_t required) {
  std::vector<std::optional<Value>> out(params.size());
  if (args.args.size() > params.size())
    throw EvalError("TypeError: " + std::string(fn) + "() takes at most " + std::to_string(params.size()) +
                    " argument(s) (" + std::to_string(args.args.size()) + " given)");
  for (size_t i = 0; i < args.args.size(); ++i) out[i] = std::move(args.args[i]);
  for (auto& [k, v] : args.kwargs) {
    const auto it = std::find(params.begin(), params.end(), k);
    if (it == params.end())
      throw EvalError("TypeError: " + std::string(fn) + "() got an unexpected keyword argument '" + k + "'");
    auto& slot = out[static_cast<size_t>(it - params.begin())];
    if (slot) throw EvalError("TypeError: " + std::string(fn) + "() got multiple values for argument '" + k + "'");
    slot = std::move(v);
  }
  for (size_t i = 0; i < required; ++i)
    if (!out[i])
      throw EvalError("TypeError: " + std::string(fn) + "() missing required argument '" +
                      std::string(*(params.begin() + i)) + "'");
  return out;
}

int64_t int_arg(std::string_view fn, std::string_view param, const Value& v) {
  if (v.is_int() || v.is_bool()) return v.as_int();
  if (v.is_undefined()) throw_undefined(v);
  throw EvalError("TypeError: " + std::string(fn) + "() argument '" + std::string(param) + "' must be int, not " +
                  type_name(v));
}

const std::string& str_arg(std::string_view fn, std::string_view param, const Value& v) {
  if (v.is_string()) return v.as_string();
  if (v.is_undefined()) throw_undefined(v);
  throw EvalError("TypeError: " + std::string(fn) + "() argument '" + std::string(param) + "' must be str, not " +
                  type_name(v));
}

}  // namespace rl::model::jinja
