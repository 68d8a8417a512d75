// Building a Tokenizer::Impl from tokenizer.json (+ tokenizer_config.json).
//
// Two entry points share the component parsers:
//  - from text (Tokenizer::load / parse): one SAX pass streams model.vocab straight
//    into the BPE tables and model.merges into a flat buffer, and builds a DOM for
//    the rest (small). An 11 MB Qwen tokenizer.json never becomes a 150k-node DOM.
//  - from a DOM (Tokenizer::from_json), for callers that already hold one.
// Every error names the file, the JSON path and, where it helps, a hint.
#include <algorithm>

#include "base/json_input.hpp"
#include "model/chat_template.hpp"
#include "model/tokenizer_impl.hpp"

namespace rl::model {
namespace {

constexpr int64_t kMaxId = (int64_t{1} << 24) - 1;  // ids above this are certainly a broken file
constexpr size_t kMaxDepth = 512;

struct MergeRef {
  uint32_t a_offset, a_length, b_offset, b_length;
};

// What the SAX pass captured outside the DOM.
struct Captured {
  bool vocab = false, merges = false;
  std::string merge_arena;
  std::vector<MergeRef> merge_list;
  std::vector<size_t> merge_index;  // position in model.merges (for messages)
};

[[noreturn]] void merge_not_pair(const std::string& source, size_t index) {
  throw Error(source + ": model.merges[" + std::to_string(index) + "] is not a pair",
              "expected 'a b' or [\"a\",\"b\"]");
}

void add_merge_checked(BpeModel& bpe, const std::string& source, size_t index, uint32_t rank, std::string_view a,
                       std::string_view b) {
  std::string err = bpe.add_merge(a, b, rank);
  if (!err.empty())
    throw Error(source + ": model.merges[" + std::to_string(index) + "] ('" + std::string(a) + "' + '" +
                    std::string(b) + "'): " + err,
                "every merge must join two vocabulary tokens into a vocabulary token");
}

// "a b" -> (a, b); false unless exactly one space separates two parts (as HF requires).
bool split_merge_string(std::string_view s, std::string_view& a, std::string_view& b) {
  const size_t sp = s.find(' ');
  if (sp == std::string_view::npos || s.find(' ', sp + 1) != std::string_view::npos) return false;
  a = s.substr(0, sp);
  b = s.substr(sp + 1);
  return true;
}

void check_id(int64_t id, const std::string& source, const std::string& where) {
  if (id < 0 || id > kMaxId)
    throw Error(source + ": " + where + " has id " + std::to_string(id) + ", outside 0.." + std::to_string(kMaxId));
}

// ---- SAX pass ---------------------------------------------------------------------------
class TokenizerSax {
 public:
  TokenizerSax(BpeModel& bpe, Captured& cap, const std::string& source) : bpe_(bpe), cap_(cap), source_(source) {}
  nlohmann::json root;

  bool null() { return value(nullptr); }
  bool boolean(bool v) { return value(v); }
  bool number_integer(int64_t v) { return mode_ == Mode::kVocab ? vocab_id(v) : value(v); }
  bool number_unsigned(uint64_t v) {
    return mode_ == Mode::kVocab ? vocab_id(v > uint64_t(INT64_MAX) ? INT64_MAX : int64_t(v)) : value(v);
  }
  bool number_float(double v, const std::string&) { return value(v); }
  bool string(std::string& s) {
    if (mode_ == Mode::kMerges) {
      if (merge_depth_ == 1) {
        if (parts_ >= 2) merge_not_pair(source_, merge_pos_);
        part_[parts_] = {static_cast<uint32_t>(cap_.merge_arena.size()), static_cast<uint32_t>(s.size())};
        cap_.merge_arena += s;
        ++parts_;
        return true;
      }
      if (s.rfind("#version", 0) == 0) {  // a header line of merges.txt, as HF skips it
        ++merge_pos_;
        return true;
      }
      std::string_view a, b;
      if (!split_merge_string(s, a, b)) merge_not_pair(source_, merge_pos_);
      const auto base = static_cast<uint32_t>(cap_.merge_arena.size());
      cap_.merge_arena += s;
      cap_.merge_list.push_back({base, static_cast<uint32_t>(a.size()), base + static_cast<uint32_t>(a.size()) + 1,
                                 static_cast<uint32_t>(b.size())});
      cap_.merge_index.push_back(merge_pos_++);
      return true;
    }
    return value(std::move(s));
  }
  bool binary(nlohmann::json::binary_t&) { return value(nullptr); }
  bool key(std::string& k) {
    if (mode_ == Mode::kVocab) token_ = std::move(k);
    else key_ = std::move(k);
    return true;
  }
  bool start_object(size_t) {
    if (mode_ == Mode::kDom && in_model() && key_ == "vocab") {
      mode_ = Mode::kVocab;
      cap_.vocab = true;
      return true;
    }
    if (mode_ != Mode::kDom) return not_expected("an object");
    return open(nlohmann::json::object());
  }
  bool end_object() {
    if (mode_ == Mode::kVocab) {
      mode_ = Mode::kDom;
      return true;
    }
    stack_.pop_back();
    keys_.pop_back();
    return true;
  }
  bool start_array(size_t) {
    if (mode_ == Mode::kDom && in_model() && key_ == "merges") {
      mode_ = Mode::kMerges;
      cap_.merges = true;
      merge_depth_ = 0;
      return true;
    }
    if (mode_ == Mode::kMerges && merge_depth_ == 0) {
      merge_depth_ = 1;
      parts_ = 0;
      return true;
    }
    if (mode_ != Mode::kDom) return not_expected("an array");
    return open(nlohmann::json::array());
  }
  bool end_array() {
    if (mode_ == Mode::kMerges) {
      if (merge_depth_ == 0) {
        mode_ = Mode::kDom;
        return true;
      }
      if (parts_ != 2) merge_not_pair(source_, merge_pos_);
      cap_.merge_list.push_back({part_[0].first, part_[0].second, part_[1].first, part_[1].second});
      cap_.merge_index.push_back(merge_pos_++);
      merge_depth_ = 0;
      return true;
    }
    stack_.pop_back();
    keys_.pop_back();
    return true;
  }
  bool parse_error(size_t position, const std::string&, const nlohmann::detail::exception& ex) {
    json_input::Guard g(source_, json_input::file_limits());  // its message quotes the input short and printable
    g.parse_error(position, ex.what());
    throw Error(g.message());
  }

 private:
  enum class Mode { kDom, kVocab, kMerges };
  bool in_model() const { return stack_.size() == 2 && keys_[1] == "model" && stack_[1]->is_object(); }
  bool not_expected(const char* what) {
    if (mode_ == Mode::kVocab)
      throw Error(source_ + ": model.vocab['" + json_input::excerpt(token_) + "'] must be an integer id, got " + what);
    merge_not_pair(source_, merge_pos_);
  }
  bool vocab_id(int64_t id) {
    check_id(id, source_, "model.vocab['" + json_input::excerpt(token_) + "']");
    bpe_.add_token(token_, static_cast<int32_t>(id));
    return true;
  }
  template <class V>
  bool value(V&& v) {
    if (mode_ == Mode::kVocab)
      throw Error(source_ + ": model.vocab['" + json_input::excerpt(token_) + "'] must be an integer id, got " +
                  nlohmann::json(v).type_name());
    if (mode_ == Mode::kMerges) merge_not_pair(source_, merge_pos_);
    if (stack_.empty()) {
      root = std::forward<V>(v);
      return true;
    }
    insert(nlohmann::json(std::forward<V>(v)));
    return true;
  }
  nlohmann::json* insert(nlohmann::json v) {
    nlohmann::json& top = *stack_.back();
    if (top.is_object()) {
      nlohmann::json& slot = top[key_];
      slot = std::move(v);
      return &slot;
    }
    top.push_back(std::move(v));
    return &top.back();
  }
  bool open(nlohmann::json container) {
    if (stack_.size() >= kMaxDepth) throw Error(source_ + ": JSON nested deeper than " + std::to_string(kMaxDepth));
    if (stack_.empty()) {
      root = std::move(container);
      stack_.push_back(&root);
      keys_.emplace_back();
      return true;
    }
    keys_.push_back(stack_.back()->is_object() ? key_ : std::string());
    stack_.push_back(insert(std::move(container)));
    return true;
  }

  BpeModel& bpe_;
  Captured& cap_;
  const std::string& source_;
  std::vector<nlohmann::json*> stack_;
  std::vector<std::string> keys_;
  std::string key_, token_;
  Mode mode_ = Mode::kDom;
  int merge_depth_ = 0;
  size_t merge_pos_ = 0;
  int parts_ = 0;
  std::pair<uint32_t, uint32_t> part_[2];
};

// ---- the model -----------------------------------------------------------------------------------
void read_bpe_options(const JsonNode& model, BpeOptions& o) {
  if (!model["unk_token"].is_null()) o.unk_token = model["unk_token"].string();
  o.fuse_unk = model["fuse_unk"].boolean_or(false);
  o.byte_fallback = model["byte_fallback"].boolean_or(false);
  o.ignore_merges = model["ignore_merges"].boolean_or(false);
  o.continuing_subword_prefix = model["continuing_subword_prefix"].string_or("");
  o.end_of_word_suffix = model["end_of_word_suffix"].string_or("");
  JsonNode dropout = model["dropout"];
  if (!dropout.is_null()) {
    if (!dropout.raw().is_number()) dropout.fail("must be a number or null, got " + dropout.type_name());
    if (dropout.raw().get<double>() != 0.0)
      dropout.fail("is not supported (BPE dropout makes encoding random)", "set it to null for inference");
  }
}

void check_model_type(const JsonNode& model) {
  model.expect_object();
  JsonNode type = model["type"];
  if (type.is_null() && model.has("merges")) return;  // very old files have no type
  const std::string t = type.is_null() ? std::string("(none)") : type.string();
  if (t != "BPE")
    type.fail("'" + t + "' is not a supported model type",
              "rlhost reads BPE tokenizers (byte-level like GPT-2/Qwen/Llama-3, or SentencePiece-style like Llama-2)");
}

// model.vocab and model.merges from a DOM.
void read_vocab_and_merges(const JsonNode& model, BpeModel& bpe, const std::string& source) {
  JsonNode vocab = model["vocab"];
  vocab.expect_object();
  bpe.reserve(vocab.size(), model["merges"].size());
  for (auto& [token, id] : vocab.raw().items()) {
    if (!id.is_number_integer())
      throw Error(source + ": model.vocab['" + token + "'] must be an integer id, got " + id.type_name());
    const int64_t v = id.is_number_unsigned() && id.get<uint64_t>() > uint64_t(INT64_MAX) ? INT64_MAX : id.get<int64_t>();
    check_id(v, source, "model.vocab['" + token + "']");
    bpe.add_token(token, static_cast<int32_t>(v));
  }
  JsonNode merges = model["merges"];
  if (merges.is_null()) return;
  merges.expect_array();
  uint32_t rank = 0;
  for (size_t i = 0; i < merges.size(); ++i) {
    const nlohmann::json& m = merges.raw()[i];
    std::string_view a, b;
    if (m.is_string()) {
      const std::string& s = m.get_ref<const std::string&>();
      if (s.rfind("#version", 0) == 0) continue;
      if (!split_merge_string(s, a, b)) merge_not_pair(source, i);
    } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
      a = m[0].get_ref<const std::string&>();
      b = m[1].get_ref<const std::string&>();
    } else {
      merge_not_pair(source, i);
    }
    add_merge_checked(bpe, source, i, rank++, a, b);
  }
}

void read_added_tokens(const JsonNode& list, Tokenizer::Impl& impl) {
  if (list.is_null()) return;
  list.expect_array();
  for (size_t i = 0; i < list.size(); ++i) {
    JsonNode t = list.at(i);
    t.expect_object();
    AddedToken a;
    a.id = static_cast<int32_t>(t["id"].integer(0, kMaxId));
    a.content = t["content"].string();
    if (a.content.empty()) t["content"].fail("must not be empty");
    a.special = t["special"].boolean_or(false);
    a.lstrip = t["lstrip"].boolean_or(false);
    a.rstrip = t["rstrip"].boolean_or(false);
    a.single_word = t["single_word"].boolean_or(false);
    a.normalized = t["normalized"].boolean_or(!a.special);
    impl.added.add(std::move(a));
  }
}

// ---- tokenizer_config.json ----------------------------------------------------------------------
// A special token entry: "text", {"content": "text", ...} (an AddedToken), or null.
std::optional<std::string> special_token_text(const JsonNode& node) {
  if (node.is_null()) return std::nullopt;
  if (node.is_string()) return node.string();
  if (node.is_object()) return node["content"].string();
  node.fail("must be a string, an AddedToken object or null, got " + node.type_name());
}

void read_config(const nlohmann::json& config, Tokenizer::Impl& impl) {
  if (config.is_null()) return;
  static const std::string kSource = "tokenizer_config.json";
  JsonNode root(config, "", kSource);
  root.expect_object();
  auto lookup = [&](const char* key) -> std::optional<int32_t> {
    auto text = special_token_text(root[key]);
    if (!text) return std::nullopt;
    impl.special_token_strings[key] = *text;
    const int32_t id = impl.token_to_id(*text);
    if (id < 0) root[key].fail("is '" + *text + "', which is not a token of " + impl.source);
    return id;
  };
  impl.bos_id = lookup("bos_token");
  if (auto eos = lookup("eos_token")) impl.eos_ids.push_back(*eos);
  impl.pad_id = lookup("pad_token");
  lookup("unk_token");
  JsonNode tmpl = root["chat_template"];
  if (tmpl.is_string()) {
    impl.chat_template_source = tmpl.string();
  } else if (tmpl.is_array()) {
    for (size_t i = 0; i < tmpl.size(); ++i) {
      JsonNode entry = tmpl.at(i);
      entry.expect_object();
      if (entry["name"].string() == "default") {
        impl.chat_template_source = entry["template"].string();
        impl.chat_template_name = "chat_template[" + std::to_string(i) + "] (default)";
      }
    }
    if (!impl.chat_template_source) tmpl.fail("has no template named \"default\"");
  } else if (!tmpl.is_null()) {
    tmpl.fail("must be a string or a list of {name, template}, got " + tmpl.type_name());
  }
}

// ---- assembling --------------------------------------------------------------------------------------
void build_common(const JsonNode& root, Tokenizer::Impl& impl, const nlohmann::json& config) {
  impl.normalizer = Normalizer::from_json(root["normalizer"]);
  impl.pre_tokenizer = PreTokenizer::from_json(root["pre_tokenizer"]);
  read_added_tokens(root["added_tokens"], impl);
  // Before anything is sized by the highest id: a corrupt id must not allocate gigabytes.
  const int32_t max_id = std::max(impl.model.max_id(), impl.added.max_id());
  const size_t entries = impl.model.vocab_entries() + impl.added.tokens().size();
  if (max_id < 0) throw Error(impl.source + ": model.vocab is empty", "a tokenizer needs at least one token");
  if (static_cast<size_t>(max_id) > 4 * entries + 65536)
    throw Error(impl.source + ": token ids are not dense (highest id " + std::to_string(max_id) + " for " +
                std::to_string(entries) + " tokens)", "is model.vocab complete?");
  impl.vocab_size = max_id + 1;
  if (std::string err = impl.model.finalize(impl.pre_tokenizer.byte_level()); !err.empty())
    throw Error(impl.source + ": " + err);
  impl.added.build(impl.normalizer);
  impl.post_processor = PostProcessor::from_json(root["post_processor"]);
  impl.decoder = Decoder::from_json(root["decoder"]);
  read_config(config, impl);

  if (impl.decoder.plain_byte_level()) {
    impl.fast_decode = true;
    impl.decoded_offsets.assign(static_cast<size_t>(impl.vocab_size) + 1, 0);
    for (int32_t id = 0; id < impl.vocab_size; ++id) {
      impl.decoded_offsets[static_cast<size_t>(id)] = static_cast<uint32_t>(impl.decoded_arena.size());
      if (auto tok = impl.id_to_token(id)) append_byte_level_bytes(*tok, impl.decoded_arena);
    }
    impl.decoded_offsets.back() = static_cast<uint32_t>(impl.decoded_arena.size());
  }
}

}  // namespace

std::unique_ptr<Tokenizer::Impl> build_tokenizer_from_text(std::string_view text, const nlohmann::json& config,
                                                            const std::string& source) {
  auto impl = std::make_unique<Tokenizer::Impl>();
  impl->source = source;
  Captured cap;
  // Rough sizes from the file size (the vocabulary and merges are most of it).
  impl->model.reserve_vocab(0, text.size() / 8);
  cap.merge_arena.reserve(text.size() / 6);
  cap.merge_list.reserve(text.size() / 80);
  cap.merge_index.reserve(text.size() / 80);
  TokenizerSax sax(impl->model, cap, source);
  nlohmann::json::sax_parse(text.begin(), text.end(), &sax);
  JsonNode root(sax.root, "", source);
  root.expect_object();
  JsonNode model = root["model"];
  if (model.is_null()) root.fail("has no \"model\"");
  check_model_type(model);
  read_bpe_options(model, impl->model.options);
  if (!cap.vocab) {
    read_vocab_and_merges(model, impl->model, source);  // odd layouts (e.g. vocab given as something else)
  } else {
    if (!cap.merges && !model["merges"].is_null()) model["merges"].expect_array();
    impl->model.reserve(impl->model.vocab_entries(), cap.merge_list.size());
    for (size_t k = 0; k < cap.merge_list.size(); ++k) {
      const MergeRef& m = cap.merge_list[k];
      add_merge_checked(impl->model, source, cap.merge_index[k], static_cast<uint32_t>(k),
                        std::string_view(cap.merge_arena).substr(m.a_offset, m.a_length),
                        std::string_view(cap.merge_arena).substr(m.b_offset, m.b_length));
    }
  }
  build_common(root, *impl, config);
  return impl;
}

std::unique_ptr<Tokenizer::Impl> build_tokenizer_from_json(const nlohmann::json& tokenizer_json,
                                                            const nlohmann::json& config, const std::string& source) {
  auto impl = std::make_unique<Tokenizer::Impl>();
  impl->source = source;
  JsonNode root(tokenizer_json, "", source);
  root.expect_object();
  JsonNode model = root["model"];
  if (model.is_null()) root.fail("has no \"model\"");
  check_model_type(model);
  read_bpe_options(model, impl->model.options);
  read_vocab_and_merges(model, impl->model, source);
  build_common(root, *impl, config);
  return impl;
}

}  // namespace rl::model
