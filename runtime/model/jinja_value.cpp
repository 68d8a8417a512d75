// Values of the chat-template interpreter: Python's str(), repr(), ==, <,
// truthiness and iteration, as Jinja2 templates observe them (JSON: jinja_json.cpp).
#include "model/jinja_value.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>

#include "model/jinja_text.hpp"

namespace rl::model::jinja {

// ---- containers ------------------------------------------------------------------
const Value* DictData::find(std::string_view key) const {
  if (!index_.empty()) {
    auto it = index_.find(std::string(key));
    return it == index_.end() ? nullptr : &items_[it->second].second;
  }
  for (const auto& [k, v] : items_)
    if (k == key) return &v;
  return nullptr;
}

void DictData::set(std::string key, Value value) {
  constexpr size_t kIndexFrom = 12;  // linear search is faster for the usual small dicts
  if (auto* existing = const_cast<Value*>(find(key))) {
    depth_ = std::max(depth_, value_depth(value) + 1);  // an upper bound after overwrites
    check_depth(depth_);
    *existing = std::move(value);
    return;
  }
  depth_ = std::max(depth_, value_depth(value) + 1);
  check_depth(depth_);
  items_.emplace_back(std::move(key), std::move(value));
  if (items_.size() == kIndexFrom) {
    for (size_t i = 0; i < items_.size(); ++i) index_.emplace(items_[i].first, i);
  } else if (items_.size() > kIndexFrom) {
    index_.emplace(items_.back().first, items_.size() - 1);
  }
}

int value_depth(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::List:
      return v.as_list().depth;
    case Value::Kind::Dict:
      return v.as_dict().depth();
    case Value::Kind::Callable:
      return v.as_callable().depth;
    case Value::Kind::Loop:
      return v.as_loop().items->depth + 1;
    case Value::Kind::Iterator:
      return v.as_iterator().items->depth + 1;
    default:
      return 0;  // namespaces: the evaluator unlinks them after each render
  }
}

void check_depth(int depth) {
  if (depth > kMaxValueDepth) throw EvalError("value nested deeper than " + std::to_string(kMaxValueDepth) + " levels");
}

Value Value::list(std::vector<Value> items, bool is_tuple) {
  auto d = std::make_shared<ListData>();
  for (const auto& item : items) d->depth = std::max(d->depth, value_depth(item) + 1);
  check_depth(d->depth);
  d->items = std::move(items);
  d->is_tuple = is_tuple;
  return list(std::shared_ptr<const ListData>(std::move(d)));
}

Value Value::dict(DictData d) { return dict(std::make_shared<const DictData>(std::move(d))); }

Value Value::callable(std::string name, NativeFn fn, int depth) {
  check_depth(depth);
  Value v;
  v.v_ = std::make_shared<const CallableData>(CallableData{std::move(name), std::move(fn), depth});
  return v;
}

Value Value::iterator(std::vector<Value> items, std::string type_name) {
  auto list = std::make_shared<ListData>();
  for (const auto& item : items) list->depth = std::max(list->depth, value_depth(item) + 1);
  list->items = std::move(items);
  auto it = std::make_shared<IteratorData>();
  it->items = std::move(list);
  it->type_name = std::move(type_name);
  Value v;
  v.v_ = std::move(it);
  return v;
}

const void* Value::identity() const {
  switch (kind()) {
    case Kind::List:
      return list_ptr().get();
    case Kind::Dict:
      return &as_dict();
    case Kind::Namespace:
      return &as_namespace();
    case Kind::Loop:
      return &as_loop();
    case Kind::Callable:
      return &as_callable();
    case Kind::Iterator:
      return &as_iterator();
    default:
      return nullptr;
  }
}

// ---- Python semantics ------------------------------------------------------------------
void throw_undefined(const Value& v) {
  throw EvalError("UndefinedError: " +
                  (v.undefined_hint().empty() ? std::string("value is undefined") : v.undefined_hint()));
}

std::string type_name(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::Undefined:
      return "Undefined";
    case Value::Kind::None:
      return "NoneType";
    case Value::Kind::Bool:
      return "bool";
    case Value::Kind::Int:
      return "int";
    case Value::Kind::Float:
      return "float";
    case Value::Kind::String:
      return "str";
    case Value::Kind::List:
      return v.as_list().is_tuple ? "tuple" : "list";
    case Value::Kind::Dict:
      return "dict";
    case Value::Kind::Namespace:
      return "Namespace";
    case Value::Kind::Loop:
      return "LoopContext";
    case Value::Kind::Callable:
      return "function";
    case Value::Kind::Iterator:
      return v.as_iterator().type_name;
  }
  return "object";
}

bool truthy(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::Undefined:
    case Value::Kind::None:
      return false;
    case Value::Kind::Bool:
      return v.as_bool();
    case Value::Kind::Int:
      return v.as_int() != 0;
    case Value::Kind::Float:
      return v.as_float() != 0.0;
    case Value::Kind::String:
      return !v.as_string().empty();
    case Value::Kind::List:
      return !v.as_list().items.empty();
    case Value::Kind::Dict:
      return v.as_dict().size() != 0;
    default:
      return true;  // namespace, loop, callables, iterators
  }
}

std::string format_float(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d < 0 ? "-inf" : "inf";
  if (d == 0) return std::signbit(d) ? "-0.0" : "0.0";
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof buf, d, std::chars_format::scientific);  // shortest round-trip
  std::string_view sci(buf, static_cast<size_t>(res.ptr - buf));
  std::string out;
  if (sci.front() == '-') {
    out.push_back('-');
    sci.remove_prefix(1);
  }
  const size_t e_pos = sci.find('e');
  std::string digits;
  for (char c : sci.substr(0, e_pos))
    if (c != '.') digits.push_back(c);
  const int exp10 = std::stoi(std::string(sci.substr(e_pos + 1)));
  const int decpt = exp10 + 1;  // digits are 0.d1d2... x 10^decpt
  const auto nd = static_cast<int>(digits.size());
  if (decpt > -4 && decpt <= 16) {  // Python's repr switches to exponent notation outside this range
    if (decpt <= 0) {
      out += "0." + std::string(static_cast<size_t>(-decpt), '0') + digits;
    } else if (decpt < nd) {
      out += digits.substr(0, static_cast<size_t>(decpt)) + "." + digits.substr(static_cast<size_t>(decpt));
    } else {
      out += digits + std::string(static_cast<size_t>(decpt - nd), '0') + ".0";
    }
    return out;
  }
  out += digits.substr(0, 1);
  if (nd > 1) out += "." + digits.substr(1);
  char exp_buf[16];
  std::snprintf(exp_buf, sizeof exp_buf, "e%c%02d", exp10 < 0 ? '-' : '+', std::abs(exp10));
  return out + exp_buf;
}

std::string repr_string(std::string_view s) {
  const bool has_single = s.find('\'') != std::string_view::npos;
  const bool has_double = s.find('"') != std::string_view::npos;
  const char quote = has_single && !has_double ? '"' : '\'';
  std::string out(1, quote);
  for (char32_t c : utf8_decode(s)) {
    if (c == static_cast<char32_t>(quote) || c == '\\') {
      out.push_back('\\');
      out.push_back(static_cast<char>(c));
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (!is_py_printable(c)) {
      char buf[16];
      if (c < 0x100)
        std::snprintf(buf, sizeof buf, "\\x%02x", unsigned(c));
      else if (c < 0x10000)
        std::snprintf(buf, sizeof buf, "\\u%04x", unsigned(c));
      else
        std::snprintf(buf, sizeof buf, "\\U%08x", unsigned(c));
      out += buf;
    } else {
      utf8_append(out, c);
    }
  }
  out.push_back(quote);
  return out;
}

namespace {
std::string callable_text(const Value& v) {
  const std::string& name = v.as_callable().name;
  if (name.rfind("macro ", 0) == 0) return "<Macro " + name.substr(6) + ">";
  throw EvalError("cannot print the function '" + name + "' (Python would print an object address); call it");
}

void append_repr(std::string& out, const Value& v, int depth = 0) {
  if (depth > kMaxValueDepth) throw EvalError("cannot print a value nested deeper than 512 levels");
  switch (v.kind()) {
    case Value::Kind::Undefined:
      out += "Undefined";
      return;
    case Value::Kind::String:
      out += repr_string(v.as_string());
      return;
    case Value::Kind::List: {
      const auto& l = v.as_list();
      out.push_back(l.is_tuple ? '(' : '[');
      for (size_t i = 0; i < l.items.size(); ++i) {
        if (i) out += ", ";
        append_repr(out, l.items[i], depth + 1);
      }
      if (l.is_tuple && l.items.size() == 1) out.push_back(',');
      out.push_back(l.is_tuple ? ')' : ']');
      return;
    }
    case Value::Kind::Dict: {
      out.push_back('{');
      bool first = true;
      for (const auto& [k, item] : v.as_dict().items()) {
        if (!first) out += ", ";
        first = false;
        out += repr_string(k);
        out += ": ";
        append_repr(out, item, depth + 1);
      }
      out.push_back('}');
      return;
    }
    case Value::Kind::Namespace:
      out += "<Namespace ";
      append_repr(out, Value::dict(v.as_namespace().attrs), depth + 1);
      out += ">";
      return;
    default:
      append_str(out, v);
  }
}
}  // namespace

void append_str(std::string& out, const Value& v) {
  switch (v.kind()) {
    case Value::Kind::Undefined:
      return;
    case Value::Kind::None:
      out += "None";
      return;
    case Value::Kind::Bool:
      out += v.as_bool() ? "True" : "False";
      return;
    case Value::Kind::Int:
      out += std::to_string(v.as_int());
      return;
    case Value::Kind::Float:
      out += format_float(v.as_float());
      return;
    case Value::Kind::String:
      out += v.as_string();
      return;
    case Value::Kind::List:
    case Value::Kind::Dict:
      append_repr(out, v);
      return;
    case Value::Kind::Namespace:
      append_repr(out, v);
      return;
    case Value::Kind::Loop: {
      const auto& l = v.as_loop();
      out += "<LoopContext " + std::to_string(l.index0 + 1) + "/" + std::to_string(l.items->items.size()) + ">";
      return;
    }
    case Value::Kind::Callable:
      out += callable_text(v);
      return;
    case Value::Kind::Iterator:
      throw EvalError("cannot print a " + v.as_iterator().type_name +
                      " (Python would print an object address); convert it with '|list'");
  }
}

std::string to_str(const Value& v) {
  if (v.is_string()) return v.as_string();
  std::string out;
  append_str(out, v);
  return out;
}

std::string repr(const Value& v) {
  std::string out;
  append_repr(out, v);
  return out;
}

bool equals(const Value& a, const Value& b) {
  using K = Value::Kind;
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) return a.as_float() == b.as_float();
    return a.as_int() == b.as_int();
  }
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case K::Undefined:
    case K::None:
      return true;
    case K::String:
      return a.as_string() == b.as_string();
    case K::List: {
      const auto &x = a.as_list(), &y = b.as_list();
      if (x.is_tuple != y.is_tuple || x.items.size() != y.items.size()) return false;
      for (size_t i = 0; i < x.items.size(); ++i)
        if (!equals(x.items[i], y.items[i])) return false;
      return true;
    }
    case K::Dict: {
      const auto &x = a.as_dict(), &y = b.as_dict();
      if (x.size() != y.size()) return false;
      for (const auto& [k, v] : x.items()) {
        const Value* other = y.find(k);
        if (!other || !equals(v, *other)) return false;
      }
      return true;
    }
    default:
      return a.identity() == b.identity();
  }
}

int compare(const Value& a, const Value& b, std::string_view op) {
  if (a.is_undefined()) throw_undefined(a);
  if (b.is_undefined()) throw_undefined(b);
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) {
      const double x = a.as_float(), y = b.as_float();
      return x < y ? -1 : x > y ? 1 : 0;
    }
    return a.as_int() < b.as_int() ? -1 : a.as_int() > b.as_int() ? 1 : 0;
  }
  if (a.is_string() && b.is_string()) {
    const int c = a.as_string().compare(b.as_string());  // UTF-8 byte order is code point order
    return c < 0 ? -1 : c > 0 ? 1 : 0;
  }
  if (a.is_list() && b.is_list() && a.as_list().is_tuple == b.as_list().is_tuple) {
    const auto &x = a.as_list().items, &y = b.as_list().items;
    for (size_t i = 0; i < x.size() && i < y.size(); ++i)
      if (!equals(x[i], y[i])) return compare(x[i], y[i], op);
    return x.size() < y.size() ? -1 : x.size() > y.size() ? 1 : 0;
  }
  throw EvalError("TypeError: '" + std::string(op) + "' not supported between instances of '" + type_name(a) +
                  "' and '" + type_name(b) + "'");
}

std::shared_ptr<const ListData> iterate(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::List:
      return v.list_ptr();
    case Value::Kind::Undefined:
      return std::make_shared<const ListData>();
    case Value::Kind::Dict: {
      auto out = std::make_shared<ListData>();
      for (const auto& kv : v.as_dict().items()) out->items.emplace_back(kv.first);
      return out;
    }
    case Value::Kind::String: {
      auto out = std::make_shared<ListData>();
      const std::string& s = v.as_string();
      if (is_ascii(s)) {
        for (char c : s) out->items.emplace_back(std::string(1, c));
      } else {
        for (char32_t c : utf8_decode(s)) {
          std::string ch;
          utf8_append(ch, c);
          out->items.emplace_back(std::move(ch));
        }
      }
      return out;
    }
    case Value::Kind::Iterator: {
      auto& it = v.as_iterator();
      auto out = std::make_shared<ListData>();
      out->items.assign(it.items->items.begin() + static_cast<ptrdiff_t>(it.pos), it.items->items.end());
      out->depth = it.items->depth;
      it.pos = it.items->items.size();  // consumed, as a Python generator
      return out;
    }
    case Value::Kind::Loop:
      return v.as_loop().items;
    default:
      throw EvalError("TypeError: '" + type_name(v) + "' object is not iterable");
  }
}

size_t length(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::Undefined:
      return 0;
    case Value::Kind::String:
      return code_point_count(v.as_string());
    case Value::Kind::List:
      return v.as_list().items.size();
    case Value::Kind::Dict:
      return v.as_dict().size();
    case Value::Kind::Loop:
      return v.as_loop().items->items.size();
    default:
      throw EvalError("TypeError: object of type '" + type_name(v) + "' has no len()");
  }
}

}  // namespace rl::model::jinja
