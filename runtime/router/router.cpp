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
  if (!o.pd_disaggregation) {
    const char* hint = " (hint: add --pd-disaggregation / pd_disaggregation = true)";
    if (!o.prefill.empty()) throw std::invalid_argument(std::string("router: --prefill needs PD mode") + hint);
    if (!o.decode.empty()) throw std::invalid_argument(std::string("router: --decode needs PD mode") + hint);
    if (!o.prefill_policy.empty())
      throw std::invalid_argument(std::string("router: --prefill-policy needs PD mode") + hint);
    if (!o.decode_policy.empty()) throw std::invalid_argument(std::string("router: --decode-policy needs PD mode") + hint);
  } else if (!o.workers.empty()) {
    throw std::invalid_argument(
        "router: --worker (regular workers) and --pd-disaggregation do not mix: in PD mode give prefill workers "
        "(--prefill URL [BOOTSTRAP_PORT]) and decode workers (--decode URL)");
  }
  for (auto& p : o.prefill)
    if (p.bootstrap_port < 0 || p.bootstrap_port > 65535)
      throw std::invalid_argument("router: --prefill " + p.url + ": bootstrap port must be 1-65535 (got " +
                                  std::to_string(p.bootstrap_port) + "; leave it out to ask the worker)");
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
                    circuit_name(w.circuit), w.requests, w.failures, w.last_error, worker_type_name(w.type),
                    w.bootstrap_port};
}

Router::Impl::Impl(RouterOptions o) : opts(std::move(o)), registry(opts.breaker) {
  policy = make_policy(opts.policy, opts.policy_opts);
  // Each pool its own policy object: cache_aware's tree, round robin's turn.
  prefill_policy = make_policy(opts.prefill_policy.empty() ? opts.policy : opts.prefill_policy, opts.policy_opts);
  decode_policy = make_policy(opts.decode_policy.empty() ? opts.policy : opts.decode_policy, opts.policy_opts);
}

Router::Router(RouterOptions opts) {
  check_options(opts);
  impl_ = std::make_unique<Impl>(std::move(opts));
  for (auto& u : impl_->opts.workers) {
    std::string err = impl_->add(u, nullptr);
    if (!err.empty()) throw std::invalid_argument("router: --worker " + err);
  }
  for (auto& p : impl_->opts.prefill) {
    std::string err = impl_->add(p.url, nullptr, WorkerType::prefill, p.bootstrap_port);
    if (!err.empty()) throw std::invalid_argument("router: --prefill " + err);
  }
  for (auto& u : impl_->opts.decode) {
    std::string err = impl_->add(u, nullptr, WorkerType::decode);
    if (!err.empty()) throw std::invalid_argument("router: --decode " + err);
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

std::string Router::add_worker(const std::string& url, WorkerInfo* added, WorkerType type, int bootstrap_port) {
  return on_loop(*impl_, [&] { return impl_->add(url, added, type, bootstrap_port); });
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

std::string Router::Impl::add(const std::string& url, WorkerInfo* out, WorkerType type, int bootstrap_port) {
  const char* tn = worker_type_name(type);
  if (type != WorkerType::regular && !opts.pd_disaggregation)
    return std::string("a ") + tn + " worker needs a router in PD mode (hint: start it with --pd-disaggregation, "
           "or add a regular worker: worker_type \"regular\")";
  if (type == WorkerType::regular && opts.pd_disaggregation)
    return "this router runs in PD mode: a worker must be a prefill or a decode worker (hint: worker_type "
           "\"prefill\" with its bootstrap_port, or \"decode\")";
  if (bootstrap_port != 0 && type != WorkerType::prefill)
    return std::string("bootstrap_port is for prefill workers only (this one is ") + tn + ")";
  if (bootstrap_port < 0 || bootstrap_port > 65535)
    return "bootstrap_port must be 1-65535 (got " + std::to_string(bootstrap_port) + "; leave it out to ask the worker's /server_info)";
  std::string err;
  Worker* w = registry.add(url, err, opts.allow_link_local_workers);
  if (!w) return err;
  w->type = type;
  w->bootstrap_port = bootstrap_port;
  w->next_probe_at = 0;  // probe at the next tick: an unreachable worker is found out fast
  if (out) *out = info_of(*w);
  if (running)
    spdlog::info("router: added {}worker {} (id {})", type == WorkerType::regular ? "" : std::string(tn) + " ", w->url, w->id);
  return "";
}

bool Router::Impl::remove(const std::string& key) {
  Worker* w = registry.find(key);
  if (!w) return false;
  const uint64_t id = w->id;
  const std::string url = w->url;
  policy->on_worker_removed(id);
  prefill_policy->on_worker_removed(id);
  decode_policy->on_worker_removed(id);
  registry.remove(key);
  if (running) spdlog::info("router: removed worker {} (id {})", url, id);
  redispatch_from(id, url);
  pd_worker_removed(id);
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
                   {"last_error", w->last_error},
                   {"worker_type", worker_type_name(w->type)},
                   {"bootstrap_port", w->bootstrap_port > 0 ? json(w->bootstrap_port) : json(nullptr)}});
  }
}

void Router::Impl::send_error(const Res& res, int status, const std::string& type, const std::string& message) {
  json j = {{"error", {{"message", message}, {"type", type}, {"code", status}}}};
  res->send_json(status, j.dump(-1, ' ', false, json::error_handler_t::replace));
}

}  // namespace rl::router
