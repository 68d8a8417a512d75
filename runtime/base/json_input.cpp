// JSON input policy: limits checked while parsing, short printable messages.
#include "base/json_input.hpp"

#include <cstdio>
#include <cstdlib>

#include "base/utf8.hpp"

namespace rl::json_input {
namespace {

size_t env_size(const char* name, size_t fallback) {
  const char* s = std::getenv(name);
  if (!s || !*s) return fallback;
  char* end = nullptr;
  const unsigned long long v = std::strtoull(s, &end, 10);
  return (end && *end == 0 && v > 0) ? static_cast<size_t>(v) : fallback;
}

std::string size_text(size_t n) {
  if (n >= (size_t(1) << 20) && n % (size_t(1) << 20) == 0) return std::to_string(n >> 20) + " MiB";
  return std::to_string(n) + " bytes";
}

constexpr size_t kPathParts = 6;  // components of a field path shown before "..."
constexpr size_t kKeyBytes = 40;  // of each key

// Builds the DOM through nlohmann's own SAX DOM builder, with the guard in front.
template <class J>
class DomSax {
 public:
  DomSax(J& root, Guard& g) : dom_(root, false), g_(g) {}
  bool null() { return g_.scalar() && dom_.null(); }
  bool boolean(bool v) { return g_.scalar() && dom_.boolean(v); }
  bool number_integer(typename J::number_integer_t v) { return g_.scalar() && dom_.number_integer(v); }
  bool number_unsigned(typename J::number_unsigned_t v) { return g_.scalar() && dom_.number_unsigned(v); }
  bool number_float(typename J::number_float_t v, const typename J::string_t& s) {
    return g_.scalar() && dom_.number_float(v, s);
  }
  bool string(typename J::string_t& s) { return g_.string(s.size()) && dom_.string(s); }
  bool binary(typename J::binary_t& b) { return g_.scalar() && dom_.binary(b); }
  bool start_object(size_t n) { return g_.open(false) && dom_.start_object(n); }
  bool key(typename J::string_t& k) { return g_.key(k) && dom_.key(k); }
  bool end_object() {
    g_.close();
    return dom_.end_object();
  }
  bool start_array(size_t n) { return g_.open(true) && dom_.start_array(n); }
  bool end_array() {
    g_.close();
    return dom_.end_array();
  }
  template <class E>
  bool parse_error(size_t byte, const std::string&, const E& ex) {
    g_.parse_error(byte, ex.what());
    return false;
  }

 private:
  nlohmann::detail::json_sax_dom_parser<J> dom_;
  Guard& g_;
};

template <class J>
J parse_as(std::string_view text, std::string_view what, const Limits& lim) {
  Guard g(what, lim);
  if (!g.check_size(text.size())) g.raise();
  J root;
  DomSax<J> sax(root, g);
  if (!J::sax_parse(text.begin(), text.end(), &sax)) {
    if (g.message().empty()) g.parse_error(text.size(), "invalid JSON");
    g.raise();
  }
  return root;
}

template <class J>
void brief_into(const J& v, std::string& out, size_t budget, int level) {
  if (out.size() >= budget) return;
  const size_t room = budget - out.size();
  if (v.is_string()) {
    out += '"' + excerpt(v.template get_ref<const typename J::string_t&>(), room > 40 ? 40 : room) + '"';
  } else if (v.is_array() || v.is_object()) {
    const bool arr = v.is_array();
    if (v.empty()) {
      out += arr ? "[]" : "{}";
      return;
    }
    if (level >= 2) {
      out += arr ? "[...]" : "{...}";
      return;
    }
    out += arr ? '[' : '{';
    size_t shown = 0;
    for (auto it = v.begin(); it != v.end() && out.size() < budget; ++it, ++shown) {
      if (shown) out += ", ";
      if (!arr) out += '"' + excerpt(it.key(), 20) + "\": ";
      brief_into(*it, out, budget, level + 1);
    }
    if (shown < v.size()) out += ", ...";
    out += arr ? ']' : '}';
  } else {
    out += v.dump(-1, ' ', false, J::error_handler_t::replace);  // a scalar: short
  }
}

template <class J>
std::string brief_of(const J& v, size_t max_chars) {
  std::string out;
  brief_into(v, out, max_chars, 0);
  if (out.size() > max_chars) {
    size_t cut = max_chars;
    while (cut > 0 && (static_cast<unsigned char>(out[cut]) & 0xC0) == 0x80) --cut;  // keep UTF-8 whole
    out.resize(cut);
    out += "...";
  }
  if (v.is_array() || v.is_object())
    out += " (" + std::string(v.is_array() ? "an array of " : "an object of ") + std::to_string(v.size()) +
           (v.is_array() ? " elements)" : " keys)");
  return out;
}

}  // namespace

const Limits& limits() {
  static const Limits lim = [] {
    Limits l;
    l.max_depth = env_size("RLHOST_JSON_MAX_DEPTH", l.max_depth);
    l.max_bytes = env_size("RLHOST_JSON_MAX_BYTES", l.max_bytes);
    l.max_string = env_size("RLHOST_JSON_MAX_STRING", l.max_string);
    l.max_elements = env_size("RLHOST_JSON_MAX_ELEMENTS", l.max_elements);
    return l;
  }();
  return lim;
}

Limits file_limits() {
  Limits l;
  l.max_depth = limits().max_depth;
  l.max_bytes = l.max_string = l.max_elements = SIZE_MAX;
  return l;
}

// ---- Guard ---------------------------------------------------------------------------

Guard::Guard(std::string_view what, const Limits& lim) : what_(what), lim_(lim) {}

bool Guard::refuse(const std::string& problem, const std::string& hint) {
  field_ = path();
  message_ = what_ + ": " + problem;
  if (!field_.empty()) message_ += " in field '" + field_ + "'";
  if (!hint.empty()) message_ += " (hint: " + hint + ")";
  hinted_ = !hint.empty();
  return false;
}

std::string Guard::path() const {
  std::string p;
  size_t parts = 0;
  for (const Frame& f : frames_) {
    if (!f.array && f.key.empty()) break;  // an object before its first key
    if (++parts > kPathParts) {
      p += "... (" + std::to_string(frames_.size()) + " levels)";
      break;
    }
    if (f.array) p += "[" + std::to_string(f.index) + "]";
    else p += (p.empty() ? "" : ".") + excerpt(f.key, kKeyBytes);
  }
  return p;
}

bool Guard::check_size(size_t text_bytes) {
  if (text_bytes <= lim_.max_bytes) return true;
  return refuse(size_text(text_bytes) + ", over the limit of " + size_text(lim_.max_bytes),
                "RLHOST_JSON_MAX_BYTES raises it");
}

bool Guard::count() {
  if (++elements_ <= lim_.max_elements) return true;
  return refuse("more than " + std::to_string(lim_.max_elements) + " values",
                "RLHOST_JSON_MAX_ELEMENTS raises the limit");
}

void Guard::value_done() {
  if (!frames_.empty() && frames_.back().array) frames_.back().index++;
}

bool Guard::scalar() {
  if (!count()) return false;
  value_done();
  return true;
}

bool Guard::string(size_t bytes) {
  if (bytes > lim_.max_string)
    return refuse("a string of " + size_text(bytes) + ", over the limit of " + size_text(lim_.max_string),
                  "RLHOST_JSON_MAX_STRING raises it");
  return scalar();
}

bool Guard::key(std::string_view k) {
  if (frames_.empty()) return true;
  frames_.back().key.assign(k.substr(0, kKeyBytes));  // made printable only if a message needs it
  if (k.size() > lim_.max_string)
    return refuse("a key of " + size_text(k.size()) + ", over the limit of " + size_text(lim_.max_string),
                  "RLHOST_JSON_MAX_STRING raises it");
  return true;
}

bool Guard::duplicate_key() {
  const std::string k = frames_.empty() ? std::string() : frames_.back().key;
  if (!frames_.empty()) frames_.back().key.clear();  // the path names the object, not the key twice
  return refuse("key '" + excerpt(k, kKeyBytes) + "' appears twice", "keep one of them");
}

bool Guard::open(bool array) {
  if (!count()) return false;
  if (frames_.size() >= lim_.max_depth)
    return refuse("nested deeper than " + std::to_string(lim_.max_depth) + " levels",
                  "RLHOST_JSON_MAX_DEPTH raises the limit");
  frames_.push_back({array, 0, {}});
  return true;
}

void Guard::close() {
  if (!frames_.empty()) frames_.pop_back();
  value_done();
}

void Guard::parse_error(size_t byte, std::string_view nlohmann_what) {
  std::string_view w = nlohmann_what;
  if (w.rfind("[json.exception", 0) == 0)
    if (auto p = w.find("] "); p != std::string_view::npos) w.remove_prefix(p + 2);
  std::string reason;
  // nlohmann quotes the token it stopped in ("; last read: '...'"): any length, any bytes.
  const std::string_view marker = "; last read: '";
  if (auto p = w.find(marker); p != std::string_view::npos) {
    std::string_view token = w.substr(p + marker.size());
    std::string_view expected;  // "; expected ..." may follow the quoted token
    if (auto e = token.rfind("'; expected "); e != std::string_view::npos) {
      expected = token.substr(e + 1);
      token = token.substr(0, e);
    } else if (!token.empty() && token.back() == '\'') {
      token.remove_suffix(1);
    }
    // Its end is where the parser stopped: show that.
    const std::string shown = token.size() > 40 ? "..." + excerpt(token.substr(token.size() - 40), 40) : excerpt(token, 40);
    reason = excerpt(w.substr(0, p), 200) + " (last read: '" + shown + "')" + excerpt(expected, 120);
  } else {
    reason = excerpt(w, 240);
  }
  const bool utf8 = w.find("UTF-8") != std::string_view::npos || w.find("surrogate") != std::string_view::npos;
  refuse("invalid JSON at byte " + std::to_string(byte) + ": " + reason,
         utf8 ? "JSON text must be valid UTF-8; escape other bytes as \\u00XX" : "");
}

void Guard::raise() const { throw Error(message_, field_, hinted_); }

// ---- entry points ----------------------------------------------------------------------

nlohmann::json parse(std::string_view text, std::string_view what, const Limits& lim) {
  return parse_as<nlohmann::json>(text, what, lim);
}

nlohmann::ordered_json parse_ordered(std::string_view text, std::string_view what, const Limits& lim) {
  return parse_as<nlohmann::ordered_json>(text, what, lim);
}

std::string excerpt(std::string_view text, size_t max_bytes) {
  std::string out;
  size_t i = 0;
  while (i < text.size() && out.size() < max_bytes) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (c >= 0x20 && c < 0x7F) {
      out += static_cast<char>(c);
      ++i;
      continue;
    }
    if (c >= 0x80)
      if (const size_t n = utf8_sequence_length(text.data() + i, text.size() - i)) {
        out.append(text.data() + i, n);
        i += n;
        continue;
      }
    char buf[8];
    std::snprintf(buf, sizeof buf, "\\x%02X", c);
    out += buf;
    ++i;
  }
  if (i < text.size()) out += "... (" + std::to_string(text.size()) + " bytes)";
  return out;
}

std::string brief(const nlohmann::json& v, size_t max_chars) { return brief_of(v, max_chars); }
std::string brief(const nlohmann::ordered_json& v, size_t max_chars) { return brief_of(v, max_chars); }

std::string dump_reply(const nlohmann::json& v) {
  return v.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace rl::json_input
