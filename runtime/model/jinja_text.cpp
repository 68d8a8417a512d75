// Python str behaviour over UTF-8 for the chat-template interpreter.
#include "model/jinja_text.hpp"

#include <algorithm>

#include "model/jinja_value.hpp"

namespace rl::model::jinja {

std::u32string utf8_decode(std::string_view s) {
  std::u32string out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<unsigned char>(s[i]);
    const int extra = c < 0x80 ? 0 : (c >> 5) == 0x6 ? 1 : (c >> 4) == 0xE ? 2 : (c >> 3) == 0x1E ? 3 : -1;
    char32_t cp = extra <= 0 ? c : extra == 1 ? (c & 0x1F) : extra == 2 ? (c & 0x0F) : (c & 0x07);
    bool ok = extra >= 0 && i + static_cast<size_t>(std::max(extra, 0)) < s.size();
    for (int k = 1; ok && k <= extra; ++k) {
      const auto cc = static_cast<unsigned char>(s[i + k]);
      if ((cc & 0xC0) != 0x80) ok = false;
      cp = (cp << 6) | (cc & 0x3F);
    }
    if (!ok) {  // invalid byte: kept as a lone surrogate (Python's surrogateescape)
      out.push_back(0xDC00 + c);
      ++i;
      continue;
    }
    out.push_back(cp);
    i += extra + 1;
  }
  return out;
}

void utf8_append(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp >= 0xDC80 && cp <= 0xDCFF) {
    out.push_back(static_cast<char>(cp - 0xDC00));  // an invalid input byte, restored
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

std::string utf8_encode(std::u32string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char32_t cp : s) utf8_append(out, cp);
  return out;
}

bool is_ascii(std::string_view s) {
  return std::all_of(s.begin(), s.end(), [](char c) { return static_cast<unsigned char>(c) < 0x80; });
}

size_t code_point_count(std::string_view s) {
  if (is_ascii(s)) return s.size();
  return utf8_decode(s).size();
}

bool is_py_space(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

bool is_py_printable(char32_t c) {
  if (c == ' ') return true;
  if (c < 0x20 || (c >= 0x7F && c <= 0xA0) || c == 0xAD) return false;
  if (is_py_space(c)) return false;
  if ((c >= 0x200B && c <= 0x200F) || (c >= 0x202A && c <= 0x202E) || (c >= 0x2060 && c <= 0x206F)) return false;
  if (c == 0xFEFF || (c >= 0xFFF9 && c <= 0xFFFB) || (c >= 0xD800 && c <= 0xF8FF) || c >= 0xF0000) return false;
  if (c == 0x061C || c == 0x180E || (c >= 0x0600 && c <= 0x0605) || c == 0x06DD || c == 0x070F) return false;
  if (c == 0xE0001 || (c >= 0xE0020 && c <= 0xE007F)) return false;
  return true;
}

// Simple case mapping for ASCII, Latin-1, Latin Extended-A, Greek, Cyrillic,
// Armenian and full-width Latin. Other scripts are returned unchanged, and the
// special one-to-many mappings (ß -> SS, final sigma, İ) are not applied.
char32_t to_upper(char32_t c) {
  if (c < 0x80) return (c >= 'a' && c <= 'z') ? c - 32 : c;
  if (c >= 0xE0 && c <= 0xFE && c != 0xF7) return c - 32;
  if (c == 0xB5) return 0x39C;
  if (c == 0xFF) return 0x178;
  if (c >= 0x100 && c <= 0x17F) {
    if (c == 0x131) return 'I';
    if (c == 0x17F) return 'S';
    if ((c >= 0x100 && c <= 0x12F) || (c >= 0x132 && c <= 0x137) || (c >= 0x14A && c <= 0x177))
      return (c & 1) ? c - 1 : c;
    if ((c >= 0x139 && c <= 0x148) || (c >= 0x179 && c <= 0x17E)) return (c & 1) ? c : c - 1;
    return c;
  }
  if (c >= 0x3B1 && c <= 0x3CB && c != 0x3C2) return c - 32;
  if (c == 0x3C2) return 0x3A3;
  if (c == 0x3AC) return 0x386;
  if (c >= 0x3AD && c <= 0x3AF) return c - 37;
  if (c == 0x3CC) return 0x38C;
  if (c == 0x3CD || c == 0x3CE) return c - 63;
  if (c >= 0x430 && c <= 0x44F) return c - 32;
  if (c >= 0x450 && c <= 0x45F) return c - 80;
  if ((c >= 0x460 && c <= 0x481) || (c >= 0x48A && c <= 0x4BF)) return (c & 1) ? c - 1 : c;
  if (c >= 0x561 && c <= 0x586) return c - 48;
  if (c >= 0xFF41 && c <= 0xFF5A) return c - 32;
  return c;
}

char32_t to_lower(char32_t c) {
  if (c < 0x80) return (c >= 'A' && c <= 'Z') ? c + 32 : c;
  if (c >= 0xC0 && c <= 0xDE && c != 0xD7) return c + 32;
  if (c == 0x178) return 0xFF;
  if (c >= 0x100 && c <= 0x17F) {
    if ((c >= 0x100 && c <= 0x12F) || (c >= 0x132 && c <= 0x137) || (c >= 0x14A && c <= 0x177))
      return (c & 1) ? c : c + 1;
    if ((c >= 0x139 && c <= 0x148) || (c >= 0x179 && c <= 0x17E)) return (c & 1) ? c + 1 : c;
    return c;
  }
  if (c >= 0x391 && c <= 0x3AB && c != 0x3A2) return c + 32;
  if (c == 0x386) return 0x3AC;
  if (c >= 0x388 && c <= 0x38A) return c + 37;
  if (c == 0x38C) return 0x3CC;
  if (c == 0x38E || c == 0x38F) return c + 63;
  if (c >= 0x410 && c <= 0x42F) return c + 32;
  if (c >= 0x400 && c <= 0x40F) return c + 80;
  if ((c >= 0x460 && c <= 0x481) || (c >= 0x48A && c <= 0x4BF)) return (c & 1) ? c : c + 1;
  if (c >= 0x531 && c <= 0x556) return c + 48;
  if (c >= 0xFF21 && c <= 0xFF3A) return c + 32;
  return c;
}

namespace {
template <class F>
std::string map_code_points(std::string_view s, F f) {
  if (is_ascii(s)) {
    std::string out(s);
    for (auto& ch : out)
      ch = static_cast<char>(f(static_cast<char32_t>(static_cast<unsigned char>(ch)), size_t(&ch - out.data())));
    return out;
  }
  std::u32string u = utf8_decode(s);
  for (size_t i = 0; i < u.size(); ++i) u[i] = f(u[i], i);
  return utf8_encode(u);
}

bool is_title_separator(char32_t c) {
  return c == '-' || c == '(' || c == '{' || c == '[' || c == '<' || is_py_space(c);
}
}  // namespace

std::string str_upper(std::string_view s) {
  return map_code_points(s, [](char32_t c, size_t) { return to_upper(c); });
}
std::string str_lower(std::string_view s) {
  return map_code_points(s, [](char32_t c, size_t) { return to_lower(c); });
}
std::string str_capitalize(std::string_view s) {
  return map_code_points(s, [](char32_t c, size_t i) { return i == 0 ? to_upper(c) : to_lower(c); });
}
std::string str_title(std::string_view s) {
  std::u32string u = utf8_decode(s);
  bool word_start = true;
  for (auto& c : u) {
    if (is_title_separator(c)) {
      word_start = true;
      continue;
    }
    c = word_start ? to_upper(c) : to_lower(c);
    word_start = false;
  }
  return utf8_encode(u);
}

std::string str_strip(std::string_view s, const std::optional<std::string>& chars, bool left, bool right) {
  std::u32string u = utf8_decode(s);
  std::u32string set = chars ? utf8_decode(*chars) : std::u32string();
  auto strip_it = [&](char32_t c) { return chars ? set.find(c) != std::u32string::npos : is_py_space(c); };
  size_t b = 0, e = u.size();
  if (left)
    while (b < e && strip_it(u[b])) ++b;
  if (right)
    while (e > b && strip_it(u[e - 1])) --e;
  return utf8_encode(std::u32string_view(u).substr(b, e - b));
}

std::vector<std::string> str_split(std::string_view s, const std::optional<std::string>& sep, int64_t maxsplit,
                                   bool from_right) {
  std::vector<std::string> parts;
  if (maxsplit < 0) maxsplit = INT64_MAX;
  if (sep) {
    if (sep->empty()) throw EvalError("ValueError: empty separator");
    if (!from_right) {
      size_t pos = 0;
      while (maxsplit-- > 0) {
        size_t at = s.find(*sep, pos);
        if (at == std::string_view::npos) break;
        parts.emplace_back(s.substr(pos, at - pos));
        pos = at + sep->size();
      }
      parts.emplace_back(s.substr(pos));
    } else {
      size_t end = s.size();
      while (maxsplit-- > 0 && end >= sep->size()) {
        size_t at = s.rfind(*sep, end - sep->size());
        if (at == std::string_view::npos) break;
        parts.emplace_back(s.substr(at + sep->size(), end - at - sep->size()));
        end = at;
      }
      parts.emplace_back(s.substr(0, end));
      std::reverse(parts.begin(), parts.end());
    }
    return parts;
  }
  // Whitespace split: runs of whitespace separate, no empty strings.
  std::u32string u = utf8_decode(s);
  if (!from_right) {
    size_t i = 0;
    while (true) {
      while (i < u.size() && is_py_space(u[i])) ++i;
      if (i == u.size()) break;
      if (maxsplit-- <= 0) {
        parts.push_back(utf8_encode(std::u32string_view(u).substr(i)));
        break;
      }
      size_t j = i;
      while (j < u.size() && !is_py_space(u[j])) ++j;
      parts.push_back(utf8_encode(std::u32string_view(u).substr(i, j - i)));
      i = j;
    }
  } else {
    size_t e = u.size();
    while (true) {
      while (e > 0 && is_py_space(u[e - 1])) --e;
      if (e == 0) break;
      if (maxsplit-- <= 0) {
        parts.push_back(utf8_encode(std::u32string_view(u).substr(0, e)));
        break;
      }
      size_t b = e;
      while (b > 0 && !is_py_space(u[b - 1])) --b;
      parts.push_back(utf8_encode(std::u32string_view(u).substr(b, e - b)));
      e = b;
    }
    std::reverse(parts.begin(), parts.end());
  }
  return parts;
}

std::vector<std::string> str_splitlines(std::string_view s, bool keepends) {
  std::u32string u = utf8_decode(s);
  std::vector<std::string> lines;
  size_t start = 0, i = 0;
  auto is_break = [](char32_t c) {
    return c == '\n' || c == '\r' || c == 0x0B || c == 0x0C || c == 0x1C || c == 0x1D || c == 0x1E || c == 0x85 ||
           c == 0x2028 || c == 0x2029;
  };
  while (i < u.size()) {
    if (!is_break(u[i])) {
      ++i;
      continue;
    }
    size_t brk = (u[i] == '\r' && i + 1 < u.size() && u[i + 1] == '\n') ? 2 : 1;
    lines.push_back(utf8_encode(std::u32string_view(u).substr(start, i - start + (keepends ? brk : 0))));
    i += brk;
    start = i;
  }
  if (start < u.size()) lines.push_back(utf8_encode(std::u32string_view(u).substr(start)));
  return lines;
}

std::string str_replace(std::string_view s, std::string_view old_s, std::string_view new_s, int64_t count) {
  if (count < 0) count = INT64_MAX;
  std::string out;
  if (old_s.empty()) {  // Python inserts `new` before every code point and at the end
    std::u32string u = utf8_decode(s);
    for (char32_t c : u) {
      if (count > 0) {
        out += new_s;
        --count;
      }
      utf8_append(out, c);
    }
    if (count > 0) out += new_s;
    return out;
  }
  size_t pos = 0;
  while (count-- > 0) {
    size_t at = s.find(old_s, pos);
    if (at == std::string_view::npos) break;
    out.append(s.substr(pos, at - pos));
    out.append(new_s);
    pos = at + old_s.size();
  }
  out.append(s.substr(pos));
  return out;
}

int64_t str_count(std::string_view s, std::string_view sub) {
  if (sub.empty()) return static_cast<int64_t>(code_point_count(s)) + 1;
  int64_t n = 0;
  for (size_t pos = s.find(sub); pos != std::string_view::npos; pos = s.find(sub, pos + sub.size())) ++n;
  return n;
}

int64_t str_find(std::string_view s, std::string_view sub, bool from_right) {
  size_t at = from_right ? s.rfind(sub) : s.find(sub);
  if (at == std::string_view::npos) return -1;
  return static_cast<int64_t>(code_point_count(s.substr(0, at)));
}

std::vector<size_t> slice_indices(size_t len, std::optional<int64_t> start, std::optional<int64_t> stop, int64_t step) {
  if (step == 0) throw EvalError("ValueError: slice step cannot be zero");
  const auto n = static_cast<int64_t>(len);
  auto adjust = [&](std::optional<int64_t> v, int64_t dflt, int64_t lo, int64_t hi) {
    if (!v) return dflt;
    int64_t x = *v;
    if (x < 0) x += n;
    return std::clamp(x, lo, hi);
  };
  std::vector<size_t> out;
  if (step > 0) {
    int64_t b = adjust(start, 0, 0, n), e = adjust(stop, n, 0, n);
    for (int64_t i = b; i < e; i += step) out.push_back(static_cast<size_t>(i));
  } else {
    int64_t b = adjust(start, n - 1, -1, n - 1), e = adjust(stop, -1, -1, n - 1);
    for (int64_t i = b; i > e; i += step) out.push_back(static_cast<size_t>(i));
  }
  return out;
}

std::string str_slice(std::string_view s, std::optional<int64_t> start, std::optional<int64_t> stop, int64_t step) {
  std::string out;
  if (is_ascii(s)) {
    for (size_t i : slice_indices(s.size(), start, stop, step)) out.push_back(s[i]);
    return out;
  }
  std::u32string u = utf8_decode(s);
  for (size_t i : slice_indices(u.size(), start, stop, step)) utf8_append(out, u[i]);
  return out;
}

std::optional<std::string> str_index(std::string_view s, int64_t i) {
  if (is_ascii(s)) {
    const auto n = static_cast<int64_t>(s.size());
    if (i < 0) i += n;
    if (i < 0 || i >= n) return std::nullopt;
    return std::string(1, s[static_cast<size_t>(i)]);
  }
  std::u32string u = utf8_decode(s);
  const auto n = static_cast<int64_t>(u.size());
  if (i < 0) i += n;
  if (i < 0 || i >= n) return std::nullopt;
  std::string out;
  utf8_append(out, u[static_cast<size_t>(i)]);
  return out;
}

}  // namespace rl::model::jinja
