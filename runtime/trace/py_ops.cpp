// Python semantics on pickle values (see py_ops.hpp), for the kinds a trace carrier
// holds. Numbers compare across int / float / bool as Python does; text is UTF-8.
#include "trace/py_ops.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <vector>

#include "model/jinja_value.hpp"
#include "trace/py_float.hpp"

namespace rl::trace {
namespace {

using Kind = Value::Kind;

bool is_num(const Value* v) {
  if (!v) return false;
  const Kind k = v->kind();
  return k == Kind::integer || k == Kind::real || k == Kind::boolean || k == Kind::big_integer;
}

bool big_negative(const Value& v) {
  const std::string& b = v.as_big_int().le_bytes;
  return !b.empty() && (static_cast<unsigned char>(b.back()) & 0x80);
}

// An int-valued number as int64 (false for a non-integral float or a big int).
bool as_int64(const Value& v, int64_t* out) {
  switch (v.kind()) {
    case Kind::boolean: *out = v.as_bool(); return true;
    case Kind::integer: *out = v.as_int(); return true;
    case Kind::real: {
      const double d = v.as_float();
      if (d != std::floor(d) || !(std::fabs(d) < 9.2e18)) return false;
      *out = static_cast<int64_t>(d);
      return true;
    }
    default: return false;
  }
}

bool num_eq(const Value& a, const Value& b) {
  int64_t x, y;
  const bool ia = as_int64(a, &x), ib = as_int64(b, &y);
  if (ia && ib) return x == y;
  if (a.is(Kind::big_integer) || b.is(Kind::big_integer)) {
    if (a.is(Kind::big_integer) && b.is(Kind::big_integer)) return a.as_big_int().le_bytes == b.as_big_int().le_bytes;
    return false;  // a big int is wider than any int64 or exact float we compare with here
  }
  return a.to_number() == b.to_number();
}

bool num_less(const Value& a, const Value& b) {
  if (a.is(Kind::big_integer) || b.is(Kind::big_integer)) return a.to_number() < b.to_number();
  const bool fa = a.is(Kind::real), fb = b.is(Kind::real);
  if (!fa && !fb) {
    int64_t x = 0, y = 0;
    as_int64(a, &x), as_int64(b, &y);
    return x < y;
  }
  return a.to_number() < b.to_number();
}

bool text_like(const Value* v) { return v && v->is(Kind::string); }

// repr of bytes: b'...' with \xNN for bytes outside printable ASCII.
void repr_bytes(std::string_view s, std::string& out) {
  const bool has_single = s.find('\'') != std::string_view::npos, has_double = s.find('"') != std::string_view::npos;
  const char q = has_single && !has_double ? '"' : '\'';
  out.push_back('b');
  out.push_back(q);
  char buf[8];
  for (const char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    if (c == static_cast<unsigned char>(q) || c == '\\') {
      out.push_back('\\'), out.push_back(ch);
    } else if (c == '\n' || c == '\r' || c == '\t') {
      out.push_back('\\'), out.push_back(c == '\n' ? 'n' : c == '\r' ? 'r' : 't');
    } else if (c < 0x20 || c >= 0x7f) {
      std::snprintf(buf, sizeof buf, "\\x%02x", c);
      out += buf;
    } else {
      out.push_back(ch);
    }
  }
  out.push_back(q);
}

void big_int_text(const Value& v, std::string& out) {
  // Two's complement little-endian -> decimal by repeated division of a base-2^32 magnitude.
  std::string b = v.as_big_int().le_bytes;
  const bool neg = big_negative(v);
  if (neg) {  // magnitude = ~b + 1
    int carry = 1;
    for (auto& ch : b) {
      const int x = (static_cast<unsigned char>(~static_cast<unsigned char>(ch))) + carry;
      ch = static_cast<char>(x & 0xFF);
      carry = x >> 8;
    }
  }
  std::vector<uint32_t> limbs((b.size() + 3) / 4, 0);
  for (size_t i = 0; i < b.size(); ++i) limbs[i / 4] |= static_cast<uint32_t>(static_cast<unsigned char>(b[i])) << (8 * (i % 4));
  std::string digits;
  auto is_zero = [&] { return std::all_of(limbs.begin(), limbs.end(), [](uint32_t x) { return x == 0; }); };
  while (!is_zero()) {
    uint64_t rem = 0;
    for (size_t i = limbs.size(); i-- > 0;) {
      const uint64_t cur = (rem << 32) | limbs[i];
      limbs[i] = static_cast<uint32_t>(cur / 10);
      rem = cur % 10;
    }
    digits.push_back(static_cast<char>('0' + rem));
  }
  if (digits.empty()) digits = "0";
  if (neg) out.push_back('-');
  out.append(digits.rbegin(), digits.rend());
}

// Python's float() / int() grammar for text: [ws][sign]digits[_digits][.digits][e[sign]digits][ws].
std::string numeric_text(std::string_view s, bool allow_float) {
  auto ws = [](char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; };
  while (!s.empty() && ws(s.front())) s.remove_prefix(1);
  while (!s.empty() && ws(s.back())) s.remove_suffix(1);
  std::string out;
  size_t i = 0;
  if (i < s.size() && (s[i] == '+' || s[i] == '-')) out.push_back(s[i++]);
  if (allow_float) {
    std::string rest;
    for (size_t k = i; k < s.size(); ++k) rest.push_back(static_cast<char>(std::tolower(static_cast<unsigned char>(s[k]))));
    if (rest == "inf" || rest == "infinity" || rest == "nan") return out + rest;
  }
  auto digits = [&](bool required) {
    size_t n = 0;
    while (i < s.size()) {
      if (std::isdigit(static_cast<unsigned char>(s[i]))) {
        out.push_back(s[i++]), ++n;
      } else if (s[i] == '_' && n > 0 && i + 1 < s.size() && std::isdigit(static_cast<unsigned char>(s[i + 1]))) {
        ++i;
      } else {
        break;
      }
    }
    return n > 0 || !required;
  };
  const size_t before = out.size();
  digits(false);
  bool any = out.size() > before;
  if (allow_float && i < s.size() && s[i] == '.') {
    out.push_back(s[i++]);
    const size_t b2 = out.size();
    digits(false);
    any = any || out.size() > b2;
  }
  if (!any) return {};
  if (allow_float && i < s.size() && (s[i] == 'e' || s[i] == 'E')) {
    out.push_back(s[i++]);
    if (i < s.size() && (s[i] == '+' || s[i] == '-')) out.push_back(s[i++]);
    if (!digits(true)) return {};
  }
  return i == s.size() ? out : std::string();
}

}  // namespace

bool py_truthy(const Value* v) {
  if (!v) return false;
  switch (v->kind()) {
    case Kind::none: return false;
    case Kind::boolean: return v->as_bool();
    case Kind::integer: return v->as_int() != 0;
    case Kind::big_integer: return true;
    case Kind::real: return v->as_float() != 0;
    case Kind::string: return !v->as_string().empty();
    case Kind::bytes: return !v->as_bytes().data.empty();
    case Kind::list: return !v->as_list().items.empty();
    case Kind::tuple: return !v->as_tuple().items.empty();
    case Kind::dict: return !v->as_dict().items.empty();
    default: return true;
  }
}

bool py_eq(const Value* a, const Value* b) {
  const bool na = !a || a->is_none(), nb = !b || b->is_none();
  if (na || nb) return na && nb;
  if (is_num(a) && is_num(b)) return num_eq(*a, *b);
  if (a->kind() != b->kind()) return false;
  switch (a->kind()) {
    case Kind::string: return a->as_string() == b->as_string();
    case Kind::bytes: return a->as_bytes().data == b->as_bytes().data;
    case Kind::list:
    case Kind::tuple: {
      const auto &x = a->items(), &y = b->items();
      if (x.size() != y.size()) return false;
      for (size_t i = 0; i < x.size(); ++i)
        if (!py_eq(&x[i], &y[i])) return false;
      return true;
    }
    default: return *a == *b;
  }
}

size_t py_hash(const Value* v) {
  if (!v || v->is_none()) return 0x9e3779b97f4a7c15ull;
  int64_t i;
  if (is_num(v)) {
    if (as_int64(*v, &i)) return std::hash<int64_t>{}(i);
    return std::hash<double>{}(v->to_number());
  }
  switch (v->kind()) {
    case Kind::string: return std::hash<std::string_view>{}(v->as_string());
    case Kind::bytes: return std::hash<std::string_view>{}(v->as_bytes().data) ^ 0x5bd1e995;
    case Kind::list:
    case Kind::tuple: {
      size_t h = v->items().size();
      for (const Value& x : v->items()) h = h * 1000003 ^ py_hash(&x);
      return h;
    }
    default: return static_cast<size_t>(v->kind());
  }
}

bool py_less(const Value* a, const Value* b) {
  if (!a || !b) return false;
  if (is_num(a) && is_num(b)) return num_less(*a, *b);
  if (text_like(a) && text_like(b)) return a->as_string() < b->as_string();  // UTF-8 bytes order = code points
  if (a->kind() != b->kind()) return false;
  if (a->is(Kind::bytes)) return a->as_bytes().data < b->as_bytes().data;
  if (a->is(Kind::list) || a->is(Kind::tuple)) {
    const auto &x = a->items(), &y = b->items();
    for (size_t i = 0; i < x.size() && i < y.size(); ++i)
      if (!py_eq(&x[i], &y[i])) return py_less(&x[i], &y[i]);
    return x.size() < y.size();
  }
  return false;
}

void py_str(const Value* v, std::string& out) {
  if (v && v->is(Kind::string)) {
    out += v->as_string();
    return;
  }
  py_repr(v, out);
}

void py_repr(const Value* v, std::string& out) {
  if (!v) {
    out += "None";
    return;
  }
  switch (v->kind()) {
    case Kind::none: out += "None"; return;
    case Kind::boolean: out += v->as_bool() ? "True" : "False"; return;
    case Kind::integer: out += std::to_string(v->as_int()); return;
    case Kind::big_integer: big_int_text(*v, out); return;
    case Kind::real: py_float_repr(v->as_float(), out); return;
    case Kind::string: out += model::jinja::repr_string(v->as_string()); return;
    case Kind::bytes: repr_bytes(v->as_bytes().data, out); return;
    case Kind::list:
    case Kind::tuple: {
      const bool tuple = v->is(Kind::tuple);
      out.push_back(tuple ? '(' : '[');
      const auto& items = v->items();
      for (size_t i = 0; i < items.size(); ++i) {
        if (i) out += ", ";
        py_repr(&items[i], out);
      }
      if (tuple && items.size() == 1) out.push_back(',');
      out.push_back(tuple ? ')' : ']');
      return;
    }
    case Kind::dict: {
      out.push_back('{');
      bool first = true;
      for (const auto& [k, x] : v->as_dict().items) {
        if (!first) out += ", ";
        first = false;
        py_repr(&k, out);
        out += ": ";
        py_repr(&x, out);
      }
      out.push_back('}');
      return;
    }
    case Kind::tensor: {
      const auto& t = v->as_tensor();
      out += "tensor(";
      if (t.numel() == 1) {
        py_float_repr(t.element(0), out);
      } else {
        out += "shape=[";
        for (size_t i = 0; i < t.shape.size(); ++i) out += (i ? "," : "") + std::to_string(t.shape[i]);
        out += "]";
      }
      out += ", dtype=torch.";
      out += pickle::dtype_name(t.dtype);
      out += ")";
      return;
    }
    case Kind::global: out += "<class '" + v->as_global().module + "." + v->as_global().name + "'>"; return;
  }
}

bool py_float(const Value* v, double* out) {
  if (!v) return false;
  switch (v->kind()) {
    case Kind::boolean:
    case Kind::integer:
    case Kind::big_integer:
    case Kind::real: *out = v->to_number(); return true;
    case Kind::string:
    case Kind::bytes: {
      const std::string text = numeric_text(v->is(Kind::string) ? v->as_string() : v->as_bytes().data, true);
      if (text.empty()) return false;
      *out = std::strtod(text.c_str(), nullptr);
      return true;
    }
    case Kind::tensor:
      if (v->as_tensor().numel() != 1) return false;
      *out = v->as_tensor().element(0);
      return true;
    default: return false;
  }
}

bool py_int(const Value* v, int64_t* out) {
  if (!v) return false;
  switch (v->kind()) {
    case Kind::boolean: *out = v->as_bool(); return true;
    case Kind::integer: *out = v->as_int(); return true;
    case Kind::real: {
      const double d = std::trunc(v->as_float());
      if (!std::isfinite(d)) return false;
      *out = static_cast<int64_t>(std::clamp(d, -9.2e18, 9.2e18));
      return true;
    }
    case Kind::string:
    case Kind::bytes: {
      const std::string text = numeric_text(v->is(Kind::string) ? v->as_string() : v->as_bytes().data, false);
      if (text.empty()) return false;
      *out = std::strtoll(text.c_str(), nullptr, 10);
      return true;
    }
    case Kind::tensor: {
      if (v->as_tensor().numel() != 1) return false;
      const double d = std::trunc(v->as_tensor().element(0));
      if (!std::isfinite(d)) return false;
      *out = static_cast<int64_t>(d);
      return true;
    }
    default: return false;
  }
}

bool py_positive_number(const Value* v) {
  if (!is_num(v)) return false;
  if (v->is(Kind::big_integer)) return !big_negative(*v);
  return v->to_number() > 0;
}

size_t utf8_length(std::string_view s) {
  size_t n = 0;
  for (const char c : s) n += (static_cast<unsigned char>(c) & 0xC0) != 0x80;
  return n;
}

std::string_view utf8_prefix(std::string_view s, size_t n) {
  size_t i = 0, seen = 0;
  for (; i < s.size(); ++i) {
    if ((static_cast<unsigned char>(s[i]) & 0xC0) != 0x80) {
      if (seen == n) break;
      ++seen;
    }
  }
  return s.substr(0, i);
}

}  // namespace rl::trace
