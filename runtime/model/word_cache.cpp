#include "model/word_cache.hpp"

#include <cstring>

namespace rl::model {

namespace {
constexpr size_t kSlots = WordCache::kWordsPerShard * 2;  // load <= 0.5
static_assert((kSlots & (kSlots - 1)) == 0, "slot count must be a power of two");
inline size_t shard_of(uint64_t hash) { return static_cast<size_t>(hash >> 60) % WordCache::kShards; }
}  // namespace

WordCache::WordCache() : shards_(std::make_unique<std::array<Shard, kShards>>()) {}
WordCache::~WordCache() = default;

bool WordCache::find(std::string_view word, uint64_t hash, std::vector<int32_t>& out) const {
  const Shard& s = (*shards_)[shard_of(hash)];
  std::lock_guard<std::mutex> lock(s.mutex);
  if (s.slots.empty()) return false;
  for (size_t i = hash & (kSlots - 1);; i = (i + 1) & (kSlots - 1)) {
    const Slot& slot = s.slots[i];
    if (!slot.used) return false;
    if (slot.hash == hash && slot.key_length == word.size() &&
        std::memcmp(s.keys.data() + slot.key_offset, word.data(), word.size()) == 0) {
      out.insert(out.end(), s.ids.begin() + slot.ids_offset, s.ids.begin() + slot.ids_offset + slot.id_count);
      return true;
    }
  }
}

void WordCache::insert(std::string_view word, uint64_t hash, const int32_t* ids, size_t n) const {
  if (word.size() > kMaxWordBytes || n > 0xFFFF) return;
  Shard& s = (*shards_)[shard_of(hash)];
  std::lock_guard<std::mutex> lock(s.mutex);
  if (s.count >= kWordsPerShard) return;
  if (s.slots.empty()) s.slots.resize(kSlots);
  size_t i = hash & (kSlots - 1);
  for (; s.slots[i].used; i = (i + 1) & (kSlots - 1)) {
    const Slot& slot = s.slots[i];
    if (slot.hash == hash && slot.key_length == word.size() &&
        std::memcmp(s.keys.data() + slot.key_offset, word.data(), word.size()) == 0)
      return;  // another thread got here first
  }
  Slot& slot = s.slots[i];
  slot.hash = hash;
  slot.key_offset = static_cast<uint32_t>(s.keys.size());
  slot.key_length = static_cast<uint16_t>(word.size());
  slot.ids_offset = static_cast<uint32_t>(s.ids.size());
  slot.id_count = static_cast<uint16_t>(n);
  slot.used = true;
  s.keys.append(word);
  s.ids.insert(s.ids.end(), ids, ids + n);
  ++s.count;
}

}  // namespace rl::model
