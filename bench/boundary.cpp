// Cost of crossing the Lua ⇄ C++ boundary through the trampoline, next to its
// peers in the same run:
//   Lua -> C++: entry<Fn> with throwing arg:: decoders, vs. a raw lua_CFunction
//               (lua_tonumber, no checks) and a luaL_check* function (lua.c style).
//   C++ -> Lua: call_protected (pcall + traceback handler), vs. raw lua_call and
//               lua_pcall without a handler.
// Prints ns/call and ratios; asserts nothing. Goal: <= 100 ns per crossing.
//   build/bench/bench_boundary [iterations]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "bindings/trampoline.hpp"

using namespace rl::lua;

namespace {

int l_add_trampolined(lua_State* L) {
  const double a = arg::number(L, 1, "a");
  const double b = arg::number(L, 2, "b");
  lua_pushnumber(L, a + b);
  return 1;
}

int l_add_raw(lua_State* L) {
  lua_pushnumber(L, lua_tonumber(L, 1) + lua_tonumber(L, 2));
  return 1;
}

int l_add_checked(lua_State* L) {
  lua_pushnumber(L, luaL_checknumber(L, 1) + luaL_checknumber(L, 2));
  return 1;
}

double seconds_now() {
  using namespace std::chrono;
  return duration<double>(steady_clock::now().time_since_epoch()).count();
}

// ns per call of Lua loop `for i = 1, n do acc = f(acc, 1) end`
double lua_to_cpp(lua_State* L, const char* fname, long n) {
  std::string code = "local f, n = ...; local acc = 0; for i = 1, n do acc = f(acc, 1) end; return acc";
  luaL_loadstring(L, code.c_str());
  lua_getglobal(L, fname);
  lua_pushnumber(L, static_cast<double>(n));
  const double t0 = seconds_now();
  std::string err;
  if (!call_protected(L, 2, 1, &err)) {
    std::fprintf(stderr, "%s\n", err.c_str());
    std::exit(1);
  }
  const double dt = seconds_now() - t0;
  if (lua_tonumber(L, -1) != static_cast<double>(n)) std::fprintf(stderr, "wrong result\n");
  lua_pop(L, 1);
  return dt / static_cast<double>(n) * 1e9;
}

enum class CallKind { kProtectedWithTraceback, kRawCall, kPcallNoHandler };

// ns per call of a Lua function `function(x) return x + 1 end` from C++
double cpp_to_lua(lua_State* L, CallKind kind, long n) {
  luaL_dostring(L, "function inc(x) return x + 1 end");
  double acc = 0;
  const double t0 = seconds_now();
  for (long i = 0; i < n; ++i) {
    lua_getglobal(L, "inc");
    lua_pushnumber(L, acc);
    switch (kind) {
      case CallKind::kProtectedWithTraceback:
        call_protected(L, 1, 1, nullptr);
        break;
      case CallKind::kRawCall:
        lua_call(L, 1, 1);
        break;
      case CallKind::kPcallNoHandler:
        lua_pcall(L, 1, 1, 0);
        break;
    }
    acc = lua_tonumber(L, -1);
    lua_pop(L, 1);
  }
  const double dt = seconds_now() - t0;
  if (acc != static_cast<double>(n)) std::fprintf(stderr, "wrong result\n");
  return dt / static_cast<double>(n) * 1e9;
}

template <class F>
double best_of(int runs, F f) {
  double best = 1e30;
  for (int i = 0; i < runs; ++i) best = std::min(best, f());
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  const long n = argc > 1 ? std::atol(argv[1]) : 10'000'000;
  lua_State* L = luaL_newstate();
  luaL_openlibs(L);
  lua_pushstring(L, "bench.add");
  lua_pushcclosure(L, entry<l_add_trampolined>, 1);
  lua_setglobal(L, "add_trampolined");
  lua_pushcfunction(L, l_add_raw);
  lua_setglobal(L, "add_raw");
  lua_pushcfunction(L, l_add_checked);
  lua_setglobal(L, "add_checked");

  const int runs = 5;
  const double t_tramp = best_of(runs, [&] { return lua_to_cpp(L, "add_trampolined", n); });
  const double t_raw = best_of(runs, [&] { return lua_to_cpp(L, "add_raw", n); });
  const double t_checked = best_of(runs, [&] { return lua_to_cpp(L, "add_checked", n); });
  const long m = n / 5;
  const double c_prot = best_of(runs, [&] { return cpp_to_lua(L, CallKind::kProtectedWithTraceback, m); });
  const double c_raw = best_of(runs, [&] { return cpp_to_lua(L, CallKind::kRawCall, m); });
  const double c_pcall = best_of(runs, [&] { return cpp_to_lua(L, CallKind::kPcallNoHandler, m); });
  lua_close(L);

  std::printf("boundary benchmark (best of %d runs, LuaJIT %s, one thread)\n", runs, LUAJIT_VERSION);
  std::printf("%-44s %10s %14s\n", "crossing", "ns/call", "vs trampoline");
  std::printf("%-44s %10.1f %14s\n", "Lua->C++ entry<> trampoline (2 checked args)", t_tramp, "1.00x");
  std::printf("%-44s %10.1f %13.2fx\n", "Lua->C++ raw lua_CFunction (no checks)", t_raw, t_raw / t_tramp);
  std::printf("%-44s %10.1f %13.2fx\n", "Lua->C++ luaL_checknumber (lua.c style)", t_checked, t_checked / t_tramp);
  std::printf("%-44s %10.1f %14s\n", "C++->Lua call_protected (+traceback handler)", c_prot, "1.00x");
  std::printf("%-44s %10.1f %13.2fx\n", "C++->Lua raw lua_call (unprotected)", c_raw, c_raw / c_prot);
  std::printf("%-44s %10.1f %13.2fx\n", "C++->Lua lua_pcall (no handler)", c_pcall, c_pcall / c_prot);
  std::printf("goal <= 100 ns per crossing: Lua->C++ %s, C++->Lua %s\n", t_tramp <= 100 ? "met" : "NOT met",
              c_prot <= 100 ? "met" : "NOT met");
  return 0;
}
