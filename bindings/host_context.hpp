// Per-Lua-state host context: the event loop, and the registry of in-flight
// operations whose events are delivered to the Lua scheduler (lua/rl/task.lua).
//
// An "op" is any asynchronous piece of work started from Lua (timer, HTTP
// request, control-socket chunk...). C++ completes it on the loop thread with
// deliver(); the Lua dispatcher resumes the coroutine waiting on that op id.
// Nothing here ever runs Lua on a thread other than the loop's.
#pragma once

#include <lua.hpp>

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "base/event_loop.hpp"

namespace rl::lua {

class HostContext {
 public:
  using Push = std::function<int(lua_State*)>;  // pushes the event's values, returns their count

  HostContext(lua_State* L, EventLoop& loop);
  ~HostContext();  // may run after lua_close(): never touches the state
  static HostContext& get(lua_State* L);

  lua_State* state() const { return L_; }
  EventLoop& loop() const { return loop_; }

  uint64_t new_op(std::function<void()> cancel = {});
  void set_cancel(uint64_t id, std::function<void()> cancel);
  bool live(uint64_t id) const { return ops_.count(id) != 0; }
  // Calls dispatcher(id, ...values) through the protected call. `final` forgets
  // the op first (no cancel after completion). Events for unknown ops are dropped.
  void deliver(uint64_t id, const Push& push, bool final);
  // Cancels the op's C++ side (no event is delivered for it afterwards).
  bool cancel(uint64_t id);
  size_t live_ops() const { return ops_.size(); }
  void cancel_all();

  // Arranges dispatcher(0) at the next loop iteration (coalesced).
  void request_tick();
  void set_dispatcher(int ref);

  // Errors that escaped the dispatcher itself (bugs): logged, and counted so the
  // host can exit non-zero.
  int dispatcher_errors() const { return dispatcher_errors_; }

 private:
  void call_dispatcher(uint64_t id, const Push* push);

  lua_State* L_;
  EventLoop& loop_;
  int dispatcher_ref_ = LUA_NOREF;
  bool tick_pending_ = false;
  int dispatcher_errors_ = 0;
  uint64_t next_op_ = 1;
  std::unordered_map<uint64_t, std::function<void()>> ops_;
};

// From any thread: completes `op` on the loop thread with ("done", text) or
// ("error", text) — unless `alive` went false meanwhile (the owner was stopped).
void post_op_text(HostContext* ctx, const std::shared_ptr<std::atomic<bool>>& alive, uint64_t op, bool ok,
                  std::string text);

// A userdata's helper thread for blocking work started from Lua, one job at a
// time; each job's text (or exception message) completes an op. The owner calls
// stop() before it goes away: no event is delivered after that.
struct OpThread {
  std::shared_ptr<std::atomic<bool>> alive = std::make_shared<std::atomic<bool>>(true);
  std::shared_ptr<std::atomic<bool>> busy = std::make_shared<std::atomic<bool>>(false);
  std::thread job;
  std::vector<int> cpus;  // non-empty: each job's thread (and the threads it starts) runs on these

  bool is_busy() const { return busy->load(); }
  void join() {
    if (job.joinable()) job.join();
  }
  void stop() {
    alive->store(false);
    join();
  }
  // Starts fn on the thread and pushes the op id (the caller checked is_busy()).
  int start(lua_State* L, std::function<std::string()> fn);
};

}  // namespace rl::lua
