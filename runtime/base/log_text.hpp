// Logging for code that cannot include spdlog: LibTorch ships its own fmt
// headers, which shadow the ones spdlog was built with, so files compiled with
// LibTorch's include path (runtime/engine, runtime/profile, ...) log through
// these plain functions instead. Same logger and format as base/log.hpp.
#pragma once

#include <string_view>

namespace rl::log {

enum class Level { trace, debug, info, warn, error };

void text(Level level, std::string_view msg);
inline void info(std::string_view msg) { text(Level::info, msg); }
inline void warn(std::string_view msg) { text(Level::warn, msg); }
inline void error(std::string_view msg) { text(Level::error, msg); }

}  // namespace rl::log
