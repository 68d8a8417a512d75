// _core.interrupt: guards with deadlines over the Lua code running now, and the
// bounded stop (bindings/interrupt.hpp explains the machinery).
//
//   enter(deadline|nil, label|nil, co|nil, depth|nil) -> co, depth
//                                    a guard runs now: interrupt it at `deadline` (rl.now()
//                                    seconds; nil: only when the run stops); co, depth: what
//                                    it covers (default: what the caller calls next)
//   leave() -> reason|nil            it no longer runs; the reason it was interrupted
//   set_error_metatable(mt)          the metatable of the error the hook raises (rl.task.Cancelled)
//   set_stop_grace(s)                seconds a step has after the first SIGINT/SIGTERM (0: none)
//   stop_state() -> {stop_in, hard_in, code, signals} | nil
//   abort_now()                      the stop's grace is over now (the hard exit keeps its time)
//   jit_checks(on|nil) -> was        the profiler's line checks in compiled code (bench/interrupt.lua)
//   stats() -> {installed, jit_checks, interrupts}
//   service()                        the host handles pending signals now (after an interruption)
#include <pthread.h>
#include <signal.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <climits>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <thread>

#include "base/child_process.hpp"
#include "bindings/core_module.hpp"
#include "bindings/interrupt.hpp"
#include "bindings/trampoline.hpp"

namespace rl::lua {

namespace interrupt {
namespace {

constexpr int64_t kNever = INT64_MAX;
constexpr int64_t kPollNs = 50'000'000;        // the watchdog looks every 50 ms
constexpr int64_t kStuckNs = 30'000'000'000;   // interrupted, still not unwound: stuck in C
constexpr int kTimeLimit = 1, kStopping = 2;

int64_t now_ns() {  // CLOCK_MONOTONIC, as EventLoop::now (steady_clock); async-signal-safe
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return int64_t(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}
int64_t to_ns(double s) { return s >= 9.2e9 ? kNever : int64_t(s * 1e9); }

lua_State* g_L = nullptr;
pthread_t g_lua_thread{};
std::atomic<bool> g_profiler{false};         // LuaJIT's profiler runs (line checks in traces)
std::atomic<int64_t> g_deadline{0};          // the running guard's deadline; 0: none runs
std::atomic<uint64_t> g_gen{0};              // bumped at every enter/leave
std::atomic<uint64_t> g_fire_gen{UINT64_MAX};  // the guard run being interrupted
std::atomic<int> g_fire_reason{0};
std::atomic<int64_t> g_fire_since{0};
std::atomic<uint64_t> g_interrupts{0};       // guard runs interrupted so far
std::atomic<int64_t> g_grace{0};             // the stop grace (ns); 0: unbounded stop
std::atomic<int64_t> g_stop_at{0};           // after a signal: when guards are interrupted
std::atomic<int64_t> g_hard_at{0};           // ... and when the process exits at once
std::atomic<int> g_stop_code{0};
std::atomic<int> g_stop_signals{0};
SigintHook g_sigint_hook = nullptr;
std::function<void()> g_service;
const char kErrorMt = 0;
const char kCurrentError = 0;                // the error of the guard run being interrupted
uint64_t g_error_gen = UINT64_MAX;           // ... for this generation (Lua thread only)
// What the guard covers (Lua thread only): coroutine `g_guard_co` from stack depth
// `g_guard_depth` down, and every coroutine it resumes while it runs.
lua_State* g_guard_co = nullptr;
int g_guard_depth = 0;

std::mutex g_label_mu;  // the running guard's label, for the stuck-in-C message
char g_label[160] = "";

std::mutex g_mu;
std::condition_variable g_cv;
bool g_quit = false;
// Never destroyed: a script that calls os.exit() leaves it running, and the destructor of a
// joinable std::thread at exit would call std::terminate (exit status 134 instead of the
// script's own).
std::thread* g_thread = nullptr;

void say(const char* text) {  // straight to stderr: the log may belong to a blocked thread
  size_t left = std::strlen(text);
  while (left > 0) {
    const ssize_t w = ::write(2, text, left);
    if (w <= 0) return;
    text += w;
    left -= size_t(w);
  }
}

[[noreturn]] void exit_now(int code) {
  for (pid_t p : live_children()) signal_child(p, SIGKILL);  // engines die with us anyway (death signal)
  ::_exit(code);
}

void host_hook(lua_State* L, lua_Debug*);

void arm() {
  if (g_L) lua_sethook(g_L, host_hook, LUA_MASKCALL | LUA_MASKRET | LUA_MASKCOUNT, 1);
}

bool firing() { return g_deadline.load() != 0 && g_fire_gen.load() == g_gen.load(); }

int stack_depth(lua_State* L) {
  lua_Debug ar;
  int n = 0;
  while (lua_getstack(L, n, &ar)) ++n;
  return n;
}

// True when `L` runs inside the guard: the guarded coroutine below the depth where
// the guard began, or a coroutine it resumed (the guarded one is then active but not
// running). The code around the guard (the scheduler after a resume, limit() after
// its pcall) is not inside.
bool inside_guard(lua_State* L) {
  lua_State* co = g_guard_co;
  if (!co) return false;
  if (L == co) return stack_depth(L) > g_guard_depth;
  lua_Debug ar;
  return lua_status(co) == 0 && lua_getstack(co, 0, &ar) != 0;
}

// Raises the interruption in the running guarded code. The hook stays armed: guarded
// code that catches the error (pcall) is interrupted again at its next instruction,
// with the same error (so its traceback stays the one where it was first stopped).
void raise_interrupt(lua_State* L, int reason) {
  const uint64_t gen = g_gen.load();
  if (g_error_gen == gen) {
    registry_get(L, &kCurrentError);
    lua_error(L);
  }
  lua_createtable(L, 0, 3);
  lua_pushstring(L, reason == kStopping ? "stopping" : "time limit");
  lua_setfield(L, -2, "reason");
  luaL_traceback(L, L, nullptr, 0);  // level 0: the interrupted function itself
  lua_setfield(L, -2, "traceback");
  lua_pushboolean(L, 1);
  lua_setfield(L, -2, "interrupted");
  registry_get(L, &kErrorMt);
  if (lua_istable(L, -1)) {
    lua_setmetatable(L, -2);
  } else {
    lua_pop(L, 1);
  }
  lua_pushvalue(L, -1);
  registry_set(L, &kCurrentError);
  g_error_gen = gen;
  lua_error(L);
}

void host_hook(lua_State* L, lua_Debug*) {
  if (firing()) {
    if (inside_guard(L)) raise_interrupt(L, g_fire_reason.load());
    return;  // between the guarded code and its leave(): stay armed
  }
  lua_sethook(L, nullptr, 0, 0);
  if (g_sigint_hook) g_sigint_hook(L);
}

// SIGURG from the watchdog: arm the hook on the Lua thread (the documented way:
// lua_sethook may be called from a signal handler).
void on_sigurg(int) {
  if (firing()) arm();
}

bool profiler_handles_sigprof() {
  struct sigaction cur {};
  if (sigaction(SIGPROF, nullptr, &cur) != 0) return false;
  return cur.sa_handler != SIG_DFL && cur.sa_handler != SIG_IGN;
}

void profile_cb(void*, lua_State*, int, int) {}  // the line checks are what we want, not samples

bool start_profiler(lua_State* L) {
  // "l": traces check the profiler's flag where the line changes; "i": an interval
  // (ms of CPU time) that never elapses — only the watchdog sends SIGPROF.
  luaJIT_profile_start(L, "li2147483647", profile_cb, nullptr);
  return profiler_handles_sigprof();
}

void stuck_exit(int64_t late_ns) {
  char label[160];
  {
    std::lock_guard lk(g_label_mu);
    std::snprintf(label, sizeof label, "%s", g_label[0] ? g_label : "guarded Lua code");
  }
  char msg[512];
  std::snprintf(msg, sizeof msg,
                "rlhost: %s was interrupted %.0f s ago and has not stopped: it is blocked inside a C function "
                "(a hook cannot stop C code: a pattern match, os.execute, an FFI call); exiting with status 1\n",
                label, double(late_ns) / 1e9);
  say(msg);
  exit_now(1);
}

void hard_exit() {
  char msg[400];
  std::snprintf(msg, sizeof msg,
                "rlhost: still running %.0f s after the stop signal (the stop grace is %.0f s: the step's, then as "
                "long again to save and stop): exiting now with status %d; the checkpoint on disk is the last "
                "complete one\n",
                double(2 * g_grace.load()) / 1e9, double(g_grace.load()) / 1e9, g_stop_code.load());
  say(msg);
  exit_now(g_stop_code.load());
}

void watchdog() {
  std::unique_lock lk(g_mu);
  while (!g_quit) {
    g_cv.wait_for(lk, std::chrono::nanoseconds(kPollNs));
    if (g_quit) break;
    const int64_t now = now_ns();
    const int64_t hard = g_hard_at.load();
    if (hard && now >= hard) hard_exit();
    const uint64_t gen = g_gen.load();
    const int64_t deadline = g_deadline.load();
    if (deadline == 0 || gen != g_gen.load()) continue;
    const int64_t stop = g_stop_at.load();
    const int reason = now >= deadline ? kTimeLimit : (stop && now >= stop) ? kStopping : 0;
    if (!reason) continue;
    if (g_fire_gen.load() != gen) {
      g_fire_reason = reason;
      g_fire_since = now;
      g_fire_gen = gen;
      ++g_interrupts;
    } else if (now - g_fire_since.load() > kStuckNs) {
      stuck_exit(now - g_fire_since.load());
    }
    pthread_kill(g_lua_thread, SIGURG);
    if (g_profiler.load() && profiler_handles_sigprof()) pthread_kill(g_lua_thread, SIGPROF);
  }
}

}  // namespace

void install(lua_State* L) {
  if (g_L) return;
  g_L = L;
  g_lua_thread = pthread_self();
  struct sigaction sa {};
  sa.sa_handler = on_sigurg;
  sa.sa_flags = SA_RESTART;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGURG, &sa, nullptr);
  g_profiler = start_profiler(L);
  {
    std::lock_guard lk(g_mu);
    g_quit = false;
  }
  g_thread = new std::thread(watchdog);
}

void uninstall() {
  if (!g_L) return;
  {
    std::lock_guard lk(g_mu);
    g_quit = true;
  }
  g_cv.notify_all();
  if (g_thread && g_thread->joinable()) g_thread->join();
  delete g_thread;
  g_thread = nullptr;
  if (g_profiler.exchange(false)) luaJIT_profile_stop(g_L);
  signal(SIGURG, SIG_DFL);
  g_deadline = 0;
  ++g_gen;
  g_L = nullptr;
}

void set_sigint_hook(SigintHook fn) { g_sigint_hook = fn; }
void set_service(std::function<void()> fn) { g_service = std::move(fn); }
void arm_hook() { arm(); }
void disarm_hook() {
  if (g_L && !firing()) lua_sethook(g_L, nullptr, 0, 0);
}

void on_stop_signal(int signo, int /*count*/) {
  const int64_t grace = g_grace.load();
  if (grace <= 0) return;
  const int64_t now = now_ns();
  if (g_stop_signals.fetch_add(1) == 0) {
    g_stop_code = 128 + signo;
    g_stop_at = now + grace;
    g_hard_at = now + 2 * grace;
  } else if (g_stop_at.load() > now) {
    g_stop_at = now;  // again: abort now (the hard exit keeps its time)
  }
}

double hard_exit_in() {
  const int64_t hard = g_hard_at.load();
  return hard ? double(hard - now_ns()) / 1e9 : -1.0;
}

}  // namespace interrupt

namespace {

using namespace interrupt;

void set_label(const char* s, size_t n) {
  std::lock_guard lk(g_label_mu);
  n = std::min(n, sizeof g_label - 1);
  std::memcpy(g_label, s, n);
  g_label[n] = '\0';
}

// enter(deadline|nil, label|nil, co|nil, depth|nil) -> co, depth: the guard covers
// coroutine `co` below stack depth `depth` (0: all of it; a task's, entered before it
// is resumed), or without `co` what the caller calls next (limit(): the frames below
// the caller's).
int l_enter(lua_State* L) {
  const int64_t d = lua_isnoneornil(L, 1) ? kNever : to_ns(arg::number(L, 1, "deadline"));
  size_t n = 0;
  const char* label = lua_isnoneornil(L, 2) ? nullptr : lua_tolstring(L, 2, &n);
  if (label) set_label(label, n);
  if (lua_isthread(L, 3)) {
    g_guard_co = lua_tothread(L, 3);
    g_guard_depth = lua_isnoneornil(L, 4) ? 0 : int(arg::integer(L, 4, "depth"));
  } else {
    g_guard_co = L;
    g_guard_depth = stack_depth(L);  // enter and its caller: what the caller calls next is deeper
  }
  ++g_gen;
  g_deadline = d > 0 ? d : 1;
  lua_pushthread(g_guard_co);
  lua_xmove(g_guard_co, L, 1);
  lua_pushinteger(L, g_guard_depth);
  return 2;  // what it covers, to enter it again after a nested guard
}

int l_leave(lua_State* L) {
  const uint64_t gen = g_gen.load();
  const bool fired = g_fire_gen.load() == gen;
  const int reason = g_fire_reason.load();
  g_deadline = 0;
  g_guard_co = nullptr;
  ++g_gen;
  if (g_error_gen == gen) {  // drop the cached error
    lua_pushnil(L);
    registry_set(L, &kCurrentError);
    g_error_gen = UINT64_MAX;
  }
  if (!fired) return 0;
  lua_pushstring(L, reason == kStopping ? "stopping" : "time limit");
  return 1;
}

int l_set_error_metatable(lua_State* L) {
  arg::table(L, 1, "mt");
  lua_pushvalue(L, 1);
  registry_set(L, &kErrorMt);
  return 0;
}

int l_set_stop_grace(lua_State* L) {
  const double s = arg::number(L, 1, "seconds");
  if (!(s >= 0)) throw ArgError(1, "seconds", "a non-negative number expected");
  g_grace = s > 0 ? to_ns(s) : 0;
  return 0;
}

int l_stop_state(lua_State* L) {
  const int64_t stop = g_stop_at.load();
  if (!stop) return 0;
  const int64_t now = now_ns();
  lua_createtable(L, 0, 4);
  set_number(L, "stop_in", double(stop - now) / 1e9);
  set_number(L, "hard_in", double(g_hard_at.load() - now) / 1e9);
  set_number(L, "code", g_stop_code.load());
  set_number(L, "signals", g_stop_signals.load());
  return 1;
}

int l_abort_now(lua_State*) {
  const int64_t now = now_ns();
  if (g_stop_at.load() == 0 || g_stop_at.load() > now) g_stop_at = now;
  return 0;
}

int l_jit_checks(lua_State* L) {
  const bool was = g_profiler.load();
  if (!lua_isnoneornil(L, 1) && g_L) {
    const bool on = lua_toboolean(L, 1);
    if (on && !was) {
      g_profiler = start_profiler(g_L);
    } else if (!on && was) {
      g_profiler = false;
      luaJIT_profile_stop(g_L);
    }
  }
  lua_pushboolean(L, was);
  return 1;
}

int l_service(lua_State*) {
  if (g_service) g_service();
  return 0;
}

int l_stats(lua_State* L) {
  lua_createtable(L, 0, 3);
  set_bool(L, "installed", g_L != nullptr);
  set_bool(L, "jit_checks", g_profiler.load());
  set_number(L, "interrupts", double(g_interrupts.load()));
  return 1;
}

}  // namespace

void open_interrupt(lua_State* L, int t) {
  static const Reg regs[] = {
      {"enter", entry<l_enter>},
      {"leave", entry<l_leave>},
      {"set_error_metatable", entry<l_set_error_metatable>},
      {"set_stop_grace", entry<l_set_stop_grace>},
      {"stop_state", entry<l_stop_state>},
      {"abort_now", entry<l_abort_now>},
      {"jit_checks", entry<l_jit_checks>},
      {"stats", entry<l_stats>},
      {"service", entry<l_service>},
  };
  register_functions(L, t, "rl.interrupt.", regs);
}

}  // namespace rl::lua
