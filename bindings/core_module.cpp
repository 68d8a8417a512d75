#include "bindings/core_module.hpp"

#include "bindings/trampoline.hpp"

namespace rl::lua {

namespace {
using OpenFn = void (*)(lua_State*, int);
void add_area(lua_State* L, int core, const char* name, OpenFn open) {
  lua_newtable(L);
  open(L, lua_gettop(L));
  lua_setfield(L, core, name);
}
}  // namespace

void open_core(lua_State* L) {
  lua_newtable(L);
  const int core = lua_gettop(L);
  add_area(L, core, "loop", open_loop);
  add_area(L, core, "log", open_log);
  add_area(L, core, "json", open_json);
  add_area(L, core, "http", open_http);
  add_area(L, core, "control", open_control);
  add_area(L, core, "tokenizer", open_tokenizer);
  add_area(L, core, "router", open_router);
  add_area(L, core, "process", open_process);
  add_area(L, core, "admin", open_admin);
  add_area(L, core, "metrics", open_metrics);
  add_area(L, core, "dump", open_dump);
  add_area(L, core, "gzip", open_gzip);
  add_area(L, core, "timeline", open_timeline);
  add_area(L, core, "interrupt", open_interrupt);
  add_area(L, core, "safetensors", open_safetensors);
  lua_pushstring(L, RLHOST_VERSION);
  lua_setfield(L, core, "version");
  lua_getglobal(L, "package");
  lua_getfield(L, -1, "loaded");
  lua_pushvalue(L, core);
  lua_setfield(L, -2, "rl._core");
  lua_settop(L, core - 1);
}

}  // namespace rl::lua
