// A router in a child process (`rlhost router ...`): spawn, signal, reap.
//
// Why a separate process at all: a router that must outlive the recipe, or be
// isolated from its crashes, or be restarted independently. The child learns
// nothing from us but its argv; the parent learns the child's URL from the
// --ready-file the child writes once it is listening.
#pragma once

#include <sys/types.h>

#include <optional>
#include <string>
#include <vector>

namespace rl::router {

// Path of the running executable (/proc/self/exe).
std::string self_executable();

// Starts argv[0] with argv (no shell). stdout/stderr are inherited. Throws
// std::runtime_error naming the program on failure.
pid_t spawn_process(const std::vector<std::string>& argv);

// Sends `sig`; false when the process no longer exists.
bool signal_process(pid_t pid, int sig);

// Non-blocking reap: nullopt while it runs; else its exit code, or 128+signal.
std::optional<int> reap_process(pid_t pid);

}  // namespace rl::router
