// The BPE word cache: word bytes -> ids, shared by all threads using a tokenizer.
//
// Fill-until-full (like HF's): words are added until a shard holds kWordsPerShard,
// then only looked up; nothing is ever evicted, so there is no churn. Each shard is
// one open-addressing table over two arenas (key bytes, ids) behind its own mutex;
// the caller hashes the word once (the hash picks the shard and the slot).
#pragma once
#include <array>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

namespace rl::model {

class WordCache {
 public:
  static constexpr size_t kShards = 16;
  static constexpr size_t kWordsPerShard = 4096;
  static constexpr size_t kMaxWordBytes = 256;  // longer words are not cached

  WordCache();
  ~WordCache();
  // Appends the cached ids of `word` (hash: hash_bytes(word)) to `out`; false when absent.
  bool find(std::string_view word, uint64_t hash, std::vector<int32_t>& out) const;
  void insert(std::string_view word, uint64_t hash, const int32_t* ids, size_t n) const;  // a cache: logically const

 private:
  struct Slot {
    uint64_t hash = 0;
    uint32_t key_offset = 0, ids_offset = 0;
    uint16_t key_length = 0, id_count = 0;
    bool used = false;
  };
  struct Shard {
    mutable std::mutex mutex;
    std::vector<Slot> slots;  // allocated on the first insert
    std::string keys;
    std::vector<int32_t> ids;
    size_t count = 0;
  };
  std::unique_ptr<std::array<Shard, kShards>> shards_;
};

}  // namespace rl::model
