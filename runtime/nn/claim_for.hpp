#pragma once
// A parallel loop whose threads take over the items a slower thread has not reached.
// A static split (at::parallel_for) gives every thread a fixed share, and the loop then
// waits for the slowest: a thread whose core is lent to another process for a while (an
// HTTP thread, the load generator, a neighbour), or a share that holds the longer
// sequences. Here each thread starts on its own contiguous share, taking its items one
// at a time from the front, and when that is done takes the next items of the other
// shares. Which thread computes an item never changes what it computes, so the bits do
// not depend on the schedule.
#include <ATen/Parallel.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <vector>

namespace rl::nn {

// fn(i, next, task) for every i in [0, n), on at most `tasks` threads; `next` is the item
// the same thread takes after i (n: none), claimed before i runs so it can be prefetched;
// `task` (< at::get_num_threads()) is the same for every item one thread runs, so it can
// index per-thread scratch.
template <class Fn>
void claim_for(int64_t n, int64_t tasks, Fn&& fn) {
  if (n <= 0) return;
  tasks = std::clamp<int64_t>(std::min<int64_t>(tasks, at::get_num_threads()), 1, n);
  struct alignas(64) Share {
    std::atomic<int64_t> next{0};
    int64_t end = 0;
  };
  std::vector<Share> shares(static_cast<size_t>(tasks));
  for (int64_t t = 0; t < tasks; ++t) {
    shares[static_cast<size_t>(t)].next.store(t * n / tasks, std::memory_order_relaxed);
    shares[static_cast<size_t>(t)].end = (t + 1) * n / tasks;
  }
  at::parallel_for(0, tasks, 1, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      auto claim = [&] {  // from this thread's share first, then from the others'
        for (int64_t k = 0; k < tasks; ++k) {
          Share& s = shares[static_cast<size_t>((t + k) % tasks)];
          if (s.next.load(std::memory_order_relaxed) >= s.end) continue;
          const int64_t i = s.next.fetch_add(1, std::memory_order_relaxed);
          if (i < s.end) return i;
        }
        return n;
      };
      for (int64_t i = claim(); i < n;) {
        const int64_t next = claim();
        fn(i, next, t);
        i = next;
      }
    }
  });
}

}  // namespace rl::nn
