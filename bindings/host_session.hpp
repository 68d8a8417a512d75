// One run of the host over a ready Lua state: compiles the -e chunks and the
// recipe, opens the control socket, runs them as the main task on the loop,
// reports the outcome, then (with -i, or with nothing to run) runs the REPL
// until end of input. Also owns Ctrl-C handling: at an idle prompt ^C clears
// the line; otherwise it cancels the foreground task (main, or the REPL chunk).
#pragma once

#include <lua.hpp>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "base/event_loop.hpp"
#include "host/cli.hpp"

namespace rl {
class Repl;
struct ControlReply;
}  // namespace rl

namespace rl::lua {

class ControlHub;

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
  int run_main(const std::vector<int>& refs, bool& exited);
  void on_iteration();
  void print_outcome(int code, const char* msg);

  // REPL and control socket (host_session.cpp, second half).
  int start_control();  // 0, or an exit status
  void run_repl();
  bool repl_incomplete(const std::string& chunk);
  std::optional<int> exit_requested();

  lua_State* L_;
  EventLoop& loop_;
  const HostOptions& opts_;
  int host_ref_ = LUA_NOREF;  // rl._host
  std::unique_ptr<ControlHub> hub_;
  Repl* repl_ = nullptr;  // while the REPL runs
};

}  // namespace rl::lua
