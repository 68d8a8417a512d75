// The control socket server (runtime/host/control_server.cpp) on a real event
// loop, with raw sockets as clients: framing, partial reads and writes, several
// clients, disconnects mid-request, limits, the TCP token, files and modes.
#include <catch2/catch.hpp>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "base/event_loop.hpp"
#include "host/control_registry.hpp"
#include "host/control_server.hpp"

namespace fs = std::filesystem;
using nlohmann::json;
using rl::ControlReply;
using rl::ControlRequest;
using rl::ControlServer;
using rl::EventLoop;

namespace {

struct TempDir {
  fs::path path;
  TempDir() {
    char tmpl[] = "/tmp/rlhost-ctl-test-XXXXXX";
    path = ::mkdtemp(tmpl);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  std::string operator/(const std::string& name) const { return (path / name).string(); }
};

// Runs the loop until pred() holds or `timeout_s` passes.
bool pump_until(EventLoop& loop, const std::function<bool()>& pred, double timeout_s = 5) {
  const double end = EventLoop::now() + timeout_s;
  while (!pred()) {
    if (EventLoop::now() > end) return false;
    loop.run_once(0.005);
  }
  return true;
}

// A raw client: non-blocking reads so the test can pump the server's loop.
struct Client {
  int fd = -1;
  std::string in;
  bool closed = false;

  static Client unix_socket(const std::string& path) {
    Client c;
    c.fd = rl::control::connect_unix(path);
    REQUIRE(c.fd >= 0);
    return c;
  }
  static Client tcp(int port) {
    Client c;
    c.fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(port));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    REQUIRE(::connect(c.fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
    return c;
  }
  Client() = default;
  Client(Client&& o) noexcept : fd(o.fd), in(std::move(o.in)), closed(o.closed) { o.fd = -1; }
  ~Client() {
    if (fd >= 0) ::close(fd);
  }
  void send_raw(const std::string& s) {
    size_t off = 0;
    while (off < s.size()) {
      const ssize_t n = ::send(fd, s.data() + off, s.size() - off, MSG_NOSIGNAL);
      REQUIRE(n > 0);
      off += static_cast<size_t>(n);
    }
  }
  void send(const json& j) { send_raw(j.dump() + "\n"); }
  void poll_input() {
    char buf[65536];
    for (;;) {
      const ssize_t n = ::recv(fd, buf, sizeof buf, MSG_DONTWAIT);
      if (n > 0) {
        in.append(buf, static_cast<size_t>(n));
        continue;
      }
      if (n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK)) closed = true;
      return;
    }
  }
  std::optional<json> take() {
    auto nl = in.find('\n');
    if (nl == std::string::npos) return std::nullopt;
    auto j = json::parse(in.substr(0, nl));
    in.erase(0, nl + 1);
    return j;
  }
  // Next message, pumping the loop meanwhile.
  json read(EventLoop& loop, double timeout_s = 5) {
    std::optional<json> msg;
    REQUIRE(pump_until(loop, [&] {
      poll_input();
      msg = take();
      return msg.has_value() || closed;
    }, timeout_s));
    REQUIRE(msg.has_value());
    return *msg;
  }
  bool wait_closed(EventLoop& loop) {
    return pump_until(loop, [&] {
      poll_input();
      return closed;
    });
  }
};

ControlServer::Options unix_options(const std::string& path) {
  ControlServer::Options o;
  o.socket_path = path;
  o.write_record = false;
  o.script = "test.lua";
  return o;
}

// A server whose handler answers "eval" with the code upper-cased, and keeps
// requests whose code is "hold" for the test to answer.
struct EchoServer {
  EventLoop& loop;
  ControlServer server;
  std::vector<ControlRequest> held;
  std::vector<uint64_t> disconnected;

  EchoServer(EventLoop& l, ControlServer::Options o) : loop(l), server(l, std::move(o)) {
    server.set_handlers(
        [this](const ControlRequest& r) {
          if (r.code == "hold") return held.push_back(r);
          ControlReply reply;
          if (r.op == "complete?") {
            reply.incomplete = r.code.find("function") != std::string::npos;
          } else {
            std::string up = r.code;
            for (auto& c : up) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
            reply.values = {up};
            reply.output = "out:" + r.op + "\n";
          }
          server.respond(r.request, reply);
        },
        [this](uint64_t client) { disconnected.push_back(client); });
    server.start();
  }
};

}  // namespace

TEST_CASE("control server: eval round trip over a 0600 Unix socket") {
  TempDir dir;
  EventLoop loop;
  EchoServer s(loop, unix_options(dir / "c.sock"));
  struct stat st {};
  REQUIRE(::stat(s.server.socket_path().c_str(), &st) == 0);
  CHECK(S_ISSOCK(st.st_mode));
  CHECK((st.st_mode & 0777) == 0600);

  auto c = Client::unix_socket(s.server.socket_path());
  c.send({{"id", 7}, {"op", "eval"}, {"code", "return x"}});
  json r = c.read(loop);
  CHECK(r["id"] == 7);
  CHECK(r["ok"] == true);
  CHECK(r["values"] == json::array({"RETURN X"}));
  CHECK(r["output"] == "out:eval\n");
  CHECK(r["incomplete"] == false);

  c.send({{"id", "s1"}, {"op", "complete?"}, {"code", "function f()"}});
  r = c.read(loop);
  CHECK(r["id"] == "s1");
  CHECK(r["incomplete"] == true);

  c.send({{"id", 8}, {"op", "info"}});
  r = c.read(loop);
  CHECK(r["ok"] == true);
  CHECK(r["info"]["pid"] == ::getpid());
  CHECK(r["info"]["script"] == "test.lua");
  CHECK(r["info"]["socket"] == s.server.socket_path());
}

TEST_CASE("control server: requests split across writes, and several in one write") {
  TempDir dir;
  EventLoop loop;
  EchoServer s(loop, unix_options(dir / "c.sock"));
  auto c = Client::unix_socket(s.server.socket_path());
  const std::string msg = json{{"id", 1}, {"op", "eval"}, {"code", "abc"}}.dump() + "\n";
  for (char ch : msg) {  // one byte at a time
    c.send_raw(std::string(1, ch));
    loop.run_once(0);
  }
  CHECK(c.read(loop)["values"][0] == "ABC");

  std::string two = json{{"id", 2}, {"op", "eval"}, {"code", "x"}}.dump() + "\r\n" +
                    json{{"id", 3}, {"op", "eval"}, {"code", "y"}}.dump() + "\n\n";
  c.send_raw(two);
  auto a = c.read(loop);
  auto b = c.read(loop);
  CHECK(a["id"] == 2);
  CHECK(b["id"] == 3);
  CHECK(b["values"][0] == "Y");
}

TEST_CASE("control server: malformed requests get errors and the connection stays usable") {
  TempDir dir;
  EventLoop loop;
  EchoServer s(loop, unix_options(dir / "c.sock"));
  auto c = Client::unix_socket(s.server.socket_path());
  c.send_raw("this is not json\n");
  json r = c.read(loop);
  CHECK(r["ok"] == false);
  CHECK(r["id"].is_null());
  CHECK_THAT(r["error"].get<std::string>(), Catch::Contains("malformed request"));

  c.send({{"id", 1}, {"op", "launch"}});
  r = c.read(loop);
  CHECK(r["id"] == 1);
  CHECK_THAT(r["error"].get<std::string>(), Catch::Contains("unknown op 'launch'"));

  c.send({{"id", 2}, {"op", "eval"}});
  CHECK_THAT(c.read(loop)["error"].get<std::string>(), Catch::Contains("needs \"code\""));

  c.send({{"id", 3}, {"op", "eval"}, {"code", "still here"}});
  CHECK(c.read(loop)["values"][0] == "STILL HERE");
}

TEST_CASE("control server: several clients, replies out of order, disconnect mid-request") {
  TempDir dir;
  EventLoop loop;
  EchoServer s(loop, unix_options(dir / "c.sock"));
  auto a = Client::unix_socket(s.server.socket_path());
  auto b = Client::unix_socket(s.server.socket_path());
  {
    auto gone = Client::unix_socket(s.server.socket_path());
    a.send({{"id", 1}, {"op", "eval"}, {"code", "hold"}});
    b.send({{"id", 1}, {"op", "eval"}, {"code", "hold"}});
    gone.send({{"id", 1}, {"op", "eval"}, {"code", "hold"}});
    REQUIRE(pump_until(loop, [&] { return s.held.size() == 3; }));
    CHECK(s.server.client_count() == 3);
  }  // `gone` disconnects while its request is held
  REQUIRE(pump_until(loop, [&] { return s.disconnected.size() == 1; }));
  CHECK(s.disconnected[0] == s.held[2].client);
  CHECK(s.server.client_count() == 2);
  CHECK(s.server.pending_requests() == 2);

  ControlReply late;
  late.values = {"nobody"};
  s.server.respond(s.held[2].request, late);  // its client is gone: a no-op
  ControlReply rb;
  rb.values = {"for b"};
  s.server.respond(s.held[1].request, rb);
  ControlReply ra;
  ra.ok = false;
  ra.error = "for a";
  s.server.respond(s.held[0].request, ra);
  CHECK(b.read(loop)["values"][0] == "for b");
  json r = a.read(loop);
  CHECK(r["ok"] == false);
  CHECK(r["error"] == "for a");
  CHECK(s.server.pending_requests() == 0);
}

TEST_CASE("control server: a message over the limit is refused and the connection closed") {
  TempDir dir;
  EventLoop loop;
  auto opts = unix_options(dir / "c.sock");
  opts.max_message = 4096;
  EchoServer s(loop, opts);
  SECTION("without a newline") {
    auto c = Client::unix_socket(s.server.socket_path());
    c.send_raw(std::string(10000, 'x'));
    json r = c.read(loop);
    CHECK(r["ok"] == false);
    CHECK_THAT(r["error"].get<std::string>(), Catch::Contains("too large"));
    CHECK(c.wait_closed(loop));
  }
  SECTION("a complete line") {
    auto c = Client::unix_socket(s.server.socket_path());
    c.send({{"id", 1}, {"op", "eval"}, {"code", std::string(5000, 'y')}});
    CHECK_THAT(c.read(loop)["error"].get<std::string>(), Catch::Contains("too large"));
    CHECK(c.wait_closed(loop));
  }
  // The server itself is fine.
  auto ok = Client::unix_socket(s.server.socket_path());
  ok.send({{"id", 2}, {"op", "eval"}, {"code", "fine"}});
  CHECK(ok.read(loop)["values"][0] == "FINE");
}

TEST_CASE("control server: a large reply is written in pieces as the client reads") {
  TempDir dir;
  EventLoop loop;
  EchoServer s(loop, unix_options(dir / "c.sock"));
  auto c = Client::unix_socket(s.server.socket_path());
  int small = 4096;
  ::setsockopt(c.fd, SOL_SOCKET, SO_RCVBUF, &small, sizeof small);
  const std::string big(8 << 20, 'q');
  c.send({{"id", 1}, {"op", "eval"}, {"code", "hold"}});
  REQUIRE(pump_until(loop, [&] { return s.held.size() == 1; }));
  ControlReply r;
  r.values = {big};
  r.output = std::string("\xff\xfe bad utf-8", 12);  // replaced, never a failed reply
  s.server.respond(s.held[0].request, r);
  json got = c.read(loop, 20);
  CHECK(got["values"][0].get<std::string>().size() == big.size());
  CHECK_THAT(got["output"].get<std::string>(), Catch::Contains("bad utf-8"));
}

TEST_CASE("control server: TCP listens on 127.0.0.1 and needs the token") {
  TempDir dir;
  EventLoop loop;
  ControlServer::Options o = unix_options(dir / "c.sock");
  o.tcp_port = 0;  // any free port
  o.token = "0123456789abcdef0123456789abcdef";
  EchoServer s(loop, o);
  REQUIRE(s.server.tcp_port() > 0);
  struct stat st {};
  REQUIRE(::stat(s.server.token_path().c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0600);
  std::ifstream tf(s.server.token_path());
  std::string saved;
  tf >> saved;
  CHECK(saved == o.token);

  SECTION("no token") {
    auto c = Client::tcp(s.server.tcp_port());
    c.send({{"id", 1}, {"op", "eval"}, {"code", "x"}});
    json r = c.read(loop);
    CHECK(r["ok"] == false);
    CHECK_THAT(r["error"].get<std::string>(), Catch::Contains("token required"));
    CHECK(c.wait_closed(loop));
  }
  SECTION("bad token") {
    auto c = Client::tcp(s.server.tcp_port());
    c.send({{"id", 1}, {"op", "info"}, {"token", "nope"}});
    CHECK(c.read(loop)["error"] == "bad token");
    CHECK(c.wait_closed(loop));
  }
  SECTION("good token, then requests without it") {
    auto c = Client::tcp(s.server.tcp_port());
    c.send({{"id", 1}, {"op", "eval"}, {"code", "a"}, {"token", o.token}});
    CHECK(c.read(loop)["values"][0] == "A");
    c.send({{"id", 2}, {"op", "eval"}, {"code", "b"}});
    CHECK(c.read(loop)["values"][0] == "B");
  }
  // Listening on loopback only: the kernel's socket table says 127.0.0.1.
  char port_hex[8];
  std::snprintf(port_hex, sizeof port_hex, ":%04X", s.server.tcp_port());
  std::ifstream proc("/proc/net/tcp");
  std::string line, listen_addr;
  while (std::getline(proc, line)) {
    std::istringstream ls(line);
    std::string sl, local, remote, state;
    ls >> sl >> local >> remote >> state;
    if (state == "0A" && local.size() > 5 && local.substr(local.size() - 5) == port_hex) listen_addr = local;
  }
  CHECK(listen_addr == std::string("0100007F") + port_hex);
}

TEST_CASE("control server: record file, stale sockets, and cleanup at stop") {
  TempDir dir;
  const char* old_xdg = std::getenv("XDG_RUNTIME_DIR");
  std::string saved_xdg = old_xdg ? old_xdg : "";
  ::setenv("XDG_RUNTIME_DIR", (dir / "xdg").c_str(), 1);
  {
    EventLoop loop;
    const std::string path = dir / "c.sock";
    {  // a socket left behind by a dead process: bound, never listened on
      int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
      sockaddr_un a{};
      a.sun_family = AF_UNIX;
      std::snprintf(a.sun_path, sizeof a.sun_path, "%s", path.c_str());
      REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
      ::close(fd);
    }
    auto o = unix_options(path);
    o.write_record = true;
    o.argv = {"rlhost", "test.lua"};
    {
      EchoServer s(loop, o);  // replaces the stale socket
      const std::string record = rl::control::runtime_dir() + "/" + std::to_string(::getpid()) + ".json";
      CHECK(s.server.record_path() == record);
      struct stat st {};
      REQUIRE(::stat(rl::control::runtime_dir().c_str(), &st) == 0);
      CHECK((st.st_mode & 0777) == 0700);
      auto r = rl::control::read_record(record);
      REQUIRE(r.has_value());
      CHECK(r->pid == ::getpid());
      CHECK(r->socket == path);
      CHECK(r->argv == std::vector<std::string>{"rlhost", "test.lua"});
      auto live = rl::control::list_processes(true);
      REQUIRE(live.size() == 1);
      CHECK(live[0].pid == ::getpid());

      // A second server on the same path: refused, the first keeps working.
      ControlServer second(loop, unix_options(path));
      CHECK_THROWS_WITH(second.start(), Catch::Contains("in use by another process"));
      auto c = Client::unix_socket(path);
      c.send({{"id", 1}, {"op", "eval"}, {"code", "ok"}});
      CHECK(c.read(loop)["values"][0] == "OK");
    }
    CHECK_FALSE(fs::exists(path));
    CHECK(rl::control::list_processes(true).empty());
    CHECK_FALSE(fs::exists(rl::control::runtime_dir() + "/" + std::to_string(::getpid()) + ".json"));
  }
  if (old_xdg)
    ::setenv("XDG_RUNTIME_DIR", saved_xdg.c_str(), 1);
  else
    ::unsetenv("XDG_RUNTIME_DIR");
}

TEST_CASE("control server: clear errors for unusable paths") {
  TempDir dir;
  EventLoop loop;
  const std::string file = dir / "plain";
  std::ofstream(file) << "x";
  ControlServer a(loop, unix_options(file));
  CHECK_THROWS_WITH(a.start(), Catch::Contains("is not a socket"));
  ControlServer b(loop, unix_options(dir / std::string(200, 'n')));
  CHECK_THROWS_WITH(b.start(), Catch::Contains("too long"));
}

TEST_CASE("control server: the default limit is 16 MiB per message") {
  TempDir dir;
  EventLoop loop;
  EchoServer s(loop, unix_options(dir / "c.sock"));
  auto c = Client::unix_socket(s.server.socket_path());
  // Just under the limit is accepted (a big chunk of code is fine)...
  const std::string code((16 << 20) - 100, 'a');
  const std::string ok_msg = json{{"id", 1}, {"op", "complete?"}, {"code", code}}.dump() + "\n";
  REQUIRE(ok_msg.size() < (16u << 20));
  size_t off = 0;
  while (off < ok_msg.size()) {  // interleave writes with loop turns: the server reads as it arrives
    const ssize_t n = ::send(c.fd, ok_msg.data() + off, ok_msg.size() - off, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (n > 0) off += static_cast<size_t>(n);
    loop.run_once(0);
  }
  CHECK(c.read(loop, 20)["id"] == 1);
  // ...one byte-stream longer than 16 MiB without a newline is not.
  const std::string chunk(1 << 20, 'b');
  for (int i = 0; i < 17 && !c.closed; ++i) {
    size_t sent = 0;
    while (sent < chunk.size() && !c.closed) {
      const ssize_t n = ::send(c.fd, chunk.data() + sent, chunk.size() - sent, MSG_DONTWAIT | MSG_NOSIGNAL);
      if (n > 0) sent += static_cast<size_t>(n);
      else if (n < 0 && errno != EAGAIN) c.closed = true;
      loop.run_once(0);
      c.poll_input();
    }
  }
  json r = c.read(loop);
  CHECK(r["ok"] == false);
  CHECK_THAT(r["error"].get<std::string>(), Catch::Contains("over 16 MiB"));
}
