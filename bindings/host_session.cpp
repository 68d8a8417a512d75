#include "bindings/host_session.hpp"

#include <unistd.h>

#include <atomic>
#include <csignal>
#include <cstdio>
#include <cstring>

#include "bindings/trampoline.hpp"

namespace rl::lua {

namespace {

// ---- Ctrl-C ---------------------------------------------------------------------
// The handler only sets a flag, arms a Lua hook (so a busy Lua loop stops at its
// next instruction count) and wakes the loop. The loop then cancels the
// foreground task; a third ^C before that happens exits at once.
std::atomic<int> g_sigint{0};
EventLoop* g_loop = nullptr;
lua_State* g_L = nullptr;
const char kCancelledKey = 0;

void interrupt_hook(lua_State* L, lua_Debug*) {
  lua_sethook(L, nullptr, 0, 0);
  if (g_sigint.exchange(0) == 0) return;
  lua_newtable(L);
  lua_pushstring(L, "interrupted");
  lua_setfield(L, -2, "reason");
  lua_pushlightuserdata(L, (void*)&kCancelledKey);
  lua_rawget(L, LUA_REGISTRYINDEX);
  lua_setmetatable(L, -2);
  lua_error(L);
}

void on_sigint(int) {
  if (g_sigint.fetch_add(1) >= 2) _exit(130);
  if (g_L) lua_sethook(g_L, interrupt_hook, LUA_MASKCALL | LUA_MASKRET | LUA_MASKCOUNT, 1);
  if (g_loop) g_loop->wakeup();
}

}  // namespace

HostSession::HostSession(lua_State* L, EventLoop& loop, const HostOptions& opts)
    : L_(L), loop_(loop), opts_(opts) {
  g_loop = &loop;
  g_L = L;
  struct sigaction sa {};
  sa.sa_handler = on_sigint;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, nullptr);
  loop_.set_on_iteration([this] { on_iteration(); });
}

HostSession::~HostSession() {
  signal(SIGINT, SIG_DFL);
  loop_.set_on_iteration(nullptr);
  lua_sethook(L_, nullptr, 0, 0);
  g_loop = nullptr;
  g_L = nullptr;
  if (host_ref_ != LUA_NOREF) luaL_unref(L_, LUA_REGISTRYINDEX, host_ref_);
}

void HostSession::on_iteration() {
  if (g_sigint.load() == 0) return;
  lua_sethook(L_, nullptr, 0, 0);  // the loop handles it: disarm the hook
  g_sigint = 0;
  call_host("interrupt", 0, 0);
}

bool HostSession::call_host(const char* fn, int nargs, int nresults) {
  lua_rawgeti(L_, LUA_REGISTRYINDEX, host_ref_);
  lua_getfield(L_, -1, fn);
  lua_remove(L_, -2);
  lua_insert(L_, -(nargs + 1));
  std::string err;
  if (!call_protected(L_, nargs, nresults, &err)) {
    std::fprintf(stderr, "rlhost: internal error in rl._host.%s: %s\n", fn, err.c_str());
    return false;
  }
  return true;
}

// Loads rl, sets rl.argv / rl.script / arg, and compiles every chunk before
// anything runs, so a syntax error anywhere fails fast with file:line.
int HostSession::compile(std::vector<int>& refs) {
  lua_getglobal(L_, "require");
  lua_pushstring(L_, "rl._host");
  std::string err;
  if (!call_protected(L_, 1, 1, &err)) {
    std::fprintf(stderr, "rlhost: cannot load the rl library: %s\n", err.c_str());
    return 1;
  }
  host_ref_ = luaL_ref(L_, LUA_REGISTRYINDEX);

  lua_getglobal(L_, "require");
  lua_pushstring(L_, "rl.task");
  call_protected(L_, 1, 1, nullptr);
  lua_pushlightuserdata(L_, (void*)&kCancelledKey);
  lua_getfield(L_, -2, "Cancelled");
  lua_rawset(L_, LUA_REGISTRYINDEX);
  lua_pop(L_, 1);

  lua_getglobal(L_, "require");
  lua_pushstring(L_, "rl");
  call_protected(L_, 1, 1, nullptr);
  const int rl = lua_gettop(L_);
  lua_pushvalue(L_, rl);
  lua_setglobal(L_, "rl");
  // rl.argv and the classic `arg` table (arg[0] = script)
  lua_createtable(L_, static_cast<int>(opts_.script_args.size()), 1);
  lua_createtable(L_, static_cast<int>(opts_.script_args.size()), 1);
  for (size_t i = 0; i < opts_.script_args.size(); ++i) {
    lua_pushstring(L_, opts_.script_args[i].c_str());
    lua_rawseti(L_, -3, static_cast<int>(i + 1));
    lua_pushstring(L_, opts_.script_args[i].c_str());
    lua_rawseti(L_, -2, static_cast<int>(i + 1));
  }
  if (opts_.script) {
    lua_pushstring(L_, opts_.script->c_str());
    lua_rawseti(L_, -2, 0);
    lua_pushstring(L_, opts_.script->c_str());
    lua_setfield(L_, rl, "script");
  }
  lua_setglobal(L_, "arg");
  lua_setfield(L_, rl, "argv");
  lua_pop(L_, 1);

  for (const auto& chunk : opts_.eval_chunks) {
    if (luaL_loadbuffer(L_, chunk.data(), chunk.size(), "=(command line)") != 0) {
      std::fprintf(stderr, "rlhost: %s\n", lua_tostring(L_, -1));
      lua_pop(L_, 1);
      return 1;
    }
    refs.push_back(luaL_ref(L_, LUA_REGISTRYINDEX));
  }
  if (opts_.script) {
    if (luaL_loadfile(L_, opts_.script->c_str()) != 0) {
      std::fprintf(stderr, "rlhost: %s\n", lua_tostring(L_, -1));
      lua_pop(L_, 1);
      return 1;
    }
    refs.push_back(luaL_ref(L_, LUA_REGISTRYINDEX));
  }
  return 0;
}

void HostSession::print_outcome(int code, const char* msg) {
  if (code == 0 || !msg) return;
  std::fprintf(stderr, "rlhost: %s\n", msg);
}

int HostSession::run_main(const std::vector<int>& refs) {
  lua_createtable(L_, static_cast<int>(refs.size()), 0);
  for (size_t i = 0; i < refs.size(); ++i) {
    lua_rawgeti(L_, LUA_REGISTRYINDEX, refs[i]);
    lua_rawseti(L_, -2, static_cast<int>(i + 1));
    luaL_unref(L_, LUA_REGISTRYINDEX, refs[i]);
  }
  lua_getglobal(L_, "rl");
  lua_getfield(L_, -1, "argv");
  lua_remove(L_, -2);
  if (!call_host("run_main", 2, 0)) return 1;
  loop_.run();
  if (!call_host("main_outcome", 0, 2)) return 1;
  const int code = static_cast<int>(lua_tointeger(L_, -2));
  print_outcome(code, lua_tostring(L_, -1));
  lua_pop(L_, 2);
  return code;
}

int HostSession::run() {
  std::vector<int> refs;
  if (int rc = compile(refs)) return rc;
  int code = 0;
  if (!refs.empty()) code = run_main(refs);
  call_host("report_unobserved", 0, 0);
  return code;
}

}  // namespace rl::lua
