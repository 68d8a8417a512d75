// Helpers shared by the C++ tests (header-only: include it as "test_support.hpp").
#pragma once

#include <cstdlib>
#include <filesystem>

#include "base/event_loop.hpp"

namespace rl::test {

// ../shared/data: $RLHOST_SHARED_DATA (ctest sets it), else beside the source tree.
inline std::filesystem::path shared_data() {
  if (const char* env = std::getenv("RLHOST_SHARED_DATA"); env && *env) return env;
  return std::filesystem::path(RLHOST_TEST_SOURCE_DIR).parent_path() / "shared" / "data";
}

inline std::filesystem::path stories_dir() { return shared_data() / "models" / "stories260K"; }

// Turns `loop` until pred() holds or `max_s` seconds have passed; returns
// pred(). The limit is a hang guard, far above what a passing test needs:
// use it as REQUIRE(run_until(loop, [&] { return done; })).
template <class Pred>
bool run_until(EventLoop& loop, Pred pred, double max_s = 20) {
  const double until = EventLoop::now() + max_s;
  while (!pred() && EventLoop::now() < until) loop.run_once(0.01);
  return pred();
}

}  // namespace rl::test
