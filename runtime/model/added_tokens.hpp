// tokenizer.json "added_tokens": tokens matched in the text before the model runs
// (special tokens like <|im_start|>, and plain added tokens like <think>).
//
// As in HF `tokenizers`: tokens with normalized=false are matched in the raw text,
// those with normalized=true in each normalized piece (their own content normalized
// the same way); leftmost match first, longest on ties; single_word requires word
// boundaries; lstrip/rstrip absorb the whitespace on that side.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace rl::model {

class Normalizer;

struct AddedToken {
  int32_t id = -1;
  std::string content;
  bool special = false;
  bool lstrip = false;
  bool rstrip = false;
  bool single_word = false;
  bool normalized = false;
  // What id_to_token and decode give: the content, or for normalized tokens the
  // content as normalized (HF does this: "<x>" under Prepend("▁") decodes as " <x>").
  std::string text;
};

class AddedVocabulary {
 public:
  void add(AddedToken token);
  void build(const Normalizer& normalizer);  // after the last add()

  struct Segment {
    int32_t id;  // -1: text to encode
    uint32_t begin, end;
  };
  // Splits `text` by the tokens of one kind (normalized or not) into `out`.
  void split(std::string_view text, bool normalized, std::vector<Segment>& out) const;
  bool has_normalized() const { return !normalized_.empty(); }

  const AddedToken* by_id(int32_t id) const;
  int32_t by_content(std::string_view content) const;  // -1 when absent
  const std::vector<AddedToken>& tokens() const { return tokens_; }
  int32_t max_id() const { return max_id_; }

 private:
  // A byte trie over the token texts of one kind.
  class Matcher {
   public:
    void add(std::string_view text, int32_t token);
    bool empty() const { return nodes_.size() <= 1; }
    // Leftmost-longest match at or after `from`: (start, end, token) or token -1.
    void find(std::string_view s, size_t from, size_t& start, size_t& end, int32_t& token) const;

   private:
    struct Node {
      int32_t token = -1;
      std::vector<std::pair<unsigned char, int32_t>> children;
    };
    std::vector<Node> nodes_{Node{}};
    bool first_[256] = {};
  };
  std::vector<AddedToken> tokens_;
  std::unordered_map<int32_t, size_t> by_id_;
  std::unordered_map<std::string, int32_t> by_content_;
  Matcher raw_, normalized_;
  int32_t max_id_ = -1;
};

}  // namespace rl::model
