// Helpers shared by the C++ tests (header-only: include it as "test_support.hpp").
#pragma once

#include "base/event_loop.hpp"

namespace rl::test {

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
