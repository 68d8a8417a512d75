#include "bindings/host_session.hpp"

#include <unistd.h>

#include <atomic>
#include <csignal>
#include <cstdio>
#include <cstring>

#include <spdlog/spdlog.h>

#include "bindings/core_control.hpp"
#include "bindings/host_context.hpp"
#include "bindings/interrupt.hpp"
#include "bindings/trampoline.hpp"
#include "host/control_server.hpp"
#include "host/repl.hpp"

#ifndef RLHOST_VERSION
#define RLHOST_VERSION "0.0.0"
#endif

namespace rl::lua {

namespace {

// ---- Ctrl-C and SIGTERM ----------------------------------------------------------
// The handler only sets a flag, arms a Lua hook (so a busy Lua loop stops at its
// next instruction count) and wakes the loop. The loop then cancels the
// foreground task; a third signal before that happens exits at once. SIGTERM
// (what timeout, systemd and Kubernetes send) takes the same path as ^C, so a
// recipe's rl.on_interrupt handler stops it gracefully either way.
std::atomic<int> g_sigint{0};
std::atomic<int> g_signo{SIGINT};  // the last one received
// True while the REPL waits at its prompt: ^C then only clears the line, so
// the Lua hook is not armed (it would cancel whatever background task happens
// to be running Lua at that instant).
std::atomic<bool> g_repl_idle{false};
EventLoop* g_loop = nullptr;
lua_State* g_L = nullptr;
const char kCancelledKey = 0;

// True when the recipe set rl.on_interrupt: Ctrl-C is then left to the event loop
// (HostSession::on_iteration calls the handler) instead of raising inside Lua.
bool graceful_interrupt(lua_State* L) {
  lua_getglobal(L, "package");
  lua_getfield(L, -1, "loaded");
  lua_getfield(L, -1, "rl._host");
  bool graceful = false;
  if (lua_istable(L, -1)) {
    lua_getfield(L, -1, "graceful_interrupt");
    graceful = lua_toboolean(L, -1);
    lua_pop(L, 1);
  }
  lua_pop(L, 3);
  return graceful;
}

// The signal part of the host's hook (bindings/interrupt.hpp owns the hook, which
// also interrupts guarded code past its deadline).
void sigint_hook(lua_State* L) {
  if (graceful_interrupt(L)) return;
  if (g_sigint.exchange(0) == 0) return;
  lua_newtable(L);
  lua_pushstring(L, g_signo.load() == SIGTERM ? "terminated" : "interrupted");
  lua_setfield(L, -2, "reason");
  registry_get(L, &kCancelledKey);
  lua_setmetatable(L, -2);
  lua_error(L);
}

void on_sigint(int sig) {
  g_signo = sig;
  const int n = g_sigint.fetch_add(1);
  if (n >= 2) _exit(128 + sig);  // children die with us (PR_SET_PDEATHSIG)
  interrupt::on_stop_signal(sig, n + 1);  // with a stop grace (a recipe's): the clock starts now
  if (g_L && !g_repl_idle.load()) interrupt::arm_hook();
  if (g_loop) g_loop->wakeup();
}

// SIGUSR1: the hang report (rl.watchdog) at the loop's next iteration.
std::atomic<bool> g_sigusr1{false};
void on_sigusr1(int) {
  g_sigusr1 = true;
  if (g_loop) g_loop->wakeup();
}

}  // namespace

HostSession::HostSession(lua_State* L, EventLoop& loop, const HostOptions& opts)
    : L_(L), loop_(loop), opts_(opts) {
  g_loop = &loop;
  g_L = L;
  interrupt::set_sigint_hook(sigint_hook);
  interrupt::install(L);
  struct sigaction sa {};
  sa.sa_handler = on_sigint;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  sa.sa_handler = on_sigusr1;
  sigaction(SIGUSR1, &sa, nullptr);
  loop_.set_on_iteration([this] { on_iteration(); });
  interrupt::set_service([this] { on_iteration(); });
}

HostSession::~HostSession() {
  hub_.reset();  // closes the control socket while the Lua state is still open
  signal(SIGINT, SIG_DFL);
  signal(SIGUSR1, SIG_DFL);
  signal(SIGTERM, SIG_DFL);
  loop_.set_on_iteration(nullptr);
  interrupt::set_service(nullptr);
  interrupt::uninstall();
  lua_sethook(L_, nullptr, 0, 0);
  g_loop = nullptr;
  g_L = nullptr;
  if (host_ref_ != LUA_NOREF) luaL_unref(L_, LUA_REGISTRYINDEX, host_ref_);
}

void HostSession::on_iteration() {
  if (repl_ && !repl_->busy()) g_repl_idle = true;
  if (g_sigusr1.exchange(false)) call_host("report", 0, 0);
  if (g_sigint.load() == 0) return;
  interrupt::disarm_hook();  // the loop handles it: disarm the hook
  g_sigint = 0;
  const bool term = g_signo.load() == SIGTERM;
  if (!term && repl_ && repl_->interrupt()) return;  // ^C idle at the prompt: just a fresh line
  lua_pushstring(L_, term ? "SIGTERM" : "SIGINT");
  call_host("interrupt", 1, 0);
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
  lua_getfield(L_, -1, "Cancelled");
  registry_set(L_, &kCancelledKey);
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

int HostSession::run_main(const std::vector<int>& refs, bool& exited) {
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
  if (!call_host("main_outcome", 0, 3)) return 1;
  const int code = static_cast<int>(lua_tointeger(L_, -3));
  print_outcome(code, lua_tostring(L_, -2));
  exited = lua_toboolean(L_, -1) != 0;
  lua_pop(L_, 3);
  return code;
}

int HostSession::run() {
  std::vector<int> refs;
  if (int rc = compile(refs)) return rc;
  if (int rc = start_control()) return rc;
  int code = 0;
  bool exited = false;  // rl.exit: no REPL even with -i
  if (!refs.empty()) code = run_main(refs, exited);
  if (opts_.interactive && !exited) {
    // After -i the status stays the recipe's: 0 unless it failed.
    run_repl();
    if (auto requested = exit_requested()) code = *requested;
  }
  call_host("report_unobserved", 0, 0);
  return code;
}

// ---- control socket and REPL ------------------------------------------------------

int HostSession::start_control() {
  if (!opts_.control && !opts_.interactive) return 0;
  hub_ = std::make_unique<ControlHub>(L_, HostContext::get(L_));
  if (!call_host("start_control", 0, 0)) return 1;
  if (!opts_.control) return 0;
  ControlServer::Options o;
  o.socket_path = opts_.control_path;
  o.tcp_port = opts_.control_tcp_port;
  o.script = opts_.script.value_or("");
  o.argv = opts_.argv0;
  try {
    hub_->listen(std::move(o));
  } catch (const std::exception& e) {
    // Asked for explicitly: a usage error. The default socket is a convenience:
    // a run must not fail because /run/user is read-only.
    if (!opts_.control_path.empty() || opts_.control_tcp_port) {
      std::fprintf(stderr, "rlhost: %s\n", e.what());
      return 2;
    }
    spdlog::warn("no control socket (rlhost attach will not reach this process): {}", e.what());
  }
  return 0;
}

std::optional<int> HostSession::exit_requested() {
  if (!call_host("exit_requested", 0, 1)) return std::nullopt;
  std::optional<int> code;
  if (lua_isnumber(L_, -1)) code = static_cast<int>(lua_tointeger(L_, -1));
  lua_pop(L_, 1);
  return code;
}

bool HostSession::repl_incomplete(const std::string& chunk) {
  lua_pushlstring(L_, chunk.data(), chunk.size());
  if (!call_host("repl_incomplete", 1, 1)) return false;
  const bool incomplete = lua_toboolean(L_, -1) != 0;
  lua_pop(L_, 1);
  return incomplete;
}

namespace {
// Values on one line separated by tabs (like print), errors on stderr.
void print_reply(const ControlReply& r) {
  if (!r.output.empty()) std::fwrite(r.output.data(), 1, r.output.size(), stdout);
  for (size_t i = 0; i < r.values.size(); ++i) {
    if (i) std::fputc('\t', stdout);
    std::fwrite(r.values[i].data(), 1, r.values[i].size(), stdout);
  }
  if (!r.values.empty()) std::fputc('\n', stdout);
  std::fflush(stdout);
  if (!r.ok) {
    std::fprintf(stderr, "%s\n", r.error.c_str());
    std::fflush(stderr);
  }
}
}  // namespace

void HostSession::run_repl() {
  Repl::Options ro;
  ro.history_path = Repl::default_history_path();
  ro.banner = std::string("rlhost ") + RLHOST_VERSION + " (" + LUAJIT_VERSION +
              "). Ctrl-C interrupts a chunk, Ctrl-D exits.\n";
  Repl::Callbacks cb;
  cb.incomplete = [this](const std::string& chunk) { return repl_incomplete(chunk); };
  cb.eval = [this](const std::string& chunk, Repl::Done done) {
    g_repl_idle = false;  // before the chunk can run: ^C must reach it
    const bool tty = repl_ && repl_->uses_readline();
    hub_->submit_local("eval", chunk, [done, tty](const ControlReply& r) {
      if (tty && !r.ok && r.error == "interrupted") std::fputc('\n', stderr);  // after the echoed ^C
      print_reply(r);
      done();
    });
  };
  cb.on_eof = [this] { loop_.stop(); };
  Repl repl(loop_, ro, cb);
  repl_ = &repl;
  g_repl_idle = true;
  try {
    repl.start();
    loop_.run();  // until end of input, or rl.exit
  } catch (...) {
    g_repl_idle = false;
    repl_ = nullptr;
    throw;
  }
  g_repl_idle = false;
  repl_ = nullptr;
  repl.stop();
}

}  // namespace rl::lua
