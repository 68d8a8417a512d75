// _core.safetensors: a saved weight directory cut into request bodies for an
// engine's /update_weights_from_safetensors (rl.weight_sync's "http" method).
#include "bindings/core_module.hpp"
#include "bindings/trampoline.hpp"
#include "model/weight_buckets.hpp"

namespace rl::lua {
namespace {

size_t bucket_bytes_arg(lua_State* L, int idx) {
  const int64_t b = arg::integer(L, idx, "bucket_bytes");
  if (b < 1) throw ArgError(idx, "bucket_bytes", "must be >= 1");
  return static_cast<size_t>(b);
}

// buckets(dir, bucket_bytes) -> n, bytes: how many request bodies the directory's
// tensors make (each at most bucket_bytes of tensor data, a bigger tensor in row
// slices), and the tensors' bytes in all.
int l_buckets(lua_State* L) {
  const std::string dir(arg::string(L, 1, "dir"));
  const size_t bucket = bucket_bytes_arg(L, 2);
  const model::TensorSet set = model::read_safetensors_dir(dir);
  size_t bytes = 0;
  for (const auto& t : set.tensors) bytes += t.nbytes;
  lua_pushnumber(L, static_cast<lua_Number>(model::plan_buckets(set, bucket).size()));
  lua_pushnumber(L, static_cast<lua_Number>(bytes));
  return 2;
}

// bucket(dir, bucket_bytes, i) -> bytes, tensors: request body i (1-based) as a
// safetensors file, and how many tensors (or slices) it holds.
int l_bucket(lua_State* L) {
  const std::string dir(arg::string(L, 1, "dir"));
  const size_t bucket = bucket_bytes_arg(L, 2);
  const int64_t i = arg::integer(L, 3, "i");
  const model::TensorSet set = model::read_safetensors_dir(dir);
  const auto plan = model::plan_buckets(set, bucket);
  if (i < 1 || static_cast<size_t>(i) > plan.size())
    throw ArgError(3, "i", "must be in [1, " + std::to_string(plan.size()) + "]");
  const std::string body = model::encode_bucket(set, plan[size_t(i - 1)]);
  lua_pushlstring(L, body.data(), body.size());
  lua_pushnumber(L, static_cast<lua_Number>(plan[size_t(i - 1)].size()));
  return 2;
}

}  // namespace

void open_safetensors(lua_State* L, int t) {
  static const Reg regs[] = {
      {"buckets", entry<l_buckets>},
      {"bucket", entry<l_bucket>},
  };
  register_functions(L, t, "rl.safetensors.", regs);
}

}  // namespace rl::lua
