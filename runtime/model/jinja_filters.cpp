// Filters of the chat-template interpreter: Jinja2 3.1's built-in filters that
// chat templates use, with their argument names and quirks (e.g. `"4.2"|int`
// is 4, map/select/reverse return one-shot iterators), and transformers'
// `tojson` (json.dumps with ensure_ascii=False, indent, separators, sort_keys).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "model/jinja_ast.hpp"
#include "model/jinja_builtins.hpp"
#include "model/jinja_text.hpp"

namespace rl::model::jinja {
namespace {

using Args = std::vector<std::optional<Value>>;

void no_args(std::string_view fn, CallArgs& a) { bind_args(fn, a, {}); }

bool flag(const std::optional<Value>& v) { return v && truthy(*v); }

// Jinja's make_attrgetter: "a.b.0" looks up each part with getitem.
Value attr_path(const Value& item, const Value& attribute) {
  if (!attribute.is_string()) return get_item(item, attribute);
  Value cur = item;
  const std::string& path = attribute.as_string();
  size_t start = 0;
  while (true) {
    const size_t dot = path.find('.', start);
    const std::string part = path.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    const bool digits =
        !part.empty() && std::all_of(part.begin(), part.end(), [](char c) { return c >= '0' && c <= '9'; });
    if (cur.is_undefined()) throw_undefined(cur);
    cur = digits ? get_item(cur, Value::integer(std::stoll(part))) : get_item(cur, Value(part));
    if (dot == std::string::npos) return cur;
    start = dot + 1;
  }
}

// Sort key comparison with Jinja's case_sensitive=False lowering of strings.
Value sort_key(const Value& v, bool case_sensitive) {
  return !case_sensitive && v.is_string() ? Value(str_lower(v.as_string())) : v;
}

Value f_length(Evaluator&, const Value& v, CallArgs& a) {
  no_args("length", a);
  return Value::integer(static_cast<int64_t>(length(v)));
}

Value f_string(Evaluator&, const Value& v, CallArgs& a) {
  no_args("string", a);
  return Value(to_str(v));
}

Value f_trim(Evaluator&, const Value& v, CallArgs& a) {
  Args p = bind_args("trim", a, {"chars"});
  std::optional<std::string> chars;
  if (p[0] && !p[0]->is_none()) chars = str_arg("trim", "chars", *p[0]);
  return Value(str_strip(to_str(v), chars, true, true));
}

Value f_tojson(Evaluator&, const Value& v, CallArgs& a) {
  Args p = bind_args("tojson", a, {"ensure_ascii", "indent", "separators", "sort_keys"});
  JsonOptions o;
  o.ensure_ascii = flag(p[0]);
  if (p[1] && !p[1]->is_none()) {
    if (p[1]->is_string())
      o.indent_str = p[1]->as_string(), o.indent = o.indent_str.empty() ? 0 : -1;
    else
      o.indent = static_cast<int>(std::max<int64_t>(0, std::min<int64_t>(int_arg("tojson", "indent", *p[1]), 1 << 20)));
    o.item_sep = ",";  // json.dumps: separators default to (',', ': ') when indenting
  }
  if (p[2] && !p[2]->is_none()) {
    if (!p[2]->is_list() || p[2]->as_list().items.size() != 2)
      throw EvalError("TypeError: tojson() separators must be a pair of strings");
    o.item_sep = str_arg("tojson", "separators", p[2]->as_list().items[0]);
    o.key_sep = str_arg("tojson", "separators", p[2]->as_list().items[1]);
  }
  o.sort_keys = flag(p[3]);
  std::string out;
  dump_json(out, v, o);
  return Value(std::move(out));
}

Value f_int(Evaluator&, const Value& v, CallArgs& a) {
  Args p = bind_args("int", a, {"default", "base"});
  const Value fallback = p[0] ? *p[0] : Value::integer(0);
  const int base = p[1] ? static_cast<int>(int_arg("int", "base", *p[1])) : 10;
  if (v.is_undefined()) throw_undefined(v);
  if (v.is_int() || v.is_bool()) return Value::integer(v.as_int());
  auto from_double = [&](double d) {
    if (std::isnan(d)) return fallback;
    if (std::isinf(d) || std::fabs(d) >= 9.2e18)
      throw EvalError("OverflowError: cannot convert float to a 64-bit integer");
    return Value::integer(static_cast<int64_t>(std::trunc(d)));
  };
  if (v.is_float()) return from_double(v.as_float());
  if (!v.is_string()) return fallback;
  std::string s = str_strip(v.as_string(), std::nullopt, true, true);
  std::string digits;
  size_t i = (!s.empty() && (s[0] == '+' || s[0] == '-')) ? 1 : 0;
  if (s.size() > i + 1 && s[i] == '0' &&
      ((base == 16 && (s[i + 1] | 0x20) == 'x') || (base == 8 && (s[i + 1] | 0x20) == 'o') ||
       (base == 2 && (s[i + 1] | 0x20) == 'b')))
    i += 2;
  for (; i < s.size(); ++i) {
    if (s[i] == '_' && !digits.empty() && i + 1 < s.size() && s[i + 1] != '_') continue;
    digits.push_back(s[i]);
  }
  if (!digits.empty() && base >= 2 && base <= 36) {
    errno = 0;
    char* end = nullptr;
    const long long n = std::strtoll(digits.c_str(), &end, base);
    const bool all = *end == '\0' && std::isalnum(static_cast<unsigned char>(digits[0]));
    if (all && errno == ERANGE) throw EvalError("OverflowError: '" + s + "' does not fit in a 64-bit integer");
    if (all) return Value::integer(s[0] == '-' ? -n : n);
  }
  char* end = nullptr;  // "4.2"|int is 4: Jinja retries with float()
  const double d = std::strtod(s.c_str(), &end);
  if (!s.empty() && *end == '\0' && s.find_first_of("xX") == std::string::npos) return from_double(d);
  return fallback;
}

Value f_float(Evaluator&, const Value& v, CallArgs& a) {
  Args p = bind_args("float", a, {"default"});
  const Value fallback = p[0] ? *p[0] : Value::floating(0.0);
  if (v.is_undefined()) throw_undefined(v);
  if (v.is_number()) return Value::floating(v.as_float());
  if (!v.is_string()) return fallback;
  std::string s = str_strip(v.as_string(), std::nullopt, true, true);
  s.erase(std::remove(s.begin(), s.end(), '_'), s.end());
  char* end = nullptr;
  const double d = std::strtod(s.c_str(), &end);
  if (s.empty() || *end != '\0' || s.find_first_of("xXpP") != std::string::npos) return fallback;
  return Value::floating(d);
}

Value f_first(Evaluator&, const Value& v, CallArgs& a) {
  no_args("first", a);
  if (v.kind() == Value::Kind::Iterator) {
    auto& it = v.as_iterator();
    if (it.pos < it.items->items.size()) return it.items->items[it.pos++];
  } else {
    const auto items = iterate(v);
    if (!items->items.empty()) return items->items.front();
  }
  return Value::undefined("No first item, sequence was empty.");
}

Value f_last(Evaluator&, const Value& v, CallArgs& a) {
  no_args("last", a);
  if (v.kind() == Value::Kind::Iterator) throw EvalError("TypeError: '" + type_name(v) + "' object is not reversible");
  const auto items = iterate(v);
  if (!items->items.empty()) return items->items.back();
  return Value::undefined("No last item, sequence was empty.");
}

Value f_join(Evaluator&, const Value& v, CallArgs& a) {
  Args p = bind_args("join", a, {"d", "attribute"});
  const std::string sep = p[0] ? to_str(*p[0]) : std::string();
  std::string out;
  bool first = true;
  const auto seq = iterate(v);
  for (const auto& item : seq->items) {
    if (!first) out += sep;
    first = false;
    append_str(out, p[1] && !p[1]->is_none() ? attr_path(item, *p[1]) : item);
  }
  return Value(std::move(out));
}

Value f_default(Evaluator&, const Value& v, CallArgs& a) {
  Args p = bind_args("default", a, {"default_value", "boolean"});
  if (v.is_undefined() || (flag(p[1]) && !truthy(v))) return p[0] ? *p[0] : Value(std::string());
  return v;
}

Value f_upper(Evaluator&, const Value& v, CallArgs& a) {
  no_args("upper", a);
  return Value(str_upper(to_str(v)));
}
Value f_lower(Evaluator&, const Value& v, CallArgs& a) {
  no_args("lower", a);
  return Value(str_lower(to_str(v)));
}
Value f_capitalize(Evaluator&, const Value& v, CallArgs& a) {
  no_args("capitalize", a);
  return Value(str_capitalize(to_str(v)));
}
Value f_title(Evaluator&, const Value& v, CallArgs& a) {
  no_args("title", a);
  return Value(str_title(to_str(v)));
}

Value f_replace(Evaluator&, const Value& v, CallArgs& a) {
  Args p = bind_args("replace", a, {"old", "new", "count"}, 2);
  const int64_t count = p[2] && !p[2]->is_none() ? int_arg("replace", "count", *p[2]) : -1;
  return Value(str_replace(to_str(v), to_str(*p[0]), to_str(*p[1]), count));
}

Value f_list(Evaluator&, const Value& v, CallArgs& a) {
  no_args("list", a);
  if (v.is_list() && !v.as_list().is_tuple) return v;
  return Value::list(iterate(v)->items);
}

Value f_reverse(Evaluator&, const Value& v, CallArgs& a) {
  no_args("reverse", a);
  if (v.is_string()) return Value(str_slice(v.as_string(), std::nullopt, std::nullopt, -1));
  const bool was_iterator = v.kind() == Value::Kind::Iterator;
  std::vector<Value> items = iterate(v)->items;
  std::reverse(items.begin(), items.end());
  if (was_iterator) return Value::list(std::move(items));  // Jinja falls back to a reversed list
  return Value::iterator(std::move(items), v.is_dict() ? "dict_reversekeyiterator" : "list_reverseiterator");
}

Value f_items(Evaluator&, const Value& v, CallArgs& a) {
  no_args("items", a);
  if (v.is_undefined()) return Value::iterator({}, "generator");
  if (!v.is_dict()) throw EvalError("TypeError: Can only get item pairs from a mapping.");
  std::vector<Value> out;
  for (const auto& [k, item] : v.as_dict().items()) out.push_back(Value::list({Value(k), item}, true));
  return Value::iterator(std::move(out), "generator");
}

Value f_dictsort(Evaluator&, const Value& v, CallArgs& a) {
  Args p = bind_args("dictsort", a, {"case_sensitive", "by", "reverse"});
  if (!v.is_dict()) throw EvalError("TypeError: dictsort() needs a mapping, got " + type_name(v));
  const bool by_value = p[1] && p[1]->is_string() && p[1]->as_string() == "value";
  if (p[1] && !(p[1]->is_string() && (p[1]->as_string() == "key" || by_value)))
    throw EvalError("FilterArgumentError: You can only sort by either \"key\" or \"value\"");
  std::vector<Value> pairs;
  for (const auto& [k, item] : v.as_dict().items()) pairs.push_back(Value::list({Value(k), item}, true));
  const bool cs = flag(p[0]), rev = flag(p[2]);
  std::stable_sort(pairs.begin(), pairs.end(), [&](const Value& x, const Value& y) {
    const Value kx = sort_key(x.as_list().items[by_value], cs), ky = sort_key(y.as_list().items[by_value], cs);
    return rev ? compare(ky, kx, "<") < 0 : compare(kx, ky, "<") < 0;
  });
  return Value::list(std::move(pairs));
}

Value f_sort(Evaluator&, const Value& v, CallArgs& a) {
  Args p = bind_args("sort", a, {"reverse", "case_sensitive", "attribute"});
  std::vector<Value> items = iterate(v)->items;
  const bool rev = flag(p[0]), cs = flag(p[1]);
  const bool by_attr = p[2] && !p[2]->is_none();
  auto key = [&](const Value& x) { return sort_key(by_attr ? attr_path(x, *p[2]) : x, cs); };
  std::stable_sort(items.begin(), items.end(), [&](const Value& x, const Value& y) {
    return rev ? compare(key(y), key(x), "<") < 0 : compare(key(x), key(y), "<") < 0;
  });
  return Value::list(std::move(items));
}

Value f_unique(Evaluator&, const Value& v, CallArgs& a) {
  Args p = bind_args("unique", a, {"case_sensitive", "attribute"});
  std::vector<Value> out, seen;
  const auto seq = iterate(v);
  for (const auto& item : seq->items) {
    const Value k = sort_key(p[1] && !p[1]->is_none() ? attr_path(item, *p[1]) : item, flag(p[0]));
    if ((k.is_list() && !k.as_list().is_tuple) || k.is_dict())
      throw EvalError("TypeError: unhashable type: '" + type_name(k) + "'");
    if (std::none_of(seen.begin(), seen.end(), [&](const Value& s) { return equals(s, k); })) {
      seen.push_back(k);
      out.push_back(item);
    }
  }
  return Value::iterator(std::move(out), "generator");
}

Value min_max(const Value& v, CallArgs& a, bool want_max) {
  Args p = bind_args(want_max ? "max" : "min", a, {"case_sensitive", "attribute"});
  const auto items = iterate(v);
  if (items->items.empty()) return Value::undefined("No aggregated item, sequence was empty.");
  auto key = [&](const Value& x) { return sort_key(p[1] && !p[1]->is_none() ? attr_path(x, *p[1]) : x, flag(p[0])); };
  const Value* best = &items->items[0];
  for (const auto& item : items->items) {
    const int c = compare(key(item), key(*best), want_max ? ">" : "<");
    if (want_max ? c > 0 : c < 0) best = &item;
  }
  return *best;
}
Value f_min(Evaluator&, const Value& v, CallArgs& a) { return min_max(v, a, false); }
Value f_max(Evaluator&, const Value& v, CallArgs& a) { return min_max(v, a, true); }

Value f_sum(Evaluator&, const Value& v, CallArgs& a) {
  Args p = bind_args("sum", a, {"attribute", "start"});
  Value total = p[1] ? *p[1] : Value::integer(0);
  const auto seq = iterate(v);
  for (const auto& item : seq->items)
    total = binary_op(BinOp::Add, total, p[0] && !p[0]->is_none() ? attr_path(item, *p[0]) : item);
  return total;
}

Value f_abs(Evaluator&, const Value& v, CallArgs& a) {
  no_args("abs", a);
  if (v.is_float()) return Value::floating(std::fabs(v.as_float()));
  if (v.is_int() || v.is_bool()) return v.as_int() < 0 ? negate(v) : Value::integer(v.as_int());
  if (v.is_undefined()) throw_undefined(v);
  throw EvalError("TypeError: bad operand type for abs(): '" + type_name(v) + "'");
}

Value f_round(Evaluator&, const Value& v, CallArgs& a) {
  Args p = bind_args("round", a, {"precision", "method"});
  const int64_t precision = p[0] ? int_arg("round", "precision", *p[0]) : 0;
  const std::string method = p[1] ? str_arg("round", "method", *p[1]) : "common";
  if (method != "common" && method != "ceil" && method != "floor")
    throw EvalError("FilterArgumentError: method must be common, ceil or floor");
  if (v.is_undefined()) throw_undefined(v);
  if (!v.is_number()) throw EvalError("TypeError: round() needs a number, got " + type_name(v));
  if (method == "common") {
    if (!v.is_float()) return Value::integer(v.as_int());  // round(int, n) stays an int
    if (precision < 0 || precision > 300) throw EvalError("unsupported: round() precision outside 0..300");
    char buf[400];  // printf rounds the exact binary value half-to-even, as Python's round does
    std::snprintf(buf, sizeof buf, "%.*f", static_cast<int>(precision), v.as_float());
    return Value::floating(std::strtod(buf, nullptr));
  }
  const double scale = std::pow(10.0, static_cast<double>(precision));
  const double x = v.as_float() * scale;
  return Value::floating((method == "ceil" ? std::ceil(x) : std::floor(x)) / scale);
}

Value f_center(Evaluator&, const Value& v, CallArgs& a) {
  Args p = bind_args("center", a, {"width"});
  const std::string s = to_str(v);
  const int64_t width = p[0] ? int_arg("center", "width", *p[0]) : 80;
  const auto len = static_cast<int64_t>(code_point_count(s));
  if (width <= len) return Value(s);
  if (width > static_cast<int64_t>(kMaxStringBytes)) throw EvalError("MemoryError: center() width too large");
  const int64_t pad = width - len, left = pad / 2 + (pad & width & 1);  // CPython's pad()
  return Value(std::string(static_cast<size_t>(left), ' ') + s + std::string(static_cast<size_t>(pad - left), ' '));
}

Value f_indent(Evaluator&, const Value& v, CallArgs& a) {
  Args p = bind_args("indent", a, {"width", "first", "blank"});
  std::string indention = "    ";
  if (p[0]) {
    if (p[0]->is_string())
      indention = p[0]->as_string();
    else
      indention =
          std::string(static_cast<size_t>(std::clamp<int64_t>(int_arg("indent", "width", *p[0]), 0, 4096)), ' ');
  }
  if (!v.is_string()) {  // Jinja does `s += "\n"` on the value itself
    if (v.is_undefined()) throw_undefined(v);
    if (v.is_list() && !v.as_list().is_tuple)
      throw EvalError("AttributeError: 'list' object has no attribute 'splitlines'");
    throw EvalError("TypeError: unsupported operand type(s) for +=: '" + type_name(v) + "' and 'str'");
  }
  const std::vector<std::string> lines = str_splitlines(v.as_string() + "\n", false);
  std::string rv;
  if (flag(p[2])) {
    for (size_t i = 0; i < lines.size(); ++i) rv += (i ? "\n" + indention : "") + lines[i];
  } else {
    rv = lines.empty() ? "" : lines[0];
    for (size_t i = 1; i < lines.size(); ++i) rv += "\n" + (lines[i].empty() ? lines[i] : indention + lines[i]);
  }
  return Value(flag(p[1]) ? indention + rv : rv);
}

Value f_escape(Evaluator&, const Value& v, CallArgs& a) {
  no_args("escape", a);
  std::string out;
  for (char c : to_str(v)) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&#34;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out.push_back(c);
    }
  }
  return Value(std::move(out));
}

Value f_safe(Evaluator&, const Value& v, CallArgs& a) {
  no_args("safe", a);
  return Value(to_str(v));
}

Value f_attr(Evaluator&, const Value& v, CallArgs& a) {
  Args p = bind_args("attr", a, {"name"}, 1);
  if (v.is_undefined()) throw_undefined(v);
  const std::string& name = str_arg("attr", "name", *p[0]);
  // Python getattr only: a dict's keys are not attributes (its methods are).
  if (v.is_dict() && name != "items" && name != "keys" && name != "values" && name != "get")
    return Value::undefined("'dict object' has no attribute '" + name + "'");
  return get_attr(v, name);
}

Value f_format(Evaluator&, const Value& v, CallArgs& a) {
  if (!a.args.empty() && !a.kwargs.empty())
    throw EvalError("FilterArgumentError: can't handle positional and keyword arguments at the same time");
  if (!a.kwargs.empty()) {
    DictData d;
    for (auto& [k, x] : a.kwargs) d.set(k, x);
    return Value(percent_format(to_str(v), Value::dict(std::move(d))));
  }
  return Value(percent_format(to_str(v), Value::list(a.args, true)));
}

// map / select / reject / selectattr / rejectattr: generators, as in Jinja.
// Jinja's map/select/reject(attr) yield nothing for a false value (`if value:`),
// whatever it is, and only then look at their arguments.
Value f_map(Evaluator& ev, const Value& v, CallArgs& a) {
  if (!truthy(v)) return Value::iterator({}, "generator");
  const auto items = iterate(v);
  std::vector<Value> out;
  if (a.args.empty()) {
    Args p = bind_args("map", a, {"attribute", "default"});
    if (!p[0]) throw EvalError("FilterArgumentError: map requires a filter argument");
    for (const auto& item : items->items) {
      Value x = attr_path(item, *p[0]);
      out.push_back(x.is_undefined() && p[1] ? *p[1] : std::move(x));
    }
    return Value::iterator(std::move(out), "generator");
  }
  const std::string name = str_arg("map", "filter", a.args[0]);
  const FilterFn fn = find_filter(name);
  if (!fn) throw EvalError("unsupported filter '" + name + "' (in map)");
  for (const auto& item : items->items) {
    CallArgs rest{std::vector<Value>(a.args.begin() + 1, a.args.end()), a.kwargs};
    out.push_back(fn(ev, item, rest));
  }
  return Value::iterator(std::move(out), "generator");
}

Value select_impl(Evaluator& ev, const Value& v, CallArgs& a, bool by_attr, bool keep) {
  const char* fn_name = by_attr ? (keep ? "selectattr" : "rejectattr") : (keep ? "select" : "reject");
  if (!truthy(v)) return Value::iterator({}, "generator");
  size_t next = 0;
  Value attribute;
  if (by_attr) {
    if (a.args.empty()) throw EvalError(std::string("TypeError: ") + fn_name + "() missing the attribute argument");
    attribute = a.args[next++];
  }
  TestFn test = nullptr;
  if (next < a.args.size()) {
    const std::string& name = str_arg(fn_name, "test", a.args[next++]);
    test = find_test(name);
    if (!test) throw EvalError("unsupported test '" + name + "' (in " + fn_name + ")");
  }
  std::vector<Value> out;
  const auto seq = iterate(v);
  for (const auto& item : seq->items) {
    const Value x = by_attr ? attr_path(item, attribute) : item;
    bool ok;
    if (test) {
      CallArgs rest{std::vector<Value>(a.args.begin() + static_cast<ptrdiff_t>(next), a.args.end()), a.kwargs};
      ok = test(ev, x, rest);
    } else {
      ok = truthy(x);
    }
    if (ok == keep) out.push_back(item);
  }
  return Value::iterator(std::move(out), "generator");
}
Value f_select(Evaluator& ev, const Value& v, CallArgs& a) { return select_impl(ev, v, a, false, true); }
Value f_reject(Evaluator& ev, const Value& v, CallArgs& a) { return select_impl(ev, v, a, false, false); }
Value f_selectattr(Evaluator& ev, const Value& v, CallArgs& a) { return select_impl(ev, v, a, true, true); }
Value f_rejectattr(Evaluator& ev, const Value& v, CallArgs& a) { return select_impl(ev, v, a, true, false); }

struct FilterEntry {
  std::string_view name;
  FilterFn fn;
};

const FilterEntry kFilters[] = {
    {"length", f_length},
    {"count", f_length},
    {"string", f_string},
    {"trim", f_trim},
    {"tojson", f_tojson},
    {"int", f_int},
    {"float", f_float},
    {"first", f_first},
    {"last", f_last},
    {"join", f_join},
    {"default", f_default},
    {"d", f_default},
    {"upper", f_upper},
    {"lower", f_lower},
    {"capitalize", f_capitalize},
    {"title", f_title},
    {"replace", f_replace},
    {"list", f_list},
    {"reverse", f_reverse},
    {"items", f_items},
    {"dictsort", f_dictsort},
    {"sort", f_sort},
    {"unique", f_unique},
    {"min", f_min},
    {"max", f_max},
    {"sum", f_sum},
    {"abs", f_abs},
    {"round", f_round},
    {"center", f_center},
    {"indent", f_indent},
    {"escape", f_escape},
    {"e", f_escape},
    {"forceescape", f_escape},
    {"safe", f_safe},
    {"attr", f_attr},
    {"format", f_format},
    {"map", f_map},
    {"select", f_select},
    {"reject", f_reject},
    {"selectattr", f_selectattr},
    {"rejectattr", f_rejectattr},
};

constexpr std::string_view kJinjaOnlyFilters[] = {"batch",     "filesizeformat", "groupby",  "pprint",    "random",
                                                  "slice",     "striptags",      "truncate", "urlencode", "urlize",
                                                  "wordcount", "wordwrap",       "xmlattr"};

}  // namespace

FilterFn find_filter(std::string_view name) {
  for (const auto& f : kFilters)
    if (f.name == name) return f.fn;
  return nullptr;
}

bool is_jinja_filter(std::string_view name) {
  return find_filter(name) ||
         std::find(std::begin(kJinjaOnlyFilters), std::end(kJinjaOnlyFilters), name) != std::end(kJinjaOnlyFilters);
}

}  // namespace rl::model::jinja
