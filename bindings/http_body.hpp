// A request body that C++ made and Lua hands to rl.http without copying it into a Lua
// string: a userdata holding shared, immutable bytes (rl.http.Body). Several requests
// may send the same one at once (a weight bucket POSTed to every engine, core_safetensors.cpp);
// each transfer holds the bytes until it ends. The metatable is core_http.cpp's.
#pragma once
#include <memory>
#include <string>

#include "bindings/trampoline.hpp"

namespace rl::lua {

using SharedBytes = std::shared_ptr<const std::string>;

// Pushes a new rl.http.Body holding `bytes`.
void push_http_body(lua_State* L, SharedBytes bytes);
// The bytes of the rl.http.Body at idx, or nullptr when idx holds something else.
const SharedBytes* test_http_body(lua_State* L, int idx);

}  // namespace rl::lua
