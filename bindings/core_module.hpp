// The private `rl._core` table: one sub-table per runtime area, each filled by
// an open_* function in its own bindings/core_<area>.cpp. Lua modules under
// lua/rl/ wrap these into the public API.
#pragma once

#include <lua.hpp>

namespace rl::lua {

// Builds rl._core (package.loaded["rl._core"]) with every area below.
void open_core(lua_State* L);

// Each pushes nothing and fills the table at `t` (an absolute index).
void open_loop(lua_State* L, int t);     // core_loop.cpp:    _core.loop
void open_log(lua_State* L, int t);      // core_log.cpp:     _core.log
void open_json(lua_State* L, int t);     // core_json.cpp:    _core.json
void open_http(lua_State* L, int t);     // core_http.cpp:    _core.http
void open_control(lua_State* L, int t);  // core_control.cpp: _core.control
void open_tokenizer(lua_State* L, int t);  // core_tokenizer.cpp: _core.tokenizer
void open_router(lua_State* L, int t);   // core_router.cpp:  _core.router
void open_process(lua_State* L, int t);  // core_process.cpp: _core.process (child processes)
void open_admin(lua_State* L, int t);    // core_admin.cpp:   _core.admin (the run's admin token)
void open_metrics(lua_State* L, int t);  // core_metrics.cpp: _core.metrics
void open_modules(lua_State* L, int t);  // core_modules.cpp: _core.modules (native module loading)
void open_dump(lua_State* L, int t);     // core_dump.cpp:    _core.dump (torch.save-format dumps)
void open_gzip(lua_State* L, int t);      // core_gzip.cpp:     _core.gzip (in-memory gzip)
void open_timeline(lua_State* L, int t);  // core_timeline.cpp: _core.timeline (trace timeline cache)
void open_interrupt(lua_State* L, int t);  // core_interrupt.cpp: _core.interrupt (guards, the bounded stop)
void open_safetensors(lua_State* L, int t);  // core_safetensors.cpp: _core.safetensors (weight update bodies)

// Pushes the rl.json array metatable (core_json.cpp): tables carrying it are
// lists even when empty, for every encoder (JSON, dumps).
void push_json_array_mt(lua_State* L);

}  // namespace rl::lua
