// rl::net::HttpServer: sync routes, async (loop-thread) handlers, static files,
// loopback-only binding and a prompt stop(). Clients here are httplib's own
// blocking client on helper threads; the loop runs on the test thread.
#include <catch2/catch.hpp>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <future>
#include <thread>

#include "base/errors.hpp"
#include "base/event_loop.hpp"
#include "base/live_objects.hpp"
#include "net/http_server.hpp"
#include "test_support.hpp"

using namespace rl;
using namespace rl::net;
using rl::test::run_until;
namespace fs = std::filesystem;

namespace {

fs::path temp_dir(const std::string& name) {
  auto p = fs::temp_directory_path() / ("rlhost_test_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(p);
  fs::create_directories(p);
  return p;
}

void write_file(const fs::path& p, const std::string& s) {
  std::ofstream f(p, std::ios::binary);
  f << s;
}

}  // namespace

TEST_CASE("http server: sync routes on an ephemeral loopback port", "[http_server]") {
  HttpServer srv;
  srv.route("GET", "/hello", [](const httplib::Request&, httplib::Response& res) {
    res.set_content("hi", "text/plain");
  });
  srv.route("POST", "/echo", [](const httplib::Request& req, httplib::Response& res) {
    res.status = 201;
    res.set_content(req.body, "application/octet-stream");
  });
  srv.route("GET", "/throw", [](const httplib::Request&, httplib::Response&) { throw std::runtime_error("boom"); });
  srv.start();
  REQUIRE(srv.port() > 0);
  CHECK(srv.url() == "http://127.0.0.1:" + std::to_string(srv.port()));

  httplib::Client cli("127.0.0.1", srv.port());
  auto r = cli.Get("/hello");
  REQUIRE(r);
  CHECK(r->status == 200);
  CHECK(r->body == "hi");
  auto p = cli.Post("/echo", std::string("a\0b", 3), "application/octet-stream");
  REQUIRE(p);
  CHECK(p->status == 201);
  CHECK(p->body == std::string("a\0b", 3));
  auto missing = cli.Get("/nope");
  REQUIRE(missing);
  CHECK(missing->status == 404);
  auto thrown = cli.Get("/throw");
  REQUIRE(thrown);
  CHECK(thrown->status == 500);
  srv.stop();
  srv.stop();  // idempotent
  CHECK_FALSE(cli.Get("/hello"));
}

TEST_CASE("http server: refuses non-loopback hosts unless allowed", "[http_server]") {
  CHECK(HttpServer::is_loopback("127.0.0.1"));
  CHECK(HttpServer::is_loopback("127.3.2.1"));
  CHECK(HttpServer::is_loopback("::1"));
  CHECK(HttpServer::is_loopback("localhost"));
  CHECK_FALSE(HttpServer::is_loopback("0.0.0.0"));
  CHECK_FALSE(HttpServer::is_loopback("10.1.2.3"));
  CHECK_FALSE(HttpServer::is_loopback("example.com"));

  HttpServerOptions o;
  o.host = "0.0.0.0";
  HttpServer srv(o);
  try {
    srv.start();
    FAIL("expected a refusal");
  } catch (const Error& e) {
    const std::string msg = e.what();
    CHECK(msg.find("refusing to bind '0.0.0.0'") != std::string::npos);
    CHECK(msg.find("allow_remote") != std::string::npos);
  }
}

TEST_CASE("http server: a port in use is a clear error", "[http_server]") {
  HttpServer a;
  a.start();
  HttpServerOptions o;
  o.port = a.port();
  HttpServer b(o);
  try {
    b.start();
    FAIL("expected bind failure");
  } catch (const Error& e) {
    CHECK(std::string(e.what()).find("cannot listen on 127.0.0.1:" + std::to_string(a.port())) != std::string::npos);
  }
}

TEST_CASE("http server: static files with MIME types; no escape from the root", "[http_server]") {
  const auto dir = temp_dir("static");
  write_file(dir / "index.html", "<h1>viewer</h1>");
  write_file(dir / "app.js", "console.log(1)");
  write_file(dir / "style.css", "body{}");
  write_file(dir / "data.json", "{\"a\":1}");
  write_file(dir / "icon.svg", "<svg/>");
  write_file(dir / "trace.jsonl", "{}\n");
  fs::create_directories(dir / "sub");
  write_file(dir / "sub" / "index.html", "sub");
  write_file(dir.parent_path() / "rlhost_secret.txt", "secret");
  fs::create_symlink(dir.parent_path() / "rlhost_secret.txt", dir / "link.txt");  // a way out

  HttpServer srv;
  srv.serve_static(dir.string());
  CHECK_THROWS_AS(HttpServer().serve_static((dir / "missing").string()), Error);
  srv.start();
  httplib::Client cli("127.0.0.1", srv.port());
  struct Case { const char* path; const char* type; const char* body; };
  for (auto c : {Case{"/index.html", "text/html; charset=utf-8", "<h1>viewer</h1>"},
                 Case{"/", "text/html; charset=utf-8", "<h1>viewer</h1>"},
                 Case{"/app.js", "text/javascript; charset=utf-8", "console.log(1)"},
                 Case{"/style.css", "text/css; charset=utf-8", "body{}"},
                 Case{"/data.json", "application/json", "{\"a\":1}"},
                 Case{"/icon.svg", "image/svg+xml", "<svg/>"},
                 Case{"/trace.jsonl", "application/x-ndjson", "{}\n"},
                 Case{"/sub/", "text/html; charset=utf-8", "sub"}}) {
    INFO(c.path);
    auto r = cli.Get(c.path);
    REQUIRE(r);
    CHECK(r->status == 200);
    CHECK(r->get_header_value("Content-Type") == c.type);
    CHECK(r->body == c.body);
  }
  auto esc = cli.Get("/../rlhost_secret.txt");
  REQUIRE(esc);
  CHECK(esc->status != 200);
  CHECK(esc->body.find("secret") == std::string::npos);
  auto link = cli.Get("/link.txt");
  REQUIRE(link);
  CHECK(link->status == 404);
  CHECK(link->body.find("secret") == std::string::npos);
  srv.stop();
  fs::remove_all(dir);
  fs::remove(dir.parent_path() / "rlhost_secret.txt");
}

TEST_CASE("http server: async handlers run on the loop thread", "[http_server]") {
  EventLoop loop;
  const auto loop_thread = std::this_thread::get_id();
  const int64_t base = live_objects();
  HttpServer srv;
  int handled = 0;
  bool on_loop = true;
  srv.serve_async(loop, [&](AsyncExchangePtr ex) {
    on_loop = on_loop && std::this_thread::get_id() == loop_thread;
    ++handled;
    const auto& rq = ex->request();
    AsyncResponse r;
    r.status = rq.path == "/later" ? 202 : 200;
    r.headers = {{"X-Path", rq.path}, {"Content-Type", "application/json"}};
    r.body = "{\"method\":\"" + rq.method + "\",\"query\":\"" + rq.query + "\",\"len\":" +
             std::to_string(rq.body.size()) + "}";
    if (rq.path == "/later") {
      loop.call_later(0.05, [ex, r] { ex->respond(r); });  // answered from a later loop turn
    } else {
      ex->respond(r);
    }
  });
  srv.start();
  auto fut = std::async(std::launch::async, [port = srv.port()] {
    httplib::Client cli("127.0.0.1", port);
    std::vector<std::string> out;
    for (const char* path : {"/a?x=1&y=2", "/later"}) {
      auto r = cli.Post(path, "body!", "text/plain");
      out.push_back(r ? std::to_string(r->status) + " " + r->get_header_value("X-Path") + " " +
                            r->get_header_value("Content-Type") + " " + r->body
                      : "failed");
    }
    return out;
  });
  REQUIRE(run_until(loop, [&] { return fut.wait_for(std::chrono::seconds(0)) == std::future_status::ready; }));
  auto out = fut.get();
  CHECK(out[0] == "200 /a application/json {\"method\":\"POST\",\"query\":\"x=1&y=2\",\"len\":5}");
  CHECK(out[1] == "202 /later application/json {\"method\":\"POST\",\"query\":\"\",\"len\":5}");
  CHECK(handled == 2);
  CHECK(on_loop);
  srv.stop();
  CHECK(live_objects() == base);
}

TEST_CASE("http server: async timeout answers 503 and reports the abandoned exchange", "[http_server]") {
  EventLoop loop;
  const int64_t base = live_objects();
  HttpServerOptions o;
  o.async_timeout_s = 0.2;
  HttpServer srv(o);
  std::vector<AsyncExchangePtr> held;  // never answered
  int abandoned = 0;
  srv.serve_async(loop, [&](AsyncExchangePtr ex) { held.push_back(ex); },
                  [&](AsyncExchangePtr ex) {
                    ++abandoned;
                    CHECK_FALSE(ex->respond({}));  // too late: dropped
                  });
  srv.start();
  auto fut = std::async(std::launch::async, [port = srv.port()] {
    httplib::Client cli("127.0.0.1", port);
    auto r = cli.Get("/slow");
    return r ? r->status : -1;
  });
  REQUIRE(run_until(loop, [&] { return abandoned == 1; }));
  CHECK(fut.get() == 503);
  held.clear();
  srv.stop();
  CHECK(live_objects() == base);
}

TEST_CASE("http server: stop() is prompt with waiting requests and idle keep-alive connections", "[http_server]") {
  EventLoop loop;
  HttpServerOptions o;
  o.keep_alive_timeout_s = 30;  // stop() must not wait for this
  HttpServer srv(o);
  std::vector<AsyncExchangePtr> held;
  srv.serve_async(loop, [&](AsyncExchangePtr ex) {
    if (ex->request().path == "/fast") ex->respond({200, {}, "ok"});
    else held.push_back(ex);
  });
  srv.start();
  // An idle keep-alive connection: one answered request, connection kept open.
  httplib::Client idle("127.0.0.1", srv.port());
  idle.set_keep_alive(true);
  auto first = std::async(std::launch::async, [&] { auto r = idle.Get("/fast"); return r ? r->status : -1; });
  REQUIRE(run_until(loop, [&] { return first.wait_for(std::chrono::seconds(0)) == std::future_status::ready; }));
  CHECK(first.get() == 200);
  // A request whose handler never answers.
  auto waiting = std::async(std::launch::async, [port = srv.port()] {
    httplib::Client cli("127.0.0.1", port);
    auto r = cli.Get("/never");
    if (!r) fprintf(stderr, "client error: %s\n", httplib::to_string(r.error()).c_str());
    return r ? r->status : -1;
  });
  REQUIRE(run_until(loop, [&] { return held.size() == 1; }));
  const double t0 = EventLoop::now();
  srv.stop();
  CHECK(EventLoop::now() - t0 < 10.0);  // a hang check, far above the normal few ms
  CHECK(waiting.get() == 503);
  CHECK_FALSE(held[0]->respond({}));
}
