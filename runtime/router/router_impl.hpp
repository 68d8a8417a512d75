// Router internals shared by router.cpp (lifecycle, workers), routes.cpp (the route
// table and its endpoints), proxy.cpp (forwarding, retries, streaming relay) and health.cpp (probes,
// fan-outs). Not a public header: everything here runs on the router's loop.
#pragma once

#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/event_loop.hpp"
#include "net/event_server.hpp"
#include "net/http_client.hpp"
#include "net/upstream.hpp"
#include "router/metrics.hpp"
#include "router/policies.hpp"
#include "router/router.hpp"
#include "router/worker_registry.hpp"

namespace rl::router {

using Res = std::shared_ptr<net::Responder>;
struct Exchange;    // proxy.cpp: one client request across its attempts
struct PdExchange;  // pd_proxy.cpp: one generation to a prefill and a decode worker

struct Router::Impl {
  explicit Impl(RouterOptions o);

  RouterOptions opts;
  EventLoop loop;
  std::unique_ptr<net::EventServer> server;
  std::unique_ptr<net::HttpClient> client;     // probes, fan-outs, https:// workers
  std::unique_ptr<net::UpstreamPool> upstream; // the proxy's hot path to http:// workers
  WorkerRegistry registry;
  std::unique_ptr<Policy> policy;          // regular workers (and, in PD mode, the info endpoints)
  std::unique_ptr<Policy> prefill_policy;  // PD mode: each pool has its own state (cache_aware's tree)
  std::unique_ptr<Policy> decode_policy;
  RouterMetrics metrics;
  std::thread thread;
  std::thread::id loop_thread;
  bool running = false;
  uint64_t health_timer = 0;
  // proxy.cpp: requests dispatched to a worker (pruned as they end), so that one the
  // worker still holds when it leaves the router is retried on another
  std::vector<std::weak_ptr<Exchange>> exchanges;
  size_t exchanges_prune_at = 64;
  // pd_proxy.cpp: the same for PD generations (failed at once when a side's worker leaves)
  std::vector<std::weak_ptr<PdExchange>> pd_exchanges;
  size_t pd_exchanges_prune_at = 64;
  std::mt19937_64 rng{std::random_device{}()};

  // router.cpp
  std::string add(const std::string& url, WorkerInfo* out, WorkerType type = WorkerType::regular,
                  int bootstrap_port = 0);
  bool remove(const std::string& key);
  std::vector<WorkerInfo> infos();
  void workers_json(nlohmann::json& out);
  void send_error(const Res& res, int status, const std::string& type, const std::string& message);

  // routes.cpp: the route table (path, methods, admin) and one handler per endpoint
  struct Route;
  void handle(net::ServerRequest& req, const Res& res);
  bool admin_authorized(const net::ServerRequest& req) const;
  void on_generate(net::ServerRequest& req, const Res& res);
  void on_info(net::ServerRequest& req, const Res& res);
  void on_embeddings(net::ServerRequest& req, const Res& res);
  void on_health(net::ServerRequest& req, const Res& res);
  void on_workers(net::ServerRequest& req, const Res& res);
  void on_list_workers(net::ServerRequest& req, const Res& res);
  void on_worker(net::ServerRequest& req, const Res& res);
  void on_add_or_remove_worker(net::ServerRequest& req, const Res& res);
  void on_get_loads(net::ServerRequest& req, const Res& res);
  void on_metrics(net::ServerRequest& req, const Res& res);
  void on_engine_metrics(net::ServerRequest& req, const Res& res);
  void on_flush_cache(net::ServerRequest& req, const Res& res);

  // proxy.cpp
  void proxy(net::ServerRequest& req, const Res& res, bool route_on_body);
  // Requests worker `id` holds (nothing relayed yet) go to another worker: it left the router.
  void redispatch_from(uint64_t id, const std::string& url);
  // pd_proxy.cpp: one generation to a prefill and a decode worker at once
  void pd_proxy(net::ServerRequest& req, const Res& res);
  // PD generations worker `id` holds fail now, naming it (the room is spent: no retry).
  void pd_worker_removed(uint64_t id);

  // health.cpp
  void start_health();
  void health_tick();
  void probe(Worker& w);
  void ask_bootstrap_port(Worker& w, const std::string& path = "/server_info");
  void engine_metrics(const Res& res);
  void flush_cache(const Res& res);
};

WorkerInfo info_of(const Worker& w);

// proxy.cpp, shared with pd_proxy.cpp
bool hop_by_hop(std::string_view lowercase_name);
// A client's headers as they go on to a worker (hop-by-hop ones dropped), its routing
// key (X-SMG-Routing-Key, else x-session-id) and whether it named a Content-Type.
struct ForwardHeaders {
  net::HeaderList headers;
  std::string key;
  bool has_type = false;
};
ForwardHeaders forward_headers(const net::ServerRequest& req);
// The text a prefix-affinity policy routes on: SGLang's text/input_ids, OpenAI's
// prompt or messages ("" when the body has none).
std::string routing_text(const nlohmann::json& body);

}  // namespace rl::router
