// rl::spawn_child: own process group, parent-death signal, private log, the
// registry that stop_children() empties; real processes throughout.
#include <catch2/catch.hpp>

#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "base/child_process.hpp"
#include "base/errors.hpp"

namespace {

std::optional<int> wait_exit(pid_t pid, double seconds = 10) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (std::chrono::steady_clock::now() < end) {
    if (auto rc = rl::reap_child(pid)) return rc;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return std::nullopt;
}

bool alive(pid_t pid) { return ::kill(pid, 0) == 0; }

rl::ChildOptions logging_to(const std::string& path) {
  rl::ChildOptions o;
  o.log_path = path;
  return o;
}

}  // namespace

TEST_CASE("spawn_child: own group, /dev/null stdin, private log, exit codes", "[child_process]") {
  const auto dir = std::filesystem::temp_directory_path() / ("rlhost-child-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string log = (dir / "out.log").string();
  const pid_t pid = rl::spawn_child({"/bin/sh", "-c", "echo out; echo err >&2; read x || echo eof; exit 7"}, logging_to(log));
  CHECK(::getpgid(pid) == pid);
  CHECK(wait_exit(pid) == 7);
  std::ifstream in(log);
  std::stringstream ss;
  ss << in.rdbuf();
  CHECK(ss.str() == "out\nerr\neof\n");
  struct stat st {};
  REQUIRE(::stat(log.c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0600);
  CHECK(rl::live_children().empty());

  CHECK_THROWS_WITH(rl::spawn_child({"/nonexistent/prog"}), Catch::Contains("cannot start '/nonexistent/prog'") &&
                                                                Catch::Contains("No such file"));
  CHECK_THROWS_WITH(rl::spawn_child({"/bin/true"}, logging_to((dir / "no" / "such" / "dir.log").string())),
                    Catch::Contains("log file"));
  CHECK(rl::live_children().empty());
  std::filesystem::remove_all(dir);
}

TEST_CASE("spawn_child: opts.env sets the child's variables on top of ours, not on argv", "[child_process]") {
  const auto dir = std::filesystem::temp_directory_path() / ("rlhost-child-env-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string log = (dir / "out.log").string();
  ::setenv("RLHOST_TEST_KEEP", "kept", 1);
  ::setenv("RLHOST_TEST_SECRET", "old", 1);
  rl::ChildOptions o;
  o.log_path = log;
  o.env = {"RLHOST_TEST_SECRET=s3cret=x", "RLHOST_TEST_NEW=new"};
  const pid_t pid = rl::spawn_child(
      {"/bin/sh", "-c", "echo $RLHOST_TEST_KEEP $RLHOST_TEST_SECRET $RLHOST_TEST_NEW; env | grep -c RLHOST_TEST_SECRET"},
      o);
  CHECK(wait_exit(pid) == 0);
  std::ifstream in(log);
  std::stringstream ss;
  ss << in.rdbuf();
  CHECK(ss.str() == "kept s3cret=x new\n1\n");   // replaced, not doubled
  CHECK(std::string(std::getenv("RLHOST_TEST_SECRET")) == "old");   // ours unchanged
  o.env = {"=bad"};
  CHECK_THROWS_WITH(rl::spawn_child({"/bin/true"}, o), Catch::Contains("NAME=value"));
  ::unsetenv("RLHOST_TEST_KEEP");
  ::unsetenv("RLHOST_TEST_SECRET");
  std::filesystem::remove_all(dir);
}

TEST_CASE("spawn_child: signals reach the group; stop_children ends what is left", "[child_process]") {
  // The shell's own child (sleep) is in the group too: signal_child ends both.
  const pid_t a = rl::spawn_child({"/bin/sh", "-c", "sleep 60 & wait"});
  const pid_t b = rl::spawn_child({"/bin/sh", "-c", "trap '' TERM; sleep 60 & wait; sleep 60"});
  CHECK(rl::live_children().size() == 2);
  CHECK(rl::signal_child(a, SIGTERM));
  CHECK(wait_exit(a) == 128 + SIGTERM);
  // b ignores SIGTERM: stop_children escalates to SIGKILL after the grace period.
  CHECK(rl::stop_children(0.2) == 1);
  CHECK_FALSE(alive(b));
  CHECK(rl::live_children().empty());
  CHECK_FALSE(rl::signal_child(b, 0));
}

TEST_CASE("spawn_child: the child dies with its parent, even by SIGKILL", "[child_process]") {
  // A middle process spawns a grandchild (through spawn_child in a forked copy
  // of this test), prints its pid and is SIGKILLed: the kernel's parent-death
  // signal ends the grandchild.
  int fds[2];
  REQUIRE(::pipe(fds) == 0);
  const pid_t middle = ::fork();
  if (middle == 0) {
    ::close(fds[0]);
    pid_t g = -1;
    try {
      g = rl::spawn_child({"/bin/sleep", "60"});
    } catch (...) {
    }
    (void)!::write(fds[1], &g, sizeof g);
    ::pause();
    ::_exit(0);
  }
  ::close(fds[1]);
  pid_t grandchild = -1;
  REQUIRE(::read(fds[0], &grandchild, sizeof grandchild) == sizeof grandchild);
  ::close(fds[0]);
  REQUIRE(grandchild > 0);
  CHECK(alive(grandchild));
  ::kill(middle, SIGKILL);
  int status = 0;
  ::waitpid(middle, &status, 0);
  bool gone = false;
  for (int i = 0; i < 500 && !gone; ++i) {  // reparented to init (or a subreaper), which reaps it
    std::ifstream stat("/proc/" + std::to_string(grandchild) + "/stat");
    std::string line;
    std::getline(stat, line);
    gone = line.empty() || line.find(") Z") != std::string::npos;
    if (!gone) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  CHECK(gone);
}
