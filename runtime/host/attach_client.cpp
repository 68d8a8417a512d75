// `rlhost attach`: finds the process, connects to its control socket and runs
// chunks there, either from -e arguments or from a REPL (host/repl.hpp).
//
// The client is deliberately simple: one request at a time, waited for with a
// blocking poll(). While a chunk runs remotely, Ctrl-C sends an "interrupt"
// request (the remote chunk is cancelled; the process lives on); a third ^C
// leaves at once.
#include "host/attach_client.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <optional>
#include <string>

#include "base/event_loop.hpp"
#include "base/json_input.hpp"
#include "host/control_registry.hpp"
#include "host/repl.hpp"

using nlohmann::json;

namespace rl {

namespace {

constexpr size_t kMaxReply = size_t{256} << 20;

std::atomic<int> g_sigint{0};
EventLoop* g_loop = nullptr;

void on_sigint(int) {
  if (g_sigint.fetch_add(1) >= 2) _exit(130);
  if (g_loop) g_loop->wakeup();
}

int fail(const std::string& msg, int code = 2) {
  std::fprintf(stderr, "rlhost attach: %s\n", msg.c_str());
  return code;
}

struct Target {
  bool tcp = false;
  std::string path;  // Unix socket
  int port = 0;      // TCP, on 127.0.0.1
  int pid = 0;       // when known
  std::string display;
};

// ---- finding the process ----------------------------------------------------------

bool all_digits(const std::string& s) {
  if (s.empty()) return false;
  for (char c : s)
    if (c < '0' || c > '9') return false;
  return true;
}

void print_list(const std::vector<control::ProcessRecord>& procs, FILE* out) {
  std::fprintf(out, "%-8s %-21s %-32s %s\n", "PID", "STARTED", "SCRIPT", "SOCKET");
  for (const auto& p : procs) {
    std::string where = p.socket;
    if (p.tcp_port) where += (where.empty() ? "" : " ") + std::string("tcp://127.0.0.1:") + std::to_string(p.tcp_port);
    std::fprintf(out, "%-8d %-21s %-32s %s\n", p.pid, p.started_at.c_str(),
                 p.script.empty() ? "(repl)" : p.script.c_str(), where.c_str());
  }
}

// Returns 0 and fills `t`, or an exit status after printing why.
int resolve_target(const AttachOptions& opts, Target& t) {
  if (!opts.target) {
    auto procs = control::list_processes(true);
    if (procs.empty())
      return fail("no live rlhost process found (looked in " + control::runtime_dir() + ")");
    if (procs.size() > 1) {
      print_list(procs, stderr);
      return fail("several rlhost processes are running: pick one with `rlhost attach PID`");
    }
    const auto& p = procs.front();
    t.pid = p.pid;
    if (!p.socket.empty()) {
      t.path = p.socket;
    } else {
      t.tcp = true;
      t.port = p.tcp_port;
    }
  } else if (opts.target->rfind("tcp://", 0) == 0) {
    const std::string rest = opts.target->substr(6);
    const auto colon = rest.rfind(':');
    const std::string host = colon == std::string::npos ? "" : rest.substr(0, colon);
    const std::string port = colon == std::string::npos ? "" : rest.substr(colon + 1);
    if (host != "127.0.0.1" && host != "localhost")
      return fail("'" + *opts.target + "': the control port only listens on 127.0.0.1 (tcp://127.0.0.1:PORT)");
    if (!all_digits(port) || port.size() > 5 || std::stoi(port) < 1 || std::stoi(port) > 65535)
      return fail("'" + *opts.target + "': bad port (tcp://127.0.0.1:PORT)");
    t.tcp = true;
    t.port = std::stoi(port);
  } else if (all_digits(*opts.target)) {
    if (opts.target->size() > 9)  // beyond any pid_max (4194304 at most): no such process
      return fail("no rlhost process with pid " + json_input::excerpt(*opts.target, 40) + " (not a process id)");
    t.pid = std::stoi(*opts.target);
    std::string sock = control::default_socket_path(t.pid);
    const std::string record = control::runtime_dir() + "/" + *opts.target + ".json";
    if (auto r = control::read_record(record)) {
      if (!r->socket.empty()) {
        sock = r->socket;
      } else if (r->tcp_port && control::pid_alive(t.pid)) {  // its Unix socket failed; TCP did not
        t.tcp = true;
        t.port = r->tcp_port;
        t.display = "tcp://127.0.0.1:" + std::to_string(t.port);
        return 0;
      }
    }
    struct stat st {};
    if (!control::pid_alive(t.pid) || ::stat(sock.c_str(), &st) != 0)
      return fail("no rlhost process with pid " + *opts.target + " (no socket at " + sock + ")");
    t.path = sock;
  } else {
    t.path = *opts.target;
  }
  t.display = t.tcp ? "tcp://127.0.0.1:" + std::to_string(t.port) : t.path;
  return 0;
}

// --token, $RLHOST_CONTROL_TOKEN, or the token file the process wrote.
std::string find_token(const AttachOptions& opts, const Target& t) {
  if (opts.token) return *opts.token;
  if (const char* env = std::getenv("RLHOST_CONTROL_TOKEN"); env && *env) return env;
  for (const auto& p : control::list_processes(false)) {
    if (p.tcp_port != t.port || p.token_file.empty()) continue;
    std::ifstream in(p.token_file);
    std::string token;
    if (in >> token) return token;
  }
  return "";
}

// ---- the connection -------------------------------------------------------------

// The first exchange ("info") answers at once from any live rlhost: a peer silent this
// long is not one, or cannot answer (stopped, its loop blocked).
constexpr double kInfoTimeoutS = 10;

class Connection {
 public:
  ~Connection() {
    if (fd_ >= 0) ::close(fd_);
  }
  int fd() const { return fd_; }

  // Returns "" or an error message.
  std::string open(const Target& t) {
    if (!t.tcp) {
      fd_ = control::connect_unix(t.path);
      if (fd_ >= 0) return "";
      if (errno == ENOENT) return "no socket at " + t.path;
      if (errno == ECONNREFUSED)
        return "connection refused at " + t.path + " (the process is gone and left a stale socket; `rlhost attach --list` cleans up)";
      if (errno == EACCES) return "permission denied at " + t.path + " (the socket belongs to another user)";
      return t.path + ": " + std::strerror(errno);
    }
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd_ < 0) return std::string("socket: ") + std::strerror(errno);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(t.port));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
      const int e = errno;
      ::close(fd_);
      fd_ = -1;
      if (e == ECONNREFUSED)
        return "connection refused at " + t.display + " (is rlhost running with --control-tcp " + std::to_string(t.port) + "?)";
      return t.display + ": " + std::strerror(e);
    }
    return "";
  }

  // Sends a request and waits for the reply with its id. Ctrl-C meanwhile
  // sends one "interrupt". Returns the reply, or nullopt with `err` set.
  // timeout_s > 0: no reply within it is an error (err names the wait).
  std::optional<json> call(json req, std::string& err, double timeout_s = 0) {
    const auto id = next_id_++;
    req["id"] = id;
    if (!token_.empty()) req["token"] = token_;
    if (!write_line(req.dump(-1, ' ', false, json::error_handler_t::replace), err)) return std::nullopt;
    bool interrupted = false;
    for (;;) {
      if (g_sigint.load() > 0 && !interrupted) {
        interrupted = true;
        json intr{{"id", "interrupt"}, {"op", "interrupt"}};
        if (!token_.empty()) intr["token"] = token_;
        if (!write_line(intr.dump(), err)) return std::nullopt;
      }
      auto msg = read_message(err, timeout_s);
      if (!msg) {
        if (err.empty()) continue;  // interrupted by a signal: look at the flag again
        return std::nullopt;
      }
      if (msg->contains("id") && (*msg)["id"] == json(id)) {
        g_sigint = 0;
        return msg;
      }
      if (msg->contains("id") && (*msg)["id"].is_null() && !(*msg).value("ok", true)) {
        err = msg->value("error", "refused");  // refused before reading the request
        return std::nullopt;
      }
      // other ids: the reply to our "interrupt"; nothing to do
    }
  }

  void set_token(std::string t) { token_ = std::move(t); }

  // While idle at the prompt: takes in what arrived (a late reply to an
  // "interrupt"; call() skips it later). False when the process closed the
  // connection.
  bool drain_idle() {
    char buf[65536];
    for (;;) {
      const ssize_t n = ::recv(fd_, buf, sizeof buf, MSG_DONTWAIT);
      if (n > 0) {
        in_.append(buf, static_cast<size_t>(n));
        continue;
      }
      if (n == 0) return false;
      return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR;
    }
  }

 private:
  bool write_line(const std::string& s, std::string& err) {
    std::string line = s + "\n";
    size_t off = 0;
    while (off < line.size()) {
      const ssize_t n = ::send(fd_, line.data() + off, line.size() - off, MSG_NOSIGNAL);
      if (n < 0) {
        if (errno == EINTR) continue;
        err = std::string("connection lost: ") + std::strerror(errno);
        return false;
      }
      off += static_cast<size_t>(n);
    }
    return true;
  }

  // One message; nullopt with err "" when a signal interrupted the wait. With
  // timeout_s > 0, nullopt and a message once that long passed without one.
  std::optional<json> read_message(std::string& err, double timeout_s = 0) {
    err.clear();
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
    for (;;) {
      if (auto nl = in_.find('\n'); nl != std::string::npos) {
        json msg;
        try {
          msg = json_input::parse(std::string_view(in_).substr(0, nl), "reply");
        } catch (const json_input::Error&) {
          msg = nullptr;
        }
        in_.erase(0, nl + 1);
        if (!msg.is_object()) {
          err = "the process sent a malformed reply";
          return std::nullopt;
        }
        return msg;
      }
      if (in_.size() > kMaxReply) {
        err = "reply too large";
        return std::nullopt;
      }
      pollfd p{fd_, POLLIN, 0};
      int wait_ms = -1;
      if (timeout_s > 0) {
        const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
        wait_ms = static_cast<int>(std::max<int64_t>(0, left.count()));
      }
      const int ready = ::poll(&p, 1, wait_ms);
      if (ready < 0) {
        if (errno == EINTR) return std::nullopt;
        err = std::string("poll: ") + std::strerror(errno);
        return std::nullopt;
      }
      if (ready == 0) {
        char secs[32];
        std::snprintf(secs, sizeof secs, "%g", timeout_s);
        err = std::string("no answer within ") + secs +
              " s (not an rlhost control socket, or a process that is stopped or whose loop is blocked)";
        return std::nullopt;
      }
      char buf[65536];
      const ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
      if (n == 0) {
        err = "connection closed by the process (it exited?)";
        return std::nullopt;
      }
      if (n < 0) {
        if (errno == EINTR) return std::nullopt;
        err = std::string("connection lost: ") + std::strerror(errno);
        return std::nullopt;
      }
      in_.append(buf, static_cast<size_t>(n));
    }
  }

  int fd_ = -1;
  std::string in_;
  std::string token_;
  uint64_t next_id_ = 1;
};

// Prints a reply like the local REPL does: output, values (tab-separated),
// then the error on stderr. Returns whether the chunk succeeded.
bool print_reply(const json& r) {
  const std::string output = r.value("output", "");
  std::fwrite(output.data(), 1, output.size(), stdout);
  if (r.contains("values") && r["values"].is_array() && !r["values"].empty()) {
    bool first = true;
    for (const auto& v : r["values"]) {
      if (!first) std::fputc('\t', stdout);
      first = false;
      const std::string s = v.is_string() ? v.get<std::string>() : v.dump();
      std::fwrite(s.data(), 1, s.size(), stdout);
    }
    std::fputc('\n', stdout);
  }
  std::fflush(stdout);
  const bool ok = r.value("ok", false);
  if (!ok) {
    std::fprintf(stderr, "%s\n", r.value("error", std::string("failed")).c_str());
    std::fflush(stderr);
  }
  return ok;
}

int run_chunks(Connection& conn, const std::vector<std::string>& chunks) {
  bool failed = false;
  for (const auto& code : chunks) {
    std::string err;
    auto r = conn.call(json{{"op", "eval"}, {"code", code}}, err);
    if (!r) return fail(err);
    if (!print_reply(*r)) failed = true;
  }
  return failed ? 1 : 0;
}

int run_interactive(Connection& conn, const json& info) {
  EventLoop loop;
  g_loop = &loop;
  int status = 0;
  const int pid = info.value("pid", 0);
  Repl::Options ro;
  ro.prompt = "rlhost:" + std::to_string(pid) + "> ";
  ro.continuation_prompt = "rlhost:" + std::to_string(pid) + ">> ";
  ro.history_path = Repl::default_history_path("attach_history");
  const std::string script = info.value("script", "");
  ro.banner = "attached to rlhost pid " + std::to_string(pid) + (script.empty() ? "" : " (" + script + ")") +
              ". Chunks run inside it; Ctrl-C interrupts one, Ctrl-D detaches.\n";
  Repl* repl_ptr = nullptr;
  auto lost = [&](const std::string& err) {
    std::fprintf(stderr, "rlhost attach: %s\n", err.c_str());
    status = 2;
    loop.stop();
  };
  Repl::Callbacks cb;
  cb.incomplete = [&](const std::string& chunk) {
    if (status) return false;  // already lost: say it once
    std::string err;
    auto r = conn.call(json{{"op", "complete?"}, {"code", chunk}}, err);
    if (!r) {
      lost(err);
      return false;
    }
    return r->value("incomplete", false);
  };
  cb.eval = [&](const std::string& chunk, Repl::Done done) {
    if (status) return;
    std::string err;
    auto r = conn.call(json{{"op", "eval"}, {"code", chunk}}, err);
    if (!r) return lost(err);
    if (repl_ptr->uses_readline() && !r->value("ok", true) && r->value("error", std::string()) == "interrupted")
      std::fputc('\n', stderr);  // after the echoed ^C
    print_reply(*r);
    done();
  };
  cb.on_eof = [&] { loop.stop(); };
  Repl repl(loop, ro, cb);
  repl_ptr = &repl;
  // Notice at the prompt when the process goes away, instead of at the next chunk.
  loop.watch(conn.fd(), EPOLLIN | EPOLLRDHUP, [&](uint32_t) {
    if (repl_ptr->busy() || conn.drain_idle()) return;
    if (repl_ptr->uses_readline()) std::fputs("\n", stdout);
    lost("the process closed the connection (it exited?)");
  });
  loop.set_on_iteration([&] {
    if (g_sigint.load() == 0) return;
    g_sigint = 0;
    repl_ptr->interrupt();
  });
  repl.start();
  loop.run();
  loop.unwatch(conn.fd());
  repl.stop();
  g_loop = nullptr;
  return status;
}

int run_list() {
  auto procs = control::list_processes(true);
  if (procs.empty()) {
    std::printf("no live rlhost processes (in %s)\n", control::runtime_dir().c_str());
    return 0;
  }
  print_list(procs, stdout);
  return 0;
}

}  // namespace

int run_attach(const AttachOptions& opts) {
  if (opts.list) return run_list();
  Target target;
  if (int rc = resolve_target(opts, target)) return rc;

  Connection conn;
  if (auto err = conn.open(target); !err.empty()) return fail(err);
  if (target.tcp) {
    const std::string token = find_token(opts, target);
    if (token.empty())
      return fail("a token is needed for " + target.display + ": pass --token T or set RLHOST_CONTROL_TOKEN");
    conn.set_token(token);
  }

  struct sigaction sa {};
  sa.sa_handler = on_sigint;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, nullptr);  // no SA_RESTART: poll() must return on ^C

  // "info" first: a bad token or a refused peer fails here with a clear message.
  std::string err;
  auto info = conn.call(json{{"op", "info"}}, err, kInfoTimeoutS);
  if (!info) return fail(err + " (" + target.display + ")");
  if (!info->value("ok", false)) {
    const std::string e = info->value("error", std::string("refused"));
    return fail(e == "bad token" ? "bad token for " + target.display + " (check --token or RLHOST_CONTROL_TOKEN)"
                                 : e + " (" + target.display + ")");
  }
  const json about = info->contains("info") ? (*info)["info"] : json::object();
  int rc = opts.eval_chunks.empty() ? run_interactive(conn, about) : run_chunks(conn, opts.eval_chunks);
  signal(SIGINT, SIG_DFL);
  return rc;
}

}  // namespace rl
