#include "tensor/block_cache.hpp"

#include <atomic>

#include <malloc.h>
#include <sys/mman.h>
#include <unistd.h>

#include <c10/core/Allocator.h>
#include <c10/core/CPUAllocator.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <map>
#include <mutex>
#include <string>
#include <unordered_map>

#include "base/errors.hpp"

namespace rl::tensor {
namespace {

constexpr int64_t kMinBytes = int64_t{1} << 20;  // smaller requests: LibTorch's own allocator
constexpr int64_t kGranule = int64_t{64} << 10;  // mapped sizes are whole 64 KiB

int64_t rounded(int64_t n) { return (n + kGranule - 1) / kGranule * kGranule; }

// The cap on cached bytes: RLHOST_CPU_BLOCK_CACHE MiB, else a quarter of the memory.
// Negative: the variable is 0 (no cache) or not a number (an error at install).
int64_t cache_limit() {
  const char* e = std::getenv("RLHOST_CPU_BLOCK_CACHE");
  if (e && *e) {
    char* end = nullptr;
    const long long mib = std::strtoll(e, &end, 10);
    if (*end || mib < 0)
      throw Error(std::string("RLHOST_CPU_BLOCK_CACHE=") + e + ": expected a whole number of MiB",
                  "the most freed CPU memory to keep for reuse, in MiB; 0 turns the block cache off");
    return mib == 0 ? -1 : static_cast<int64_t>(mib) << 20;
  }
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  return pages > 0 && page > 0 ? static_cast<int64_t>(pages) * page / 4 : int64_t{1} << 30;
}

class BlockCache final : public c10::Allocator {
 public:
  BlockCache(c10::Allocator* fallback, int64_t limit) : fallback_(fallback), limit_(limit) {}

  c10::DataPtr allocate(size_t n) override {
    if (static_cast<int64_t>(n) < kMinBytes) return fallback_->allocate(n);
    void* p = take(rounded(static_cast<int64_t>(n)));
    return {p, p, &BlockCache::free_block, c10::Device(c10::DeviceType::CPU)};
  }

  c10::DeleterFnPtr raw_deleter() const override { return &BlockCache::free_block; }

  void copy_data(void* dest, const void* src, std::size_t count) const override {
    default_copy_data(dest, src, count);
  }

  static BlockCache* instance;

  int64_t release() {
    std::lock_guard<std::mutex> lock(mu_);
    const int64_t freed = cached_;
    evict(cached_);
    return freed;
  }

  BlockCacheStats stats() {
    std::lock_guard<std::mutex> lock(mu_);
    BlockCacheStats s;
    s.installed = true;
    s.hits = hits_;
    s.misses = misses_;
    s.live_bytes = live_bytes_;
    s.cached_bytes = cached_;
    return s;
  }

 private:
  struct Block {
    int64_t size;
    uint64_t age;
  };

  // `want` bytes, warm where the cache allows: the smallest cached block that holds
  // them (its tail stays cached), else a new range into which cached blocks, largest
  // first, are moved (mremap moves their pages, no copy): fresh pages only for the rest.
  void* take(int64_t want) {
    std::lock_guard<std::mutex> lock(mu_);
    char* p = nullptr;
    if (const auto fit = by_size_.lower_bound(want); fit != by_size_.end()) {
      p = fit->second;
      const int64_t size = remove(p);
      keep(p + want, size - want);
      ++hits_;
    } else {
      p = static_cast<char*>(map(want));
      int64_t filled = 0;
      while (filled < want && !by_size_.empty()) {
        char* from = std::prev(by_size_.end())->second;
        const int64_t size = remove(from), piece = std::min(size, want - filled);
        if (mremap(from, static_cast<size_t>(piece), static_cast<size_t>(piece), MREMAP_MAYMOVE | MREMAP_FIXED,
                   p + filled) == MAP_FAILED) {
          keep(from, size);  // (a process at its mapping limit): the rest stays fresh
          break;
        }
        keep(from + piece, size - piece);
        filled += piece;
      }
      ++(filled > 0 ? hits_ : misses_);
    }
    live_.emplace(p, want);
    live_bytes_ += want;
    return p;
  }

  // A new mapping of `bytes`; the cached blocks go first when memory is short. Holds mu_.
  void* map(int64_t bytes) {
    void* p = mmap(nullptr, static_cast<size_t>(bytes), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
      evict(cached_);
      p = mmap(nullptr, static_cast<size_t>(bytes), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    }
    TORCH_CHECK_WITH(OutOfMemoryError, p != MAP_FAILED, "CPU block cache: not enough memory: tried to allocate ",
                     bytes, " bytes (", std::strerror(errno), ")");
    return p;
  }

  // Caches [p, p + size): whole when at least kMinBytes, else unmapped. Holds mu_.
  void keep(char* p, int64_t size) {
    if (size <= 0) return;
    if (size < kMinBytes || size > limit_) {
      munmap(p, static_cast<size_t>(size));
      return;
    }
    if (cached_ + size > limit_) evict(cached_ + size - limit_);
    const uint64_t age = next_age_++;
    blocks_.emplace(p, Block{size, age});
    by_size_.emplace(size, p);
    by_age_.emplace(age, p);
    cached_ += size;
  }

  // Takes the cached block at p out of the indexes; returns its size. Holds mu_.
  int64_t remove(char* p) {
    const auto b = blocks_.find(p);
    const Block blk = b->second;
    blocks_.erase(b);
    for (auto it = by_size_.lower_bound(blk.size); it != by_size_.end() && it->first == blk.size; ++it)
      if (it->second == p) {
        by_size_.erase(it);
        break;
      }
    by_age_.erase(blk.age);
    cached_ -= blk.size;
    return blk.size;
  }

  // Unmaps cached blocks, oldest first, until `bytes` are gone or none is left. Holds mu_.
  void evict(int64_t bytes) {
    while (bytes > 0 && !by_age_.empty()) {
      char* p = by_age_.begin()->second;
      const int64_t size = remove(p);
      munmap(p, static_cast<size_t>(size));
      bytes -= size;
    }
  }

  void put(void* p) {
    std::unique_lock<std::mutex> lock(mu_);
    const auto it = live_.find(p);
    if (it == live_.end()) {  // a small block through raw_deleter(): the fallback's
      lock.unlock();
      fallback_->raw_deleter()(p);
      return;
    }
    const int64_t size = it->second;
    live_.erase(it);
    live_bytes_ -= size;
    keep(static_cast<char*>(p), size);
  }

  static void free_block(void* p) {
    if (p) instance->put(p);
  }

  c10::Allocator* fallback_;
  const int64_t limit_;
  std::mutex mu_;
  std::unordered_map<void*, int64_t> live_;  // base -> bytes
  std::map<char*, Block> blocks_;            // cached
  std::multimap<int64_t, char*> by_size_;    // cached, by size
  std::map<uint64_t, char*> by_age_;         // cached, oldest first
  uint64_t next_age_ = 0;
  int64_t cached_ = 0, live_bytes_ = 0, hits_ = 0, misses_ = 0;
};

BlockCache* BlockCache::instance = nullptr;
std::once_flag installed;

}  // namespace

bool install_block_cache() {
  std::call_once(installed, [] {
    const int64_t limit = cache_limit();
    if (limit < 0) return;
    // Never destroyed: tensors may be freed during exit.
    BlockCache::instance = new BlockCache(c10::GetCPUAllocator(), limit);
    c10::SetCPUAllocator(BlockCache::instance, /*priority=*/1);
  });
  return BlockCache::instance != nullptr;
}

BlockCacheStats block_cache_stats() { return BlockCache::instance ? BlockCache::instance->stats() : BlockCacheStats{}; }

int64_t release_cached_blocks() { return BlockCache::instance ? BlockCache::instance->release() : 0; }

void return_free_memory() {
  release_cached_blocks();
  malloc_trim(0);
}

namespace {
std::atomic<int> users{0};
}

MemoryInUse::MemoryInUse() { users.fetch_add(1); }
MemoryInUse::~MemoryInUse() { users.fetch_sub(1); }

bool return_idle_memory() {
  if (users.load() > 0) return false;
  return_free_memory();
  return true;
}

}  // namespace rl::tensor
