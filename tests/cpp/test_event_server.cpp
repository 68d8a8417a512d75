// rl::net::RequestParser and rl::net::EventServer: framing, malformed input,
// keep-alive, pipelining, large bodies read in place, streaming, slow clients, many
// connections.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdint>
#include <string>
#include <vector>

#include "net/event_server.hpp"
#include "net/http_parser.hpp"
#include "test_support.hpp"

using rl::EventLoop;
using rl::net::EventServer;
using rl::net::RequestParser;
using rl::net::Responder;
using rl::net::ServerRequest;

namespace {

RequestParser::Status parse_all(RequestParser& p, const std::string& buf, size_t& pos) { return p.feed(buf, pos); }

int connect_to(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
  fcntl(fd, F_SETFL, O_NONBLOCK);
  return fd;
}

// Sends `raw`, turns the loop until `pred(received)` or the peer closes.
template <class Pred>
std::string exchange(EventLoop& loop, int fd, const std::string& raw, Pred pred, bool* closed = nullptr) {
  if (!raw.empty()) REQUIRE(::send(fd, raw.data(), raw.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(raw.size()));
  std::string got;
  bool eof = false;
  rl::test::run_until(loop, [&] {
    char buf[65536];
    ssize_t n;
    while ((n = ::recv(fd, buf, sizeof buf, 0)) > 0) got.append(buf, static_cast<size_t>(n));
    if (n == 0) eof = true;
    return eof || pred(got);
  });
  if (closed) *closed = eof;
  return got;
}

}  // namespace

TEST_CASE("request parser: framing, byte by byte", "[event_server]") {
  const std::string raw =
      "POST /generate?a=1&b=x%20y HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n"
      "5\r\nhello\r\n6;ext=1\r\n world\r\n0\r\nTrailer: t\r\n\r\n"
      "GET /next HTTP/1.1\r\n\r\n";
  RequestParser p;
  std::string buf;
  size_t pos = 0;
  RequestParser::Status st = RequestParser::Status::need_more;
  for (char c : raw) {  // cut everywhere
    buf += c;
    st = parse_all(p, buf, pos);
    if (st != RequestParser::Status::need_more) break;
  }
  REQUIRE(st == RequestParser::Status::done);
  CHECK(p.request().method == "POST");
  CHECK(p.request().path == "/generate");
  CHECK(p.request().query_param("b") == "x y");
  CHECK(p.request().body == "hello world");
  CHECK(p.request().header("host") == "h");
  // The pipelined request is still there, unconsumed until reset().
  buf = raw;
  pos = 0;
  p.reset();
  REQUIRE(p.feed(buf, pos) == RequestParser::Status::done);
  p.reset();
  REQUIRE(p.feed(buf, pos) == RequestParser::Status::done);
  CHECK(p.request().path == "/next");
  CHECK(p.request().body.empty());
}

TEST_CASE("request parser: malformed input is a 4xx naming the problem", "[event_server]") {
  struct Case {
    std::string raw;
    int status;
    std::string says;
  };
  const std::vector<Case> cases = {
      {"GARBAGE\r\n\r\n", 400, "malformed request line"},
      {"GET nopath HTTP/1.1\r\n\r\n", 400, "bad request target"},
      {"GET / HTTP/2.0\r\n\r\n", 505, "not supported"},
      {"GET / HTTP/1.1\r\nNoColon\r\n\r\n", 400, "without ':'"},
      {"GET / HTTP/1.1\r\nBad Name: x\r\n\r\n", 400, "bad header name"},
      {"POST / HTTP/1.1\r\nContent-Length: abc\r\n\r\n", 400, "bad Content-Length"},
      {"POST / HTTP/1.1\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n", 400, "both"},
      {"POST / HTTP/1.1\r\nTransfer-Encoding: gzip\r\n\r\n", 501, "only chunked"},
      {"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", 400, "bad chunk size"},
      {"POST / HTTP/1.1\r\nContent-Length: 999999999\r\n\r\n", 413, "larger than"},
      {"GET / HTTP/1.1\r\nX: " + std::string(70000, 'a') + "\r\n\r\n", 431, "request head larger"},
  };
  for (auto& c : cases) {
    RequestParser p(RequestParser::Limits{64 * 1024, 1 << 20, 128});
    size_t pos = 0;
    INFO(c.raw.substr(0, 60));
    REQUIRE(p.feed(c.raw, pos) == RequestParser::Status::error);
    CHECK(p.error_status() == c.status);
    CHECK_THAT(p.error_message(), Catch::Contains(c.says));
  }
}

TEST_CASE("event server: keep-alive, pipelining, streaming, errors", "[event_server]") {
  EventLoop loop;
  std::shared_ptr<Responder> held;
  EventServer srv(loop, {}, [&](ServerRequest& req, std::shared_ptr<Responder> res) {
    if (req.path == "/echo") return res->send(200, {{"X-Method", req.method}}, req.body);
    if (req.path == "/later") {  // answered from a timer: asynchronous responders work
      loop.call_later(0.05, [res] { res->send_json(200, "{\"late\":true}"); });
      return;
    }
    if (req.path == "/stream") {
      res->start(200, {{"Content-Type", "text/event-stream"}});
      res->write("data: 1\n\n");
      held = res;
      loop.call_later(0.05, [res] {
        res->write("data: 2\n\n");
        res->end();
      });
      return;
    }
    if (req.path == "/throw") throw std::runtime_error("boom");
    if (req.path == "/digest") {  // a large body's size and FNV-1a hash
      uint64_t h = 1469598103934665603ull;
      for (unsigned char ch : req.body) h = (h ^ ch) * 1099511628211ull;
      return res->send(200, {}, std::to_string(req.body.size()) + ":" + std::to_string(h) + ";");
    }
    res->send(404, {}, "nope");
  });
  srv.start();
  REQUIRE(srv.port() > 0);

  SECTION("keep-alive: two requests on one connection") {
    int fd = connect_to(srv.port());
    auto a = exchange(loop, fd, "POST /echo HTTP/1.1\r\nContent-Length: 3\r\n\r\nabc", [](auto& s) { return s.find("abc") != std::string::npos; });
    CHECK_THAT(a, Catch::StartsWith("HTTP/1.1 200 OK\r\n"));
    CHECK_THAT(a, Catch::Contains("Content-Length: 3\r\n"));
    auto b = exchange(loop, fd, "GET /later HTTP/1.1\r\n\r\n", [](auto& s) { return s.find("late") != std::string::npos; });
    CHECK_THAT(b, Catch::Contains("{\"late\":true}"));
    CHECK(srv.stats().accepted == 1);
    ::close(fd);
  }
  SECTION("pipelined requests are answered in order, even when the first is slow") {
    int fd = connect_to(srv.port());
    auto got = exchange(loop, fd,
                        "GET /later HTTP/1.1\r\n\r\nPOST /echo HTTP/1.1\r\nContent-Length: 6\r\n\r\nsecondGET /x HTTP/1.1\r\n\r\n",
                        [](auto& s) { return s.find("nope") != std::string::npos; });
    const size_t late = got.find("late"), second = got.find("second"), nope = got.find("nope");
    REQUIRE(late != std::string::npos);
    CHECK(late < second);
    CHECK(second < nope);
    ::close(fd);
  }
  SECTION("large bodies: read straight into the request, in pieces, with a pipelined request after") {
    // A body of 3 MiB + 7 bytes, its head sent with 100 bytes of it, then the rest in
    // pieces (the server reads those straight into the body), the last piece followed
    // in the same send by a second request (read through the input buffer again).
    std::string body(3 * 1048576 + 7, '\0');
    uint64_t h = 1469598103934665603ull, x = 88172645463325252ull;
    for (char& ch : body) {
      x ^= x << 13, x ^= x >> 7, x ^= x << 17;
      ch = static_cast<char>(x);
      h = (h ^ static_cast<unsigned char>(ch)) * 1099511628211ull;
    }
    const std::string want = std::to_string(body.size()) + ":" + std::to_string(h) + ";";
    const std::string raw = "POST /digest HTTP/1.1\r\nContent-Length: " + std::to_string(body.size()) + "\r\n\r\n" +
                            body + "POST /echo HTTP/1.1\r\nContent-Length: 5\r\n\r\nafter";
    const size_t head = raw.find("\r\n\r\n") + 4;
    const std::vector<size_t> cuts = {head + 100, head + 70000, head + 70001, head + 2200000, raw.size()};
    int fd = connect_to(srv.port());
    size_t sent = 0, cut = 0;
    std::string got;
    REQUIRE(rl::test::run_until(loop, [&] {
      while (cut < cuts.size()) {   // one piece per turn at most, so the server reads between them
        const ssize_t n = ::send(fd, raw.data() + sent, cuts[cut] - sent, MSG_NOSIGNAL);
        if (n > 0) sent += static_cast<size_t>(n);
        if (sent == cuts[cut]) ++cut;
        break;
      }
      char buf[65536];
      ssize_t n;
      while ((n = ::recv(fd, buf, sizeof buf, 0)) > 0) got.append(buf, static_cast<size_t>(n));
      return got.find("after") != std::string::npos || n == 0;
    }));
    CHECK_THAT(got, Catch::Contains(want));
    CHECK_THAT(got, Catch::EndsWith("after"));
    CHECK(got.find(want) < got.find("after"));
    ::close(fd);
  }
  SECTION("streamed response: chunked, flushed per chunk") {
    int fd = connect_to(srv.port());
    auto first = exchange(loop, fd, "GET /stream HTTP/1.1\r\n\r\n", [](auto& s) { return s.find("data: 1") != std::string::npos; });
    CHECK_THAT(first, Catch::Contains("Transfer-Encoding: chunked"));
    CHECK(first.find("data: 2") == std::string::npos);  // the first chunk came alone
    auto rest = exchange(loop, fd, "", [](auto& s) { return s.find("0\r\n\r\n") != std::string::npos; });
    CHECK_THAT(rest, Catch::Contains("data: 2"));
    ::close(fd);
  }
  SECTION("Expect: 100-continue is answered before the body is sent") {
    int fd = connect_to(srv.port());
    auto interim = exchange(loop, fd, "POST /echo HTTP/1.1\r\nContent-Length: 4\r\nExpect: 100-continue\r\n\r\n",
                            [](auto& s) { return s.find("\r\n\r\n") != std::string::npos; });
    CHECK(interim == "HTTP/1.1 100 Continue\r\n\r\n");
    auto final = exchange(loop, fd, "body", [](auto& s) { return s.find("body") != std::string::npos; });
    CHECK_THAT(final, Catch::StartsWith("HTTP/1.1 200 OK"));
    ::close(fd);
  }
  SECTION("malformed request: 400 JSON and the connection closes") {
    int fd = connect_to(srv.port());
    bool closed = false;
    auto got = exchange(loop, fd, "BROKEN\r\n\r\n", [](auto&) { return false; }, &closed);
    CHECK_THAT(got, Catch::StartsWith("HTTP/1.1 400"));
    CHECK_THAT(got, Catch::Contains("malformed request line"));
    CHECK(closed);
    ::close(fd);
  }
  SECTION("a handler exception is a 500 without details") {
    int fd = connect_to(srv.port());
    auto got = exchange(loop, fd, "GET /throw HTTP/1.1\r\n\r\n", [](auto& s) { return s.find("}}") != std::string::npos; });
    CHECK_THAT(got, Catch::StartsWith("HTTP/1.1 500"));
    CHECK(got.find("boom") == std::string::npos);
    ::close(fd);
  }
  SECTION("HTTP/1.0 without keep-alive closes after the response") {
    int fd = connect_to(srv.port());
    bool closed = false;
    auto got = exchange(loop, fd, "GET /x HTTP/1.0\r\n\r\n", [](auto&) { return false; }, &closed);
    CHECK_THAT(got, Catch::StartsWith("HTTP/1.0 404"));
    CHECK(closed);
    ::close(fd);
  }
  SECTION("a client that goes away mid-stream fires on_close") {
    bool closed_seen = false;
    int fd = connect_to(srv.port());
    exchange(loop, fd, "GET /stream HTTP/1.1\r\n\r\n", [](auto& s) { return s.find("data: 1") != std::string::npos; });
    REQUIRE(held);
    held->on_close([&] { closed_seen = true; });
    ::close(fd);
    REQUIRE(rl::test::run_until(loop, [&] { return closed_seen || held->finished(); }, 5));
  }
  SECTION("many connections at once") {
    std::vector<int> fds;
    for (int i = 0; i < 500; ++i) {
      fds.push_back(connect_to(srv.port()));
      const std::string r = "POST /echo HTTP/1.1\r\nContent-Length: 4\r\n\r\n" + std::to_string(1000 + i);
      ::send(fds.back(), r.data(), r.size(), MSG_NOSIGNAL);
    }
    size_t answered = 0;
    std::vector<std::string> got(fds.size());
    rl::test::run_until(loop, [&] {
      answered = 0;
      for (size_t i = 0; i < fds.size(); ++i) {
        char buf[4096];
        ssize_t n;
        while ((n = ::recv(fds[i], buf, sizeof buf, 0)) > 0) got[i].append(buf, static_cast<size_t>(n));
        if (got[i].find(std::to_string(1000 + i)) != std::string::npos) ++answered;
      }
      return answered == fds.size();
    });
    CHECK(answered == fds.size());
    CHECK(srv.stats().open == fds.size());
    for (int fd : fds) ::close(fd);
  }
}

TEST_CASE("event server: slow clients and idle connections time out", "[event_server]") {
  EventLoop loop;
  EventServer::Options o;
  o.header_timeout_s = 0.3;
  o.idle_timeout_s = 0.3;
  EventServer srv(loop, o, [](ServerRequest&, std::shared_ptr<Responder> res) { res->send(200, {}, "ok"); });
  srv.start();
  int slow = connect_to(srv.port());
  int idle = connect_to(srv.port());
  bool closed = false;
  auto got = exchange(loop, slow, "GET / HTTP/1.1\r\nX-Slow: ", [](auto&) { return false; }, &closed);
  CHECK_THAT(got, Catch::StartsWith("HTTP/1.1 408"));
  CHECK(closed);
  closed = false;
  exchange(loop, idle, "", [](auto&) { return false; }, &closed);
  CHECK(closed);
  CHECK(srv.stats().timeouts == 2);
  ::close(slow);
  ::close(idle);
}

TEST_CASE("event server: loopback only unless allowed; busy port is a clear error", "[event_server]") {
  EventLoop loop;
  EventServer::Options o;
  o.host = "0.0.0.0";
  EventServer remote(loop, o, [](ServerRequest&, std::shared_ptr<Responder>) {});
  CHECK_THROWS_WITH(remote.start(), Catch::Contains("not a loopback address"));
  EventServer a(loop, {}, [](ServerRequest&, std::shared_ptr<Responder>) {});
  a.start();
  EventServer::Options same;
  same.port = a.port();
  EventServer b(loop, same, [](ServerRequest&, std::shared_ptr<Responder>) {});
  CHECK_THROWS_WITH(b.start(), Catch::Contains("cannot listen on 127.0.0.1:" + std::to_string(a.port())));
}

TEST_CASE("event server: connection cap, slow bodies, POST without a length, stop_accepting", "[event_server]") {
  EventLoop loop;
  EventServer::Options o;
  o.max_connections = 2;
  o.header_timeout_s = 0.3;  // covers the body too: a request is due whole
  EventServer srv(loop, o, [](ServerRequest& req, std::shared_ptr<Responder> res) {
    res->send(200, {}, req.method + " body=" + std::to_string(req.body.size()));
  });
  srv.start();

  // A POST without Content-Length has no body: answered at once, not after a timeout.
  int a = connect_to(srv.port());
  auto got = exchange(loop, a, "POST /x HTTP/1.1\r\nHost: h\r\n\r\n",
                      [](auto& s) { return s.find("body=0") != std::string::npos; });
  CHECK_THAT(got, Catch::StartsWith("HTTP/1.1 200") && Catch::Contains("POST body=0"));

  // The cap: a third connection is accepted and closed; the first two still work.
  int b = connect_to(srv.port());
  exchange(loop, b, "GET / HTTP/1.1\r\n\r\n", [](auto& s) { return s.find("body=0") != std::string::npos; });
  int c = connect_to(srv.port());
  bool closed = false;
  got = exchange(loop, c, "", [](auto&) { return false; }, &closed);
  CHECK(closed);
  CHECK(got.empty());
  CHECK(srv.stats().rejected == 1);
  ::close(c);

  // A body that stops coming: 408 once the deadline passes.
  closed = false;
  got = exchange(loop, b, "POST /x HTTP/1.1\r\nContent-Length: 10\r\n\r\nabc", [](auto&) { return false; }, &closed);
  CHECK_THAT(got, Catch::StartsWith("HTTP/1.1 408"));
  CHECK(closed);
  ::close(b);

  // stop_accepting: open connections go on being served, new ones are refused.
  srv.stop_accepting();
  got = exchange(loop, a, "GET / HTTP/1.1\r\n\r\n", [](auto& s) { return s.find("GET body=0") != std::string::npos; });
  CHECK_THAT(got, Catch::Contains("GET body=0"));
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(srv.port()));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  CHECK(::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0);
  ::close(fd);
  ::close(a);
}
