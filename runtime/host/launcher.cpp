#include "host/launcher.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string_view>

namespace rl {
namespace {

volatile sig_atomic_t g_signal = 0;
void on_signal(int sig) { g_signal = sig; }

// SIGCHLD writes a byte here, so the loop wakes the moment a rank exits: ranks are
// then reaped in the order they ended (a rank that dies takes its peers down within
// milliseconds, and the report must name the one that went first, not the lowest).
int g_child_pipe[2] = {-1, -1};
void on_child(int) {
  const int saved = errno;
  [[maybe_unused]] ssize_t n = ::write(g_child_pipe[1], "c", 1);
  errno = saved;
}

// A port that was free a moment ago (rank 0 binds it when its store starts).
int free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return 0;
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = 0;
  socklen_t len = sizeof a;
  int port = 0;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 &&
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0)
    port = ntohs(a.sin_port);
  ::close(fd);
  return port;
}

struct Stream {
  int fd = -1;
  int rank = 0;
  FILE* out = stdout;
  std::string partial;
};

struct Child {
  pid_t pid = -1;
  bool running = false;
  int status = 0;  // exit code, or 128 + signal
};

void emit(Stream& s, std::string_view data, bool flush_partial) {
  s.partial.append(data);
  size_t start = 0, nl;
  while ((nl = s.partial.find('\n', start)) != std::string::npos) {
    std::fprintf(s.out, "[rank %d] %.*s\n", s.rank, static_cast<int>(nl - start), s.partial.data() + start);
    start = nl + 1;
  }
  s.partial.erase(0, start);
  if (flush_partial && !s.partial.empty()) {
    std::fprintf(s.out, "[rank %d] %s\n", s.rank, s.partial.c_str());
    s.partial.clear();
  }
  std::fflush(s.out);
}

// Reads what is available on the streams (waits up to timeout_ms, or until a rank
// exits). Closed ones get fd -1.
void pump(std::vector<Stream>& streams, int timeout_ms) {
  std::vector<pollfd> fds;
  std::vector<size_t> idx;
  if (g_child_pipe[0] >= 0) fds.push_back({g_child_pipe[0], POLLIN, 0});
  const size_t first = fds.size();
  for (size_t i = 0; i < streams.size(); ++i)
    if (streams[i].fd >= 0) {
      fds.push_back({streams[i].fd, POLLIN, 0});
      idx.push_back(i);
    }
  if (fds.empty()) {
    if (timeout_ms > 0) ::usleep(static_cast<useconds_t>(timeout_ms) * 1000);
    return;
  }
  if (::poll(fds.data(), fds.size(), timeout_ms) <= 0) return;
  char buf[65536];
  if (first == 1 && (fds[0].revents & POLLIN))
    while (::read(g_child_pipe[0], buf, sizeof buf) > 0) {
    }
  for (size_t k = first; k < fds.size(); ++k) {
    if (!(fds[k].revents & (POLLIN | POLLHUP | POLLERR))) continue;
    Stream& s = streams[idx[k - first]];
    const ssize_t n = ::read(s.fd, buf, sizeof buf);
    if (n > 0) {
      emit(s, std::string_view(buf, static_cast<size_t>(n)), false);
    } else if (n == 0 || (errno != EINTR && errno != EAGAIN)) {
      emit(s, {}, true);
      ::close(s.fd);
      s.fd = -1;
    }
  }
}

pid_t spawn_rank(const std::vector<std::string>& args, int rank, int nproc, int port, int out_fd, int err_fd) {
  const pid_t launcher = ::getpid();
  const pid_t pid = ::fork();
  if (pid != 0) return pid;
  // Child: own process group (signals come from the launcher only), stdin closed;
  // killed when the launcher dies (even by SIGKILL), checked after arming.
  ::setpgid(0, 0);
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (::getppid() != launcher) ::_exit(137);
  ::signal(SIGINT, SIG_DFL);
  ::signal(SIGTERM, SIG_DFL);
  ::dup2(out_fd, 1);
  ::dup2(err_fd, 2);
  const int devnull = ::open("/dev/null", O_RDONLY);
  if (devnull >= 0) ::dup2(devnull, 0);
  ::setenv("RANK", std::to_string(rank).c_str(), 1);
  ::setenv("LOCAL_RANK", std::to_string(rank).c_str(), 1);
  ::setenv("WORLD_SIZE", std::to_string(nproc).c_str(), 1);
  ::setenv("LOCAL_WORLD_SIZE", std::to_string(nproc).c_str(), 1);
  ::setenv("GROUP_RANK", "0", 1);
  ::setenv("MASTER_ADDR", "127.0.0.1", 1);
  ::setenv("MASTER_PORT", std::to_string(port).c_str(), 1);
  ::setenv("RLHOST_LINES_PREFIXED", "1", 1);   // this launcher prefixes "[rank R]": no second prefix
  std::vector<char*> argv;
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  ::execv("/proc/self/exe", argv.data());
  std::fprintf(stderr, "rlhost --nproc: cannot run /proc/self/exe: %s\n", std::strerror(errno));
  ::_exit(127);
}

}  // namespace

int run_nproc(int nproc, const std::vector<std::string>& argv) {
  // The children's command line: ours without --nproc N / --nproc=N.
  std::vector<std::string> args;
  for (size_t i = 0; i < argv.size(); ++i) {
    if (argv[i] == "--nproc") {
      ++i;
      continue;
    }
    if (argv[i].rfind("--nproc=", 0) == 0) continue;
    args.push_back(argv[i]);
  }
  const int port = free_port();
  if (port == 0) {
    std::fprintf(stderr, "rlhost --nproc: no free TCP port on 127.0.0.1 for the rendezvous\n");
    return 1;
  }
  struct sigaction sa{};
  sa.sa_handler = on_signal;
  ::sigaction(SIGINT, &sa, nullptr);
  ::sigaction(SIGTERM, &sa, nullptr);
  ::signal(SIGPIPE, SIG_IGN);
  if (::pipe2(g_child_pipe, O_CLOEXEC | O_NONBLOCK) == 0) {
    struct sigaction sc{};
    sc.sa_handler = on_child;
    sc.sa_flags = SA_RESTART | SA_NOCLDSTOP;
    ::sigaction(SIGCHLD, &sc, nullptr);
  }

  std::vector<Child> children(static_cast<size_t>(nproc));
  std::vector<Stream> streams;
  for (int r = 0; r < nproc; ++r) {
    int out[2], err[2];
    if (::pipe2(out, O_CLOEXEC) != 0 || ::pipe2(err, O_CLOEXEC) != 0) {
      std::perror("rlhost --nproc: pipe");
      return 1;
    }
    children[r].pid = spawn_rank(args, r, nproc, port, out[1], err[1]);
    children[r].running = children[r].pid > 0;
    ::close(out[1]);
    ::close(err[1]);
    streams.push_back({out[0], r, stdout, {}});
    streams.push_back({err[0], r, stderr, {}});
  }
  std::fprintf(stderr, "rlhost --nproc %d: ranks started (MASTER_ADDR=127.0.0.1 MASTER_PORT=%d)\n", nproc, port);

  int result = 0, first_failed = -1, forwarded = 0;
  auto kill_running = [&](int sig) {
    for (auto& c : children)
      if (c.running) ::kill(c.pid, sig);
  };
  using clock = std::chrono::steady_clock;
  clock::time_point kill_deadline = clock::time_point::max();
  for (;;) {
    pump(streams, 100);
    if (g_signal && g_signal != forwarded) {
      forwarded = g_signal;
      kill_running(forwarded);
      if (result == 0) result = 128 + forwarded;
      kill_deadline = clock::now() + std::chrono::seconds(10);
    }
    bool any_running = false;
    for (int r = 0; r < nproc; ++r) {
      Child& c = children[r];
      if (!c.running) continue;
      int st = 0;
      if (::waitpid(c.pid, &st, WNOHANG) == c.pid) {
        c.running = false;
        c.status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
        if (c.status != 0 && first_failed < 0 && !forwarded) {
          first_failed = r;
          result = c.status;
          std::fprintf(stderr, "rlhost --nproc: rank %d exited with status %d; stopping the other ranks\n", r,
                       c.status);
          kill_running(SIGTERM);
          kill_deadline = clock::now() + std::chrono::seconds(5);
        }
      } else {
        any_running = true;
      }
    }
    if (!any_running) break;
    if (clock::now() > kill_deadline) {
      kill_running(SIGKILL);
      kill_deadline = clock::time_point::max();
    }
  }
  for (int k = 0; k < 50; ++k) {  // what the ranks printed last
    bool open = false;
    for (auto& s : streams) open = open || s.fd >= 0;
    if (!open) break;
    pump(streams, 20);
  }
  return result;
}

}  // namespace rl
