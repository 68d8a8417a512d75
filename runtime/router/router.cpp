#include "router/router.hpp"

#include <future>
#include <stdexcept>

#include <spdlog/spdlog.h>
#include "base/json_input.hpp"
#include "base/admin_token.hpp"
#include "router/router_impl.hpp"

namespace rl::router {

using nlohmann::json;

namespace {

void check_options(const RouterOptions& o) {
  auto positive = [](double v, const char* name) {
    if (!(v > 0)) throw std::invalid_argument(std::string("router: ") + name + " must be > 0 (got " + std::to_string(v) + ")");
  };
  positive(o.health_interval_s, "health_interval");
  positive(o.health_timeout_s, "health_timeout");
  positive(o.request_timeout_s, "request_timeout");
  positive(o.connect_timeout_s, "connect_timeout");
  positive(o.breaker.open_s, "circuit_open_s");
  if (o.health_failure_threshold < 1) throw std::invalid_argument("router: health_failure_threshold must be >= 1");
  if (o.health_success_threshold < 1) throw std::invalid_argument("router: health_success_threshold must be >= 1");
  if (o.breaker.failure_threshold < 1) throw std::invalid_argument("router: circuit_failure_threshold must be >= 1");
  if (o.max_retries < 0) throw std::invalid_argument("router: max_retries must be >= 0");
  if (o.port < 0 || o.port > 65535) throw std::invalid_argument("router: port must be 0-65535 (got " + std::to_string(o.port) + ")");
  if (o.policy_opts.cache_threshold < 0 || o.policy_opts.cache_threshold > 1)
    throw std::invalid_argument("router: cache_threshold must be within [0, 1]");
}

// Runs fn on the router's loop and waits for it; directly when already on it
// or when the loop is not running (nothing else can touch the state then).
template <class F>
auto on_loop(Router::Impl& r, F&& fn) -> decltype(fn()) {
  if (!r.running || std::this_thread::get_id() == r.loop_thread) return fn();
  using T = decltype(fn());
  std::promise<T> p;
  auto fut = p.get_future();
  r.loop.post([&] {
    try {
      if constexpr (std::is_void_v<T>) {
        fn();
        p.set_value();
      } else {
        p.set_value(fn());
      }
    } catch (...) {
      p.set_exception(std::current_exception());
    }
  });
  return fut.get();
}

}  // namespace

WorkerInfo info_of(const Worker& w) {
  return WorkerInfo{w.id,         w.url,      w.healthy && !w.pending, WorkerRegistry::status_name(w), w.in_flight,
                    circuit_name(w.circuit), w.requests, w.failures, w.last_error};
}

Router::Impl::Impl(RouterOptions o) : opts(std::move(o)), registry(opts.breaker) {
  policy = make_policy(opts.policy, opts.policy_opts);
}

Router::Router(RouterOptions opts) {
  check_options(opts);
  impl_ = std::make_unique<Impl>(std::move(opts));
  for (auto& u : impl_->opts.workers) {
    std::string err = impl_->add(u, nullptr);
    if (!err.empty()) throw std::invalid_argument("router: --worker " + err);
  }
}

Router::~Router() { stop(); }

void Router::start() {
  Impl& r = *impl_;
  if (r.running) return;
  net::EventServer::Options so;
  so.host = r.opts.host;
  so.port = r.opts.port;
  so.allow_remote = r.opts.allow_remote;
  so.limits.max_body_bytes = r.opts.max_body_bytes;
  so.max_connections = r.opts.max_connections;
  so.idle_timeout_s = r.opts.idle_timeout_s;
  so.name = "router";
  r.server = std::make_unique<net::EventServer>(r.loop, so, [&r](net::ServerRequest& req, const Res& res) {
    r.handle(req, res);
  });
  net::HttpClient::Options co;
  co.max_per_host = r.opts.max_conns_per_worker;
  co.timeout_s = r.opts.request_timeout_s;
  co.connect_timeout_s = r.opts.connect_timeout_s;
  co.max_connections = 8192;
  r.client = std::make_unique<net::HttpClient>(r.loop, co);
  net::UpstreamPool::Options uo;
  uo.max_per_host = r.opts.max_conns_per_worker;
  uo.timeout_s = r.opts.request_timeout_s;
  uo.connect_timeout_s = r.opts.connect_timeout_s;
  r.upstream = std::make_unique<net::UpstreamPool>(r.loop, uo);
  r.server->start();  // throws: nothing is running yet
  r.start_health();
  r.running = true;
  r.thread = std::thread([&r] {
    r.loop_thread = std::this_thread::get_id();
    r.loop.run();
  });
  // loop_thread is read by on_loop(): wait until the thread has set it.
  on_loop(r, [] {});
}

void Router::stop() {
  if (!impl_) return;
  Impl& r = *impl_;
  if (r.running) {
    r.loop.post([&r] { r.loop.stop(); });
    r.thread.join();
    r.running = false;
  }
  // The loop is idle now: tearing down on this thread races with nothing.
  if (r.health_timer) r.loop.cancel_timer(r.health_timer);
  r.health_timer = 0;
  if (r.server) r.server->stop();
  r.server.reset();
  r.upstream.reset();
  r.client.reset();
}

bool Router::running() const { return impl_->running; }
int Router::port() const { return impl_->server ? impl_->server->port() : 0; }
std::string Router::url() const { return impl_->server ? impl_->server->url() : ""; }
const RouterOptions& Router::options() const { return impl_->opts; }

std::string Router::add_worker(const std::string& url, WorkerInfo* added) {
  return on_loop(*impl_, [&] { return impl_->add(url, added); });
}
bool Router::remove_worker(const std::string& key) {
  return on_loop(*impl_, [&] { return impl_->remove(key); });
}
std::vector<WorkerInfo> Router::workers() {
  return on_loop(*impl_, [&] { return impl_->infos(); });
}
std::string Router::metrics_text() {
  return on_loop(*impl_, [&] { return impl_->metrics.render(impl_->registry); });
}

// ---- Impl: workers ----------------------------------------------------------------

std::string Router::Impl::add(const std::string& url, WorkerInfo* out) {
  std::string err;
  Worker* w = registry.add(url, err, opts.allow_link_local_workers);
  if (!w) return err;
  w->next_probe_at = 0;  // probe at the next tick: an unreachable worker is found out fast
  if (out) *out = info_of(*w);
  if (running) spdlog::info("router: added worker {} (id {})", w->url, w->id);
  return "";
}

bool Router::Impl::remove(const std::string& key) {
  Worker* w = registry.find(key);
  if (!w) return false;
  const uint64_t id = w->id;
  const std::string url = w->url;
  policy->on_worker_removed(id);
  registry.remove(key);
  if (running) spdlog::info("router: removed worker {} (id {})", url, id);
  return true;
}

std::vector<WorkerInfo> Router::Impl::infos() {
  std::vector<WorkerInfo> out;
  for (auto& w : registry.all()) out.push_back(info_of(*w));
  return out;
}

void Router::Impl::workers_json(json& out) {
  out = json::array();
  for (auto& w : registry.all()) {
    out.push_back({{"id", std::to_string(w->id)},
                   {"url", w->url},
                   {"is_healthy", w->healthy && !w->pending},
                   {"status", WorkerRegistry::status_name(*w)},
                   {"load", w->in_flight},
                   {"circuit_state", circuit_name(w->circuit)},
                   {"requests", w->requests},
                   {"failures", w->failures},
                   {"last_error", w->last_error}});
  }
}

void Router::Impl::send_error(const Res& res, int status, const std::string& type, const std::string& message) {
  json j = {{"error", {{"message", message}, {"type", type}, {"code", status}}}};
  res->send_json(status, j.dump(-1, ' ', false, json::error_handler_t::replace));
}

// ---- Impl: endpoints ----------------------------------------------------------------

// Endpoints that change the router or its workers: the admin token's.
bool Router::Impl::admin_endpoint(const std::string& method, const std::string& path) {
  if (path == "/add_worker" || path == "/remove_worker" || path == "/flush_cache") return true;
  if (path == "/workers") return method != "GET" && method != "HEAD";
  if (path.rfind("/workers/", 0) == 0) return method != "GET" && method != "HEAD";
  return false;
}

bool Router::Impl::admin_authorized(const net::ServerRequest& req) const {
  return bearer_matches(std::string(req.header("authorization")), opts.admin_token);
}

void Router::Impl::handle(net::ServerRequest& req, const Res& res) {
  const std::string& p = req.path;
  const std::string& m = req.method;
  auto method_is = [&](const char* want) {
    if (m == want || (m == "HEAD" && std::string_view(want) == "GET")) return true;
    send_error(res, 405, "method_not_allowed", m + " " + p + " is not allowed (use " + want + ")");
    return false;
  };
  if (admin_endpoint(m, p) && !admin_authorized(req)) {
    send_error(res, 401, "unauthorized",
               m + " " + p + " changes the router: it needs 'Authorization: Bearer <admin token>' (the token of the "
               "run that started the router, in $RLHOST_ADMIN_TOKEN of its processes; docs/router.md)");
    return;
  }
  // The hot paths first.
  if (p == "/generate" || p == "/v1/completions" || p == "/v1/chat/completions") {
    if (method_is("POST")) proxy(req, res, true);
    return;
  }
  if (p == "/v1/models" || p == "/get_model_info" || p == "/get_server_info" || p == "/v1/embeddings") {
    proxy(req, res, p == "/v1/embeddings");
    return;
  }
  if (p == "/health" || p == "/liveness" || p == "/readiness") {
    if (!method_is("GET")) return;
    size_t healthy = 0;
    for (auto& w : registry.all()) healthy += w->healthy && !w->pending ? 1 : 0;
    const bool ready_fail = p == "/readiness" && healthy == 0;
    res->send_json(ready_fail ? 503 : 200, json({{"status", ready_fail ? "no healthy worker" : "ok"},
                                                 {"workers", registry.size()},
                                                 {"healthy_workers", healthy}})
                                               .dump());
    return;
  }
  if (p == "/workers" || p == "/list_workers") {
    if (m == "GET" || m == "HEAD") {
      json ws;
      workers_json(ws);
      if (p == "/list_workers") {
        json urls = json::array();
        for (auto& w : registry.all()) urls.push_back(w->url);
        res->send_json(200, json({{"urls", urls}}).dump());
      } else {
        res->send_json(200, json({{"workers", ws}, {"total", registry.size()}}).dump());
      }
      return;
    }
    if (m != "POST" || p != "/workers") {
      send_error(res, 405, "method_not_allowed", m + " " + p + " is not allowed (GET lists, POST {\"url\": ...} adds)");
      return;
    }
    json body;
    try {
      body = json_input::parse(req.body, "POST /workers body");
    } catch (const json_input::Error& e) {
      send_error(res, 400, "invalid_request_error",
                 std::string(e.what()) + "; send a JSON object with a string 'url' (e.g. {\"url\": \"http://127.0.0.1:30000\"})");
      return;
    }
    if (!body.is_object() || !body.contains("url") || !body["url"].is_string()) {
      send_error(res, 400, "invalid_request_error",
                 "POST /workers: body must be a JSON object with a string 'url' (e.g. {\"url\": \"http://127.0.0.1:30000\"})");
      return;
    }
    WorkerInfo info;
    std::string err = add(body["url"].get<std::string>(), &info);
    if (!err.empty()) {
      send_error(res, err.find("already") != std::string::npos ? 409 : 400, "invalid_request_error", "POST /workers: " + json_input::excerpt(err, 300));
      return;
    }
    res->send_json(201, json({{"id", std::to_string(info.id)}, {"url", info.url}, {"is_healthy", info.healthy},
                              {"status", info.status}, {"load", 0}})
                            .dump());
    return;
  }
  if (p.rfind("/workers/", 0) == 0) {
    const std::string key = net::url_decode(p.substr(9));
    if (m == "DELETE") {
      if (remove(key)) {
        res->send_json(200, json({{"removed", key}}).dump());
      } else {
        send_error(res, 404, "not_found", "DELETE " + p + ": no worker with id or URL '" + key + "' (GET /workers lists them)");
      }
      return;
    }
    if (m == "GET") {
      Worker* w = registry.find(key);
      if (!w) return send_error(res, 404, "not_found", "no worker with id or URL '" + key + "'");
      json ws;
      workers_json(ws);
      for (auto& j : ws)
        if (j["id"] == std::to_string(w->id)) return res->send_json(200, j.dump());
      return;
    }
    send_error(res, 405, "method_not_allowed", m + " " + p + " is not allowed (GET or DELETE)");
    return;
  }
  if (p == "/add_worker" || p == "/remove_worker") {
    if (!method_is("POST")) return;
    const std::string url = req.query_param("url");
    if (url.empty()) return send_error(res, 400, "invalid_request_error", p + ": missing query parameter 'url' (" + p + "?url=http://host:port)");
    if (p == "/add_worker") {
      WorkerInfo info;
      std::string err = add(url, &info);
      if (!err.empty())
        return send_error(res, err.find("already") != std::string::npos ? 409 : 400, "invalid_request_error", p + ": " + err);
      res->send_json(200, json({{"id", std::to_string(info.id)}, {"url", info.url}, {"message", "added worker " + info.url}}).dump());
    } else {
      if (!remove(url)) return send_error(res, 404, "not_found", p + ": no worker '" + url + "'");
      res->send_json(200, json({{"removed", url}, {"message", "removed worker " + url}}).dump());
    }
    return;
  }
  if (p == "/get_loads") {
    if (!method_is("GET")) return;
    json ws = json::array();
    for (auto& w : registry.all()) ws.push_back({{"id", std::to_string(w->id)}, {"worker", w->url}, {"load", w->in_flight}});
    res->send_json(200, json({{"workers", ws}}).dump());
    return;
  }
  if (p == "/metrics") {
    if (!method_is("GET")) return;
    res->send(200, {{"Content-Type", "text/plain; version=0.0.4; charset=utf-8"}}, metrics.render(registry));
    return;
  }
  if (p == "/engine_metrics") {
    if (method_is("GET")) engine_metrics(res);
    return;
  }
  if (p == "/flush_cache") {
    if (method_is("POST")) flush_cache(res);
    return;
  }
  send_error(res, 404, "not_found",
             "no route " + m + " " + p +
                 " (router endpoints: /generate, /v1/completions, /v1/chat/completions, /v1/models, /health, /workers, "
                 "/add_worker, /remove_worker, /get_loads, /flush_cache, /metrics, /engine_metrics)");
}

}  // namespace rl::router
