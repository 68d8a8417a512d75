// Health probes and the fan-out endpoints (/engine_metrics, /flush_cache).
//
// Probing: one tick timer; each worker has its own next-probe time, normally
// health_interval_s apart. A worker that just failed (a probe, or a refused
// request connection) is probed again within a fraction of the interval, so a
// killed worker is marked unhealthy in about failure_threshold short probes
// rather than failure_threshold full intervals. Probes never overlap per worker.
#include <algorithm>

#include <spdlog/spdlog.h>

#include "router/router_impl.hpp"

namespace rl::router {

using nlohmann::json;

namespace {
double tick_period(const RouterOptions& o) { return std::clamp(o.health_interval_s / 4, 0.05, 0.5); }
double suspect_interval(const RouterOptions& o) { return std::min(o.health_interval_s, std::max(0.1, o.health_timeout_s / 2)); }
}  // namespace

void Router::Impl::start_health() {
  health_timer = loop.call_later(0, [this] { health_tick(); });
}

void Router::Impl::health_tick() {
  health_timer = loop.call_later(tick_period(opts), [this] { health_tick(); });
  const double now = EventLoop::now();
  for (auto& w : registry.all())
    if (!w->probing && now >= w->next_probe_at) probe(*w);
}

void Router::Impl::probe(Worker& w) {
  w.probing = true;
  net::HttpRequest hr;
  hr.url = w.url + opts.health_path;
  hr.timeout_s = opts.health_timeout_s;
  hr.connect_timeout_s = opts.health_timeout_s;
  const uint64_t id = w.id;
  client->submit(std::move(hr), [this, id](net::HttpResult&& r) {
    Worker* w = registry.by_id(id);
    if (!w) return;  // removed meanwhile
    w->probing = false;
    const bool ok = r.ok && r.response.status >= 200 && r.response.status < 300;
    std::string err = ok ? "" : r.ok ? "health probe: HTTP " + std::to_string(r.response.status) : "health probe: " + r.error;
    const std::string was = WorkerRegistry::status_name(*w);
    registry.on_probe(*w, ok, err, opts.health_failure_threshold, opts.health_success_threshold);
    const std::string now_status = WorkerRegistry::status_name(*w);
    if (was != now_status) {
      if (w->healthy) spdlog::info("router: worker {} is healthy{}", w->url, was == "pending" ? "" : " again");
      else spdlog::warn("router: worker {} marked unhealthy ({})", w->url, err);
    }
    // Suspects (failing, or unhealthy and maybe coming back) are probed sooner.
    const bool suspect = !ok;
    w->next_probe_at = EventLoop::now() + (suspect ? suspect_interval(opts) : opts.health_interval_s);
    // A prefill worker given without its bootstrap port: ask it, once it answers.
    if (ok && w->type == WorkerType::prefill && w->bootstrap_port == 0 && !w->bootstrap_asking) ask_bootstrap_port(*w);
  });
}

// GET /server_info (SGLang's; /get_server_info on a 404, its older name, which rlhost
// engines serve) and read disaggregation_bootstrap_port, at the top or in server_args.
// Until it is known the worker gets no PD requests; a probe later asks again.
void Router::Impl::ask_bootstrap_port(Worker& w, const std::string& path) {
  w.bootstrap_asking = true;
  net::HttpRequest hr;
  hr.url = w.url + path;
  hr.timeout_s = opts.health_timeout_s;
  hr.connect_timeout_s = opts.health_timeout_s;
  const uint64_t id = w.id;
  client->submit(std::move(hr), [this, id, path](net::HttpResult&& r) {
    Worker* w = registry.by_id(id);
    if (!w) return;
    w->bootstrap_asking = false;
    if (r.ok && r.response.status == 404 && path == "/server_info") return ask_bootstrap_port(*w, "/get_server_info");
    std::string why;
    if (!r.ok) {
      why = r.error;
    } else if (r.response.status != 200) {
      why = "HTTP " + std::to_string(r.response.status);
    } else {
      try {
        const json j = json::parse(r.response.body);
        const json* port = nullptr;
        if (j.is_object() && j.contains("disaggregation_bootstrap_port")) port = &j["disaggregation_bootstrap_port"];
        else if (j.is_object() && j.contains("server_args") && j["server_args"].is_object() &&
                 j["server_args"].contains("disaggregation_bootstrap_port"))
          port = &j["server_args"]["disaggregation_bootstrap_port"];
        if (port && port->is_number_integer() && port->get<int64_t>() >= 1 && port->get<int64_t>() <= 65535) {
          w->bootstrap_port = static_cast<int>(port->get<int64_t>());
          spdlog::info("router: prefill worker {} has bootstrap port {}", w->url, w->bootstrap_port);
          return;
        }
        why = port ? "disaggregation_bootstrap_port is " + port->dump() : "no disaggregation_bootstrap_port in it";
      } catch (const std::exception& e) {
        why = std::string("not JSON: ") + e.what();
      }
    }
    w->last_error = "bootstrap port: GET " + path + ": " + why +
                    " (is it started with --disaggregation-mode prefill? or give the port: --prefill URL PORT)";
    spdlog::warn("router: prefill worker {}: {}", w->url, w->last_error);
  });
}

// Collects one GET/POST per worker, then calls `done` with (url, result) pairs.
namespace {
struct FanOut {
  std::vector<std::pair<std::string, net::HttpResult>> results;
  size_t pending = 0;
  std::function<void(FanOut&)> done;
};

void fan_out(Router::Impl& r, const std::string& method, const std::string& path,
             std::function<void(FanOut&)> done) {
  auto f = std::make_shared<FanOut>();
  f->done = std::move(done);
  f->pending = r.registry.size();
  f->results.resize(r.registry.size());
  if (f->pending == 0) return f->done(*f);
  size_t i = 0;
  for (auto& w : r.registry.all()) {
    f->results[i].first = w->url;
    net::HttpRequest hr;
    hr.method = method;
    hr.url = w->url + path;
    hr.timeout_s = r.opts.metrics_timeout_s;
    if (method == "POST" && !r.opts.admin_token.empty())  // workers' control endpoints (/flush_cache)
      hr.headers.emplace_back("Authorization", "Bearer " + r.opts.admin_token);
    r.client->submit(std::move(hr), [f, i](net::HttpResult&& res) {
      f->results[i].second = std::move(res);
      if (--f->pending == 0) f->done(*f);
    });
    ++i;
  }
}
}  // namespace

void Router::Impl::engine_metrics(const Res& res) {
  fan_out(*this, "GET", "/metrics", [res](FanOut& f) {
    std::vector<std::pair<std::string, std::string>> ok, failed;
    for (auto& [url, r] : f.results) {
      if (r.ok && r.response.status == 200) ok.emplace_back(url, std::move(r.response.body));
      else failed.emplace_back(url, r.ok ? "HTTP " + std::to_string(r.response.status) : r.error);
    }
    res->send(200, {{"Content-Type", "text/plain; version=0.0.4; charset=utf-8"}}, merge_expositions(ok, failed));
  });
}

void Router::Impl::flush_cache(const Res& res) {
  fan_out(*this, "POST", "/flush_cache", [res](FanOut& f) {
    json results = json::array();
    bool all_ok = true;
    for (auto& [url, r] : f.results) {
      const bool ok = r.ok && r.response.status >= 200 && r.response.status < 300;
      all_ok = all_ok && ok;
      json one = {{"url", url}, {"ok", ok}, {"status", r.ok ? r.response.status : 0}};
      if (!ok) one["error"] = r.ok ? r.response.body.substr(0, 500) : r.error;
      results.push_back(std::move(one));
    }
    res->send_json(all_ok ? 200 : 502, json({{"success", all_ok}, {"workers", results}}).dump(-1, ' ', false, json::error_handler_t::replace));
  });
}

}  // namespace rl::router
