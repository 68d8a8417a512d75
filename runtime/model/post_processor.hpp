// tokenizer.json "post_processor": adds special tokens around an encoded text
// when add_special_tokens is set. Supported types: TemplateProcessing (the
// "single" template), ByteLevel (nothing to do without offsets), RobertaProcessing,
// BertProcessing, Sequence. Anything else is an error naming the JSON path.
#pragma once
#include <cstdint>
#include <vector>

#include "model/json_node.hpp"

namespace rl::model {

class PostProcessor {
 public:
  static PostProcessor from_json(const JsonNode& node);
  // ids of one sequence -> with the template's special tokens.
  void apply(std::vector<int32_t>& ids) const;
  bool adds_tokens() const { return !items_.empty(); }
  // Ids the template puts before the sequence (e.g. BOS).
  std::vector<int32_t> leading_ids() const;

 private:
  void add(const JsonNode& node);
  // One template item: the sequence itself (ids empty) or special ids.
  struct Item {
    bool sequence = false;
    std::vector<int32_t> ids;
  };
  std::vector<Item> items_;
};

}  // namespace rl::model
