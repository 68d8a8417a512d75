#include "bindings/host.hpp"

#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <stdexcept>

#include "base/child_process.hpp"
#include "base/event_loop.hpp"
#include "base/log.hpp"
#include "bindings/core_module.hpp"
#include "bindings/host_context.hpp"
#include "bindings/host_session.hpp"
#include "bindings/trampoline.hpp"

#ifndef RLHOST_SOURCE_LUA_DIR
#define RLHOST_SOURCE_LUA_DIR ""
#endif
#ifndef RLHOST_BUILD_MODULE_DIR
#define RLHOST_BUILD_MODULE_DIR ""
#endif

namespace fs = std::filesystem;

namespace rl::lua {

namespace {

fs::path exe_dir() {
  std::error_code ec;
  auto p = fs::read_symlink("/proc/self/exe", ec);
  return ec ? fs::path() : p.parent_path();
}

}  // namespace

std::string lua_library_dir() {
  if (const char* env = std::getenv("RLHOST_LUA_DIR"); env && *env) return env;
  auto installed = exe_dir() / ".." / "share" / "rlhost" / "lua";
  if (fs::exists(installed / "rl" / "init.lua")) return fs::weakly_canonical(installed).string();
  return RLHOST_SOURCE_LUA_DIR;
}

std::string native_module_dir() {
  auto installed = exe_dir() / ".." / "lib" / "rlhost";
  if (fs::exists(installed / "librlhost_torch.so")) return fs::weakly_canonical(installed).string();
  return RLHOST_BUILD_MODULE_DIR;
}

namespace {

void set_search_paths(lua_State* L, const std::optional<std::string>& script) {
  const std::string lib = lua_library_dir();
  std::string path = lib + "/?.lua;" + lib + "/?/init.lua;";
  if (script) {
    fs::path parent = fs::path(*script).parent_path();
    const std::string dir = parent.empty() ? std::string(1, '.') : parent.string();
    path += dir + "/?.lua;" + dir + "/?/init.lua;";
  }
  lua_getglobal(L, "package");
  lua_getfield(L, -1, "path");
  path += lua_tostring(L, -1);
  lua_pop(L, 1);
  lua_pushstring(L, path.c_str());
  lua_setfield(L, -2, "path");

  std::string cpath = native_module_dir() + "/lib?.so;";
  lua_getfield(L, -1, "cpath");
  cpath += lua_tostring(L, -1);
  lua_pop(L, 1);
  lua_pushstring(L, cpath.c_str());
  lua_setfield(L, -2, "cpath");
  lua_pop(L, 1);
}

}  // namespace

int run_host(const HostOptions& given) {
  HostOptions opts = given;
  if (opts.command) opts.script = lua_library_dir() + "/rl/cmd/" + *opts.command + ".lua";
  try {
    rl::log::init(opts.log_level);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rlhost: %s\n", e.what());
    return 2;
  }
  if (opts.script) {
    FILE* f = std::fopen(opts.script->c_str(), "r");
    if (!f) {
      std::fprintf(stderr, "rlhost: cannot open recipe '%s': %s\n", opts.script->c_str(), std::strerror(errno));
      return 2;
    }
    std::fclose(f);
  }

  EventLoop loop;
  lua_State* L = luaL_newstate();
  if (!L) {
    std::fprintf(stderr, "rlhost: cannot create a Lua state (out of memory)\n");
    return 1;
  }
  int status = 0;
  HostContext ctx(L, loop);  // outlives lua_close: userdata finalizers may still use it
  {
    luaL_openlibs(L);
    set_search_paths(L, opts.script);
    open_core(L);
    HostSession session(L, loop, opts);
    status = session.run();
  }
  ctx.cancel_all();
  lua_close(L);
  // Whatever way the run ended (done, error, Ctrl-C, SIGTERM), no child outlives
  // it: engines and routers a recipe did not stop (an error skipped its
  // cleanup) get SIGTERM, then SIGKILL.
  if (const auto left = rl::live_children(); !left.empty()) {
    std::fprintf(stderr, "rlhost: stopping %zu child process%s left running\n", left.size(), left.size() == 1 ? "" : "es");
    rl::stop_children(5);
  }
  return status;
}

}  // namespace rl::lua
