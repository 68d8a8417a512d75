// The parts of librlhost_torch.so's module table, one per bindings/torch_<area>.cpp.
#pragma once

#include <lua.hpp>

namespace rl::lua {

// Each fills the module table at `t` (an absolute index).
void open_model(lua_State* L, int t);   // torch_model.cpp: model_load, model_init, Model methods
void open_engine(lua_State* L, int t);  // torch_engine.cpp: start, Engine methods, process helpers

}  // namespace rl::lua
