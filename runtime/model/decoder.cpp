#include "model/decoder.hpp"

#include <cstdlib>

#include "model/bpe.hpp"
#include "model/unicode.hpp"

namespace rl::model {

Decoder Decoder::from_json(const JsonNode& node) {
  Decoder d;
  if (!node.is_null()) {
    d.none_ = false;
    d.add(node);
  }
  return d;
}

void Decoder::add(const JsonNode& node) {
  const std::string type = node.component_type();
  if (type == "Sequence") {
    JsonNode list = node["decoders"];
    list.expect_array();
    for (size_t i = 0; i < list.size(); ++i) add(list.at(i));
    return;
  }
  Step step{};
  if (type == "ByteLevel") {
    step.kind = Step::Kind::kByteLevel;
  } else if (type == "Replace") {
    step.kind = Step::Kind::kReplace;
    JsonNode pattern = node["pattern"];
    pattern.expect_object();
    if (!pattern.has("String")) pattern.fail("is not supported (only {\"String\": ...} patterns)");
    step.a = pattern["String"].string();
    step.b = node["content"].string();
    if (step.a.empty()) pattern["String"].fail("must not be empty");
  } else if (type == "ByteFallback") {
    step.kind = Step::Kind::kByteFallback;
  } else if (type == "Fuse") {
    step.kind = Step::Kind::kFuse;
  } else if (type == "Strip") {
    step.kind = Step::Kind::kStrip;
    step.a = node["content"].string();
    size_t i = 0;
    if (step.a.empty() || (unicode::decode(step.a, i), i != step.a.size()))
      node["content"].fail("must be a single character");
    step.start = static_cast<size_t>(node["start"].integer_or(0, 0, 1 << 20));
    step.stop = static_cast<size_t>(node["stop"].integer_or(0, 0, 1 << 20));
  } else if (type == "Metaspace") {
    step.kind = Step::Kind::kMetaspace;
    step.a = node["replacement"].string_or("\xE2\x96\x81");
    step.prepend = node["add_prefix_space"].boolean_or(true);
    if (!node["prepend_scheme"].is_null()) step.prepend = node["prepend_scheme"].string() != "never";
  } else {
    node["type"].fail("'" + type + "' is not a supported decoder",
                      "supported: ByteLevel, Sequence, Replace, ByteFallback, Fuse, Strip, Metaspace");
  }
  steps_.push_back(std::move(step));
}

void append_byte_level_bytes(std::string_view token, std::string& out) {
  const size_t mark = out.size();
  size_t i = 0;
  while (i < token.size()) {
    const int b = byte_level_byte(unicode::decode(token, i));
    if (b < 0) {  // not from the byte alphabet: keep the token as it is
      out.resize(mark);
      out.append(token);
      return;
    }
    out += static_cast<char>(b);
  }
}

namespace {

std::string replace_all(const std::string& s, const std::string& from, const std::string& to) {
  std::string out;
  size_t at = 0;
  for (size_t hit = s.find(from); hit != std::string::npos; hit = s.find(from, at)) {
    out.append(s, at, hit - at);
    out += to;
    at = hit + from.size();
  }
  out.append(s, at, std::string::npos);
  return out;
}

// "<0xNN>" -> the byte, else -1.
int fallback_byte(const std::string& t) {
  if (t.size() != 6 || t.compare(0, 3, "<0x") != 0 || t[5] != '>') return -1;
  auto hex = [](char c) { return c >= '0' && c <= '9' ? c - '0' : c >= 'A' && c <= 'F' ? c - 'A' + 10 : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1; };
  const int hi = hex(t[3]), lo = hex(t[4]);
  return hi < 0 || lo < 0 ? -1 : hi * 16 + lo;
}

// The code point boundaries of s (start offsets plus s.size()).
std::vector<size_t> char_starts(const std::string& s) {
  std::vector<size_t> starts;
  for (size_t i = 0; i < s.size();) {
    starts.push_back(i);
    unicode::decode(s, i);
  }
  starts.push_back(s.size());
  return starts;
}

}  // namespace

std::string Decoder::decode(std::vector<std::string> tokens) const {
  if (none_) {
    std::string out;
    for (size_t k = 0; k < tokens.size(); ++k) {
      if (k) out += ' ';
      out += tokens[k];
    }
    return out;
  }
  for (const Step& step : steps_) {
    switch (step.kind) {
      case Step::Kind::kByteLevel: {
        std::string bytes;
        for (const std::string& t : tokens) append_byte_level_bytes(t, bytes);
        tokens.assign(1, unicode::to_valid_utf8(bytes));
        break;
      }
      case Step::Kind::kReplace:
        for (std::string& t : tokens) t = replace_all(t, step.a, step.b);
        break;
      case Step::Kind::kByteFallback: {
        std::vector<std::string> out;
        std::string pending;
        auto flush = [&] {
          if (pending.empty()) return;
          if (unicode::is_valid_utf8(pending)) out.push_back(pending);
          else
            for (size_t k = 0; k < pending.size(); ++k) out.emplace_back("\xEF\xBF\xBD");  // one U+FFFD per byte
          pending.clear();
        };
        for (std::string& t : tokens) {
          const int b = fallback_byte(t);
          if (b >= 0) {
            pending += static_cast<char>(b);
          } else {
            flush();
            out.push_back(std::move(t));
          }
        }
        flush();
        tokens = std::move(out);
        break;
      }
      case Step::Kind::kFuse: {
        std::string all;
        for (const std::string& t : tokens) all += t;
        tokens.assign(1, std::move(all));
        break;
      }
      case Step::Kind::kStrip:
        for (std::string& t : tokens) {
          const std::vector<size_t> starts = char_starts(t);
          const size_t chars = starts.size() - 1;
          auto is_content = [&](size_t c) { return t.compare(starts[c], starts[c + 1] - starts[c], step.a) == 0; };
          size_t first = 0, last = chars;
          while (first < step.start && first < chars && is_content(first)) ++first;
          for (size_t k = 0; k < step.stop && last > first && is_content(last - 1); ++k) --last;
          t = t.substr(starts[first], starts[last] - starts[first]);
        }
        break;
      case Step::Kind::kMetaspace:
        for (size_t k = 0; k < tokens.size(); ++k) {
          tokens[k] = replace_all(tokens[k], step.a, " ");
          if (k == 0 && step.prepend && !tokens[k].empty() && tokens[k][0] == ' ') tokens[k].erase(0, 1);
        }
        break;
    }
  }
  std::string out;
  for (const std::string& t : tokens) out += t;
  return out;
}

}  // namespace rl::model
