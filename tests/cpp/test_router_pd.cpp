// Prefill/decode disaggregation in the router: the body functions (pd_body.hpp) on
// their own, then a Router in PD mode in-process over real HTTP workers on another
// thread that answer as SGLang's prefill and decode servers do (the bootstrap fields
// recorded, meta_info with input log-probs and pd_* timings).
#include <catch2/catch.hpp>
#include <atomic>
#include <functional>
#include <future>
#include <mutex>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "net/event_server.hpp"
#include "net/upstream.hpp"
#include "router/pd_body.hpp"
#include "router/router.hpp"
#include "router/worker_registry.hpp"
#include "test_support.hpp"

using nlohmann::json;
using rl::EventLoop;
using rl::net::EventServer;
using rl::net::HttpRequest;
using rl::net::HttpResult;
using rl::net::Responder;
using rl::net::ServerRequest;
using rl::net::UpstreamPool;
using rl::router::Router;
using rl::router::RouterOptions;
using rl::router::WorkerType;
namespace pd = rl::router::pd;

TEST_CASE("pd: batch size, bootstrap host, rooms", "[router_pd]") {
  CHECK(pd::batch_size(json{{"text", "a"}}) == 0);
  CHECK(pd::batch_size(json{{"text", {"a", "b", "c"}}}) == 3);
  CHECK(pd::batch_size(json{{"input_ids", {1, 2, 3}}}) == 0);
  CHECK(pd::batch_size(json{{"input_ids", {{1, 2}, {3}}}}) == 2);
  CHECK(pd::batch_size(json{{"prompt", {1, 2}}}) == 0);
  CHECK(pd::batch_size(json{{"prompt", {"x", "y"}}}) == 2);
  CHECK(pd::url_host("http://127.0.0.1:30001") == "127.0.0.1");
  CHECK(pd::url_host("https://node-3") == "node-3");
  CHECK(pd::url_host("http://[::1]:8000") == "::1");

  std::mt19937_64 rng(7);
  json one = {{"text", "hi"}};
  pd::add_bootstrap(one, "127.0.0.1", 8998, rng);
  CHECK(one["bootstrap_host"] == "127.0.0.1");
  CHECK(one["bootstrap_port"] == 8998);
  REQUIRE(one["bootstrap_room"].is_number_unsigned());
  CHECK(one["bootstrap_room"].get<uint64_t>() < (1ull << 63));

  json batch = {{"text", {"a", "b", "c"}}};
  pd::add_bootstrap(batch, "h", 0, rng);  // port unknown: null, as sglang-router sends None
  REQUIRE(batch["bootstrap_room"].size() == 3);
  CHECK(batch["bootstrap_host"] == json({"h", "h", "h"}));
  CHECK(batch["bootstrap_port"] == json({nullptr, nullptr, nullptr}));
  std::set<uint64_t> rooms;
  for (auto& r : batch["bootstrap_room"]) rooms.insert(r.get<uint64_t>());
  CHECK(rooms.size() == 3);  // one room per item
  // Rooms spread over [0, 2^63): the top bit below 63 is set about half the time.
  int high = 0;
  for (int i = 0; i < 1000; ++i) high += (pd::new_room(rng) >> 62) & 1;
  CHECK(high > 400);
  CHECK(high < 600);

  CHECK(pd::body_routing_key(json{{"routing_key", "s1"}}) == "s1");
  CHECK(pd::body_routing_key(json{{"session_params", {{"id", "abc"}}}}) == "abc");
  CHECK(pd::body_routing_key(json{{"session_params", {{"id", 42}}}}) == "42");
  CHECK(pd::body_routing_key(json{{"text", "x"}}).empty());
}

TEST_CASE("pd: merging the prefill's answer into the decode's", "[router_pd]") {
  const json prefill = {{"text", "p"},
                        {"meta_info",
                         {{"input_token_logprobs", {{nullptr, 1, nullptr}, {-0.5, 2, nullptr}}},
                          {"input_top_logprobs", {nullptr, {{-0.1, 7, nullptr}}}},
                          {"pd_prefill_forward_ms", 3.25},
                          {"pd_transfer_bytes", 4096},
                          {"prompt_tokens", 2}}}};
  const json decode = {{"text", " out"},
                       {"output_ids", {5, 6}},
                       {"meta_info",
                        {{"input_token_logprobs", {{-0.25, 3, nullptr}}},
                         {"output_token_logprobs", {{-0.75, 5, nullptr}, {-1.0, 6, nullptr}}},
                         {"prompt_tokens", 2}}}};
  SECTION("return_logprob: prefill's input log-probs first, then decode's; pd_* keys copied") {
    json d = decode;
    pd::merge_response(json{{"return_logprob", true}}, prefill, d);
    CHECK(d["meta_info"]["input_token_logprobs"] ==
          json({{nullptr, 1, nullptr}, {-0.5, 2, nullptr}, {-0.25, 3, nullptr}}));
    CHECK(d["meta_info"]["input_top_logprobs"] == json({nullptr, {{-0.1, 7, nullptr}}}));
    CHECK(d["meta_info"]["pd_prefill_forward_ms"] == 3.25);
    CHECK(d["meta_info"]["pd_transfer_bytes"] == 4096);
    CHECK(d["meta_info"]["output_token_logprobs"] == decode["meta_info"]["output_token_logprobs"]);
    CHECK(d["output_ids"] == decode["output_ids"]);
    CHECK(d["text"] == " out");  // the decode's answer, never the prefill's
  }
  SECTION("no return_logprob: log-probs untouched, pd_* keys still copied") {
    json d = decode;
    pd::merge_response(json{{"text", "x"}}, prefill, d);
    CHECK(d["meta_info"]["input_token_logprobs"] == decode["meta_info"]["input_token_logprobs"]);
    CHECK_FALSE(d["meta_info"].contains("input_top_logprobs"));
    CHECK(d["meta_info"]["pd_prefill_forward_ms"] == 3.25);
  }
  SECTION("a batch merges item by item, return_logprob per item") {
    json p2 = prefill;
    p2["meta_info"]["input_token_logprobs"] = {{nullptr, 9, nullptr}};
    json d = json::array({decode, decode});
    pd::merge_response(json{{"return_logprob", {false, true}}}, json::array({prefill, p2}), d);
    CHECK(d[0]["meta_info"]["input_token_logprobs"] == decode["meta_info"]["input_token_logprobs"]);
    CHECK(d[1]["meta_info"]["input_token_logprobs"] == json({{nullptr, 9, nullptr}, {-0.25, 3, nullptr}}));
    CHECK(d[0]["meta_info"]["pd_transfer_bytes"] == 4096);
  }
  SECTION("shapes that are not /generate answers are left alone") {
    json d = json::array({decode});
    pd::merge_response(json{{"return_logprob", true}}, prefill, d);  // batch vs single
    CHECK(d[0] == decode);
    json e = {{"error", "x"}};
    pd::merge_response(json{{"return_logprob", true}}, prefill, e);
    CHECK(e["meta_info"]["input_token_logprobs"].size() == 2);  // an object gets the prefill's
    json s = "text";
    pd::merge_response(json{{"return_logprob", true}}, prefill, s);
    CHECK(s == "text");
  }
}

TEST_CASE("pd: worker registry pools and the soft failure", "[router_pd]") {
  rl::router::WorkerRegistry reg(rl::router::BreakerOptions{2, 1, 5});
  std::string err;
  auto* p = reg.add("http://127.0.0.1:1", err);
  auto* d = reg.add("http://127.0.0.1:2", err);
  p->type = WorkerType::prefill;
  d->type = WorkerType::decode;
  CHECK(reg.available(0, {}, WorkerType::prefill) == std::vector<rl::router::Worker*>{p});
  CHECK(reg.available(0, {}, WorkerType::decode) == std::vector<rl::router::Worker*>{d});
  CHECK(reg.available(0).size() == 2);
  for (int i = 0; i < 10; ++i) reg.on_soft_failure(*d, "HTTP 500");
  CHECK(d->circuit == rl::router::Circuit::closed);
  CHECK(d->failures == 10);
  reg.on_failure(*d, 0, "refused");
  reg.on_failure(*d, 0, "refused");
  CHECK(d->circuit == rl::router::Circuit::open);
  const std::string why = reg.why_unavailable(1, WorkerType::decode);
  CHECK(why.find("decode") != std::string::npos);
  CHECK(why.find("circuit open") != std::string::npos);
  rl::router::WorkerRegistry empty;
  CHECK(empty.why_unavailable(0, WorkerType::prefill).find("--prefill URL") != std::string::npos);
  WorkerType t;
  CHECK(rl::router::parse_worker_type("decode", t));
  CHECK(t == WorkerType::decode);
  CHECK_FALSE(rl::router::parse_worker_type("Decode", t));
}

TEST_CASE("pd: option errors name the flag", "[router_pd]") {
  auto err = [](RouterOptions o) {
    try {
      Router r(std::move(o));
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  RouterOptions o;
  o.prefill = {{"http://127.0.0.1:1", 0}};
  CHECK(err(o).find("--prefill needs PD mode") != std::string::npos);
  o = {};
  o.decode = {"http://127.0.0.1:1"};
  CHECK(err(o).find("--pd-disaggregation") != std::string::npos);
  o = {};
  o.pd_disaggregation = true;
  o.workers = {"http://127.0.0.1:1"};
  CHECK(err(o).find("do not mix") != std::string::npos);
  o = {};
  o.pd_disaggregation = true;
  o.prefill = {{"http://127.0.0.1:1", 70000}};
  CHECK(err(o).find("bootstrap port must be 1-65535") != std::string::npos);
  o = {};
  o.pd_disaggregation = true;
  o.decode_policy = "fastest";
  CHECK(err(o).find("unknown policy 'fastest'") != std::string::npos);
  // Control API: types must fit the mode.
  RouterOptions plain;
  Router r(plain);
  CHECK(r.add_worker("http://127.0.0.1:5", nullptr, WorkerType::prefill).find("PD mode") != std::string::npos);
  RouterOptions pdo;
  pdo.pd_disaggregation = true;
  Router rp(pdo);
  CHECK(rp.add_worker("http://127.0.0.1:5").find("prefill or a decode") != std::string::npos);
  CHECK(rp.add_worker("http://127.0.0.1:5", nullptr, WorkerType::decode, 8998).find("prefill workers only") !=
        std::string::npos);
  rl::router::WorkerInfo info;
  CHECK(rp.add_worker("http://127.0.0.1:5", &info, WorkerType::prefill, 8998).empty());
  CHECK(info.type == "prefill");
  CHECK(info.bootstrap_port == 8998);
}

namespace {

// One HTTP worker on its own thread; `handler` answers every request but /health.
struct StubWorker {
  using Handler = std::function<void(ServerRequest&, std::shared_ptr<Responder>, EventLoop&)>;
  EventLoop loop;
  std::unique_ptr<EventServer> srv;
  std::thread thread;
  std::string url;
  std::mutex mu;
  std::vector<json> bodies;  // every /generate body, as received

  explicit StubWorker(Handler handler) {
    srv = std::make_unique<EventServer>(loop, EventServer::Options{}, [this, handler](ServerRequest& req, std::shared_ptr<Responder> res) {
      if (req.path == "/health") return res->send(200, {}, "ok");
      if (req.path == "/generate") {
        std::lock_guard<std::mutex> l(mu);
        bodies.push_back(json::parse(req.body));
      }
      handler(req, std::move(res), loop);
    });
    srv->start();
    url = srv->url();
    thread = std::thread([this] { loop.run(); });
  }
  void kill() {  // like a killed process: the port refuses connections from now on
    std::promise<void> done;
    loop.post([&] {
      srv->stop();
      done.set_value();
    });
    done.get_future().wait();
  }
  std::vector<json> seen() {
    std::lock_guard<std::mutex> l(mu);
    return bodies;
  }
  ~StubWorker() {
    loop.post([this] { loop.stop(); });
    thread.join();
    srv->stop();
  }
};

// As SGLang's prefill server: /server_info names the bootstrap port; /generate
// answers with input log-probs and pd_prefill_* timings (per item for a batch).
// `fail`: that status instead.
StubWorker::Handler prefill_handler(int bootstrap_port, std::atomic<int>* fail) {
  return [bootstrap_port, fail](ServerRequest& req, std::shared_ptr<Responder> res, EventLoop& loop) {
    if (req.path == "/server_info")
      return res->send_json(200, json({{"disaggregation_mode", "prefill"}, {"disaggregation_bootstrap_port", bootstrap_port}}).dump());
    const json b = json::parse(req.body);
    if (fail && *fail) {
      const int st = *fail;
      loop.call_later(b.value("prefill_delay", 0.0), [res, st] {
        res->send_json(st, R"({"error":{"message":"KV transfer failed"}})");
      });
      return;
    }
    auto one = [](const json& room) {
      return json{{"text", "P"}, {"meta_info", {{"input_token_logprobs", {{nullptr, 1, nullptr}, {-0.5, 2, nullptr}}},
                                                {"pd_prefill_forward_ms", 1.5}, {"room", room}}}};
    };
    if (b["bootstrap_room"].is_array()) {
      json out = json::array();
      for (auto& r : b["bootstrap_room"]) out.push_back(one(r));
      return res->send_json(200, out.dump());
    }
    res->send_json(200, one(b["bootstrap_room"]).dump());
  };
}

// As SGLang's decode server: the generation (streamed as SSE when asked).
StubWorker::Handler decode_handler(std::atomic<int>* fail) {
  return [fail](ServerRequest& req, std::shared_ptr<Responder> res, EventLoop& loop) {
    if (fail && *fail) return res->send_json(*fail, R"({"error":{"message":"decode out of memory"}})");
    const json b = json::parse(req.body);
    if (b.value("stream", false)) {
      loop.call_later(b.value("decode_delay", 0.0), [res] {
        res->start(200, {{"Content-Type", "text/event-stream"}});
        res->write("data: {\"text\":\"D1\"}\n\n");
        res->write("data: {\"text\":\"D1D2\"}\n\n");
        res->write("data: [DONE]\n\n");
        res->end();
      });
      return;
    }
    auto one = [] {
      return json{{"text", "D"}, {"output_ids", {5}},
                  {"meta_info", {{"input_token_logprobs", {{-0.25, 3, nullptr}}},
                                 {"output_token_logprobs", {{-0.75, 5, nullptr}}}}}};
    };
    if (b["bootstrap_room"].is_array()) {
      json out = json::array();
      for (size_t i = 0; i < b["bootstrap_room"].size(); ++i) out.push_back(one());
      return res->send_json(200, out.dump());
    }
    res->send_json(200, one().dump());
  };
}

struct Client {
  EventLoop loop;
  UpstreamPool pool{loop, UpstreamPool::Options{}};
  HttpResult post(const std::string& url, const json& body, rl::net::HeaderList headers = {}) {
    HttpRequest rq;
    rq.method = "POST";
    rq.url = url;
    rq.body = body.dump();
    rq.headers = std::move(headers);
    rq.headers.emplace_back("content-type", "application/json");
    rq.timeout_s = 30;
    std::optional<HttpResult> out;
    pool.submit(std::move(rq), [&](HttpResult&& r) { out = std::move(r); });
    REQUIRE(rl::test::run_until(loop, [&] { return out.has_value(); }, 30));
    return std::move(*out);
  }
};

bool pools_ready(Router& r, size_t n) {
  auto ws = r.workers();
  if (ws.size() != n) return false;
  for (auto& w : ws)
    if (!w.healthy || (w.type == "prefill" && w.bootstrap_port == 0)) return false;
  return true;
}

}  // namespace

TEST_CASE("pd: a router in PD mode over prefill and decode workers", "[router_pd]") {
  std::atomic<int> p_fail{0}, d_fail{0};
  StubWorker p1(prefill_handler(18998, &p_fail)), p2(prefill_handler(18999, &p_fail));
  StubWorker d1(decode_handler(&d_fail)), d2(decode_handler(&d_fail));
  RouterOptions o;
  o.pd_disaggregation = true;
  o.policy = "round_robin";
  o.prefill = {{p1.url, 0}, {p2.url, 7777}};  // p1's port asked from its /server_info; p2's given
  o.decode = {d1.url, d2.url};
  o.health_interval_s = 0.2;
  o.health_timeout_s = 0.5;
  o.breaker.failure_threshold = 2;
  o.max_retries = 0;
  Router router(o);
  router.start();
  Client c;
  REQUIRE(rl::test::run_until(c.loop, [&] { return pools_ready(router, 4); }, 10));
  for (auto& w : router.workers()) {
    if (w.url == p1.url) CHECK(w.bootstrap_port == 18998);
    if (w.url == p2.url) CHECK(w.bootstrap_port == 7777);
  }

  SECTION("the same body with the bootstrap fields goes to both; the answer is decode's, merged") {
    for (int i = 0; i < 4; ++i) {
      HttpResult r = c.post(router.url() + "/generate", {{"text", "hello"}, {"return_logprob", true}});
      REQUIRE(r.ok);
      REQUIRE(r.response.status == 200);
      const json j = json::parse(r.response.body);
      CHECK(j["text"] == "D");
      CHECK(j["meta_info"]["input_token_logprobs"] == json({{nullptr, 1, nullptr}, {-0.5, 2, nullptr}, {-0.25, 3, nullptr}}));
      CHECK(j["meta_info"]["pd_prefill_forward_ms"] == 1.5);
      CHECK_FALSE(j["meta_info"].contains("room"));  // only pd_* keys come over
    }
    auto ps = p1.seen(), ps2 = p2.seen(), ds = d1.seen(), ds2 = d2.seen();
    CHECK(ps.size() == 2);  // round robin in each pool
    CHECK(ps2.size() == 2);
    CHECK(ds.size() == 2);
    CHECK(ds2.size() == 2);
    ps.insert(ps.end(), ps2.begin(), ps2.end());
    ds.insert(ds.end(), ds2.begin(), ds2.end());
    std::set<std::string> pb, db;
    for (auto& b : ps) {
      CHECK(b["bootstrap_host"] == "127.0.0.1");
      CHECK((b["bootstrap_port"] == 18998 || b["bootstrap_port"] == 7777));
      pb.insert(b.dump());
    }
    for (auto& b : ds) db.insert(b.dump());
    CHECK(pb == db);  // byte for byte the same bodies, room included
  }

  SECTION("a batch: lists of bootstrap fields, merged item by item") {
    HttpResult r = c.post(router.url() + "/generate", {{"text", {"a", "b", "c"}}, {"return_logprob", true}});
    REQUIRE(r.response.status == 200);
    const json j = json::parse(r.response.body);
    REQUIRE(j.size() == 3);
    for (auto& item : j) CHECK(item["meta_info"]["input_token_logprobs"].size() == 3);
    const json sent = p1.seen().empty() ? p2.seen()[0] : p1.seen()[0];
    CHECK(sent["bootstrap_room"].size() == 3);
    CHECK(sent["bootstrap_host"].size() == 3);
  }

  SECTION("streaming relays decode's events") {
    HttpResult r = c.post(router.url() + "/generate", {{"text", "s"}, {"stream", true}});
    REQUIRE(r.response.status == 200);
    CHECK(r.response.body == "data: {\"text\":\"D1\"}\n\ndata: {\"text\":\"D1D2\"}\n\ndata: [DONE]\n\n");
  }

  SECTION("a routing key keeps its pair") {
    std::set<std::string> pairs;
    for (int i = 0; i < 6; ++i) {
      HttpResult r = c.post(router.url() + "/generate", {{"text", "t" + std::to_string(i)}, {"routing_key", "sess-1"}});
      REQUIRE(r.response.status == 200);
      std::string pair;
      for (auto& [k, v] : r.response.headers)
        if (k == "x-rlhost-worker" || k == "x-rlhost-prefill-worker") pair += v + " ";
      pairs.insert(pair);
    }
    CHECK(pairs.size() == 1);
  }

  SECTION("a failing side fails the request, named; 5xx never opens a circuit") {
    p_fail = 500;
    for (int i = 0; i < 4; ++i) {
      HttpResult r = c.post(router.url() + "/generate", {{"text", "x"}});
      CHECK(r.response.status == 500);
      CHECK(r.response.body.find("prefill worker http://127.0.0.1:") != std::string::npos);
      CHECK(r.response.body.find("KV transfer failed") != std::string::npos);
    }
    p_fail = 0;
    d_fail = 503;
    for (int i = 0; i < 4; ++i) {
      HttpResult r = c.post(router.url() + "/generate", {{"text", "x"}});
      CHECK(r.response.status == 503);
      CHECK(r.response.body.find("decode worker") != std::string::npos);
    }
    p_fail = 400;  // both fail: the prefill's error
    HttpResult both = c.post(router.url() + "/generate", {{"text", "x"}});
    CHECK(both.response.status == 400);
    CHECK(both.response.body.find("prefill worker") != std::string::npos);
    // The decode failed first: the prefill's error is awaited for a moment (1 s), no longer.
    p_fail = 500;
    const double t0 = EventLoop::now();
    HttpResult slow = c.post(router.url() + "/generate", {{"text", "x"}, {"prefill_delay", 5.0}});
    CHECK(slow.response.status == 503);
    CHECK(slow.response.body.find("decode worker") != std::string::npos);
    CHECK(EventLoop::now() - t0 < 3.0);
    HttpResult quick = c.post(router.url() + "/generate", {{"text", "x"}, {"prefill_delay", 0.2}});
    CHECK(quick.response.status == 500);  // came within the moment: the prefill's
    CHECK(quick.response.body.find("prefill worker") != std::string::npos);
    // Streaming: a prefill that fails before the decode's stream starts is the answer.
    d_fail = 0;
    HttpResult st = c.post(router.url() + "/generate", {{"text", "x"}, {"stream", true}, {"decode_delay", 0.5}});
    CHECK(st.response.status == 500);
    CHECK(st.response.body.find("prefill worker") != std::string::npos);
    p_fail = 0;
    d_fail = 0;
    for (auto& w : router.workers()) CHECK(w.circuit == "closed");
    HttpResult r = c.post(router.url() + "/generate", {{"text", "x"}});
    CHECK(r.response.status == 200);
    const std::string m = router.metrics_text();
    CHECK(m.find("rlhost_router_pd_errors_total{role=\"prefill\"") != std::string::npos);
    CHECK(m.find("rlhost_router_workers{worker_type=\"decode\"} 2") != std::string::npos);
  }

  SECTION("no decode worker: 503 naming the pool and how to add one") {
    REQUIRE(router.remove_worker(d1.url));
    REQUIRE(router.remove_worker(d2.url));
    HttpResult r = c.post(router.url() + "/generate", {{"text", "x"}});
    CHECK(r.response.status == 503);
    CHECK(r.response.body.find("no decode worker") != std::string::npos);
    CHECK(r.response.body.find("--decode URL") != std::string::npos);
  }

  SECTION("a body that is not a JSON object: 400") {
    HttpResult r = c.post(router.url() + "/generate", json::array({1, 2}));
    CHECK(r.response.status == 400);
    CHECK(r.response.body.find("JSON object") != std::string::npos);
  }
  router.stop();
}

TEST_CASE("pd: a refused prefill before sending picks another pair", "[router_pd]") {
  StubWorker p1(prefill_handler(18998, nullptr)), doomed(prefill_handler(18997, nullptr)), d1(decode_handler(nullptr));
  RouterOptions o;
  o.pd_disaggregation = true;
  o.policy = "round_robin";
  o.prefill = {{doomed.url, 9000}, {p1.url, 18998}};
  o.decode = {d1.url};
  o.health_interval_s = 30;  // the killed one stays healthy until a refused request has it probed
  Router router(o);
  router.start();
  Client c;
  REQUIRE(rl::test::run_until(c.loop, [&] { return pools_ready(router, 3); }, 10));
  doomed.kill();
  int ok = 0;
  for (int i = 0; i < 4; ++i) {
    HttpResult r = c.post(router.url() + "/generate", {{"text", "x"}});
    ok += r.response.status == 200 ? 1 : 0;
  }
  CHECK(ok == 4);
  CHECK(doomed.seen().empty());
  CHECK(router.metrics_text().find("rlhost_router_retries_total{worker=\"" + doomed.url + "\"}") != std::string::npos);
  router.stop();
}

TEST_CASE("pd: cache_aware keeps a prefix on one prefill and one decode worker", "[router_pd]") {
  StubWorker p1(prefill_handler(18998, nullptr)), p2(prefill_handler(18999, nullptr));
  StubWorker d1(decode_handler(nullptr)), d2(decode_handler(nullptr));
  RouterOptions o;
  o.pd_disaggregation = true;
  o.policy = "cache_aware";
  o.prefill = {{p1.url, 0}, {p2.url, 0}};
  o.decode = {d1.url, d2.url};
  Router router(o);
  router.start();
  Client c;
  REQUIRE(rl::test::run_until(c.loop, [&] { return pools_ready(router, 4); }, 10));
  auto pair_of = [&](const std::string& text) {
    HttpResult r = c.post(router.url() + "/generate", {{"text", text}});
    REQUIRE(r.response.status == 200);
    std::string pair;
    for (auto& [k, v] : r.response.headers)
      if (k == "x-rlhost-worker" || k == "x-rlhost-prefill-worker") pair += v + " ";
    return pair;
  };
  const std::string a = "Once upon a time there was a router that", b = "A completely different prompt about numbers";
  const std::string pa = pair_of(a + " 1"), pb = pair_of(b + " 1");
  CHECK(pa != pb);  // two prefixes spread over both pools
  for (int i = 2; i < 6; ++i) {
    CHECK(pair_of(a + " " + std::to_string(i)) == pa);  // a turn that extends the prefix: the same pair
    CHECK(pair_of(b + " " + std::to_string(i)) == pb);
  }
  router.stop();
}
