// rl::router::Router in-process: its own thread and loop, a worker served by an
// EventServer on another thread, clients on the test's loop. Thousands of
// concurrent requests, the thread-safe control API, errors.
#include <catch2/catch.hpp>
#include <atomic>
#include <future>
#include <optional>
#include <string>
#include <thread>

#include "net/event_server.hpp"
#include "net/upstream.hpp"
#include "router/router.hpp"
#include "test_support.hpp"

using rl::EventLoop;
using rl::net::EventServer;
using rl::net::HttpRequest;
using rl::net::HttpResult;
using rl::net::Responder;
using rl::net::ServerRequest;
using rl::net::UpstreamPool;
using rl::router::Router;
using rl::router::RouterOptions;

namespace {

// A worker on its own thread: answers /generate after `delay_s`, echoing the body.
struct ThreadWorker {
  EventLoop loop;
  std::unique_ptr<EventServer> srv;
  std::thread thread;
  std::atomic<int> max_in_flight{0};
  int in_flight = 0;
  std::string url;

  explicit ThreadWorker(double delay_s) {
    EventServer::Options o;
    o.max_connections = 30000;
    srv = std::make_unique<EventServer>(loop, o, [this, delay_s](ServerRequest& req, std::shared_ptr<Responder> res) {
      if (req.path == "/health") return res->send(200, {}, "ok");
      max_in_flight = std::max(max_in_flight.load(), ++in_flight);
      loop.call_later(delay_s, [this, res, body = req.body] {
        --in_flight;
        res->send_json(200, body);
      });
    });
    srv->start();
    url = srv->url();
    thread = std::thread([this] { loop.run(); });
  }
  // Like a killed process: the listening socket and every connection close at
  // once, requests in flight get no answer.
  void kill() {
    std::promise<void> done;
    loop.post([&] {
      srv->stop();
      done.set_value();
    });
    done.get_future().wait();
  }
  ~ThreadWorker() {
    loop.post([this] { loop.stop(); });
    thread.join();
    srv->stop();
  }
};

}  // namespace

TEST_CASE("router: 4,000 concurrent requests through one router", "[router_inproc]") {
  ThreadWorker worker(0.3);
  RouterOptions o;
  o.policy = "least_load";
  o.workers = {worker.url};
  Router router(o);
  router.start();
  EventLoop loop;
  UpstreamPool::Options po;
  po.max_per_host = 100000;  // every request on its own connection, all at once
  UpstreamPool clients(loop, po);
  const int n = 4000;
  int ok = 0, bad = 0;
  for (int i = 0; i < n; ++i) {
    HttpRequest rq;
    rq.method = "POST";
    rq.url = router.url() + "/generate";
    rq.body = "{\"text\":\"req " + std::to_string(i) + "\"}";
    rq.timeout_s = 60;
    const std::string want = rq.body;
    clients.submit(std::move(rq), [&, want](HttpResult&& r) {
      (r.ok && r.response.status == 200 && r.response.body == want ? ok : bad)++;
    });
  }
  REQUIRE(rl::test::run_until(loop, [&] { return ok + bad == n; }, 120));
  CHECK(ok == n);
  CHECK(worker.max_in_flight > 1000);  // they really were concurrent
  auto ws = router.workers();
  REQUIRE(ws.size() == 1);
  CHECK(ws[0].requests == static_cast<uint64_t>(n));
  CHECK(ws[0].load == 0);
  router.stop();
}

TEST_CASE("router: a worker killed mid-load; requests retried or failed cleanly", "[router_inproc]") {
  ThreadWorker w1(0.2), w2(0.2);
  RouterOptions o;
  o.policy = "round_robin";
  o.workers = {w1.url, w2.url};
  o.health_interval_s = 0.2;
  o.health_timeout_s = 0.2;
  Router router(o);
  router.start();
  EventLoop loop;
  // Both probed first: a pending worker only gets traffic while no probed one can take it.
  REQUIRE(rl::test::run_until(loop, [&] {
    auto ws = router.workers();
    return ws.size() == 2 && ws[0].healthy && ws[1].healthy;
  }, 10));
  UpstreamPool::Options po;
  po.max_per_host = 100000;
  UpstreamPool clients(loop, po);
  const int n = 400;
  int ok = 0, gateway = 0, other = 0;
  for (int i = 0; i < n; ++i) {
    HttpRequest rq;
    rq.method = "POST";
    rq.url = router.url() + "/generate";
    rq.body = "{\"text\":\"" + std::to_string(i) + "\"}";
    rq.timeout_s = 30;
    clients.submit(std::move(rq), [&](HttpResult&& r) {
      if (r.ok && r.response.status == 200) ok++;
      else if (r.ok && r.response.status == 502) gateway++;
      else other++;
    });
  }
  rl::test::run_until(loop, [&] { return w1.max_in_flight > 50; }, 10);
  w1.kill();
  REQUIRE(rl::test::run_until(loop, [&] { return ok + gateway + other == n; }, 60));
  CHECK(other == 0);       // every request got an answer: no hang, no dropped client
  CHECK(ok >= n / 2);      // w2's share, plus w1's refused after its death, retried onto w2 (those it held: 502)
  // w1 is marked unhealthy, later requests all go to w2.
  REQUIRE(rl::test::run_until(loop, [&] { return !router.workers()[0].healthy; }, 10));
  int later = 0;
  for (int i = 0; i < 10; ++i) {
    HttpRequest rq;
    rq.method = "POST";
    rq.url = router.url() + "/generate";
    rq.body = "{}";
    clients.submit(std::move(rq), [&](HttpResult&& r) { later += r.ok && r.response.status == 200; });
  }
  REQUIRE(rl::test::run_until(loop, [&] { return later == 10; }, 20));
  router.stop();
}

TEST_CASE("router: control API from another thread; errors", "[router_inproc]") {
  ThreadWorker w1(0), w2(0);
  RouterOptions o;
  o.policy = "round_robin";
  Router router(o);
  router.start();
  CHECK(router.add_worker(w1.url).empty());
  CHECK_THAT(router.add_worker(w1.url + "/"), Catch::Contains("already registered"));
  CHECK_THAT(router.add_worker("ftp://nope"), Catch::Contains("bad worker URL"));
  std::thread other([&] { CHECK(router.add_worker(w2.url).empty()); });
  other.join();
  CHECK(router.workers().size() == 2);
  CHECK(router.remove_worker("1"));
  CHECK_FALSE(router.remove_worker("1"));
  CHECK(router.remove_worker(w2.url));
  CHECK(router.workers().empty());
  CHECK_THAT(router.metrics_text(), Catch::Contains("# TYPE rlhost_router_requests_total counter"));
  router.stop();
  router.stop();  // idempotent

  RouterOptions bad;
  bad.policy = "fastest";
  CHECK_THROWS_WITH(Router(bad), Catch::Contains("unknown policy 'fastest'"));
  RouterOptions neg;
  neg.health_interval_s = 0;
  CHECK_THROWS_WITH(Router(neg), Catch::Contains("health_interval must be > 0"));
}

TEST_CASE("router: worker changes need the admin token; new workers are pending until probed", "[router_inproc]") {
  ThreadWorker w1(0);
  RouterOptions o;
  o.policy = "round_robin";
  o.admin_token = "router-test-token-0123456789";
  o.health_interval_s = 0.1;
  Router router(o);
  router.start();
  EventLoop loop;
  UpstreamPool clients(loop, {});
  auto call = [&](const std::string& method, const std::string& target, const std::string& auth,
                  const std::string& body = "") {
    HttpRequest rq;
    rq.method = method;
    rq.url = router.url() + target;
    rq.body = body;
    if (!auth.empty()) rq.headers.emplace_back("Authorization", auth);
    std::optional<HttpResult> got;
    clients.submit(std::move(rq), [&](HttpResult&& r) { got = std::move(r); });
    REQUIRE(rl::test::run_until(loop, [&] { return got.has_value(); }, 10));
    REQUIRE(got->ok);
    return std::make_pair(got->response.status, got->response.body);
  };
  const std::string good = "Bearer " + o.admin_token;
  const std::string add = "/add_worker?url=" + w1.url;
  for (const std::string& auth : {std::string(), std::string("Bearer wrong"), std::string("Basic x"),
                                  "Bearer " + o.admin_token + "x", o.admin_token}) {
    CHECK(call("POST", add, auth).first == 401);
    CHECK(call("POST", "/workers", auth, "{\"url\": \"" + w1.url + "\"}").first == 401);
    CHECK(call("POST", "/flush_cache", auth).first == 401);
  }
  CHECK(router.workers().empty());  // nothing got through
  CHECK(call("GET", "/workers", "").first == 200);  // reading stays open
  CHECK(call("GET", "/health", "").first == 200);

  for (const char* bad : {"file:///etc/passwd", "http://169.254.169.254", "gopher://127.0.0.1:70"}) {
    auto [st, body] = call("POST", std::string("/add_worker?url=") + bad, good);
    CHECK(st == 400);
    CHECK_THAT(body, Catch::Contains("bad worker URL"));
  }
  auto [st, body] = call("POST", "/workers", good, "{\"url\": \"" + w1.url + "\"}");
  REQUIRE(st == 201);
  CHECK_THAT(body, Catch::Contains("\"status\":\"pending\"") && Catch::Contains("\"is_healthy\":false"));
  REQUIRE(rl::test::run_until(loop, [&] { return router.workers().at(0).status == "healthy"; }, 10));
  CHECK(router.workers().at(0).healthy);
  CHECK(call("DELETE", "/workers/1", "").first == 401);
  CHECK(call("POST", "/remove_worker?url=" + w1.url, "").first == 401);
  CHECK(router.workers().size() == 1);
  CHECK(call("POST", "/remove_worker?url=" + w1.url, good).first == 200);
  CHECK(router.workers().empty());
  router.stop();
}
