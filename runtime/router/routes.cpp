// The router's endpoints as one route table, like the engine server's
// (runtime/engine/server.cpp): per path its methods, whether it needs the run's admin
// token, the 405 hint, and its handler. handle() looks the path up, checks the admin
// token and the method, then calls the handler; unknown paths are 404 naming the
// endpoints, known paths with another method 405.
#include <cstdlib>
#include <string>
#include <string_view>

#include "base/admin_token.hpp"
#include "base/json_input.hpp"
#include "router/router_impl.hpp"

namespace rl::router {

using nlohmann::json;

struct Router::Impl::Route {
  enum class Admin { none, always, writes };  // writes: every method but GET and HEAD
  const char* path;     // exact; or a prefix when it ends in '/' (/workers/<id or url>)
  const char* methods;  // space-separated; "*": any (forwarded as sent)
  Admin admin;
  const char* hint;     // the 405's "(...)"; nullptr: "(use <methods>)"
  void (Router::Impl::*fn)(net::ServerRequest&, const Res&);
};

namespace {

using Admin = Router::Impl::Route::Admin;
using R = Router::Impl;

// The hot paths first.
const R::Route kRoutes[] = {
    {"/generate", "POST", Admin::none, nullptr, &R::on_generate},
    {"/v1/completions", "POST", Admin::none, nullptr, &R::on_generate},
    {"/v1/chat/completions", "POST", Admin::none, nullptr, &R::on_generate},
    {"/v1/models", "*", Admin::none, nullptr, &R::on_info},
    {"/get_model_info", "*", Admin::none, nullptr, &R::on_info},
    {"/get_server_info", "*", Admin::none, nullptr, &R::on_info},
    {"/v1/embeddings", "*", Admin::none, nullptr, &R::on_embeddings},
    {"/health", "GET", Admin::none, nullptr, &R::on_health},
    {"/liveness", "GET", Admin::none, nullptr, &R::on_health},
    {"/readiness", "GET", Admin::none, nullptr, &R::on_health},
    {"/workers", "GET POST", Admin::writes, "GET lists, POST {\"url\": ...} adds", &R::on_workers},
    {"/list_workers", "GET", Admin::none, "GET lists, POST {\"url\": ...} adds", &R::on_list_workers},
    {"/workers/", "GET DELETE", Admin::writes, "GET or DELETE", &R::on_worker},
    {"/add_worker", "POST", Admin::always, nullptr, &R::on_add_or_remove_worker},
    {"/remove_worker", "POST", Admin::always, nullptr, &R::on_add_or_remove_worker},
    {"/get_loads", "GET", Admin::none, nullptr, &R::on_get_loads},
    {"/flush_cache", "POST", Admin::always, nullptr, &R::on_flush_cache},
    {"/metrics", "GET", Admin::none, nullptr, &R::on_metrics},
    {"/engine_metrics", "GET", Admin::none, nullptr, &R::on_engine_metrics},
};

const R::Route* find_route(const std::string& path) {
  for (const auto& r : kRoutes) {
    const std::string_view rp(r.path);
    if (rp.back() == '/' ? path.compare(0, rp.size(), rp) == 0 : path == rp) return &r;
  }
  return nullptr;
}

// Whether `method` is one of the route's (HEAD is served by GET routes).
bool allows(const R::Route& r, const std::string& method) {
  const std::string_view ms(r.methods);
  if (ms == "*") return true;
  const std::string m = method == "HEAD" ? "GET" : method;
  size_t start = 0;
  while (start <= ms.size()) {
    const size_t sp = ms.find(' ', start);
    if (ms.substr(start, sp == std::string_view::npos ? std::string_view::npos : sp - start) == m) return true;
    if (sp == std::string_view::npos) break;
    start = sp + 1;
  }
  return false;
}

std::string route_list() {
  std::string out;
  for (const auto& r : kRoutes) {
    if (!out.empty()) out += ", ";
    out += r.path;
  }
  return out;
}

}  // namespace

bool Router::Impl::admin_authorized(const net::ServerRequest& req) const {
  return bearer_matches(std::string(req.header("authorization")), opts.admin_token);
}

void Router::Impl::handle(net::ServerRequest& req, const Res& res) {
  const std::string& p = req.path;
  const std::string& m = req.method;
  const Route* r = find_route(p);
  if (!r) return send_error(res, 404, "not_found", "no route " + m + " " + p + " (router endpoints: " + route_list() + ")");
  const bool reads = m == "GET" || m == "HEAD";
  if ((r->admin == Admin::always || (r->admin == Admin::writes && !reads)) && !admin_authorized(req)) {
    return send_error(res, 401, "unauthorized",
                      m + " " + p + " changes the router: it needs 'Authorization: Bearer <admin token>' (the token of "
                      "the run that started the router, in $RLHOST_ADMIN_TOKEN of its processes; docs/router.md)");
  }
  if (!allows(*r, m)) {
    return send_error(res, 405, "method_not_allowed",
                      m + " " + p + " is not allowed (" + (r->hint ? r->hint : std::string("use ") + r->methods) + ")");
  }
  (this->*(r->fn))(req, res);
}

// ---- the endpoints ---------------------------------------------------------------------

void Router::Impl::on_generate(net::ServerRequest& req, const Res& res) {
  if (opts.pd_disaggregation) return pd_proxy(req, res);
  proxy(req, res, true);
}
void Router::Impl::on_info(net::ServerRequest& req, const Res& res) { proxy(req, res, false); }
void Router::Impl::on_embeddings(net::ServerRequest& req, const Res& res) { proxy(req, res, true); }

void Router::Impl::on_health(net::ServerRequest& req, const Res& res) {
  size_t healthy = 0, healthy_of[3] = {0, 0, 0}, of[3] = {0, 0, 0};
  for (auto& w : registry.all()) {
    const bool ok = w->healthy && !w->pending;
    healthy += ok ? 1 : 0;
    healthy_of[static_cast<int>(w->type)] += ok ? 1 : 0;
    of[static_cast<int>(w->type)]++;
  }
  const int P = static_cast<int>(WorkerType::prefill), D = static_cast<int>(WorkerType::decode);
  // PD mode is ready with a healthy worker in each pool.
  const bool none = opts.pd_disaggregation ? healthy_of[P] == 0 || healthy_of[D] == 0 : healthy == 0;
  const bool ready_fail = req.path == "/readiness" && none;
  json j = {{"status", ready_fail ? (opts.pd_disaggregation ? "no healthy prefill or decode worker" : "no healthy worker") : "ok"},
            {"workers", registry.size()},
            {"healthy_workers", healthy}};
  if (opts.pd_disaggregation) {
    j["pd_disaggregation"] = true;
    j["prefill_workers"] = of[P];
    j["healthy_prefill_workers"] = healthy_of[P];
    j["decode_workers"] = of[D];
    j["healthy_decode_workers"] = healthy_of[D];
  }
  res->send_json(ready_fail ? 503 : 200, j.dump());
}

void Router::Impl::on_list_workers(net::ServerRequest&, const Res& res) {
  json urls = json::array();
  for (auto& w : registry.all()) urls.push_back(w->url);
  res->send_json(200, json({{"urls", urls}}).dump());
}

// GET lists the workers; POST {"url": ...} adds one.
void Router::Impl::on_workers(net::ServerRequest& req, const Res& res) {
  if (req.method == "GET" || req.method == "HEAD") {
    json ws;
    workers_json(ws);
    res->send_json(200, json({{"workers", ws}, {"total", registry.size()}}).dump());
    return;
  }
  const char* example = "{\"url\": \"http://127.0.0.1:30000\"}";
  json body;
  try {
    body = json_input::parse(req.body, "POST /workers body");
  } catch (const json_input::Error& e) {
    return send_error(res, 400, "invalid_request_error",
                      std::string(e.what()) + "; send a JSON object with a string 'url' (e.g. " + example + ")");
  }
  if (!body.is_object() || !body.contains("url") || !body["url"].is_string()) {
    return send_error(res, 400, "invalid_request_error",
                      std::string("POST /workers: body must be a JSON object with a string 'url' (e.g. ") + example + ")");
  }
  WorkerType type = WorkerType::regular;
  if (auto t = body.find("worker_type"); t != body.end() && !t->is_null()) {
    if (!t->is_string() || !parse_worker_type(t->get_ref<const std::string&>(), type))
      return send_error(res, 400, "invalid_request_error",
                        "POST /workers: 'worker_type' must be \"regular\", \"prefill\" or \"decode\" (got " +
                            json_input::excerpt(t->dump(), 80) + ")");
  }
  int bootstrap_port = 0;
  if (auto b = body.find("bootstrap_port"); b != body.end() && !b->is_null()) {
    if (!b->is_number_integer() || b->get<int64_t>() < 1 || b->get<int64_t>() > 65535)
      return send_error(res, 400, "invalid_request_error",
                        "POST /workers: 'bootstrap_port' must be an integer 1-65535 (got " +
                            json_input::excerpt(b->dump(), 80) + "; leave it out to have the router ask the prefill worker's /server_info)");
    bootstrap_port = static_cast<int>(b->get<int64_t>());
  }
  WorkerInfo info;
  const std::string err = add(body["url"].get<std::string>(), &info, type, bootstrap_port);
  if (!err.empty()) {
    return send_error(res, err.find("already") != std::string::npos ? 409 : 400, "invalid_request_error",
                      "POST /workers: " + json_input::excerpt(err, 300));
  }
  res->send_json(201, json({{"id", std::to_string(info.id)}, {"url", info.url}, {"is_healthy", info.healthy},
                            {"status", info.status}, {"load", 0}, {"worker_type", info.type},
                            {"bootstrap_port", info.bootstrap_port > 0 ? json(info.bootstrap_port) : json(nullptr)}})
                          .dump());
}

// /workers/<id or url>: GET one worker, DELETE removes it.
void Router::Impl::on_worker(net::ServerRequest& req, const Res& res) {
  const std::string& p = req.path;
  const std::string key = net::url_decode(p.substr(9));
  if (req.method == "DELETE") {
    if (!remove(key))
      return send_error(res, 404, "not_found", "DELETE " + p + ": no worker with id or URL '" + key + "' (GET /workers lists them)");
    res->send_json(200, json({{"removed", key}}).dump());
    return;
  }
  Worker* w = registry.find(key);
  if (!w) return send_error(res, 404, "not_found", "no worker with id or URL '" + key + "'");
  json ws;
  workers_json(ws);
  for (auto& j : ws)
    if (j["id"] == std::to_string(w->id)) return res->send_json(200, j.dump());
}

// sglang-router's /add_worker?url=... and /remove_worker?url=...
void Router::Impl::on_add_or_remove_worker(net::ServerRequest& req, const Res& res) {
  const std::string& p = req.path;
  const std::string url = req.query_param("url");
  if (url.empty())
    return send_error(res, 400, "invalid_request_error", p + ": missing query parameter 'url' (" + p + "?url=http://host:port)");
  if (p == "/add_worker") {
    WorkerType type = WorkerType::regular;
    if (const std::string t = req.query_param("worker_type"); !t.empty() && !parse_worker_type(t, type))
      return send_error(res, 400, "invalid_request_error",
                        p + ": query parameter 'worker_type' must be regular, prefill or decode (got '" +
                            json_input::excerpt(t, 80) + "')");
    int bootstrap_port = 0;
    if (const std::string b = req.query_param("bootstrap_port"); !b.empty()) {
      char* end = nullptr;
      const long v = std::strtol(b.c_str(), &end, 10);
      if (!end || *end || v < 1 || v > 65535)
        return send_error(res, 400, "invalid_request_error",
                          p + ": query parameter 'bootstrap_port' must be an integer 1-65535 (got '" +
                              json_input::excerpt(b, 80) + "')");
      bootstrap_port = static_cast<int>(v);
    }
    WorkerInfo info;
    const std::string err = add(url, &info, type, bootstrap_port);
    if (!err.empty())
      return send_error(res, err.find("already") != std::string::npos ? 409 : 400, "invalid_request_error", p + ": " + err);
    res->send_json(200, json({{"id", std::to_string(info.id)}, {"url", info.url}, {"message", "added worker " + info.url}}).dump());
    return;
  }
  if (!remove(url)) return send_error(res, 404, "not_found", p + ": no worker '" + url + "'");
  res->send_json(200, json({{"removed", url}, {"message", "removed worker " + url}}).dump());
}

void Router::Impl::on_get_loads(net::ServerRequest&, const Res& res) {
  json ws = json::array();
  for (auto& w : registry.all()) ws.push_back({{"id", std::to_string(w->id)}, {"worker", w->url}, {"load", w->in_flight}});
  res->send_json(200, json({{"workers", ws}}).dump());
}

void Router::Impl::on_metrics(net::ServerRequest&, const Res& res) {
  res->send(200, {{"Content-Type", "text/plain; version=0.0.4; charset=utf-8"}}, metrics.render(registry));
}

void Router::Impl::on_engine_metrics(net::ServerRequest&, const Res& res) { engine_metrics(res); }
void Router::Impl::on_flush_cache(net::ServerRequest&, const Res& res) { flush_cache(res); }

}  // namespace rl::router
