#include "base/child_process.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <map>
#include <mutex>
#include <string_view>
#include <thread>

#include "base/errors.hpp"

extern char** environ;

namespace rl {
namespace {

std::mutex g_mu;
std::map<pid_t, bool> g_children;  // pid -> has its own process group

// In the forked child: only async-signal-safe calls until exec.
[[noreturn]] void exec_child(char* const* argv, char* const* envp, const char* log, const ChildOptions& o, pid_t parent,
                             int err_fd) {
  auto die = [err_fd](int code) {
    const int e = errno;
    const int msg[2] = {code, e};
    (void)!::write(err_fd, msg, sizeof msg);
    ::_exit(127);
  };
  sigset_t none;
  sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
  for (int sig : {SIGINT, SIGTERM, SIGPIPE, SIGHUP, SIGQUIT}) ::signal(sig, SIG_DFL);
  if (o.own_group && ::setpgid(0, 0) != 0) die(1);
  if (o.death_signal) {
    if (::prctl(PR_SET_PDEATHSIG, o.death_signal) != 0) die(2);
    if (::getppid() != parent) ::_exit(128 + o.death_signal);  // the parent died before prctl
  }
  if (o.nice && ::setpriority(PRIO_PROCESS, 0, o.nice) != 0) die(6);
  const int in = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  if (in < 0 || ::dup2(in, 0) < 0) die(3);
  if (log) {
    const int fd = ::open(log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
    if (fd < 0) die(4);
    if (::dup2(fd, 1) < 0 || ::dup2(fd, 2) < 0) die(4);
  }
  ::execve(argv[0], argv, envp);
  die(5);
  ::_exit(127);  // not reached (die exits)
}

const char* step_name(int code) {
  switch (code) {
    case 1: return "setpgid";
    case 2: return "prctl(PR_SET_PDEATHSIG)";
    case 3: return "open /dev/null";
    case 4: return "open the log file";
    case 6: return "setpriority (nice)";
    default: return "exec";
  }
}

}  // namespace

pid_t spawn_child(const std::vector<std::string>& argv, const ChildOptions& opts) {
  if (argv.empty() || argv[0].empty()) throw Error("spawn: empty argv");
  // Everything the child touches is built before fork: it must not allocate.
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  const char* log = opts.log_path.empty() ? nullptr : opts.log_path.c_str();
  // Our environment with opts.env's entries replacing those of the same name.
  std::vector<char*> envp;
  for (char** e = environ; e && *e; ++e) {
    const std::string_view entry(*e);
    const auto name = entry.substr(0, entry.find('=') + 1);
    bool replaced = false;
    for (const auto& o : opts.env) replaced = replaced || std::string_view(o).substr(0, name.size()) == name;
    if (!replaced) envp.push_back(*e);
  }
  for (const auto& o : opts.env) {
    if (o.find('=') == std::string::npos || o.front() == '=')
      throw Error("spawn " + argv[0] + ": bad environment entry (NAME=value expected)");
    envp.push_back(const_cast<char*>(o.c_str()));
  }
  envp.push_back(nullptr);
  int pipefd[2];
  if (::pipe2(pipefd, O_CLOEXEC) != 0) throw_errno("spawn " + argv[0] + ": pipe");
  const pid_t parent = ::getpid();
  std::lock_guard lk(g_mu);  // a concurrent stop_children() must see this child
  const pid_t pid = ::fork();
  if (pid < 0) {
    const int e = errno;
    ::close(pipefd[0]);
    ::close(pipefd[1]);
    errno = e;
    throw_errno("spawn " + argv[0] + ": fork");
  }
  if (pid == 0) {
    ::close(pipefd[0]);
    exec_child(args.data(), envp.data(), log, opts, parent, pipefd[1]);
  }
  ::close(pipefd[1]);
  if (opts.own_group) ::setpgid(pid, pid);  // also here: no window where signal_child misses the group
  int msg[2] = {0, 0};
  ssize_t n;
  do n = ::read(pipefd[0], msg, sizeof msg);
  while (n < 0 && errno == EINTR);
  ::close(pipefd[0]);
  if (n == static_cast<ssize_t>(sizeof msg)) {  // exec (or a step before it) failed
    int status = 0;
    ::waitpid(pid, &status, 0);
    throw Error("cannot start '" + argv[0] + "': " + step_name(msg[0]) + ": " + std::strerror(msg[1]),
                msg[0] == 4 ? "is the log directory writable?" : "");
  }
  g_children[pid] = opts.own_group;
  return pid;
}

bool signal_child(pid_t pid, int sig) {
  if (pid <= 0) return false;
  bool group = false;
  {
    std::lock_guard lk(g_mu);
    auto it = g_children.find(pid);
    group = it != g_children.end() && it->second;
  }
  if (group && ::kill(-pid, sig) == 0) return true;
  return ::kill(pid, sig) == 0;
}

std::optional<int> reap_child(pid_t pid) {
  int status = 0;
  const pid_t r = ::waitpid(pid, &status, WNOHANG);
  if (r == 0) return std::nullopt;
  if (r < 0 && errno != ECHILD) return std::nullopt;  // EINTR: ask again later
  std::lock_guard lk(g_mu);
  auto it = g_children.find(pid);
  const bool group = it != g_children.end() && it->second;
  if (it != g_children.end()) g_children.erase(it);
  // What the child left in its group (a shell's background job) goes too.
  if (group && r == pid) ::kill(-pid, SIGKILL);
  if (r < 0) return -1;
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return -1;
}

std::vector<pid_t> live_children() {
  std::lock_guard lk(g_mu);
  std::vector<pid_t> out;
  for (auto& [pid, group] : g_children) out.push_back(pid);
  return out;
}

int stop_children(double grace_s) {
  std::vector<pid_t> pids;
  for (pid_t p : live_children())
    if (!reap_child(p)) pids.push_back(p);  // not exited (nor reaped elsewhere) yet
  for (pid_t p : pids) {
    signal_child(p, SIGTERM);
    signal_child(p, SIGCONT);  // a stopped child (SIGSTOP) handles it now, not after the grace
  }
  using clock = std::chrono::steady_clock;
  auto wait_all = [&](double seconds) {
    const auto deadline = clock::now() + std::chrono::duration<double>(seconds);
    for (;;) {
      bool any = false;
      for (pid_t p : pids)
        if (!reap_child(p)) any = true;  // reaped (here or elsewhere): done
      if (!any || clock::now() > deadline) return !any;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  };
  if (!wait_all(grace_s)) {
    for (pid_t p : live_children()) signal_child(p, SIGKILL);
    wait_all(5);
  }
  return static_cast<int>(pids.size());
}

}  // namespace rl

namespace rl {

std::string self_executable() {
  char buf[4096];
  const ssize_t n = ::readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) throw_errno("cannot read /proc/self/exe");
  return std::string(buf, static_cast<size_t>(n));
}

}  // namespace rl
