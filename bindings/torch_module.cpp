// librlhost_torch.so: the LibTorch half of the bindings, loaded by
// `require "rlhost_torch"` (lua/rl/torch.lua). Host symbols (trampoline, loop,
// logging) resolve to the rlhost binary's own copies.
#include "tensor/block_cache.hpp"
#include "tensor/torch_env.hpp"

#include "bindings/torch_module.hpp"
#include "bindings/trampoline.hpp"

namespace rl::lua {
namespace {

int l_info(lua_State* L) {
  const auto info = rl::tensor::torch_info();
  lua_createtable(L, 0, 9);
  set_string(L, "version", info.version);
  set_bool(L, "cuda_built", info.cuda_built);
  set_bool(L, "cuda_available", info.cuda_available);
  set_number(L, "cuda_devices", static_cast<double>(info.cuda_devices));
  set_number(L, "cuda_runtime_version", static_cast<double>(info.cuda_runtime_version));
  set_number(L, "nccl_version", static_cast<double>(info.nccl_version));
  set_number(L, "num_threads", static_cast<double>(info.num_threads));
  set_number(L, "num_interop_threads", static_cast<double>(info.num_interop_threads));
  set_number(L, "kernel_threads", static_cast<double>(info.kernel_threads));
  return 1;
}

// set_num_threads(n): LibTorch validates n itself (a c10::Error for n <= 0).
int l_set_num_threads(lua_State* L) {
  rl::tensor::set_num_threads(static_cast<int>(arg::integer(L, 1, "n")));
  return 0;
}

// block_cache(): the CPU block cache's counters (tensor/block_cache.hpp).
int l_block_cache(lua_State* L) {
  const auto s = rl::tensor::block_cache_stats();
  lua_createtable(L, 0, 5);
  set_bool(L, "installed", s.installed);
  set_number(L, "hits", static_cast<double>(s.hits));
  set_number(L, "misses", static_cast<double>(s.misses));
  set_number(L, "live_bytes", static_cast<double>(s.live_bytes));
  set_number(L, "cached_bytes", static_cast<double>(s.cached_bytes));
  return 1;
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
  std::string bad_setting;  // raised below, outside the catch: lua_error unwinds
  try {
    rl::tensor::install_block_cache();
  } catch (const std::exception& e) {
    bad_setting = e.what();
  }
  if (!bad_setting.empty()) return luaL_error(L, "%s", bad_setting.c_str());
  static const Reg regs[] = {
      {"info", entry<l_info>},
      {"set_num_threads", entry<l_set_num_threads>},
      {"manual_seed", entry<l_manual_seed>},
      {"block_cache", entry<l_block_cache>},
  };
  lua_newtable(L);
  register_functions(L, -1, "rl.torch.", regs);
  lua_newtable(L);  // private: wrapped by lua/rl/model.lua
  open_model(L, lua_gettop(L));
  lua_setfield(L, -2, "_model");
  lua_newtable(L);  // private: wrapped by lua/rl/engine.lua
  open_engine(L, lua_gettop(L));
  lua_setfield(L, -2, "_engine");
  lua_newtable(L);
  rl::lua::open_trainer(L, lua_gettop(L));
  lua_setfield(L, -2, "_trainer");
  lua_newtable(L);  // private: wrapped by lua/rl/dist.lua
  rl::lua::open_dist(L, lua_gettop(L));
  lua_setfield(L, -2, "_dist");
  lua_newtable(L);  // private: wrapped by lua/rl/tinker/training.lua
  rl::lua::open_stepwise(L, lua_gettop(L));
  lua_setfield(L, -2, "_stepwise");
  return 1;
}
