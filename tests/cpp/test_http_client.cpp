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

using namespace rl;
using namespace rl::net;

namespace {

template <class Pred>
bool run_until(EventLoop& loop, Pred pred, double max_s = 20) {
  const double until = EventLoop::now() + max_s;
  while (!pred() && EventLoop::now() < until) loop.run_once(0.01);
  return pred();
}

std::string header(const HeaderList& h, const std::string& name) {
  for (auto& [k, v] : h)
    if (k == name) return v;
  return "";
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
  HttpRequest get;
  get.url = ts.url("/echo/42");
  client.submit(get, [&](HttpResult&& r) { results.push_back(std::move(r)); });
  HttpRequest post;
  post.method = "POST";
  post.url = ts.url("/echo");
  post.body = std::string("payload\0with nul", 16);
  post.headers = {{"X-Custom", "yes"}, {"Content-Type", "application/octet-stream"}};
  client.submit(post, [&](HttpResult&& r) { results.push_back(std::move(r)); });
  HttpRequest put = post;
  put.method = "PUT";
  client.submit(put, [&](HttpResult&& r) { results.push_back(std::move(r)); });
  HttpRequest del;
  del.method = "DELETE";
  del.url = ts.url("/echo");
  client.submit(del, [&](HttpResult&& r) { results.push_back(std::move(r)); });
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
  std::optional<HttpResult> res;
  HttpRequest rq;
  rq.url = ts.url("/status/503");
  client.submit(rq, [&](HttpResult&& r) { res = std::move(r); });
  REQUIRE(run_until(loop, [&] { return res.has_value(); }));
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
    HttpRequest rq;
    rq.url = ts.url("/echo/" + std::to_string(done));
    client.submit(rq, [&](HttpResult&& r) {
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
  HttpClient::Options o;
  o.max_per_host = 4;
  HttpClient client(loop, o);
  int done = 0;
  for (int i = 0; i < 40; ++i) {
    HttpRequest rq;
    rq.url = ts.url("/slow");
    client.submit(rq, [&](HttpResult&& r) {
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
    HttpRequest rq;
    rq.url = ts.url("/slow");
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
  const std::string url = "http://127.0.0.1:" + std::to_string(closed_port()) + "/";
  std::optional<HttpResult> res;
  HttpRequest rq;
  rq.url = url;
  client.submit(rq, [&](HttpResult&& r) { res = std::move(r); });
  REQUIRE(run_until(loop, [&] { return res.has_value(); }, 5));
  CHECK_FALSE(res->ok);
  CHECK_FALSE(res->timed_out);
  CHECK(res->error.rfind("GET " + url + ": Couldn't connect to server", 0) == 0);
}

TEST_CASE("http client: total timeout against a server that never answers", "[http_client]") {
  SilentListener silent;
  EventLoop loop;
  HttpClient client(loop);
  std::optional<HttpResult> res;
  HttpRequest rq;
  rq.url = "http://127.0.0.1:" + std::to_string(silent.port) + "/x";
  rq.timeout_s = 0.2;
  const double t0 = EventLoop::now();
  client.submit(rq, [&](HttpResult&& r) { res = std::move(r); });
  REQUIRE(run_until(loop, [&] { return res.has_value(); }, 5));
  CHECK(EventLoop::now() - t0 >= 0.19);
  CHECK(res->timed_out);
  CHECK(res->error.rfind("GET " + rq.url + ": timed out after 0.2 s", 0) == 0);
}

TEST_CASE("http client: time in the queue counts against the timeout", "[http_client]") {
  SilentListener silent;
  EventLoop loop;
  HttpClient::Options o;
  o.max_per_host = 1;
  HttpClient client(loop, o);
  const std::string url = "http://127.0.0.1:" + std::to_string(silent.port) + "/";
  std::optional<HttpResult> first, second;
  HttpRequest a;
  a.url = url;
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
  HttpClient::Options o;
  o.max_per_host = 1;
  HttpClient client(loop, o);
  int called = 0;
  HttpRequest rq;
  rq.url = "http://127.0.0.1:" + std::to_string(silent.port) + "/";
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
  HttpRequest rq;
  rq.url = ts.url("/stream");
  client.submit(rq, [&](HttpResult&& r) { res = std::move(r); },
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
  HttpRequest rq;
  rq.url = "http://exa mple.com/";
  client.submit(rq, [&](HttpResult&& r) { res = std::move(r); });
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
    HttpRequest rq;
    rq.url = ts.url("/echo/" + std::to_string(i));
    client.submit(rq, [&, i](HttpResult&& r) {
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
