// rl::parse_cpu_list / format_cpu_list / pin_process: taskset's lists, and a real
// process's threads pinned (the ones it has and the ones it starts after).
#include <catch2/catch.hpp>

#include <sched.h>

#include <condition_variable>
#include <mutex>
#include <stdexcept>
#include <thread>
#include <vector>

#include "base/cpu_set.hpp"

namespace {

std::vector<int> thread_cpus() {  // the calling thread's mask
  cpu_set_t set;
  CPU_ZERO(&set);
  REQUIRE(sched_getaffinity(0, sizeof(set), &set) == 0);
  std::vector<int> out;
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &set)) out.push_back(c);
  return out;
}

}  // namespace

TEST_CASE("CPU lists: taskset's syntax, sorted and unique; errors name the item", "[cpu_set]") {
  CHECK(rl::parse_cpu_list("0-3,6") == std::vector<int>{0, 1, 2, 3, 6});
  CHECK(rl::parse_cpu_list("6,0-1,1") == std::vector<int>{0, 1, 6});
  CHECK(rl::parse_cpu_list("5") == std::vector<int>{5});
  CHECK(rl::format_cpu_list({0, 1, 2, 3, 6}) == "0-3,6");
  CHECK(rl::format_cpu_list({1, 3, 4}) == "1,3-4");
  CHECK(rl::format_cpu_list(rl::parse_cpu_list("2,0-1,7-9")) == "0-2,7-9");
  CHECK_THROWS_WITH(rl::parse_cpu_list(""), Catch::Contains("empty"));
  CHECK_THROWS_WITH(rl::parse_cpu_list("3-1"), Catch::Contains("'3-1'") && Catch::Contains("descending"));
  CHECK_THROWS_WITH(rl::parse_cpu_list("0,,1"), Catch::Contains("''"));
  CHECK_THROWS_WITH(rl::parse_cpu_list("a"), Catch::Contains("'a'"));
  CHECK_THROWS_WITH(rl::parse_cpu_list("-1"), Catch::Contains("'-1'"));
  CHECK_THROWS_WITH(rl::parse_cpu_list("99999"), Catch::Contains("'99999'"));
  CHECK_THROWS_AS(rl::parse_cpu_list("1-x"), std::invalid_argument);
}

TEST_CASE("pin_process pins every thread, those started after too, and widens back", "[cpu_set]") {
  const auto all = rl::allowed_cpus();
  REQUIRE(!all.empty());
  const std::vector<int> one{all.back()};
  std::vector<int> seen_before;
  bool go = false;
  std::mutex mu;
  std::condition_variable cv;
  std::thread before([&] {  // a thread that exists before the pinning
    std::unique_lock<std::mutex> lk(mu);
    cv.wait(lk, [&] { return go; });
    seen_before = thread_cpus();
  });
  rl::pin_process(one);
  {
    std::lock_guard<std::mutex> lk(mu);
    go = true;
  }
  cv.notify_all();
  before.join();
  CHECK(seen_before == one);
  CHECK(rl::allowed_cpus() == one);
  std::vector<int> seen_after;
  std::thread([&] { seen_after = thread_cpus(); }).join();
  CHECK(seen_after == one);
  rl::pin_process(all);  // widened again
  CHECK(rl::allowed_cpus() == all);
  CHECK_THROWS_WITH(rl::pin_process({1023}), Catch::Contains("1023") && Catch::Contains("does not exist"));
  CHECK(rl::allowed_cpus() == all);
}
