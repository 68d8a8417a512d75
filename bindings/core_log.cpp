// _core.log: Lua records into the process logger, with the recipe's file:line.
#include "base/log.hpp"
#include "bindings/core_module.hpp"
#include "bindings/trampoline.hpp"

namespace rl::lua {
namespace {

spdlog::level::level_enum level_arg(lua_State* L, int idx) {
  auto name = arg::string(L, idx, "level");
  auto lvl = rl::log::parse_level(name);
  if (!lvl)
    throw ArgError(idx, "level", "unknown level '" + std::string(name) +
                                     "'; expected trace, debug, info, warn, error, critical or off");
  return *lvl;
}

// write(level, file, line, message)
int l_write(lua_State* L) {
  const auto lvl = level_arg(L, 1);
  const auto file = arg::opt_string(L, 2, "file");
  const auto line = arg::opt_integer(L, 3, "line").value_or(0);
  const auto msg = arg::string(L, 4, "message");
  std::string f(file.value_or(""));
  rl::log::write(lvl, f.c_str(), static_cast<int>(line), msg);
  return 0;
}

// enabled(level) -> bool: lets Lua skip formatting records that would be dropped.
int l_enabled(lua_State* L) {
  lua_pushboolean(L, spdlog::default_logger_raw()->should_log(level_arg(L, 1)));
  return 1;
}

// level([new_level]) -> current level name
int l_level(lua_State* L) {
  if (!lua_isnoneornil(L, 1)) rl::log::set_level(level_arg(L, 1));
  auto sv = spdlog::level::to_string_view(rl::log::level());
  lua_pushlstring(L, sv.data(), sv.size());
  return 1;
}

}  // namespace

void open_log(lua_State* L, int t) {
  static const Reg regs[] = {
      {"write", entry<l_write>},
      {"enabled", entry<l_enabled>},
      {"level", entry<l_level>},
  };
  register_functions(L, t, "rl.log.", regs);
}

}  // namespace rl::lua
