// librlhost_torch.so: the LibTorch half of the bindings, loaded by
// `require "rlhost_torch"` (lua/rl/torch.lua). Host symbols (trampoline, loop,
// logging) resolve to the rlhost binary's own copies.
#include "tensor/torch_env.hpp"

#include "bindings/trampoline.hpp"

namespace rl::lua {
namespace {

int l_info(lua_State* L) {
  const auto info = rl::tensor::torch_info();
  lua_createtable(L, 0, 6);
  lua_pushstring(L, info.version.c_str());
  lua_setfield(L, -2, "version");
  lua_pushboolean(L, info.cuda_built);
  lua_setfield(L, -2, "cuda_built");
  lua_pushboolean(L, info.cuda_available);
  lua_setfield(L, -2, "cuda_available");
  lua_pushinteger(L, info.cuda_devices);
  lua_setfield(L, -2, "cuda_devices");
  lua_pushinteger(L, info.cuda_runtime_version);
  lua_setfield(L, -2, "cuda_runtime_version");
  lua_pushinteger(L, info.nccl_version);
  lua_setfield(L, -2, "nccl_version");
  lua_pushinteger(L, info.num_threads);
  lua_setfield(L, -2, "num_threads");
  lua_pushinteger(L, info.num_interop_threads);
  lua_setfield(L, -2, "num_interop_threads");
  return 1;
}

// set_num_threads(n): LibTorch validates n itself (a c10::Error for n <= 0).
int l_set_num_threads(lua_State* L) {
  rl::tensor::set_num_threads(static_cast<int>(arg::integer(L, 1, "n")));
  return 0;
}

int l_manual_seed(lua_State* L) {
  rl::tensor::manual_seed(static_cast<uint64_t>(arg::integer(L, 1, "seed")));
  return 0;
}

}  // namespace
}  // namespace rl::lua

extern "C" __attribute__((visibility("default"))) int luaopen_rlhost_torch(lua_State* L) {
  using namespace rl::lua;
  add_exception_translator(rl::tensor::describe_c10_error);
  static const Reg regs[] = {
      {"info", entry<l_info>},
      {"set_num_threads", entry<l_set_num_threads>},
      {"manual_seed", entry<l_manual_seed>},
  };
  lua_newtable(L);
  register_functions(L, -1, "rl.torch.", regs);
  return 1;
}
