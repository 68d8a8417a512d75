// tokenizer.json "decoder": turns token strings back into text.
// Supported types: ByteLevel, Sequence, Replace (String patterns), ByteFallback,
// Fuse, Strip, Metaspace. Anything else is an error naming the JSON path.
#pragma once
#include <string>
#include <vector>

#include "model/json_node.hpp"

namespace rl::model {

class Decoder {
 public:
  // `node` is tokenizer.json's "decoder" (null: tokens are joined with spaces, as HF does).
  static Decoder from_json(const JsonNode& node);
  // The decoder is exactly ByteLevel: each token's bytes can be precomputed.
  bool plain_byte_level() const { return steps_.size() == 1 && steps_[0].kind == Step::Kind::kByteLevel; }
  std::string decode(std::vector<std::string> tokens) const;

 private:
  struct Step {
    enum class Kind { kByteLevel, kReplace, kByteFallback, kFuse, kStrip, kMetaspace } kind;
    std::string a, b;     // Replace: a -> b; Strip: a = content; Metaspace: a = replacement
    size_t start = 0, stop = 0;  // Strip
    bool prepend = true;  // Metaspace: strip the first token's leading space
  };
  void add(const JsonNode& node);
  std::vector<Step> steps_;
  bool none_ = true;
};

// ByteLevel decoding of one token: its characters mapped back to bytes, or the
// token's own UTF-8 when a character is outside the byte alphabet (added tokens).
void append_byte_level_bytes(std::string_view token, std::string& out);

}  // namespace rl::model
