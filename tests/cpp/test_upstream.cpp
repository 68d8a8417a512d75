// rl::net::UpstreamPool against a real EventServer on the same loop: framing
// (Content-Length, chunked, close-delimited), keep-alive reuse, refused and
// silent upstreams, cancellation, a stale pooled connection, deferred errors.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <string>

#include "net/event_server.hpp"
#include "net/upstream.hpp"
#include "test_support.hpp"

using rl::EventLoop;
using rl::net::EventServer;
using rl::net::HttpRequest;
using rl::net::HttpResult;
using rl::net::Responder;
using rl::net::ServerRequest;
using rl::net::UpstreamPool;

namespace {

int closed_port() {  // a port nothing listens on
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  socklen_t len = sizeof a;
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  ::close(fd);
  return ntohs(a.sin_port);
}

}  // namespace

TEST_CASE("upstream pool: framing, keep-alive, errors", "[upstream]") {
  EventLoop loop;
  std::string last_body, last_host;
  EventServer srv(loop, {}, [&](ServerRequest& req, std::shared_ptr<Responder> res) {
    last_body = req.body;
    last_host = std::string(req.header("host"));
    if (req.path == "/len") return res->send(200, {{"X-A", "1"}}, "hello");
    if (req.path == "/chunked") {
      res->start(201, {{"Content-Type", "text/event-stream"}});
      res->write("data: 1\n\n");
      loop.call_later(0.02, [res] {
        res->write("data: 2\n\n");
        res->end();
      });
      return;
    }
    if (req.path == "/slow") return;  // never answers
    if (req.path == "/empty") return res->send(204, {}, "");
    res->send(404, {}, "nope");
  });
  srv.start();
  const std::string base = srv.url();
  UpstreamPool pool(loop, {});

  auto run = [&](HttpRequest rq, std::string* chunks = nullptr) {
    HttpResult out;
    bool done = false;
    rl::net::HttpClient::ChunkFn on_chunk;
    if (chunks) on_chunk = [chunks](std::string_view b) { chunks->append(b); };
    pool.submit(std::move(rq), [&](HttpResult&& r) { out = std::move(r); done = true; }, on_chunk);
    REQUIRE(rl::test::run_until(loop, [&] { return done; }, 10));
    return out;
  };

  SECTION("Content-Length response; the connection is kept and reused") {
    for (int i = 0; i < 3; ++i) {
      HttpRequest rq;
      rq.method = "POST";
      rq.url = base + "/len";
      rq.body = "body" + std::to_string(i);
      rq.headers = {{"Content-Type", "application/json"}, {"Host", "ignored"}};
      auto r = run(rq);
      REQUIRE(r.ok);
      CHECK(r.response.status == 200);
      CHECK(r.response.body == "hello");
      CHECK(last_body == "body" + std::to_string(i));
      CHECK(last_host == base.substr(7));
    }
    CHECK(pool.stats().connections_opened == 1);
    CHECK(pool.stats().reused == 2);
    CHECK(pool.stats().idle == 1);
  }
  SECTION("chunked response streamed through on_chunk; status known from the first chunk") {
    HttpRequest rq;
    rq.url = base + "/chunked";
    std::string chunks;
    uint64_t id = 0;
    long status_at_first_chunk = -1;
    bool done = false;
    HttpResult out;
    id = pool.submit(rq, [&](HttpResult&& r) { out = std::move(r); done = true; },
                     [&](std::string_view b) {
                       if (status_at_first_chunk < 0) status_at_first_chunk = pool.peek(id)->status;
                       chunks.append(b);
                     });
    REQUIRE(rl::test::run_until(loop, [&] { return done; }, 10));
    CHECK(out.ok);
    CHECK(status_at_first_chunk == 201);
    CHECK(chunks == "data: 1\n\ndata: 2\n\n");
    CHECK(out.response.body.empty());
  }
  SECTION("204 has no body") {
    HttpRequest rq;
    rq.url = base + "/empty";
    auto r = run(rq);
    CHECK(r.ok);
    CHECK(r.response.status == 204);
  }
  SECTION("refused port: an error naming the URL, delivered from the loop") {
    HttpRequest rq;
    rq.url = "http://127.0.0.1:" + std::to_string(closed_port()) + "/x";
    auto r = run(rq);
    CHECK_FALSE(r.ok);
    CHECK_THAT(r.error, Catch::StartsWith("GET " + rq.url + ": Couldn't connect to server"));
  }
  SECTION("bad URL and timeouts") {
    HttpRequest rq;
    rq.url = "ftp://x/";
    bool called_inside = false, done = false;
    HttpResult out;
    bool in_submit = true;
    pool.submit(rq, [&](HttpResult&& r) { called_inside = in_submit; out = std::move(r); done = true; });
    in_submit = false;
    REQUIRE(rl::test::run_until(loop, [&] { return done; }, 5));
    CHECK_FALSE(called_inside);
    CHECK_THAT(out.error, Catch::Contains("only http://"));
    HttpRequest slow;
    slow.url = base + "/slow";
    slow.timeout_s = 0.2;
    auto r = run(slow);
    CHECK(r.timed_out);
    CHECK_THAT(r.error, Catch::Contains("timed out after 0.2 s"));
  }
  SECTION("cancel mid-response: no callback, the slot is freed") {
    HttpRequest rq;
    rq.url = base + "/slow";
    bool called = false;
    const uint64_t id = pool.submit(rq, [&](HttpResult&&) { called = true; });
    rl::test::run_until(loop, [&] { return srv.stats().requests >= 1; }, 5);
    CHECK(pool.cancel(id));
    CHECK_FALSE(pool.cancel(id));
    for (int i = 0; i < 20; ++i) loop.run_once(0.005);
    CHECK_FALSE(called);
    CHECK(pool.stats().active == 0);
  }
  SECTION("a pooled connection the server closed is retried on a fresh one") {
    HttpRequest rq;
    rq.url = base + "/len";
    REQUIRE(run(rq).ok);
    srv.stop();  // closes the kept connection...
    EventServer::Options o;
    o.port = std::stoi(base.substr(base.rfind(':') + 1));
    EventServer again(loop, o, [](ServerRequest&, std::shared_ptr<Responder> res) { res->send(200, {}, "again"); });
    again.start();  // ...and a new server takes the port
    auto r = run(rq);
    REQUIRE(r.ok);
    CHECK(r.response.body == "again");
  }
}

TEST_CASE("upstream pool: per-host limit queues FIFO", "[upstream]") {
  EventLoop loop;
  int in_flight = 0, max_seen = 0;
  EventServer srv(loop, {}, [&](ServerRequest&, std::shared_ptr<Responder> res) {
    max_seen = std::max(max_seen, ++in_flight);
    loop.call_later(0.01, [&, res] {
      --in_flight;
      res->send(200, {}, "ok");
    });
  });
  srv.start();
  UpstreamPool::Options o;
  o.max_per_host = 3;
  UpstreamPool pool(loop, o);
  int done = 0;
  for (int i = 0; i < 12; ++i) {
    HttpRequest rq;
    rq.url = srv.url() + "/";
    pool.submit(rq, [&](HttpResult&& r) { done += r.ok; });
  }
  REQUIRE(rl::test::run_until(loop, [&] { return done == 12; }, 10));
  CHECK(max_seen == 3);
  CHECK(pool.stats().connections_opened == 3);
}

TEST_CASE("upstream pool: pause stops reading, resume finishes the body", "[upstream]") {
  EventLoop loop;
  const std::string block(64 * 1024, 'x');
  EventServer srv(loop, {}, [&](ServerRequest&, std::shared_ptr<Responder> res) {
    res->start(200, {});
    for (int i = 0; i < 128; ++i) res->write(block);  // 8 MiB, far beyond the socket buffers
    res->end();
  });
  srv.start();
  UpstreamPool pool(loop, {});
  size_t got = 0;
  bool done = false;
  uint64_t id = 0;
  HttpRequest rq;
  rq.url = srv.url() + "/big";
  id = pool.submit(rq, [&](HttpResult&& r) { done = r.ok; }, [&](std::string_view b) {
    if (got == 0) pool.pause(id, true);
    got += b.size();
  });
  rl::test::run_until(loop, [&] { return got > 0; }, 5);
  for (int i = 0; i < 50; ++i) loop.run_once(0.002);
  const size_t while_paused = got;
  CHECK(while_paused < 8u * 1024 * 1024);  // the rest waits in the server's buffers and TCP
  CHECK_FALSE(done);
  CHECK(pool.pause(id, false));
  REQUIRE(rl::test::run_until(loop, [&] { return done; }, 10));
  CHECK(got == 128u * block.size());
}
