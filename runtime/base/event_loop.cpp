#include "base/event_loop.hpp"

#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <string>

namespace rl {

namespace {
std::runtime_error sys_error(const char* what) {
  return std::runtime_error(std::string("event loop: ") + what + ": " + std::strerror(errno));
}
}  // namespace

EventLoop::EventLoop() : events_(256) {
  epfd_ = epoll_create1(EPOLL_CLOEXEC);
  if (epfd_ < 0) throw sys_error("epoll_create1");
  wakefd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (wakefd_ < 0) throw sys_error("eventfd");
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.fd = wakefd_;
  if (epoll_ctl(epfd_, EPOLL_CTL_ADD, wakefd_, &ev) < 0) throw sys_error("epoll_ctl(wakeup)");
}

EventLoop::~EventLoop() {
  if (wakefd_ >= 0) close(wakefd_);
  if (epfd_ >= 0) close(epfd_);
}

double EventLoop::now() {
  using namespace std::chrono;
  return duration<double>(steady_clock::now().time_since_epoch()).count();
}

uint64_t EventLoop::call_later(double delay_s, Fn fn) {
  if (!(delay_s >= 0) || std::isinf(delay_s)) delay_s = 0;  // NaN and negatives run next tick
  const uint64_t id = next_timer_id_++;
  const double deadline = now() + delay_s;
  timers_.emplace(std::make_pair(deadline, id), std::move(fn));
  timer_deadline_.emplace(id, deadline);
  return id;
}

bool EventLoop::cancel_timer(uint64_t id) {
  auto it = timer_deadline_.find(id);
  if (it == timer_deadline_.end()) return false;
  timers_.erase({it->second, id});
  timer_deadline_.erase(it);
  return true;
}

void EventLoop::post(Fn fn) {
  {
    std::lock_guard<std::mutex> lock(posted_mu_);
    posted_.push_back(std::move(fn));
  }
  wakeup();
}

void EventLoop::wakeup() noexcept {
  if (wake_pending_.exchange(true)) return;
  const uint64_t one = 1;
  ssize_t r = ::write(wakefd_, &one, sizeof one);
  (void)r;  // EAGAIN means the counter is already non-zero: the loop will wake.
}

void EventLoop::watch(int fd, uint32_t events, FdFn fn) {
  epoll_event ev{};
  ev.events = events;
  ev.data.fd = fd;
  const bool known = fds_.count(fd) != 0;
  if (epoll_ctl(epfd_, known ? EPOLL_CTL_MOD : EPOLL_CTL_ADD, fd, &ev) < 0)
    throw sys_error("epoll_ctl(watch)");
  fds_[fd] = std::move(fn);
}

void EventLoop::modify(int fd, uint32_t events) {
  epoll_event ev{};
  ev.events = events;
  ev.data.fd = fd;
  if (epoll_ctl(epfd_, EPOLL_CTL_MOD, fd, &ev) < 0) throw sys_error("epoll_ctl(modify)");
}

void EventLoop::unwatch(int fd) {
  if (fds_.erase(fd) == 0) return;
  epoll_ctl(epfd_, EPOLL_CTL_DEL, fd, nullptr);  // fd may already be closed: ignore
}

void EventLoop::stop() {
  stop_ = true;
  wakeup();
}

int EventLoop::next_timeout_ms(double max_wait_s) const {
  double wait = max_wait_s;
  if (!timers_.empty()) wait = std::min(wait, timers_.begin()->first.first - now());
  {
    std::lock_guard<std::mutex> lock(posted_mu_);
    if (!posted_.empty()) wait = 0;
  }
  if (wait <= 0) return 0;
  if (wait > 3600) return 3600 * 1000;
  return static_cast<int>(std::ceil(wait * 1000.0));
}

void EventLoop::drain_posted() {
  std::vector<Fn> batch;
  {
    std::lock_guard<std::mutex> lock(posted_mu_);
    batch.swap(posted_);
  }
  for (auto& fn : batch) fn();
}

void EventLoop::run_due_timers() {
  const double t = now();
  // Collect first so timers added by callbacks run on a later iteration.
  std::vector<Fn> due;
  while (!timers_.empty() && timers_.begin()->first.first <= t) {
    auto node = timers_.extract(timers_.begin());
    timer_deadline_.erase(node.key().second);
    due.push_back(std::move(node.mapped()));
  }
  for (auto& fn : due) fn();
}

void EventLoop::run_once(double max_wait_s) {
  ++iterations_;
  const int timeout = next_timeout_ms(max_wait_s);
  int n = epoll_wait(epfd_, events_.data(), static_cast<int>(events_.size()), timeout);
  if (n < 0 && errno != EINTR) throw sys_error("epoll_wait");
  // The wake-up is consumed before anything runs: a wakeup() from a signal handler or
  // another thread while this iteration's work runs (a long Lua callback) writes again
  // and so wakes the next epoll_wait, instead of being taken for the one consumed here.
  for (int i = 0; i < n; ++i) {
    if (events_[i].data.fd != wakefd_) continue;
    uint64_t v;
    while (::read(wakefd_, &v, sizeof v) > 0) {
    }
    wake_pending_ = false;
  }
  if (on_iteration_) on_iteration_();
  for (int i = 0; i < n; ++i) {
    const int fd = events_[i].data.fd;
    if (fd == wakefd_) continue;
    auto it = fds_.find(fd);
    if (it == fds_.end()) continue;  // unwatched by an earlier callback this round
    FdFn fn = it->second;            // copy: the callback may unwatch itself
    fn(events_[i].events);
  }
  if (n == static_cast<int>(events_.size())) events_.resize(events_.size() * 2);
  run_due_timers();
  drain_posted();
}

void EventLoop::run() {
  stop_ = false;
  while (!stop_) run_once(3600);
}

}  // namespace rl
