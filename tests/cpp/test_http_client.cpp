// rl::net::HttpClient against in-process HttpServer routes (real sockets on
// 127.0.0.1): round trips, keep-alive, per-host limits and queue timeouts,
// errors, cancellation, streaming and 10,000 requests at once.
#include <catch2/catch.hpp>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <optional>
#include <thread>

#include "base/event_loop.hpp"
#include "net/http_client.hpp"
#include "net/http_server.hpp"
#include "test_support.hpp"

using namespace rl;
using namespace rl::net;
using rl::test::run_until;

namespace {

std::string header(const HeaderList& h, const std::string& name) {
  for (auto& [k, v] : h)
    if (k == name) return v;
  return "";
}

std::string loopback_url(int port, const std::string& path) {
  return "http://127.0.0.1:" + std::to_string(port) + path;
}

HttpRequest get_request(std::string url) {
  HttpRequest rq;
  rq.url = std::move(url);
  return rq;
}

HttpClient::Options per_host_limit(int max_per_host) {
  HttpClient::Options o;
  o.max_per_host = max_per_host;
  return o;
}

// Submits `rq` and turns the client's loop until its callback has run: the
// result, or nothing after `max_s` (the request is then cancelled).
std::optional<HttpResult> fetch(HttpClient& client, const HttpRequest& rq, double max_s = 20) {
  std::optional<HttpResult> res;
  const auto id = client.submit(rq, [&](HttpResult&& r) { res = std::move(r); });
  if (!run_until(client.loop(), [&] { return res.has_value(); }, max_s)) client.cancel(id);
  return res;
}

// A listening socket that never accepts: connects succeed (backlog), answers never come.
struct SilentListener {
  int fd = -1;
  int port = 0;
  SilentListener() {
    fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    REQUIRE(bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
    REQUIRE(listen(fd, 64) == 0);
    socklen_t len = sizeof a;
    getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
    port = ntohs(a.sin_port);
  }
  ~SilentListener() { close(fd); }
  std::string url(const std::string& path) const { return loopback_url(port, path); }
};

int closed_port() {
  SilentListener l;
  return l.port;  // closed when l goes away
}

// A test server: /echo, /slow (tracks concurrency), /stream (chunked, delayed).
struct TestServer {
  HttpServer srv;
  std::atomic<int> now{0}, max_seen{0};
  TestServer() : srv(options()) {
    srv.route("GET", "/echo/(\\d+)", [](const httplib::Request& req, httplib::Response& res) {
      res.set_header("X-Id", req.matches[1].str());
      res.set_content("{\"id\":" + req.matches[1].str() + "}", "application/json");
    });
    srv.route("POST", "/echo", [](const httplib::Request& req, httplib::Response& res) {
      res.set_header("X-Method", req.method);
      res.set_header("X-Custom", req.get_header_value("X-Custom"));
      res.set_content(req.body, "text/plain");
    });
    srv.route("PUT", "/echo", [](const httplib::Request& req, httplib::Response& res) {
      res.set_content(req.method + ":" + req.body, "text/plain");
    });
    srv.route("DELETE", "/echo", [](const httplib::Request& req, httplib::Response& res) {
      res.status = 204;
    });
    srv.route("GET", "/slow", [this](const httplib::Request&, httplib::Response& res) {
      const int n = ++now;
      int m = max_seen.load();
      while (n > m && !max_seen.compare_exchange_weak(m, n)) {
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      --now;
      res.set_content("slow", "text/plain");
    });
    srv.route("GET", "/status/(\\d+)", [](const httplib::Request& req, httplib::Response& res) {
      res.status = std::stoi(req.matches[1].str());
      res.set_content("status body", "text/plain");
    });
    srv.route("GET", "/stream", [](const httplib::Request&, httplib::Response& res) {
      auto sent = std::make_shared<int>(0);
      res.set_chunked_content_provider("text/event-stream", [sent](size_t, httplib::DataSink& sink) {
        if (*sent == 5) {
          sink.done();
          return true;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
        std::string ev = "data: part" + std::to_string((*sent)++) + "\n\n";
        sink.write(ev.data(), ev.size());
        return true;
      });
    });
    srv.start();
  }
  static HttpServerOptions options() {
    HttpServerOptions o;
    o.threads = 70;  // >= the client's per-host limit: httplib holds a worker per keep-alive connection
    return o;
  }
  std::string url(const std::string& path) const { return srv.url() + path; }
};

}  // namespace

TEST_CASE("http client: GET and POST round trips", "[http_client]") {
  TestServer ts;
  EventLoop loop;
  HttpClient client(loop);
  std::vector<HttpResult> results;
  const auto collect = [&](HttpResult&& r) { results.push_back(std::move(r)); };
  client.submit(get_request(ts.url("/echo/42")), collect);
  HttpRequest post = get_request(ts.url("/echo"));
  post.method = "POST";
  post.body = std::string("payload\0with nul", 16);
  post.headers = {{"X-Custom", "yes"}, {"Content-Type", "application/octet-stream"}};
  client.submit(post, collect);
  HttpRequest put = post;
  put.method = "PUT";
  client.submit(put, collect);
  HttpRequest del = get_request(ts.url("/echo"));
  del.method = "DELETE";
  client.submit(del, collect);
  REQUIRE(run_until(loop, [&] { return results.size() == 4; }));
  auto find = [&](auto pred) -> HttpResult& {
    for (auto& r : results)
      if (pred(r)) return r;
    FAIL("no such result");
    return results[0];
  };
  for (auto& r : results) REQUIRE(r.ok);
  auto& g = find([](auto& r) { return r.response.body == "{\"id\":42}"; });
  CHECK(g.response.status == 200);
  CHECK(header(g.response.headers, "x-id") == "42");
  CHECK(header(g.response.headers, "content-type") == "application/json");
  CHECK(g.response.timings.total_s > 0);
  auto& p = find([&](auto& r) { return r.response.body == post.body; });
  CHECK(header(p.response.headers, "x-custom") == "yes");
  CHECK(header(p.response.headers, "x-method") == "POST");
  find([&](auto& r) { return r.response.body == "PUT:" + post.body; });
  CHECK(find([](auto& r) { return r.response.body.empty(); }).response.status == 204);
}

TEST_CASE("http client: 4xx/5xx are responses, not errors", "[http_client]") {
  TestServer ts;
  EventLoop loop;
  HttpClient client(loop);
  const auto res = fetch(client, get_request(ts.url("/status/503")));
  REQUIRE(res.has_value());
  CHECK(res->ok);
  CHECK(res->response.status == 503);
  CHECK(res->response.body == "status body");
}

TEST_CASE("http client: keep-alive reuses connections", "[http_client]") {
  TestServer ts;
  EventLoop loop;
  HttpClient client(loop);
  int done = 0;
  std::function<void()> next = [&] {  // sequential: each submitted from the previous completion
    client.submit(get_request(ts.url("/echo/" + std::to_string(done))), [&](HttpResult&& r) {
      REQUIRE(r.ok);
      if (++done < 200) next();
    });
  };
  next();
  REQUIRE(run_until(loop, [&] { return done == 200; }));
  CHECK(client.stats().connections_opened == 1);
  CHECK(client.stats().finished == 200);
}

TEST_CASE("http client: the per-host limit holds, FIFO, client and per-request", "[http_client]") {
  TestServer ts;
  EventLoop loop;
  HttpClient client(loop, per_host_limit(4));
  int done = 0;
  for (int i = 0; i < 40; ++i) {
    client.submit(get_request(ts.url("/slow")), [&](HttpResult&& r) {
      REQUIRE(r.ok);
      ++done;
    });
  }
  CHECK(client.stats().active == 4);
  CHECK(client.stats().queued == 36);
  REQUIRE(run_until(loop, [&] { return done == 40; }));
  CHECK(ts.max_seen.load() <= 4);
  CHECK(ts.max_seen.load() >= 2);
  CHECK(client.stats().connections_opened <= 4);

  ts.max_seen = 0;
  done = 0;
  for (int i = 0; i < 20; ++i) {
    HttpRequest rq = get_request(ts.url("/slow"));
    rq.max_per_host = 2;
    client.submit(rq, [&](HttpResult&&) { ++done; });
  }
  CHECK(client.stats().active == 2);
  REQUIRE(run_until(loop, [&] { return done == 20; }));
  CHECK(ts.max_seen.load() <= 2);
}

TEST_CASE("http client: connection refused is a quick error naming method and URL", "[http_client]") {
  EventLoop loop;
  HttpClient client(loop);
  const std::string url = loopback_url(closed_port(), "/");
  const auto res = fetch(client, get_request(url), 5);
  REQUIRE(res.has_value());
  CHECK_FALSE(res->ok);
  CHECK_FALSE(res->timed_out);
  CHECK(res->error.rfind("GET " + url + ": Couldn't connect to server", 0) == 0);
}

TEST_CASE("http client: total timeout against a server that never answers", "[http_client]") {
  SilentListener silent;
  EventLoop loop;
  HttpClient client(loop);
  HttpRequest rq = get_request(silent.url("/x"));
  rq.timeout_s = 0.2;
  const double t0 = EventLoop::now();
  const auto res = fetch(client, rq, 5);
  REQUIRE(res.has_value());
  CHECK(EventLoop::now() - t0 >= 0.19);
  CHECK(res->timed_out);
  CHECK(res->error.rfind("GET " + rq.url + ": timed out after 0.2 s", 0) == 0);
}

TEST_CASE("http client: time in the queue counts against the timeout", "[http_client]") {
  SilentListener silent;
  EventLoop loop;
  HttpClient client(loop, per_host_limit(1));
  std::optional<HttpResult> first, second;
  HttpRequest a = get_request(silent.url("/"));
  a.timeout_s = 1.0;
  client.submit(a, [&](HttpResult&& r) { first = std::move(r); });
  HttpRequest b = a;
  b.timeout_s = 0.2;
  client.submit(b, [&](HttpResult&& r) { second = std::move(r); });
  CHECK(client.stats().queued == 1);
  REQUIRE(run_until(loop, [&] { return second.has_value(); }, 5));
  CHECK_FALSE(first.has_value());  // the queued one expired first, never sent
  CHECK(second->timed_out);
  CHECK(second->error.find("never sent") != std::string::npos);
  CHECK(client.stats().started == 1);
  REQUIRE(run_until(loop, [&] { return first.has_value(); }, 5));
  CHECK(first->timed_out);
}

TEST_CASE("http client: cancel frees queued and active requests without callbacks", "[http_client]") {
  SilentListener silent;
  EventLoop loop;
  HttpClient client(loop, per_host_limit(1));
  int called = 0;
  const HttpRequest rq = get_request(silent.url("/"));
  const auto active = client.submit(rq, [&](HttpResult&&) { ++called; });
  const auto queued = client.submit(rq, [&](HttpResult&&) { ++called; });
  loop.run_once(0.05);
  CHECK(client.stats().active == 1);
  CHECK(client.cancel(queued));
  CHECK(client.stats().queued == 0);
  CHECK(client.cancel(active));
  CHECK_FALSE(client.cancel(active));
  CHECK(client.stats().active == 0);
  for (int i = 0; i < 10; ++i) loop.run_once(0.01);
  CHECK(called == 0);
  CHECK(client.stats().cancelled == 2);
}

TEST_CASE("http client: streaming hands chunks over as they arrive", "[http_client]") {
  TestServer ts;
  EventLoop loop;
  HttpClient client(loop);
  std::string streamed;
  int chunks = 0;
  std::optional<HttpResult> res;
  client.submit(get_request(ts.url("/stream")), [&](HttpResult&& r) { res = std::move(r); },
                [&](std::string_view bytes) {
                  CHECK_FALSE(res.has_value());  // chunks precede completion
                  streamed.append(bytes);
                  ++chunks;
                });
  REQUIRE(run_until(loop, [&] { return res.has_value(); }));
  REQUIRE(res->ok);
  CHECK(res->response.body.empty());
  CHECK(streamed == "data: part0\n\ndata: part1\n\ndata: part2\n\ndata: part3\n\ndata: part4\n\n");
  CHECK(chunks >= 2);  // 10 ms apart: not all in one read
}

TEST_CASE("http client: bad URLs fail through the callback, never inside submit", "[http_client]") {
  EventLoop loop;
  HttpClient client(loop);
  std::optional<HttpResult> res;
  client.submit(get_request("http://exa mple.com/"), [&](HttpResult&& r) { res = std::move(r); });
  CHECK_FALSE(res.has_value());
  REQUIRE(run_until(loop, [&] { return res.has_value(); }, 5));
  CHECK(res->error.rfind("GET http://exa mple.com/: bad URL", 0) == 0);
}

TEST_CASE("http client: 10,000 requests submitted at once", "[http_client]") {
  TestServer ts;
  EventLoop loop;
  HttpClient client(loop);
  constexpr int n = 10000;
  std::vector<int> got(n, -1);
  int done = 0, failed = 0;
  for (int i = 0; i < n; ++i) {
    client.submit(get_request(ts.url("/echo/" + std::to_string(i))), [&, i](HttpResult&& r) {
      ++done;
      if (!r.ok) {
        ++failed;
        return;
      }
      if (r.response.body == "{\"id\":" + std::to_string(i) + "}") got[i] = i;
    });
  }
  CHECK(client.stats().queued == n - 64);
  REQUIRE(run_until(loop, [&] { return done == n; }, 120));
  CHECK(failed == 0);
  int mine = 0;
  for (int i = 0; i < n; ++i) mine += got[i] == i;
  CHECK(mine == n);
  CHECK(client.stats().connections_opened <= 64);
  CHECK(client.stats().active == 0);
}
