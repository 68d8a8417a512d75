// The one event loop of an rlhost process. It runs on the main thread and owns
// timers, file-descriptor watchers and a thread-safe queue of completions.
// Other threads never run loop callbacks themselves: they `post()` them here.
// Knows nothing of Lua; bindings/ turns callbacks into coroutine resumes.
#pragma once

#include <sys/epoll.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <unordered_map>
#include <vector>

namespace rl {

class EventLoop {
 public:
  using Fn = std::function<void()>;
  using FdFn = std::function<void(uint32_t events)>;  // EPOLLIN | EPOLLOUT | EPOLLERR | EPOLLHUP

  EventLoop();
  ~EventLoop();
  EventLoop(const EventLoop&) = delete;
  EventLoop& operator=(const EventLoop&) = delete;

  // Timers (loop thread only). Returns an id for cancel_timer(); ids are never 0.
  uint64_t call_later(double delay_s, Fn fn);
  bool cancel_timer(uint64_t id);

  // Runs fn on the loop thread at the next iteration. Safe from any thread.
  void post(Fn fn);

  // File-descriptor watchers (loop thread only). `events` is an EPOLL* mask.
  void watch(int fd, uint32_t events, FdFn fn);
  void modify(int fd, uint32_t events);
  void unwatch(int fd);
  bool watching(int fd) const { return fds_.count(fd) != 0; }

  // Runs until stop() is called. Returns immediately if already stopped;
  // stop() is cleared on entry so run() can be called again.
  void run();
  // One iteration: waits at most max_wait_s (0 = poll) for work, then runs it.
  void run_once(double max_wait_s);
  void stop();
  bool stop_requested() const { return stop_; }

  // Async-signal-safe: wakes a blocked run_once() (used by signal handlers).
  void wakeup() noexcept;

  // Hook run at the top of every iteration, after waking (e.g. to notice a
  // SIGINT flag). Loop thread only.
  void set_on_iteration(Fn fn) { on_iteration_ = std::move(fn); }

  // Monotonic seconds.
  static double now();

  // Numbers for tests and `rl._core.loop_stats()`.
  size_t pending_timers() const { return timers_.size(); }
  size_t watched_fds() const { return fds_.size(); }
  uint64_t iterations() const { return iterations_; }

 private:
  void drain_posted();
  void run_due_timers();
  int next_timeout_ms(double max_wait_s) const;

  int epfd_ = -1;
  int wakefd_ = -1;
  bool stop_ = false;
  uint64_t iterations_ = 0;
  uint64_t next_timer_id_ = 1;
  // (deadline, id) -> callback; ordered so the earliest deadline is first.
  std::map<std::pair<double, uint64_t>, Fn> timers_;
  std::unordered_map<uint64_t, double> timer_deadline_;
  std::unordered_map<int, FdFn> fds_;
  mutable std::mutex posted_mu_;
  std::vector<Fn> posted_;
  std::atomic<bool> wake_pending_{false};
  Fn on_iteration_;
  std::vector<epoll_event> events_;
};

}  // namespace rl
