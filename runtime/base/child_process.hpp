// Child processes that cannot outlive the process that started them.
//
// Every child gets, before it execs:
//  * a parent-death signal (PR_SET_PDEATHSIG, SIGKILL by default), so it dies
//    when we die, even by SIGKILL; it checks that we are still alive after
//    setting it (we may have died in between);
//  * its own process group, so a terminal's Ctrl-C or a supervisor's SIGTERM
//    reaches us first and we stop our children in order (signal_child signals
//    the whole group: whatever the child started goes too);
//  * stdin from /dev/null (a background process group must not read the tty),
//    stdout and stderr appended to `log_path` (created mode 0600) when given.
// Live children are recorded; stop_children() ends those still running (the
// host calls it on every way out). The death signal follows the *thread* that
// spawned the child: spawn from a thread that lives as long as the process
// (rlhost spawns from the main thread).
#pragma once

#include <sys/types.h>

#include <optional>
#include <string>
#include <vector>

namespace rl {

struct ChildOptions {
  std::string log_path;   // "" = inherit stdout/stderr
  bool own_group = true;  // setpgid(0, 0)
  int death_signal = 9;   // SIGKILL; 0 = none
  // The child's CPU priority (nice 0-19, inherited by every thread it starts): 19 lets it
  // run only on cores the rest of the job leaves idle. 0 = ours.
  int nice = 0;
  // "NAME=value" entries set in the child's environment on top of ours (a secret for
  // the child goes here, never on argv, which every user can read in /proc).
  std::vector<std::string> env;
};

// Starts argv[0] (a path, no PATH search) with argv and our environment (plus opts.env).
// Throws rl::Error naming the program when it cannot be started (fork, or exec
// failing in the child: the reason comes back over a pipe).
pid_t spawn_child(const std::vector<std::string>& argv, const ChildOptions& opts = {});
// Sends `sig` to the child's process group (or to it alone when it has none);
// false when it is gone.
bool signal_child(pid_t pid, int sig);
// Non-blocking reap: nullopt while it runs; else its exit code or 128+signal
// (-1 when it is not our child).
std::optional<int> reap_child(pid_t pid);
// Children spawned here and not reaped yet.
std::vector<pid_t> live_children();
// SIGTERM to every live child's group, SIGKILL to those still there after
// `grace_s`, then reaps them. Returns how many were running.
int stop_children(double grace_s);

}  // namespace rl

namespace rl {
// Path of the running executable (/proc/self/exe). Throws rl::Error.
std::string self_executable();
}  // namespace rl
