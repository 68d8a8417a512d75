// JSON in and out for the chat-template interpreter: the render context (from
// nlohmann::json or ordered_json, keeping key order) and transformers' tojson,
// i.e. Python's json.dumps(ensure_ascii, indent, separators, sort_keys).
#include <algorithm>
#include <cmath>
#include <cstdio>

#include "model/jinja_text.hpp"
#include "model/jinja_value.hpp"

namespace rl::model::jinja {

namespace {
constexpr int kMaxJsonDepth = 512;

template <class Json>
Value from_json_at(const Json& j, int depth) {
  if (depth > kMaxJsonDepth) throw EvalError("JSON input nested deeper than 512 levels");
  switch (j.type()) {
    case nlohmann::json::value_t::null:
      return Value::none();
    case nlohmann::json::value_t::boolean:
      return Value::boolean(j.template get<bool>());
    case nlohmann::json::value_t::number_integer:
      return Value::integer(j.template get<int64_t>());
    case nlohmann::json::value_t::number_unsigned: {
      const auto u = j.template get<uint64_t>();
      if (u > static_cast<uint64_t>(INT64_MAX))
        throw EvalError("JSON integer " + std::to_string(u) + " exceeds 64 bits");
      return Value::integer(static_cast<int64_t>(u));
    }
    case nlohmann::json::value_t::number_float:
      return Value::floating(j.template get<double>());
    case nlohmann::json::value_t::string:
      return Value(j.template get_ref<const std::string&>());
    case nlohmann::json::value_t::array: {
      std::vector<Value> items;
      items.reserve(j.size());
      for (const auto& e : j) items.push_back(from_json_at(e, depth + 1));
      return Value::list(std::move(items));
    }
    case nlohmann::json::value_t::object: {
      DictData d;
      for (auto it = j.begin(); it != j.end(); ++it) d.set(it.key(), from_json_at(it.value(), depth + 1));
      return Value::dict(std::move(d));
    }
    default:
      throw EvalError("unsupported JSON value (binary or discarded) in the template context");
  }
}

void dump_json_string(std::string& out, std::string_view s, bool ensure_ascii) {
  out.push_back('"');
  auto escape_u = [&](unsigned c) {
    char buf[16];
    std::snprintf(buf, sizeof buf, "\\u%04x", c);
    out += buf;
  };
  for (size_t i = 0; i < s.size(); ++i) {
    const auto c = static_cast<unsigned char>(s[i]);
    switch (c) {
      case '"':
        out += "\\\"";
        continue;
      case '\\':
        out += "\\\\";
        continue;
      case '\n':
        out += "\\n";
        continue;
      case '\r':
        out += "\\r";
        continue;
      case '\t':
        out += "\\t";
        continue;
      case '\b':
        out += "\\b";
        continue;
      case '\f':
        out += "\\f";
        continue;
      default:
        break;
    }
    if (c < 0x20 || (ensure_ascii && c == 0x7F)) {
      escape_u(c);
    } else if (c >= 0x80 && ensure_ascii) {
      size_t j = i + 1;
      while (j < s.size() && (static_cast<unsigned char>(s[j]) & 0xC0) == 0x80) ++j;
      for (char32_t cp : utf8_decode(s.substr(i, j - i))) {
        if (cp >= 0x10000) {
          escape_u(0xD800 + ((cp - 0x10000) >> 10));
          escape_u(0xDC00 + ((cp - 0x10000) & 0x3FF));
        } else {
          escape_u(cp);
        }
      }
      i = j - 1;
    } else {
      out.push_back(static_cast<char>(c));
    }
  }
  out.push_back('"');
}

void newline_indent(std::string& out, const JsonOptions& o, int depth) {
  out.push_back('\n');
  if (!o.indent_str.empty()) {
    for (int i = 0; i < depth; ++i) out += o.indent_str;
  } else {
    out.append(static_cast<size_t>(o.indent) * static_cast<size_t>(depth), ' ');
  }
}
}  // namespace

Value from_json(const nlohmann::json& j) { return from_json_at(j, 0); }
Value from_json(const nlohmann::ordered_json& j) { return from_json_at(j, 0); }

void dump_json(std::string& out, const Value& v, const JsonOptions& o, int depth) {
  if (depth > kMaxJsonDepth) throw EvalError("ValueError: tojson: value nested deeper than 512 levels");
  const bool pretty = o.indent >= 0 || !o.indent_str.empty();
  switch (v.kind()) {
    case Value::Kind::None:
      out += "null";
      return;
    case Value::Kind::Bool:
      out += v.as_bool() ? "true" : "false";
      return;
    case Value::Kind::Int:
      out += std::to_string(v.as_int());
      return;
    case Value::Kind::Float: {
      const double d = v.as_float();
      out += std::isnan(d) ? "NaN" : std::isinf(d) ? (d < 0 ? "-Infinity" : "Infinity") : format_float(d);
      return;
    }
    case Value::Kind::String:
      dump_json_string(out, v.as_string(), o.ensure_ascii);
      return;
    case Value::Kind::List: {
      const auto& items = v.as_list().items;
      if (items.empty()) {
        out += "[]";
        return;
      }
      out.push_back('[');
      for (size_t i = 0; i < items.size(); ++i) {
        if (i) out += o.item_sep;
        if (pretty) newline_indent(out, o, depth + 1);
        dump_json(out, items[i], o, depth + 1);
      }
      if (pretty) newline_indent(out, o, depth);
      out.push_back(']');
      return;
    }
    case Value::Kind::Dict: {
      std::vector<const std::pair<std::string, Value>*> entries;
      for (const auto& kv : v.as_dict().items()) entries.push_back(&kv);
      if (entries.empty()) {
        out += "{}";
        return;
      }
      if (o.sort_keys)
        std::stable_sort(entries.begin(), entries.end(), [](auto* a, auto* b) { return a->first < b->first; });
      out.push_back('{');
      for (size_t i = 0; i < entries.size(); ++i) {
        if (i) out += o.item_sep;
        if (pretty) newline_indent(out, o, depth + 1);
        dump_json_string(out, entries[i]->first, o.ensure_ascii);
        out += o.key_sep;
        dump_json(out, entries[i]->second, o, depth + 1);
      }
      if (pretty) newline_indent(out, o, depth);
      out.push_back('}');
      return;
    }
    default:
      throw EvalError("TypeError: Object of type " + type_name(v) + " is not JSON serializable");
  }
}

}  // namespace rl::model::jinja
