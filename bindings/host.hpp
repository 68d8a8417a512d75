// The Lua host: creates the Lua state, runs a recipe's main task on the event
// loop, then (with -i) a REPL. main() calls this; nothing here leaks lua.h.
#pragma once

#include <string>

#include "host/cli.hpp"

namespace rl::lua {

// Returns the process exit status (0 ok, 1 Lua error, 2 usage error, 130 ^C).
int run_host(const HostOptions& opts);

// Directory of the Lua library (lua/): $RLHOST_LUA_DIR, the installed
// ../share/rlhost/lua beside the binary, or the source tree's.
std::string lua_library_dir();
// Directory of native Lua modules (librlhost_torch.so).
std::string native_module_dir();

}  // namespace rl::lua
