// tokenizer.json "normalizer": rewrites text before pre-tokenization.
// Supported types: Sequence, NFC, Prepend, Replace (String patterns), Strip.
// Anything else is an error naming the JSON path.
#pragma once
#include <string>
#include <string_view>
#include <vector>

#include "model/json_node.hpp"

namespace rl::model {

class Normalizer {
 public:
  // `node` is tokenizer.json's "normalizer" (null: none).
  static Normalizer from_json(const JsonNode& node);
  bool empty() const { return steps_.empty(); }
  std::string apply(std::string_view text) const;  // text: valid UTF-8
  // The normalized text: `text` itself when nothing changes it (NFC of NFC text), else
  // a view of `storage`.
  std::string_view apply(std::string_view text, std::string& storage) const;

 private:
  struct Step {
    enum class Kind { kNfc, kPrepend, kReplace, kStrip } kind;
    std::string a, b;  // Prepend: a; Replace: a -> b
    bool left = false, right = false;  // Strip
  };
  void add(const JsonNode& node);
  std::vector<Step> steps_;
};

}  // namespace rl::model
