// rl::BufferPool: large buffers come back for the next take (the same memory), the
// smallest big enough first; small ones and any past the bound are not kept; a
// share_pooled string returns its buffer when its last owner lets go.
#include <catch2/catch.hpp>
#include <memory>
#include <string>

#include "base/buffer_pool.hpp"

using rl::BufferPool;

TEST_CASE("buffer pool: reuse, best fit, bound", "[buffer_pool]") {
  constexpr size_t MiB = size_t{1} << 20;
  BufferPool pool(16 * MiB);
  std::string a = pool.take(4 * MiB);
  CHECK(a.empty());
  REQUIRE(a.capacity() >= 4 * MiB);
  a.assign(3 * MiB, 'x');
  const char* a_data = a.data();
  pool.give(std::move(a));
  CHECK(pool.held_bytes() >= 4 * MiB);
  std::string b = pool.take(2 * MiB);   // the kept one is big enough: the same memory, emptied
  CHECK(b.data() == a_data);
  CHECK(b.empty());
  CHECK(pool.held_bytes() == 0);

  SECTION("the smallest buffer big enough is taken") {
    std::string big = pool.take(6 * MiB);
    const char* small_data = b.data();
    pool.give(std::move(big));
    pool.give(std::move(b));
    CHECK(pool.take(3 * MiB).data() == small_data);
    CHECK(pool.take(7 * MiB).capacity() >= 7 * MiB);   // none big enough: a new one
  }
  SECTION("small buffers and buffers past the bound are not kept") {
    std::string small = pool.take(1000);
    pool.give(std::move(small));
    CHECK(pool.held_bytes() == 0);
    pool.give(std::move(b));                 // 4 MiB: kept
    std::string c = pool.take(13 * MiB);
    pool.give(std::move(c));                 // 4 + 13 > 16: freed
    CHECK(pool.held_bytes() < 13 * MiB);
    CHECK(pool.held_bytes() >= 4 * MiB);
  }
}

TEST_CASE("buffer pool: a shared string goes back to the process's pool", "[buffer_pool]") {
  constexpr size_t MiB = size_t{1} << 20;
  BufferPool& pool = rl::large_buffers();
  std::string s = pool.take(3 * MiB);
  s.assign(2 * MiB, 'y');
  const char* data = s.data();
  const size_t before = pool.held_bytes();
  auto shared = rl::share_pooled(std::move(s));
  auto second = shared;
  CHECK(shared->size() == 2 * MiB);
  shared.reset();
  CHECK(pool.held_bytes() == before);      // another owner still has it
  second.reset();
  CHECK(pool.held_bytes() > before);
  CHECK(pool.take(3 * MiB).data() == data);
}
