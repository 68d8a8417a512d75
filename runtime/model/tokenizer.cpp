// Tokenizer: the public API over Tokenizer::Impl (tokenizer_impl.hpp).
//
// encode: invalid UTF-8 -> U+FFFD; split out added tokens (raw text); per piece:
//         normalize, split out normalized added tokens, pre-tokenize, BPE; then the
//         post-processor (BOS etc.) when add_special_tokens.
// decode: id -> token string (added tokens first) -> decoder chain; unknown ids are
//         skipped, as HF does.
// A Tokenizer is immutable after loading and safe for concurrent const use: the
// BPE word cache is sharded behind mutexes, scratch buffers are thread_local, and
// the chat template is parsed once under a mutex.
#include "model/tokenizer.hpp"

#include <algorithm>
#include <cstdio>
#include <system_error>

#include "base/json_input.hpp"
#include "model/chat_template.hpp"
#include "model/tokenizer_impl.hpp"
#include "model/unicode.hpp"

namespace rl::model {

namespace fs = std::filesystem;

Tokenizer::Impl::Impl() = default;
Tokenizer::Impl::~Impl() = default;

Tokenizer::Tokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Tokenizer::~Tokenizer() = default;
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;

// ---- loading ----------------------------------------------------------------------------
namespace {

std::string read_file(const fs::path& path) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) {
    const std::error_code ec(errno, std::generic_category());
    throw Error("tokenizer: cannot open " + path.string() + ": " + ec.message());
  }
  std::string data;
  char buf[1 << 16];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) data.append(buf, n);
  const bool failed = std::ferror(f);
  std::fclose(f);
  if (failed) throw Error("tokenizer: cannot read " + path.string());
  return data;
}

nlohmann::json read_json_file(const fs::path& path) {
  const std::string text = read_file(path);
  return json_input::parse(text, path.string(), json_input::file_limits());
}

// eos_token_id of config.json / generation_config.json: an id or a list of ids.
void add_eos_ids(const fs::path& file, Tokenizer::Impl& impl) {
  std::error_code ec;
  if (!fs::is_regular_file(file, ec)) return;
  nlohmann::json j;
  try {
    j = read_json_file(file);
  } catch (const std::exception&) {
    return;  // a broken config.json is reported by whoever loads the model config
  }
  if (!j.is_object() || !j.contains("eos_token_id")) return;
  const nlohmann::json& v = j["eos_token_id"];
  auto add = [&](const nlohmann::json& x) {
    if (!x.is_number_integer()) return;
    const int64_t id = x.get<int64_t>();
    if (id < 0 || id >= impl.vocab_size) return;
    if (std::find(impl.eos_ids.begin(), impl.eos_ids.end(), id) == impl.eos_ids.end())
      impl.eos_ids.push_back(static_cast<int32_t>(id));
  };
  if (v.is_array())
    for (const auto& x : v) add(x);
  else
    add(v);
}

}  // namespace

Tokenizer Tokenizer::load(const fs::path& path) {
  std::error_code ec;
  fs::path file = path;
  fs::path dir = path.parent_path();
  if (fs::is_directory(path, ec)) {
    dir = path;
    file = path / "tokenizer.json";
    if (!fs::exists(file, ec))
      throw Error("tokenizer: " + path.string() + " has no tokenizer.json",
                  "pass a model directory (tokenizer.json, tokenizer_config.json) or a tokenizer.json file");
  }
  const std::string text = read_file(file);
  nlohmann::json config;
  const fs::path config_file = dir / "tokenizer_config.json";
  if (fs::is_regular_file(config_file, ec)) config = read_json_file(config_file);
  auto impl = build_tokenizer_from_text(text, config, file.string());
  impl->config_source = config_file.string();
  add_eos_ids(dir / "config.json", *impl);
  add_eos_ids(dir / "generation_config.json", *impl);
  return Tokenizer(std::move(impl));
}

Tokenizer Tokenizer::from_json(const nlohmann::json& tokenizer_json, const nlohmann::json& tokenizer_config,
                               const std::string& source) {
  return Tokenizer(build_tokenizer_from_json(tokenizer_json, tokenizer_config, source));
}

Tokenizer Tokenizer::from_json_text(std::string_view tokenizer_json, const nlohmann::json& tokenizer_config,
                                    const std::string& source) {
  return Tokenizer(build_tokenizer_from_text(tokenizer_json, tokenizer_config, source));
}

// ---- encoding --------------------------------------------------------------------------------
namespace {

void encode_words(const Tokenizer::Impl& m, std::string_view text, bool at_start, std::vector<int32_t>& ids) {
  thread_local PieceList pieces;
  m.pre_tokenizer.run(text, at_start, pieces);
  for (size_t k = 0; k < pieces.spans.size(); ++k) m.model.encode_word(pieces.piece(k), ids);
}

// One stretch of text between raw-matched added tokens.
void encode_segment(const Tokenizer::Impl& m, std::string_view text, bool at_start, std::vector<int32_t>& ids) {
  std::string normalized;
  if (!m.normalizer.empty()) text = m.normalizer.apply(text, normalized);
  if (!m.added.has_normalized()) {
    encode_words(m, text, at_start, ids);
    return;
  }
  std::vector<AddedVocabulary::Segment> segs;
  m.added.split(text, true, segs);
  for (const auto& s : segs) {
    if (s.id >= 0) ids.push_back(s.id);
    else encode_words(m, text.substr(s.begin, s.end - s.begin), at_start && s.begin == 0, ids);
  }
}

}  // namespace

std::vector<int32_t> Tokenizer::encode(std::string_view text, const EncodeOptions& opts) const {
  const Impl& m = *impl_;
  std::string repaired;
  if (!unicode::is_valid_utf8(text)) {
    repaired = unicode::to_valid_utf8(text);
    text = repaired;
  }
  std::vector<int32_t> ids;
  ids.reserve(text.size() / 3 + 4);
  thread_local std::vector<AddedVocabulary::Segment> segs;  // encode_segment uses its own
  m.added.split(text, false, segs);
  for (const auto& s : segs) {
    if (s.id >= 0) ids.push_back(s.id);
    else encode_segment(m, text.substr(s.begin, s.end - s.begin), s.begin == 0, ids);
  }
  if (opts.add_special_tokens) m.post_processor.apply(ids);
  return ids;
}

// ---- decoding --------------------------------------------------------------------------------
std::string Tokenizer::decode(const std::vector<int32_t>& ids, const DecodeOptions& opts) const {
  const Impl& m = *impl_;
  if (m.fast_decode) {
    std::string bytes;
    bytes.reserve(ids.size() * 4);
    for (int32_t id : ids) {
      if (id < 0 || id >= m.vocab_size) continue;
      if (opts.skip_special_tokens && is_special(id)) continue;
      const auto k = static_cast<size_t>(id);
      bytes.append(m.decoded_arena, m.decoded_offsets[k], m.decoded_offsets[k + 1] - m.decoded_offsets[k]);
    }
    return unicode::is_valid_utf8(bytes) ? bytes : unicode::to_valid_utf8(bytes);
  }
  std::vector<std::string> tokens;
  tokens.reserve(ids.size());
  for (int32_t id : ids) {
    if (opts.skip_special_tokens && is_special(id)) continue;
    if (auto t = m.id_to_token(id)) tokens.emplace_back(*t);
  }
  return m.decoder.decode(std::move(tokens));
}

// ---- vocabulary and special tokens --------------------------------------------------------------
int32_t Tokenizer::vocab_size() const { return impl_->vocab_size; }

std::optional<int32_t> Tokenizer::token_to_id(std::string_view token) const {
  const int32_t id = impl_->token_to_id(token);
  return id >= 0 ? std::optional<int32_t>(id) : std::nullopt;
}

std::optional<std::string> Tokenizer::id_to_token(int32_t id) const {
  auto t = impl_->id_to_token(id);
  return t ? std::optional<std::string>(std::string(*t)) : std::nullopt;
}

bool Tokenizer::is_special(int32_t id) const {
  const AddedToken* t = impl_->added.by_id(id);
  return t && t->special;
}

std::optional<int32_t> Tokenizer::bos_token_id() const { return impl_->bos_id; }
std::vector<int32_t> Tokenizer::eos_token_ids() const { return impl_->eos_ids; }
std::optional<int32_t> Tokenizer::pad_token_id() const { return impl_->pad_id; }
const std::string& Tokenizer::source() const { return impl_->source; }

// ---- chat template ------------------------------------------------------------------------------
const ChatTemplate* Tokenizer::chat_template() const {
  const Impl& m = *impl_;
  if (!m.chat_template_source) return nullptr;
  std::lock_guard<std::mutex> lock(m.template_mutex);
  if (!m.chat_template) {
    try {
      // Named with its file: errors read "<path>: chat_template:3:5: ...".
      m.chat_template = std::make_unique<ChatTemplate>(*m.chat_template_source,
                                                       m.config_source + ": " + m.chat_template_name);
    } catch (const Error&) {
      throw;
    } catch (const std::exception& e) {
      throw Error(e.what());
    }
  }
  return m.chat_template.get();
}

std::string Tokenizer::apply_chat_template(const nlohmann::ordered_json& messages,
                                           const nlohmann::ordered_json& kwargs) const {
  const ChatTemplate* t = chat_template();
  if (!t)
    throw Error("tokenizer: " + impl_->source + " has no chat template",
                "tokenizer_config.json next to tokenizer.json needs a \"chat_template\"");
  if (!messages.is_array()) throw Error("apply_chat_template: messages must be an array of {role, content}");
  if (!kwargs.is_null() && !kwargs.is_object()) throw Error("apply_chat_template: kwargs must be an object");
  // What transformers passes: the special token strings, tools/documents (None
  // unless given), add_generation_prompt (false), then the caller's kwargs.
  nlohmann::ordered_json context;  // ordered: `tools | tojson` must keep the caller's key order
  for (const auto& [k, v] : impl_->special_token_strings.items()) context[k] = v;
  context["tools"] = nullptr;
  context["documents"] = nullptr;
  context["add_generation_prompt"] = false;
  if (kwargs.is_object())
    for (auto& [k, v] : kwargs.items()) context[k] = v;
  context["messages"] = messages;
  return t->render(context);  // errors name the template (and file); raise_exception's text as is
}

// ---- IncrementalDecoder --------------------------------------------------------------------------
// The prefix/read offset technique of text-generation-inference: decode the window
// ids[prefix:] and ids[prefix:read]; emit the difference only when it grew and does
// not end in U+FFFD (an incomplete character), then slide the window.
IncrementalDecoder::IncrementalDecoder(const Tokenizer& tok, DecodeOptions opts) : tok_(&tok), opts_(opts) {}

namespace {

bool ends_with_replacement(const std::string& s) {
  return s.size() >= 3 && s.compare(s.size() - 3, 3, "\xEF\xBF\xBD") == 0;
}

// new_text minus its prefix prefix_text, cut at a character boundary.
std::string text_after(const std::string& new_text, const std::string& prefix_text) {
  size_t cut = 0;
  const size_t n = std::min(new_text.size(), prefix_text.size());
  while (cut < n && new_text[cut] == prefix_text[cut]) ++cut;
  if (cut < prefix_text.size())  // the window changed earlier text: keep to a boundary
    while (cut > 0 && (static_cast<unsigned char>(new_text[cut]) & 0xC0) == 0x80) --cut;
  return new_text.substr(cut);
}

}  // namespace

std::string IncrementalDecoder::push(int32_t id) {
  ids_.push_back(id);
  const std::vector<int32_t> prefix(ids_.begin() + static_cast<ptrdiff_t>(prefix_offset_),
                                    ids_.begin() + static_cast<ptrdiff_t>(read_offset_));
  const std::vector<int32_t> window(ids_.begin() + static_cast<ptrdiff_t>(prefix_offset_), ids_.end());
  const std::string prefix_text = tok_->decode(prefix, opts_);
  const std::string new_text = tok_->decode(window, opts_);
  if (new_text.size() <= prefix_text.size() || ends_with_replacement(new_text)) return {};
  std::string out = text_after(new_text, prefix_text);
  prefix_offset_ = read_offset_;
  read_offset_ = ids_.size();
  if (prefix_offset_ > 256) {  // keep memory bounded on long streams
    ids_.erase(ids_.begin(), ids_.begin() + static_cast<ptrdiff_t>(prefix_offset_));
    read_offset_ -= prefix_offset_;
    prefix_offset_ = 0;
  }
  return out;
}

std::string IncrementalDecoder::finish() {
  const std::vector<int32_t> prefix(ids_.begin() + static_cast<ptrdiff_t>(prefix_offset_),
                                    ids_.begin() + static_cast<ptrdiff_t>(read_offset_));
  const std::vector<int32_t> window(ids_.begin() + static_cast<ptrdiff_t>(prefix_offset_), ids_.end());
  const std::string prefix_text = tok_->decode(prefix, opts_);
  const std::string new_text = tok_->decode(window, opts_);
  ids_.clear();
  prefix_offset_ = read_offset_ = 0;
  if (new_text.size() <= prefix_text.size()) return {};
  return text_after(new_text, prefix_text);
}

}  // namespace rl::model
