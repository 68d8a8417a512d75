#include "engine/block_manager.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace rl::engine {

BlockManager::BlockManager(int64_t num_blocks, int64_t block_size, bool prefix_cache)
    : block_size_(block_size), prefix_cache_(prefix_cache), blocks_(static_cast<size_t>(num_blocks)) {
  if (num_blocks < 1 || block_size < 1)
    throw std::invalid_argument("BlockManager: need at least one block of at least one token");
  fresh_.reserve(blocks_.size());
  for (int64_t i = num_blocks - 1; i >= 0; --i) fresh_.push_back(static_cast<int32_t>(i));
}

uint64_t BlockManager::hash_block(uint64_t parent, const int32_t* tokens, int64_t n) {
  // FNV-1a over the parent hash and the token ids, then a final avalanche.
  uint64_t h = 1469598103934665603ull ^ (parent * 0x9e3779b97f4a7c15ull);
  for (int64_t i = 0; i < n; ++i) {
    uint32_t t = static_cast<uint32_t>(tokens[i]);
    for (int b = 0; b < 4; ++b) {
      h ^= (t >> (8 * b)) & 0xffu;
      h *= 1099511628211ull;
    }
  }
  h ^= h >> 33;
  h *= 0xff51afd7ed558ccdull;
  h ^= h >> 33;
  return h;
}

std::vector<uint64_t> BlockManager::block_hashes(const std::vector<int32_t>& tokens, int64_t max_tokens,
                                                 uint64_t root) const {
  const int64_t n = std::min<int64_t>(max_tokens, static_cast<int64_t>(tokens.size())) / block_size_;
  std::vector<uint64_t> out;
  out.reserve(static_cast<size_t>(std::max<int64_t>(n, 0)));
  uint64_t parent = root;
  for (int64_t b = 0; b < n; ++b) {
    parent = hash_block(parent, tokens.data() + b * block_size_, block_size_);
    out.push_back(parent);
  }
  return out;
}

BlockManager::Match BlockManager::match(const std::vector<int32_t>& tokens, int64_t max_tokens, uint64_t root) const {
  Match m;
  if (!prefix_cache_) return m;
  uint64_t parent = root;
  const int64_t n = std::min<int64_t>(max_tokens, static_cast<int64_t>(tokens.size())) / block_size_;
  for (int64_t b = 0; b < n; ++b) {
    const int32_t* t = tokens.data() + b * block_size_;
    uint64_t h = hash_block(parent, t, block_size_);
    auto it = by_hash_.find(h);
    if (it == by_hash_.end()) {
      m.next_hash = h;
      break;
    }
    const Block& blk = blocks_[static_cast<size_t>(it->second)];
    if (blk.parent != parent || !std::equal(blk.tokens.begin(), blk.tokens.end(), t)) {
      m.next_hash = h;
      break;
    }
    ++m.blocks;
    if (blk.ref == 0) ++m.reused_free;
    parent = h;
  }
  return m;
}

std::vector<int32_t> BlockManager::acquire_prefix(const std::vector<int32_t>& tokens, int64_t n, uint64_t root) {
  std::vector<int32_t> out;
  uint64_t parent = root;
  for (int64_t b = 0; b < n; ++b) {
    uint64_t h = hash_block(parent, tokens.data() + b * block_size_, block_size_);
    auto it = by_hash_.find(h);
    if (it == by_hash_.end()) throw std::logic_error("BlockManager::acquire_prefix: block " + std::to_string(b) +
                                                     " is not cached (call match() first)");
    Block& blk = blocks_[static_cast<size_t>(it->second)];
    if (blk.ref++ == 0) lru_.erase(blk.lru_pos);
    out.push_back(it->second);
    parent = h;
  }
  return out;
}

void BlockManager::uncommit(int32_t id) {
  Block& blk = blocks_[static_cast<size_t>(id)];
  if (!blk.committed) return;
  auto it = by_hash_.find(blk.hash);
  if (it != by_hash_.end() && it->second == id) by_hash_.erase(it);
  blk.committed = false;
  blk.tokens.clear();
  blk.tokens.shrink_to_fit();
}

std::optional<int32_t> BlockManager::allocate() {
  int32_t id;
  if (!fresh_.empty()) {
    id = fresh_.back();
    fresh_.pop_back();
  } else if (!lru_.empty()) {
    id = lru_.front();  // evict the least recently released cached block
    lru_.pop_front();
    uncommit(id);
  } else {
    return std::nullopt;
  }
  blocks_[static_cast<size_t>(id)].ref = 1;
  return id;
}

void BlockManager::release(const std::vector<int32_t>& ids) {
  // Release the tail first so that, under eviction, a prefix's later blocks go
  // before its earlier ones (an earlier block is useful without the later ones).
  for (auto it = ids.rbegin(); it != ids.rend(); ++it) {
    Block& blk = blocks_[static_cast<size_t>(*it)];
    if (blk.ref <= 0) throw std::logic_error("BlockManager::release: block " + std::to_string(*it) + " is not in use");
    if (--blk.ref > 0) continue;
    if (blk.committed) {
      lru_.push_back(*it);
      blk.lru_pos = std::prev(lru_.end());
    } else {
      fresh_.push_back(*it);
    }
  }
}

void BlockManager::commit(const std::vector<int32_t>& tokens, const std::vector<int32_t>& ids, int64_t num_computed,
                          int64_t& committed, uint64_t root) {
  if (!prefix_cache_) return;
  const int64_t full = std::min<int64_t>(num_computed / block_size_, static_cast<int64_t>(ids.size()));
  uint64_t parent = root;
  int64_t b = committed / block_size_;
  if (b > 0) parent = blocks_[static_cast<size_t>(ids[static_cast<size_t>(b - 1)])].hash;
  for (; b < full; ++b) {
    const int32_t* t = tokens.data() + b * block_size_;
    uint64_t h = hash_block(parent, t, block_size_);
    Block& blk = blocks_[static_cast<size_t>(ids[static_cast<size_t>(b)])];
    // A block another sequence already committed under this hash keeps the
    // entry; this copy still records its hash so later blocks chain from it.
    blk.hash = h;
    blk.parent = parent;
    if (!blk.committed && by_hash_.find(h) == by_hash_.end()) {
      blk.committed = true;
      blk.tokens.assign(t, t + block_size_);
      by_hash_.emplace(h, ids[static_cast<size_t>(b)]);
    }
    parent = h;
  }
  committed = std::max(committed, full * block_size_);
}

void BlockManager::flush() {
  for (int32_t id : lru_) {
    uncommit(id);
    fresh_.push_back(id);
  }
  lru_.clear();
  for (size_t i = 0; i < blocks_.size(); ++i) uncommit(static_cast<int32_t>(i));
  by_hash_.clear();
}

}  // namespace rl::engine
