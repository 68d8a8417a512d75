#include "base/log.hpp"
#include "base/log_text.hpp"

#include <spdlog/sinks/stdout_color_sinks.h>

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cctype>
#include <cstdlib>
#include <stdexcept>

namespace rl::log {

std::optional<spdlog::level::level_enum> parse_level(std::string_view name) {
  std::string s(name);
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  if (s == "trace") return spdlog::level::trace;
  if (s == "debug") return spdlog::level::debug;
  if (s == "info") return spdlog::level::info;
  if (s == "warn" || s == "warning") return spdlog::level::warn;
  if (s == "error") return spdlog::level::err;
  if (s == "critical") return spdlog::level::critical;
  if (s == "off") return spdlog::level::off;
  return std::nullopt;
}

// "[<host name> r<RANK>] " in a job of several processes (torchrun, srun: WORLD_SIZE > 1),
// so that the lines of one host's log, or of every host's gathered in one place, say
// where they come from; the engines a rank starts inherit its prefix. Empty for one
// process and under `rlhost --nproc`, whose launcher prefixes each line itself.
std::string rank_prefix() {
  const char* ws = std::getenv("WORLD_SIZE");
  const char* rank = std::getenv("RANK");
  if (!ws || std::atoi(ws) <= 1 || !rank || !*rank) return "";
  if (const char* p = std::getenv("RLHOST_LINES_PREFIXED"); p && *p) return "";
  char host[256] = {};
  if (::gethostname(host, sizeof host - 1) != 0 || !*host) std::snprintf(host, sizeof host, "?");
  return std::string("[") + host + " r" + rank + "] ";
}

void init(std::optional<std::string> level) {
  std::string source = "--log-level";
  if (!level) {
    if (const char* env = std::getenv("RLHOST_LOG_LEVEL"); env && *env) {
      level = env;
      source = "RLHOST_LOG_LEVEL";
    }
  }
  auto lvl = spdlog::level::info;
  if (level) {
    auto parsed = parse_level(*level);
    if (!parsed)
      throw std::invalid_argument(source + ": unknown log level '" + *level +
                                  "'; expected one of trace, debug, info, warn, error, critical, off");
    lvl = *parsed;
  }
  auto logger = spdlog::get("rlhost");
  if (!logger) {
    logger = spdlog::stderr_color_mt("rlhost");
    // time, [host rank] in a multi-process job, level, source (file:line when known), message
    logger->set_pattern("[%Y-%m-%d %H:%M:%S.%e] " + rank_prefix() + "[%^%l%$] %v");
    spdlog::set_default_logger(logger);
  }
  logger->set_level(lvl);
  logger->flush_on(spdlog::level::warn);
}

void set_level(spdlog::level::level_enum level) { spdlog::default_logger()->set_level(level); }

spdlog::level::level_enum level() { return spdlog::default_logger()->level(); }

void write(spdlog::level::level_enum level, const char* file, int line, std::string_view msg) {
  auto logger = spdlog::default_logger_raw();
  if (!logger->should_log(level)) return;
  if (file && *file)
    logger->log(level, "[{}:{}] {}", file, line, msg);
  else
    logger->log(level, "{}", msg);
}

}  // namespace rl::log

namespace rl::log {
namespace {
spdlog::level::level_enum to_spdlog(Level l) {
  switch (l) {
    case Level::trace: return spdlog::level::trace;
    case Level::debug: return spdlog::level::debug;
    case Level::info: return spdlog::level::info;
    case Level::warn: return spdlog::level::warn;
    case Level::error: return spdlog::level::err;
  }
  return spdlog::level::info;
}
}  // namespace

void text(Level level, std::string_view msg) { write(to_spdlog(level), nullptr, 0, msg); }
bool enabled(Level level) { return spdlog::default_logger_raw()->should_log(to_spdlog(level)); }

}  // namespace rl::log
