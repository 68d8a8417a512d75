// The BPE model of tokenizer.json: vocabulary, merge ranks, and the merge loop
// that turns one pre-tokenized word into ids. Private to the tokenizer.
//
// Storage is built for fast loading of 150k-entry vocabularies: every token string
// lives in one arena; token -> id is an open-addressing table of arena offsets;
// merges are a table (left id, right id) -> (rank, merged id).
//
// Thread safety: after finalize(), all const members may be called concurrently
// (the word cache has a mutex per shard).
#pragma once
#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "model/word_cache.hpp"

namespace rl::model {

uint64_t hash_bytes(std::string_view s);

// Open-addressing map from byte strings to ids; keys are copied into an arena.
class TokenMap {
 public:
  void reserve(size_t n);
  void reserve_bytes(size_t n);  // arena capacity
  // False when `key` is already present (its id is then replaced, like a JSON
  // object read into a hash map keeps the last value).
  bool insert(std::string_view key, int32_t id);
  int32_t find(std::string_view key) const;  // -1 when absent
  size_t size() const { return size_; }
  std::string_view key_at(uint32_t offset, uint32_t length) const { return {arena_.data() + offset, length}; }
  template <class Fn>
  void for_each(Fn&& fn) const {  // fn(arena offset, length, id) for every entry
    for (const Slot& s : slots_)
      if (s.id >= 0) fn(s.offset, s.length, s.id);
  }

 private:
  // The first 8 bytes of the key live in the slot: most tokens are that short,
  // so most lookups never touch the arena (one cache miss instead of two).
  struct Slot {
    uint64_t head = 0;
    uint32_t offset = 0, length = 0;
    uint32_t hash = 0;
    int32_t id = -1;  // -1: empty
  };
  static uint64_t head_of(std::string_view key);
  void grow();
  std::vector<Slot> slots_;
  std::string arena_;
  size_t size_ = 0;
};

struct BpeOptions {
  std::optional<std::string> unk_token;
  bool fuse_unk = false;
  bool byte_fallback = false;
  bool ignore_merges = false;
  std::string continuing_subword_prefix;
  std::string end_of_word_suffix;
};

class BpeModel {
 public:
  BpeModel();
  ~BpeModel();

  // ---- building (single-threaded, before finalize) ----
  BpeOptions options;
  void reserve(size_t vocab, size_t merges);
  void reserve_vocab(size_t entries, size_t bytes);
  void add_token(std::string_view token, int32_t id);
  // Registers merge number `rank`; returns an empty string, or what is wrong
  // ("'ab' is not in model.vocab").
  std::string add_merge(std::string_view left, std::string_view right, uint32_t rank);
  // byte_level: words arrive as raw bytes and each byte maps to its GPT-2
  // byte-level character. Returns an empty string, or what is wrong.
  std::string finalize(bool byte_level);

  // ---- use ----
  // Appends the ids of one word (a pre-tokenized piece, already normalized).
  void encode_word(std::string_view word, std::vector<int32_t>& out) const;
  int32_t token_to_id(std::string_view token) const { return vocab_.find(token); }
  std::optional<std::string_view> id_to_token(int32_t id) const;
  int32_t max_id() const { return max_id_; }
  size_t vocab_entries() const { return vocab_.size(); }
  size_t merge_count() const { return merge_count_; }

 private:
  struct MergeSlot {
    uint64_t key = kEmpty;
    uint32_t rank = 0;
    int32_t merged = -1;
  };
  static constexpr uint64_t kEmpty = ~uint64_t{0};
  static constexpr uint32_t kNoRank = ~uint32_t{0};
  const MergeSlot* find_merge(int32_t left, int32_t right) const;
  void initial_symbols(std::string_view word, std::vector<int32_t>& sym) const;
  void merge_small(std::vector<int32_t>& sym) const;
  void merge_large(std::vector<int32_t>& sym) const;
  void encode_uncached(std::string_view word, std::vector<int32_t>& out) const;

  TokenMap vocab_;
  std::vector<std::pair<uint32_t, uint32_t>> id_to_token_;  // (arena offset, length); length ~0u: no token
  std::vector<MergeSlot> merges_;
  size_t merge_count_ = 0;
  int32_t max_id_ = -1;
  bool byte_level_ = false;
  int32_t unk_id_ = -1;
  std::array<int32_t, 256> byte_ids_{};      // byte-level: byte -> id of its character (-1: none)
  std::array<int32_t, 256> fallback_ids_{};  // byte_fallback: byte -> id of "<0xNN>" (-1: none)
  std::array<std::string, 256> byte_chars_;  // byte-level: byte -> its character (UTF-8)

  WordCache cache_;
};

// GPT-2's byte-level alphabet: printable bytes map to themselves, the others to
// U+0100.. in order. byte_level_char(b) is the code point for byte b; the reverse
// map gives -1 for a code point that is not in the alphabet.
char32_t byte_level_char(uint8_t b);
int byte_level_byte(char32_t cp);

}  // namespace rl::model
