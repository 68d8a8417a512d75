// One run of the host over a ready Lua state: compiles the -e chunks and the
// recipe, runs them as the main task on the loop, reports the outcome, then
// (with -i) hands over to the REPL. Also owns Ctrl-C handling.
#pragma once

#include <lua.hpp>

#include <string>
#include <vector>

#include "base/event_loop.hpp"
#include "host/cli.hpp"

namespace rl::lua {

class HostSession {
 public:
  HostSession(lua_State* L, EventLoop& loop, const HostOptions& opts);
  ~HostSession();
  int run();  // exit status

  // Calls rl._host.<fn>(...) with the given number of pushed args; returns false
  // (and logs) on a Lua error. Results are left on the stack.
  bool call_host(const char* fn, int nargs, int nresults);

 private:
  int compile(std::vector<int>& refs);  // 0, or an exit status
  int run_main(const std::vector<int>& refs);
  void on_iteration();
  void print_outcome(int code, const char* msg);

  lua_State* L_;
  EventLoop& loop_;
  const HostOptions& opts_;
  int host_ref_ = LUA_NOREF;  // rl._host
};

}  // namespace rl::lua
