// Interrupting Lua code whatever it runs (docs/operations.md, "User code that
// does not return").
//
// A *guard* marks the Lua code running now (a reward's task, a dynamic filter, a
// tool call) with a deadline. A watchdog thread watches the deadline of the guard
// that runs; when it passes, the thread signals the Lua thread, whose handler arms
// the host's instruction hook, and the hook raises a Cancelled error
// ({reason = "time limit"}) in the guarded code. Interpreted code stops at its next
// instruction. LuaJIT runs no hooks inside compiled traces, so the host also runs
// LuaJIT's profiler in line mode with an interval that never elapses: every trace
// then checks the profiler's flag where the source line changes, and the thread
// sets that flag (SIGPROF, the profiler's own signal) next to the hook, so a
// compiled loop leaves its trace at its next line and stops in the hook like
// interpreted code. The cost is that check per line in compiled code
// (bench/interrupt.lua).
//
// The same machinery bounds the run's stop (docs/operations.md, "Stopping"):
// with a stop grace set, the first SIGINT/SIGTERM starts the clock; once the grace
// is over, a guard still running is interrupted ({reason = "stopping"}), and if the
// process is still alive a second grace later, the thread kills the children and
// exits at once. Guarded code stuck inside a C function (which no hook can stop) for
// kStuckSeconds past its deadline also ends the process, with a message naming it.
#pragma once

#include <lua.hpp>

#include <functional>

namespace rl::lua::interrupt {

// Installs the machinery for the host's Lua state (once, on the Lua thread):
// the watchdog thread, the SIGURG handler, LuaJIT's profiler in line mode.
void install(lua_State* L);
// Stops the thread and the profiler (before lua_close).
void uninstall();

// Arms the host's hook (SIGINT/SIGTERM: async-signal-safe). `sigint_hook` is what
// the hook calls for the signal part (host_session.cpp); it may raise.
using SigintHook = void (*)(lua_State* L);
void set_sigint_hook(SigintHook fn);
void arm_hook();
// Disarms the hook unless a guard is being interrupted.
void disarm_hook();

// What the host does between loop iterations (signals, SIGUSR1's report), run by
// _core.interrupt.service() right after the host interrupted busy guarded code, so a
// signal that arrived while it held the loop is handled before the next task runs.
void set_service(std::function<void()> fn);

// A SIGINT/SIGTERM arrived (async-signal-safe): starts or shortens the stop clock
// when a grace is set (rl._core.interrupt.set_stop_grace). `count`: 1 for the first.
void on_stop_signal(int signo, int count);

// Seconds until the hard exit, or a negative number when none is pending.
double hard_exit_in();

}  // namespace rl::lua::interrupt
