#include <catch2/catch.hpp>

#include <unistd.h>

#include <atomic>
#include <thread>
#include <vector>

#include "base/event_loop.hpp"

using rl::EventLoop;

TEST_CASE("timers fire in deadline order and can be cancelled") {
  EventLoop loop;
  std::vector<int> order;
  loop.call_later(0.03, [&] { order.push_back(3); loop.stop(); });
  loop.call_later(0.01, [&] { order.push_back(1); });
  const auto id = loop.call_later(0.02, [&] { order.push_back(99); });
  loop.call_later(0.015, [&] { order.push_back(2); });
  CHECK(loop.cancel_timer(id));
  CHECK_FALSE(loop.cancel_timer(id));
  const double t0 = EventLoop::now();
  loop.run();
  CHECK(order == std::vector<int>{1, 2, 3});
  CHECK(EventLoop::now() - t0 >= 0.029);
  CHECK(loop.pending_timers() == 0);
}

TEST_CASE("post() from other threads runs every callback on the loop thread") {
  EventLoop loop;
  const auto loop_thread = std::this_thread::get_id();
  std::atomic<int> ran{0};
  std::atomic<bool> wrong_thread{false};
  constexpr int kThreads = 4, kPerThread = 2500;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&] {
      for (int i = 0; i < kPerThread; ++i)
        loop.post([&] {
          if (std::this_thread::get_id() != loop_thread) wrong_thread = true;
          if (++ran == kThreads * kPerThread) loop.stop();
        });
    });
  loop.call_later(10, [&] { loop.stop(); });  // safety net: never hang the suite
  loop.run();
  for (auto& th : threads) th.join();
  CHECK(ran == kThreads * kPerThread);
  CHECK_FALSE(wrong_thread);
}

TEST_CASE("fd watchers see readability; unwatch inside the callback is safe") {
  EventLoop loop;
  int fds[2];
  REQUIRE(pipe(fds) == 0);
  std::string got;
  loop.watch(fds[0], EPOLLIN, [&](uint32_t ev) {
    char buf[64];
    ssize_t n = read(fds[0], buf, sizeof buf);
    if (n > 0) got.append(buf, static_cast<size_t>(n));
    if (got == "hello") {
      loop.unwatch(fds[0]);
      loop.stop();
    }
  });
  std::thread writer([&] { (void)!write(fds[1], "hel", 3); usleep(10000); (void)!write(fds[1], "lo", 2); });
  loop.call_later(5, [&] { loop.stop(); });
  loop.run();
  writer.join();
  CHECK(got == "hello");
  CHECK_FALSE(loop.watching(fds[0]));
  close(fds[0]);
  close(fds[1]);
}

TEST_CASE("wakeup() interrupts a long wait; run() can be called again") {
  EventLoop loop;
  std::thread t([&] {
    usleep(20000);
    loop.post([&] { loop.stop(); });
  });
  const double t0 = EventLoop::now();
  loop.run();  // would sleep an hour without the wakeup
  t.join();
  CHECK(EventLoop::now() - t0 < 5.0);
  bool again = false;
  loop.call_later(0, [&] { again = true; loop.stop(); });
  loop.run();
  CHECK(again);
}

TEST_CASE("a wakeup() while the iteration hook runs wakes the next wait too") {
  // A signal handler calls wakeup() and the loop's hook handles the signal; a second
  // signal arriving while the hook still handles the first must not be lost.
  EventLoop loop;
  std::atomic<int> pending{0};
  int handled = 0;
  loop.set_on_iteration([&] {
    if (pending.exchange(0) == 0) return;
    ++handled;
    if (handled == 1) {  // the second "signal" arrives while the first is handled
      pending = 1;
      loop.wakeup();
    }
  });
  pending = 1;
  loop.wakeup();
  loop.run_once(10);  // handles the first
  const double t0 = EventLoop::now();
  loop.run_once(10);  // the second woke it: no 10 s wait
  CHECK(handled == 2);
  CHECK(EventLoop::now() - t0 < 5.0);
  loop.set_on_iteration(nullptr);
}

TEST_CASE("timers added by a timer callback run on a later iteration") {
  EventLoop loop;
  int depth = 0;
  std::function<void()> chain = [&] {
    if (++depth < 100) loop.call_later(0, chain); else loop.stop();
  };
  loop.call_later(0, chain);
  loop.run();
  CHECK(depth == 100);
  CHECK(loop.iterations() >= 100);
}
