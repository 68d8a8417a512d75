// The CPU block cache (tensor/block_cache.hpp): large tensors' memory reused warm, the
// process's footprint never above its live peak. Installed before main, as the rlhost
// binary installs it when rl.torch loads, so every other case in this executable runs
// with it too.
#include <sys/mman.h>
#include <unistd.h>

#include <torch/torch.h>

#define CATCH_CONFIG_PREFIX_ALL
#include <catch2/catch.hpp>

#include <cstdint>
#include <vector>

#include "tensor/block_cache.hpp"

namespace {

const bool kInstalled = rl::tensor::install_block_cache();

constexpr int64_t kMiB = int64_t{1} << 20;

torch::Tensor bytes(int64_t n) { return torch::empty({n}, torch::kUInt8); }

// Pages of [p, p + n) in memory now (mincore).
int64_t resident_pages(const void* p, int64_t n) {
  const long page = sysconf(_SC_PAGESIZE);
  std::vector<unsigned char> v(static_cast<size_t>((n + page - 1) / page));
  if (mincore(const_cast<void*>(p), static_cast<size_t>(n), v.data()) != 0) return -1;
  int64_t r = 0;
  for (unsigned char c : v) r += c & 1;
  return r;
}

}  // namespace

CATCH_TEST_CASE("block cache: a freed large block comes back for the next request of its size", "[block_cache]") {
  CATCH_REQUIRE(kInstalled);
  rl::tensor::release_cached_blocks();
  const auto before = rl::tensor::block_cache_stats();
  void* first = nullptr;
  {
    auto t = bytes(4 * kMiB);
    t.fill_(7);
    first = t.data_ptr();
    CATCH_CHECK(rl::tensor::block_cache_stats().live_bytes == before.live_bytes + 4 * kMiB);
  }
  CATCH_CHECK(rl::tensor::block_cache_stats().cached_bytes == 4 * kMiB);
  auto again = bytes(4 * kMiB);
  CATCH_CHECK(again.data_ptr() == first);
  CATCH_CHECK(resident_pages(first, 4 * kMiB) == 4 * kMiB / sysconf(_SC_PAGESIZE));  // warm, not fresh
  const auto after = rl::tensor::block_cache_stats();
  CATCH_CHECK(after.hits == before.hits + 1);
  CATCH_CHECK(after.misses == before.misses + 1);
  CATCH_CHECK(after.cached_bytes == 0);
}

CATCH_TEST_CASE("block cache: a smaller request takes a cached block's head; the tail stays cached",
                "[block_cache]") {
  rl::tensor::release_cached_blocks();
  void* base = nullptr;
  {
    auto t = bytes(8 * kMiB);
    base = t.data_ptr();
  }
  auto head = bytes(3 * kMiB);
  CATCH_CHECK(head.data_ptr() == base);
  CATCH_CHECK(rl::tensor::block_cache_stats().cached_bytes == 5 * kMiB);
  auto tail = bytes(5 * kMiB);
  CATCH_CHECK(tail.data_ptr() == static_cast<char*>(base) + 3 * kMiB);
  CATCH_CHECK(rl::tensor::block_cache_stats().cached_bytes == 0);
}

CATCH_TEST_CASE("block cache: a larger request gathers the cached blocks' pages, contents moved, not copied",
                "[block_cache]") {
  rl::tensor::release_cached_blocks();
  const int64_t live0 = rl::tensor::block_cache_stats().live_bytes;
  {
    auto a = bytes(2 * kMiB), b = bytes(3 * kMiB);
    a.fill_(0xA);
    b.fill_(0xB);
  }
  CATCH_CHECK(rl::tensor::block_cache_stats().cached_bytes == 5 * kMiB);
  const auto before = rl::tensor::block_cache_stats();
  auto big = bytes(6 * kMiB);
  const auto after = rl::tensor::block_cache_stats();
  CATCH_CHECK(after.hits == before.hits + 1);
  CATCH_CHECK(after.cached_bytes == 0);                      // all of it taken: nothing left over...
  CATCH_CHECK(after.live_bytes == live0 + 6 * kMiB);         // ...and no more memory than the request
  const auto* p = static_cast<const uint8_t*>(big.data_ptr());
  CATCH_CHECK(resident_pages(p, 5 * kMiB) == 5 * kMiB / sysconf(_SC_PAGESIZE));
  // Largest first: b's 3 MiB, then a's 2 MiB, then 1 MiB of fresh (zero) pages.
  CATCH_CHECK(p[0] == 0xB);
  CATCH_CHECK(p[3 * kMiB - 1] == 0xB);
  CATCH_CHECK(p[3 * kMiB] == 0xA);
  CATCH_CHECK(p[5 * kMiB - 1] == 0xA);
  CATCH_CHECK(p[5 * kMiB] == 0);
  CATCH_CHECK(p[6 * kMiB - 1] == 0);
}

CATCH_TEST_CASE("block cache: small tensors stay with LibTorch's allocator; release gives the cache back",
                "[block_cache]") {
  rl::tensor::release_cached_blocks();
  const auto before = rl::tensor::block_cache_stats();
  { auto small = bytes(kMiB - 1); small.fill_(1); }
  CATCH_CHECK(rl::tensor::block_cache_stats().hits == before.hits);
  CATCH_CHECK(rl::tensor::block_cache_stats().misses == before.misses);
  { auto t = bytes(2 * kMiB + 1); }  // rounded up to whole 64 KiB
  CATCH_CHECK(rl::tensor::block_cache_stats().cached_bytes == 2 * kMiB + 64 * 1024);
  CATCH_CHECK(rl::tensor::release_cached_blocks() == 2 * kMiB + 64 * 1024);
  CATCH_CHECK(rl::tensor::block_cache_stats().cached_bytes == 0);
}

CATCH_TEST_CASE("block cache: a steady loop of large ops reuses its memory and computes the same values",
                "[block_cache]") {
  rl::tensor::release_cached_blocks();
  torch::manual_seed(3);
  const auto x = torch::randn({512, 1024}), w = torch::randn({1024, 768});
  const auto want = torch::relu(torch::mm(x, w)).sum(1);
  const auto before = rl::tensor::block_cache_stats();
  for (int i = 0; i < 5; ++i) {
    auto got = torch::relu(torch::mm(x, w)).sum(1);
    CATCH_CHECK(torch::equal(got, want));
  }
  const auto after = rl::tensor::block_cache_stats();
  CATCH_CHECK(after.misses == before.misses);  // every step's blocks came from the last one's
  CATCH_CHECK(after.hits >= before.hits + 5);
}

CATCH_TEST_CASE("block cache: an idle trim leaves the memory to work that holds MemoryInUse", "[block_cache]") {
  CATCH_REQUIRE(kInstalled);
  rl::tensor::release_cached_blocks();
  { auto t = bytes(4 * kMiB); }
  CATCH_REQUIRE(rl::tensor::block_cache_stats().cached_bytes >= 4 * kMiB);
  {
    rl::tensor::MemoryInUse step;  // a training step in this process
    rl::tensor::MemoryInUse nested;
    CATCH_CHECK_FALSE(rl::tensor::return_idle_memory());
    CATCH_CHECK(rl::tensor::block_cache_stats().cached_bytes >= 4 * kMiB);
  }
  CATCH_CHECK(rl::tensor::return_idle_memory());
  CATCH_CHECK(rl::tensor::block_cache_stats().cached_bytes == 0);
}
