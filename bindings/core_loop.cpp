// _core.loop: timers, ticks and loop control for the Lua scheduler (lua/rl/task.lua).
#include <chrono>

#include "base/live_objects.hpp"
#include "bindings/core_module.hpp"
#include "bindings/host_context.hpp"
#include "bindings/trampoline.hpp"

namespace rl::lua {
namespace {

// set_dispatcher(fn): fn(op_id, ...) receives every op event; op 0 is a tick.
int l_set_dispatcher(lua_State* L) {
  arg::function(L, 1, "fn");
  auto& ctx = HostContext::get(L);
  lua_pushvalue(L, 1);
  ctx.set_dispatcher(luaL_ref(L, LUA_REGISTRYINDEX));
  return 0;
}

// timer(delay_s) -> op_id; the op's one event arrives after delay_s seconds.
int l_timer(lua_State* L) {
  const double delay = arg::number(L, 1, "seconds");
  if (!(delay >= 0)) throw ArgError(1, "seconds", "must be >= 0");
  auto& ctx = HostContext::get(L);
  const uint64_t op = ctx.new_op();
  const uint64_t tid = ctx.loop().call_later(delay, [&ctx, op] { ctx.deliver(op, {}, true); });
  ctx.set_cancel(op, [&ctx, tid] { ctx.loop().cancel_timer(tid); });
  lua_pushnumber(L, static_cast<lua_Number>(op));
  return 1;
}

// cancel(op_id) -> bool: stops the op's C++ side; no event follows.
int l_cancel(lua_State* L) {
  const auto op = arg::integer(L, 1, "op");
  lua_pushboolean(L, HostContext::get(L).cancel(static_cast<uint64_t>(op)));
  return 1;
}

int l_tick(lua_State* L) {
  HostContext::get(L).request_tick();
  return 0;
}

int l_stop(lua_State* L) {
  HostContext::get(L).loop().stop();
  return 0;
}

int l_now(lua_State* L) {
  lua_pushnumber(L, EventLoop::now());
  return 1;
}

int l_time(lua_State* L) {
  using namespace std::chrono;
  lua_pushnumber(L, duration<double>(system_clock::now().time_since_epoch()).count());
  return 1;
}

int l_stats(lua_State* L) {
  auto& ctx = HostContext::get(L);
  lua_createtable(L, 0, 5);
  set_number(L, "iterations", static_cast<double>(ctx.loop().iterations()));
  set_number(L, "timers", static_cast<double>(ctx.loop().pending_timers()));
  set_number(L, "fds", static_cast<double>(ctx.loop().watched_fds()));
  set_number(L, "ops", static_cast<double>(ctx.live_ops()));
  set_number(L, "live_objects", static_cast<double>(rl::live_objects()));
  return 1;
}

int l_live_objects(lua_State* L) {
  lua_pushnumber(L, static_cast<lua_Number>(rl::live_objects()));
  return 1;
}

}  // namespace

void open_loop(lua_State* L, int t) {
  static const Reg regs[] = {
      {"set_dispatcher", entry<l_set_dispatcher>},
      {"timer", entry<l_timer>},
      {"cancel", entry<l_cancel>},
      {"tick", entry<l_tick>},
      {"stop", entry<l_stop>},
      {"now", entry<l_now>},
      {"time", entry<l_time>},
      {"stats", entry<l_stats>},
      {"live_objects", entry<l_live_objects>},
  };
  register_functions(L, t, "rl.loop.", regs);
}

}  // namespace rl::lua
