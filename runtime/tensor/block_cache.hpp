// LibTorch's CPU allocator with large blocks kept for reuse. A training step or a
// prefill frees its activations and asks for the same sizes again moments later; glibc
// hands blocks of 32 MiB and more back to the system at once and trims its heaps, so each
// step meets fresh pages: a fault and a zeroing per 4 KiB on first touch (~168,000
// faults, 690 MB, per step of the 42M Llama at 8 x 256 tokens; on a VM whose host takes
// freed guest pages back, each can cost the host a fault too). Blocks of at least 1 MiB
// come from their own mappings here and, when freed, wait for the next request: the
// smallest cached block that holds it (the rest stays cached), else the cached blocks'
// pages moved into a new range (mremap, no copy) and fresh pages only for the remainder.
//
// Footprint: new pages only once the cache is empty, so the process never holds more
// large-block memory (live plus cached) than its largest live total so far; cached bytes
// are also capped (a quarter of the machine's memory, or RLHOST_CPU_BLOCK_CACHE MiB).
// RLHOST_CPU_BLOCK_CACHE=0 leaves LibTorch's allocator alone.
#pragma once

#include <cstdint>

namespace rl::tensor {

// Makes the cache LibTorch's CPU allocator (once; later calls do nothing). Tensors
// made before keep their own deleter. Returns false when RLHOST_CPU_BLOCK_CACHE=0.
bool install_block_cache();

struct BlockCacheStats {
  bool installed = false;
  int64_t hits = 0, misses = 0;  // large requests met (wholly or in part) from the cache / by new memory alone
  int64_t live_bytes = 0;        // large blocks in tensors now
  int64_t cached_bytes = 0;      // large blocks waiting for reuse
};
BlockCacheStats block_cache_stats();

// Unmaps every cached block; returns the bytes given back.
int64_t release_cached_blocks();

// The process's freed memory back to the system: the cached blocks, then glibc's
// free heap (malloc_trim). For an engine releasing its memory, a sharded trainer
// between steps.
void return_free_memory();

// While one lives (a training step holds one), return_idle_memory() leaves freed memory
// where it is: work in this process is taking it again moments later.
class MemoryInUse {
 public:
  MemoryInUse();
  ~MemoryInUse();
  MemoryInUse(const MemoryInUse&) = delete;
  MemoryInUse& operator=(const MemoryInUse&) = delete;
};

// return_free_memory() unless a MemoryInUse lives; false when it left the memory alone.
// For an engine server gone idle after a burst, which may share its process with a
// trainer (a colocated recipe's training step starts as the rollout ends).
bool return_idle_memory();

}  // namespace rl::tensor
