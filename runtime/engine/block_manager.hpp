// The KV cache's block accounting: a fixed number of blocks of `block_size`
// token slots, reference counts, and prefix reuse. A block whose tokens are all
// computed can be committed under a hash of (previous block's hash, its tokens);
// a later sequence with the same prefix acquires those blocks instead of
// recomputing them. Unreferenced committed blocks stay reusable until a fresh
// block is needed, then the least recently released one is evicted.
//
// A chain starts from a root (0: the base model; a LoRA adapter's own otherwise,
// engine/lora_slot.hpp), so blocks computed under one adapter never match another's.
//
// Torch-free and single-threaded (the scheduler thread owns it).
#pragma once
#include <cstdint>
#include <list>
#include <optional>
#include <unordered_map>
#include <vector>

namespace rl::engine {

class BlockManager {
 public:
  BlockManager(int64_t num_blocks, int64_t block_size, bool prefix_cache = true);

  int64_t block_size() const { return block_size_; }
  int64_t num_blocks() const { return static_cast<int64_t>(blocks_.size()); }
  int64_t num_free() const { return static_cast<int64_t>(fresh_.size() + lru_.size()); }  // allocatable
  int64_t num_used() const { return num_blocks() - num_free(); }                        // referenced
  int64_t num_cached_free() const { return static_cast<int64_t>(lru_.size()); }         // reusable, unreferenced
  bool prefix_cache() const { return prefix_cache_; }

  struct Match {
    int64_t blocks = 0;          // whole blocks of the prefix found in the cache
    int64_t reused_free = 0;     // of which are unreferenced (acquiring takes them off the free list)
    std::optional<uint64_t> next_hash;  // hash of the first full block not found (for in-flight dedup)
  };
  // Looks up the longest cached prefix of tokens[0, max_tokens) in whole blocks.
  Match match(const std::vector<int32_t>& tokens, int64_t max_tokens, uint64_t root = 0) const;
  // Hashes of the full blocks of tokens[0, max_tokens) (the chain the cache uses).
  std::vector<uint64_t> block_hashes(const std::vector<int32_t>& tokens, int64_t max_tokens, uint64_t root = 0) const;
  // Takes a reference on the first `n` matched blocks (as returned by match()).
  std::vector<int32_t> acquire_prefix(const std::vector<int32_t>& tokens, int64_t n, uint64_t root = 0);
  // A block for new tokens, or nullopt when none is free.
  std::optional<int32_t> allocate();
  void release(const std::vector<int32_t>& blocks);
  // Commits the sequence's full blocks [committed/bs, num_computed/bs) for reuse;
  // advances `committed` (a multiple of block_size).
  void commit(const std::vector<int32_t>& tokens, const std::vector<int32_t>& blocks, int64_t num_computed,
              int64_t& committed, uint64_t root = 0);
  // Forgets every committed prefix (after a weight update, or on request).
  // Referenced blocks stay with their sequences.
  void flush();

  // Lifetime counters for the hit rate.
  int64_t hit_tokens = 0, queried_tokens = 0;

 private:
  struct Block {
    int32_t ref = 0;
    bool committed = false;
    uint64_t hash = 0, parent = 0;
    std::vector<int32_t> tokens;  // committed contents, to rule out hash collisions
    std::list<int32_t>::iterator lru_pos;
  };
  static uint64_t hash_block(uint64_t parent, const int32_t* tokens, int64_t n);
  void uncommit(int32_t id);

  int64_t block_size_;
  bool prefix_cache_;
  std::vector<Block> blocks_;
  std::vector<int32_t> fresh_;                     // unreferenced, nothing cached
  std::list<int32_t> lru_;                         // unreferenced, committed; front = oldest
  std::unordered_map<uint64_t, int32_t> by_hash_;  // committed blocks
};

}  // namespace rl::engine
