// nn::claim_for: every item once, `next` is the item the same task takes after, and a
// thread that stalls on its share has the rest of it taken by another thread.
#include <torch/torch.h>

#define CATCH_CONFIG_PREFIX_ALL
#include <catch2/catch.hpp>

#include <ATen/Parallel.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <utility>
#include <vector>

#include "nn/claim_for.hpp"

namespace {

struct Threads {  // at::set_num_threads(n) for a scope
  int before = at::get_num_threads();
  explicit Threads(int n) { at::set_num_threads(n); }
  ~Threads() { at::set_num_threads(before); }
};

}  // namespace

CATCH_TEST_CASE("claim_for runs every item once and says which one the thread takes next", "[threads]") {
  for (int threads : {1, 2}) {
    Threads scope(threads);
    for (int64_t n : {1, 2, 3, 17, 1000}) {
      for (int64_t tasks : {1, 2, 8}) {
        CATCH_INFO("threads " << threads << " n " << n << " tasks " << tasks);
        std::vector<std::atomic<int>> seen(static_cast<size_t>(n));
        // Per task (each is one thread's), indexed as a caller's scratch is: task < threads.
        std::vector<std::vector<std::pair<int64_t, int64_t>>> taken(static_cast<size_t>(at::get_num_threads()));
        std::atomic<int64_t> task_outside{-1};
        rl::nn::claim_for(n, tasks, [&](int64_t i, int64_t next, int64_t task) {
          seen[static_cast<size_t>(i)].fetch_add(1);
          if (task < 0 || task >= static_cast<int64_t>(taken.size())) task_outside.store(task);
          else taken[static_cast<size_t>(task)].emplace_back(i, next);
        });
        CATCH_CHECK(task_outside.load() == -1);
        for (int64_t i = 0; i < n; ++i) CATCH_CHECK(seen[static_cast<size_t>(i)].load() == 1);
        for (const auto& log : taken) {
          for (size_t j = 0; j + 1 < log.size(); ++j) CATCH_CHECK(log[j].second == log[j + 1].first);
          if (!log.empty()) CATCH_CHECK(log.back().second == n);
        }
      }
    }
  }
  rl::nn::claim_for(0, 2, [](int64_t, int64_t, int64_t) { CATCH_FAIL("an empty range runs nothing"); });
}

CATCH_TEST_CASE("claim_for: another thread takes over the share of a thread that stalls", "[threads]") {
  Threads scope(2);
  CATCH_REQUIRE(at::get_num_threads() == 2);
  constexpr int64_t n = 64;  // shares [0, 32) and [32, 64)
  std::vector<std::atomic<int>> by(n);
  for (auto& b : by) b.store(-1);
  std::atomic<bool> taken_over{false};
  rl::nn::claim_for(n, 2, [&](int64_t i, int64_t, int64_t task) {
    const int me = static_cast<int>(task);
    by[static_cast<size_t>(i)].store(me);
    if (i == 0) {
      // Stall (at most 20 s) until the other thread has run an item of this share.
      const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
      while (std::chrono::steady_clock::now() < until && !taken_over.load()) {
        for (int64_t j = 1; j < n / 2; ++j) {
          const int t = by[static_cast<size_t>(j)].load();
          if (t >= 0 && t != me) taken_over.store(true);
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
    }
  });
  CATCH_CHECK(taken_over.load());
  int other = 0;
  for (int64_t j = 1; j < n / 2; ++j) other += by[static_cast<size_t>(j)].load() != by[0].load();
  CATCH_INFO(other << " of share 0's other " << n / 2 - 1 << " items ran on the other thread");
  CATCH_CHECK(other > 0);
}
