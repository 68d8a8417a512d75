// _core.gzip: in-memory gzip for lua/rl/gzip.lua (profiler traces are .json.gz).
//
//   decompress(bytes [, max_bytes]) -> string | nil, err   (corrupt, truncated, too large)
//   compress(bytes [, level]) -> string                    (level -1..9; a bad level raises)
//   is_gzip(bytes) -> boolean
#include <string>

#include "base/errors.hpp"
#include "base/gzip.hpp"
#include "bindings/core_module.hpp"
#include "bindings/trampoline.hpp"

namespace rl::lua {
namespace {

constexpr double kDefaultMax = 1024.0 * 1024 * 1024;  // 1 GiB: a Lua string's practical limit

int l_decompress(lua_State* L) {
  const auto data = arg::string(L, 1, "bytes");
  const double max = arg::opt_number(L, 2, "max_bytes").value_or(kDefaultMax);
  if (!(max > 0)) throw ArgError(2, "max_bytes", "positive number expected");
  std::string out, err;
  try {
    out = gzip::decompress(data, static_cast<size_t>(max));
  } catch (const std::exception& e) {
    err = e.what();
  }
  if (!err.empty()) return fail(L, err);
  lua_pushlstring(L, out.data(), out.size());
  return 1;
}

int l_compress(lua_State* L) {
  const auto data = arg::string(L, 1, "bytes");
  const auto level = arg::opt_integer(L, 2, "level").value_or(-1);
  if (level < -1 || level > 9) throw ArgError(2, "level", "integer -1..9 expected, got " + std::to_string(level));
  const std::string out = gzip::compress(data, static_cast<int>(level));
  lua_pushlstring(L, out.data(), out.size());
  return 1;
}

int l_is_gzip(lua_State* L) {
  lua_pushboolean(L, gzip::is_gzip(arg::string(L, 1, "bytes")));
  return 1;
}

}  // namespace

void open_gzip(lua_State* L, int t) {
  static const Reg regs[] = {
      {"decompress", entry<l_decompress>},
      {"compress", entry<l_compress>},
      {"is_gzip", entry<l_is_gzip>},
  };
  register_functions(L, t, "rl.gzip.", regs);
}

}  // namespace rl::lua
