#include "model/normalizer.hpp"

#include "model/unicode.hpp"

namespace rl::model {

Normalizer Normalizer::from_json(const JsonNode& node) {
  Normalizer n;
  if (!node.is_null()) n.add(node);
  return n;
}

void Normalizer::add(const JsonNode& node) {
  const std::string type = node.component_type();
  if (type == "Sequence") {
    JsonNode list = node["normalizers"];
    list.expect_array();
    for (size_t i = 0; i < list.size(); ++i) add(list.at(i));
    return;
  }
  Step step{};
  if (type == "NFC") {
    step.kind = Step::Kind::kNfc;
  } else if (type == "Prepend") {
    step.kind = Step::Kind::kPrepend;
    step.a = node["prepend"].string();
  } else if (type == "Replace") {
    step.kind = Step::Kind::kReplace;
    JsonNode pattern = node["pattern"];
    pattern.expect_object();
    if (!pattern.has("String"))
      pattern.fail("is not supported (only {\"String\": ...} patterns)",
                   "a Regex Replace normalizer needs a scanner; open an issue with the tokenizer");
    step.a = pattern["String"].string();
    step.b = node["content"].string();
    if (step.a.empty()) pattern["String"].fail("must not be empty");
  } else if (type == "Strip") {
    step.kind = Step::Kind::kStrip;
    step.left = node["strip_left"].boolean_or(true);
    step.right = node["strip_right"].boolean_or(true);
  } else {
    node["type"].fail("'" + type + "' is not a supported normalizer", "supported: Sequence, NFC, Prepend, Replace, Strip");
  }
  steps_.push_back(std::move(step));
}

std::string_view Normalizer::apply(std::string_view text, std::string& storage) const {
  if (steps_.size() == 1 && steps_[0].kind == Step::Kind::kNfc && unicode::is_nfc_quick(text)) return text;
  storage = apply(text);
  return storage;
}

std::string Normalizer::apply(std::string_view text) const {
  std::string s(text);
  for (const Step& step : steps_) {
    switch (step.kind) {
      case Step::Kind::kNfc:
        if (!unicode::is_nfc_quick(s)) s = unicode::nfc(s);
        break;
      case Step::Kind::kPrepend:
        if (!s.empty()) s.insert(0, step.a);
        break;
      case Step::Kind::kReplace: {
        if (s.find(step.a) == std::string::npos) break;
        std::string out;
        out.reserve(s.size() + s.size() / 4);
        size_t at = 0;
        for (size_t hit = s.find(step.a); hit != std::string::npos; hit = s.find(step.a, at)) {
          out.append(s, at, hit - at);
          out += step.b;
          at = hit + step.a.size();
        }
        out.append(s, at, std::string::npos);
        s = std::move(out);
        break;
      }
      case Step::Kind::kStrip: {
        size_t begin = 0, end = s.size();
        if (step.left)
          while (begin < end) {
            size_t j = begin;
            if (!unicode::is_whitespace(unicode::decode(s, j))) break;
            begin = j;
          }
        if (step.right)
          while (end > begin) {
            size_t k = end - 1;  // start of the last character
            while (k > begin && (static_cast<unsigned char>(s[k]) & 0xC0) == 0x80) --k;
            size_t j = k;
            if (!unicode::is_whitespace(unicode::decode(s, j))) break;
            end = k;
          }
        s = s.substr(begin, end - begin);
        break;
      }
    }
  }
  return s;
}

}  // namespace rl::model
