#include "model/added_tokens.hpp"

#include <cstring>

#include "model/normalizer.hpp"
#include "model/unicode.hpp"

namespace rl::model {

void AddedVocabulary::add(AddedToken token) {
  max_id_ = std::max(max_id_, token.id);
  auto it = by_id_.find(token.id);
  if (it != by_id_.end()) {
    by_content_.erase(tokens_[it->second].content);
    tokens_[it->second] = token;
  } else {
    by_id_.emplace(token.id, tokens_.size());
    tokens_.push_back(token);
  }
  by_content_[token.content] = token.id;
}

void AddedVocabulary::build(const Normalizer& normalizer) {
  for (size_t k = 0; k < tokens_.size(); ++k) {
    AddedToken& t = tokens_[k];
    t.text = t.content;
    if (t.content.empty()) continue;
    if (t.normalized) {
      if (!normalizer.empty()) t.text = normalizer.apply(t.content);
      if (!t.text.empty()) normalized_.add(t.text, static_cast<int32_t>(k));
    } else {
      raw_.add(t.content, static_cast<int32_t>(k));
    }
  }
}

const AddedToken* AddedVocabulary::by_id(int32_t id) const {
  auto it = by_id_.find(id);
  return it == by_id_.end() ? nullptr : &tokens_[it->second];
}

int32_t AddedVocabulary::by_content(std::string_view content) const {
  auto it = by_content_.find(std::string(content));
  return it == by_content_.end() ? -1 : it->second;
}

void AddedVocabulary::Matcher::add(std::string_view text, int32_t token) {
  int32_t node = 0;
  for (unsigned char c : text) {
    int32_t child = -1;
    for (auto& [byte, next] : nodes_[node].children)
      if (byte == c) child = next;
    if (child < 0) {
      child = static_cast<int32_t>(nodes_.size());
      nodes_[node].children.emplace_back(c, child);
      nodes_.emplace_back();
    }
    node = child;
  }
  nodes_[node].token = token;
  first_[static_cast<unsigned char>(text[0])] = true;
}

void AddedVocabulary::Matcher::find(std::string_view s, size_t from, size_t& start, size_t& end,
                                    int32_t& token) const {
  token = -1;
  for (size_t i = from; i < s.size(); ++i) {
    if (!first_[static_cast<unsigned char>(s[i])]) continue;
    int32_t node = 0;
    for (size_t j = i; j < s.size(); ++j) {
      int32_t child = -1;
      for (auto& [byte, next] : nodes_[node].children)
        if (byte == static_cast<unsigned char>(s[j])) child = next;
      if (child < 0) break;
      node = child;
      if (nodes_[node].token >= 0) {
        token = nodes_[node].token;
        start = i;
        end = j + 1;
      }
    }
    if (token >= 0) return;
  }
}

namespace {

// Start of the code point that ends at `end` (exclusive).
size_t last_char_start(std::string_view s, size_t end) {
  size_t k = end - 1;
  while (k > 0 && (static_cast<unsigned char>(s[k]) & 0xC0) == 0x80) --k;
  return k;
}

bool is_word_char(char32_t c) { return c == '_' || unicode::is_alphanumeric(c); }

}  // namespace

void AddedVocabulary::split(std::string_view text, bool normalized, std::vector<Segment>& out) const {
  out.clear();
  const Matcher& m = normalized ? normalized_ : raw_;
  size_t done = 0;  // text before this is in `out`
  size_t from = 0;  // where the next search starts
  while (!m.empty() && from < text.size()) {
    size_t start = 0, end = 0;
    int32_t k = -1;
    m.find(text, from, start, end, k);
    if (k < 0) break;
    from = end;
    const AddedToken& t = tokens_[static_cast<size_t>(k)];
    if (start < done) continue;  // overlaps what an rstrip already took
    if (t.single_word) {
      bool left_ok = true, right_ok = true;
      if (start > 0) {
        size_t i = last_char_start(text, start);
        left_ok = !is_word_char(unicode::decode(text, i));
      }
      if (end < text.size()) {
        size_t i = end;
        right_ok = !is_word_char(unicode::decode(text, i));
      }
      if (!left_ok || !right_ok) continue;
    }
    if (t.lstrip) {
      size_t s = start;
      while (s > done) {
        const size_t c = last_char_start(text, s);
        size_t i = c;
        if (!unicode::is_whitespace(unicode::decode(text, i))) break;
        s = c;
      }
      start = s;
    }
    if (t.rstrip) {
      while (end < text.size()) {
        size_t i = end;
        if (!unicode::is_whitespace(unicode::decode(text, i))) break;
        end = i;
      }
      from = end;
    }
    if (start > done) out.push_back({-1, static_cast<uint32_t>(done), static_cast<uint32_t>(start)});
    out.push_back({t.id, static_cast<uint32_t>(start), static_cast<uint32_t>(end)});
    done = end;
  }
  if (done < text.size() || out.empty())
    out.push_back({-1, static_cast<uint32_t>(done), static_cast<uint32_t>(text.size())});
}

}  // namespace rl::model
