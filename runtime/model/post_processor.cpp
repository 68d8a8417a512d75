#include "model/post_processor.hpp"

namespace rl::model {

PostProcessor PostProcessor::from_json(const JsonNode& node) {
  PostProcessor p;
  if (!node.is_null()) p.add(node);
  return p;
}

namespace {
constexpr int64_t kMaxId = (int64_t{1} << 24) - 1;
}

void PostProcessor::add(const JsonNode& node) {
  const std::string type = node.component_type();
  if (type == "ByteLevel") return;
  if (type == "Sequence") {
    JsonNode list = node["processors"];
    list.expect_array();
    for (size_t i = 0; i < list.size(); ++i) add(list.at(i));
    return;
  }
  if (!items_.empty())
    node.fail("adds special tokens a second time", "a Sequence may hold one template-like processor");
  if (type == "TemplateProcessing") {
    JsonNode single = node["single"];
    single.expect_array();
    JsonNode specials = node["special_tokens"];
    bool has_sequence = false;
    for (size_t i = 0; i < single.size(); ++i) {
      JsonNode item = single.at(i);
      item.expect_object();
      Item out;
      if (item.has("Sequence")) {
        const std::string id = item["Sequence"]["id"].string();
        if (id != "A") item["Sequence"]["id"].fail("must be \"A\" in the single template, got '" + id + "'");
        out.sequence = true;
        has_sequence = true;
      } else if (item.has("SpecialToken")) {
        const std::string name = item["SpecialToken"]["id"].string();
        specials.expect_object();
        if (!specials.has(name.c_str()))
          item["SpecialToken"]["id"].fail("names '" + name + "', which is not in post_processor.special_tokens");
        JsonNode ids = specials[name.c_str()]["ids"];
        ids.expect_array();
        for (size_t k = 0; k < ids.size(); ++k) out.ids.push_back(static_cast<int32_t>(ids.at(k).integer(0, kMaxId)));
      } else {
        item.fail("must be {\"Sequence\": ...} or {\"SpecialToken\": ...}");
      }
      items_.push_back(std::move(out));
    }
    if (!has_sequence) single.fail("has no {\"Sequence\": {\"id\": \"A\"}} item");
    return;
  }
  if (type == "RobertaProcessing" || type == "BertProcessing") {
    auto special = [&](const char* key) {
      JsonNode pair = node[key];
      pair.expect_array();
      if (pair.size() != 2) pair.fail("must be [token, id]");
      Item it;
      it.ids.push_back(static_cast<int32_t>(pair.at(1).integer(0, kMaxId)));
      return it;
    };
    items_.push_back(special("cls"));
    items_.push_back(Item{true, {}});
    items_.push_back(special("sep"));
    return;
  }
  node["type"].fail("'" + type + "' is not a supported post-processor",
                    "supported: TemplateProcessing, ByteLevel, RobertaProcessing, BertProcessing, Sequence");
}

void PostProcessor::apply(std::vector<int32_t>& ids) const {
  if (items_.empty()) return;
  std::vector<int32_t> out;
  out.reserve(ids.size() + 4);
  for (const Item& it : items_) {
    if (it.sequence) out.insert(out.end(), ids.begin(), ids.end());
    else out.insert(out.end(), it.ids.begin(), it.ids.end());
  }
  ids = std::move(out);
}

std::vector<int32_t> PostProcessor::leading_ids() const {
  std::vector<int32_t> out;
  for (const Item& it : items_) {
    if (it.sequence) break;
    out.insert(out.end(), it.ids.begin(), it.ids.end());
  }
  return out;
}

}  // namespace rl::model
