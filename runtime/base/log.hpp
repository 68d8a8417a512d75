// Logging setup (spdlog). One logger for the whole process; Lua records carry
// the recipe's file:line as their source location.
#pragma once

#include <spdlog/spdlog.h>

#include <optional>
#include <string>
#include <string_view>

namespace rl::log {

// Parses trace|debug|info|warn|warning|error|critical|off (case-insensitive).
std::optional<spdlog::level::level_enum> parse_level(std::string_view name);

// Installs the stderr logger. Level: `level` if given, else $RLHOST_LOG_LEVEL,
// else info. Throws std::invalid_argument naming the bad value.
void init(std::optional<std::string> level = std::nullopt);
// Every line's "[<host> r<RANK>] " in a job of several processes (see log.cpp).
std::string rank_prefix();
void set_level(spdlog::level::level_enum level);
spdlog::level::level_enum level();

// A record with an explicit source location (file may be a Lua chunk name).
void write(spdlog::level::level_enum level, const char* file, int line, std::string_view msg);

}  // namespace rl::log
