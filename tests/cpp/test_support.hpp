// Helpers shared by the C++ tests (header-only: include it as "test_support.hpp").
#pragma once

#include <cstdlib>
#include <filesystem>
#include <stdexcept>

#include "base/event_loop.hpp"

namespace rl::test {

// The test data (tests/data, unpacked into <build>/test-data when the build is
// configured): $RLHOST_TEST_DATA (ctest sets it), else this build's. Missing data
// throws (the test fails naming the folder); it never skips.
inline std::filesystem::path test_data() {
  const char* env = std::getenv("RLHOST_TEST_DATA");
  const std::filesystem::path dir = env && *env ? std::filesystem::path(env) : std::filesystem::path(RLHOST_TEST_DATA_DIR);
  if (!std::filesystem::exists(dir / "README.md"))
    throw std::runtime_error("test data not found in " + dir.string() +
                             " (configuring the build unpacks tests/data there; or set RLHOST_TEST_DATA)");
  return dir;
}

inline std::filesystem::path stories_dir() { return test_data() / "models" / "stories260K"; }

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
