// rl._core.process: child processes (rl.process, process-mode rl.engine and rl.router,
// vLLM servers), each in its own process group, dying with us (base/child_process.hpp).
//
//   _core.process.spawn(argv, opts?) -> pid | nil, err   opts.log (stdout+stderr appended), opts.env ({NAME = value}),
//       opts.death_signal (default 9), opts.nice (0-19: its CPU priority); argv[1] = "@self" runs this rlhost binary
//   _core.process.kill(pid, sig) -> bool (its group)
//   _core.process.reap(pid) -> nil | exit code (128 + signal when killed)
//   _core.process.exit_now(code, grace?)   children stopped, output flushed, _exit(code): no unwinding
//   _core.process.set_cpus(list) -> list   pins this whole process to a CPU list ("0-3,6")
//   _core.process.cpus() -> list           the CPUs this process may run on
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <string>
#include <vector>

#include "base/child_process.hpp"
#include <spdlog/spdlog.h>

#include "base/cpu_set.hpp"
#include "bindings/core_module.hpp"
#include "bindings/trampoline.hpp"

namespace rl::lua {
namespace {

int l_spawn(lua_State* L) {
  arg::table(L, 1, "argv");
  std::vector<std::string> argv;
  const int n = static_cast<int>(lua_objlen(L, 1));
  for (int i = 1; i <= n; ++i) {
    lua_rawgeti(L, 1, i);
    if (lua_type(L, -1) != LUA_TSTRING && lua_type(L, -1) != LUA_TNUMBER)
      throw ArgError(1, "argv", "strings expected, item " + std::to_string(i) + " is " + arg::type_name(L, -1));
    argv.emplace_back(lua_tostring(L, -1));
    lua_pop(L, 1);
  }
  if (argv.empty()) throw ArgError(1, "argv", "non-empty list expected");
  ChildOptions co;
  if (lua_istable(L, 2)) {
    if (auto v = arg::field_string(L, 2, "log", "opts")) co.log_path = std::string(*v);
    if (auto v = arg::field_integer(L, 2, "death_signal", "opts")) {
      if (*v < 0 || *v > 64) throw ArgError(2, "opts.death_signal", "a signal number (0 = none) expected");
      co.death_signal = static_cast<int>(*v);
    }
    if (auto v = arg::field_integer(L, 2, "nice", "opts")) {
      if (*v < 0 || *v > 19) throw ArgError(2, "opts.nice", "a nice level 0-19 expected (raising priority needs root)");
      co.nice = static_cast<int>(*v);
    }
    lua_getfield(L, 2, "env");   // {NAME = value}: set in the child's environment (secrets: not on argv)
    if (lua_istable(L, -1)) {
      lua_pushnil(L);
      while (lua_next(L, -2) != 0) {
        if (lua_type(L, -2) != LUA_TSTRING || lua_type(L, -1) != LUA_TSTRING)
          throw ArgError(2, "opts.env", "a table of NAME = value strings expected");
        std::string name = lua_tostring(L, -2);
        if (name.empty() || name.find('=') != std::string::npos)
          throw ArgError(2, "opts.env", "'" + name + "' is not a variable name");
        co.env.push_back(name + "=" + lua_tostring(L, -1));
        lua_pop(L, 1);
      }
    } else if (!lua_isnil(L, -1)) {
      throw ArgError(2, "opts.env", std::string("table or nil expected, got ") + arg::type_name(L, -1));
    }
    lua_pop(L, 1);
  } else if (!lua_isnoneornil(L, 2)) {
    throw ArgError(2, "opts", std::string("table or nil expected, got ") + arg::type_name(L, 2));
  }
  pid_t pid = 0;
  try {
    if (argv[0] == "@self") argv[0] = self_executable();
    pid = spawn_child(argv, co);
  } catch (const std::exception& e) {
    std::string msg = e.what();
    return fail(L, msg);
  }
  lua_pushinteger(L, pid);
  return 1;
}

int l_kill(lua_State* L) {
  const auto pid = static_cast<pid_t>(arg::integer(L, 1, "pid"));
  const auto sig = arg::opt_integer(L, 2, "signal").value_or(SIGTERM);
  lua_pushboolean(L, signal_child(pid, static_cast<int>(sig)));
  return 1;
}

int l_reap(lua_State* L) {
  const auto pid = static_cast<pid_t>(arg::integer(L, 1, "pid"));
  auto rc = reap_child(pid);
  if (!rc) return 0;
  lua_pushinteger(L, *rc);
  return 1;
}

// Ends the process now with `code`: children stopped (SIGTERM, SIGKILL after
// `grace` s), output flushed, no destructors run — for a run that cannot unwind (its
// main task waits in a collective with a host that is gone, which a normal exit would
// join for the whole collective timeout).
int l_exit_now(lua_State* L) {
  const auto code = arg::integer(L, 1, "code");
  if (code < 0 || code > 255) throw ArgError(1, "code", "an exit status 0-255 expected");
  const double grace = arg::opt_number(L, 2, "grace").value_or(5.0);
  rl::stop_children(grace);
  spdlog::default_logger_raw()->flush();
  std::fflush(stdout);
  std::fflush(stderr);
  ::_exit(static_cast<int>(code));
}

int l_set_cpus(lua_State* L) {
  const auto cpus = arg::cpu_list(L, 1, "list");
  pin_process(cpus);
  const std::string out = format_cpu_list(cpus);
  lua_pushlstring(L, out.data(), out.size());
  return 1;
}

int l_cpus(lua_State* L) {
  const std::string out = format_cpu_list(allowed_cpus());
  lua_pushlstring(L, out.data(), out.size());
  return 1;
}

}  // namespace

void open_process(lua_State* L, int t) {
  static const Reg regs[] = {
      {"set_cpus", entry<l_set_cpus>},
      {"cpus", entry<l_cpus>},
      {"spawn", entry<l_spawn>}, {"exit_now", entry<l_exit_now>},
      {"kill", entry<l_kill>},
      {"reap", entry<l_reap>},
  };
  register_functions(L, t, "rl.process.", regs);
}

}  // namespace rl::lua
