// rl._core.admin: the run's admin token (runtime/base/admin_token.hpp), which the
// control endpoints of rlhost's engines and routers require.
//
//   _core.admin.token() -> string       sent by rl.engine, rl.router, the trainer's sync
//   _core.admin.generated() -> bool     true when this process made it (not inherited)
//   _core.admin.save() -> path | nil, err
//       writes it to <runtime dir>/<pid>.admin-token (mode 0600 in the 0700
//       per-user directory, docs/attach.md) for tools of the same user; removed
//       at exit. Idempotent.
#include <unistd.h>

#include <cstdlib>
#include <string>

#include "base/admin_token.hpp"
#include "bindings/core_module.hpp"
#include "bindings/trampoline.hpp"
#include "host/control_registry.hpp"

namespace rl::lua {
namespace {

std::string g_saved_path;

void remove_saved() {
  if (!g_saved_path.empty()) ::unlink(g_saved_path.c_str());
}

int l_token(lua_State* L) {
  const std::string& t = admin_token();
  lua_pushlstring(L, t.data(), t.size());
  return 1;
}

int l_generated(lua_State* L) {
  lua_pushboolean(L, admin_token_generated());
  return 1;
}

int l_save(lua_State* L) {
  if (g_saved_path.empty()) {
    std::string path;
    try {
      path = control::ensure_runtime_dir() + "/" + std::to_string(::getpid()) + ".admin-token";
      control::write_private_file(path, admin_token() + "\n");
    } catch (const std::exception& e) {
      std::string msg = std::string("cannot save the admin token: ") + e.what();
      return fail(L, msg);
    }
    g_saved_path = path;
    std::atexit(remove_saved);
  }
  lua_pushlstring(L, g_saved_path.data(), g_saved_path.size());
  return 1;
}

}  // namespace

void open_admin(lua_State* L, int t) {
  static const Reg regs[] = {
      {"token", entry<l_token>}, {"generated", entry<l_generated>}, {"save", entry<l_save>}};
  register_functions(L, t, "rl.admin.", regs);
}

}  // namespace rl::lua
