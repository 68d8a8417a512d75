// Logging for code that cannot include spdlog: LibTorch ships its own fmt
// headers, which clash with the fmt spdlog was built against. Messages are
// preformatted strings; they go to the same process logger as rl::log.
#pragma once

#include <string_view>

namespace rl::log {

enum class Level { trace, debug, info, warn, error };
void text(Level level, std::string_view msg);
bool enabled(Level level);

inline void info(std::string_view msg) { text(Level::info, msg); }
inline void warn(std::string_view msg) { text(Level::warn, msg); }
inline void debug(std::string_view msg) { text(Level::debug, msg); }

}  // namespace rl::log
