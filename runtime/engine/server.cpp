// EngineServer: construction, routing, the error/auth wrapper every handler goes
// through, and the read-only info endpoints (/health, /get_model_info,
// /get_server_info, /v1/loads, /metrics).
#include "engine/server.hpp"

#include "base/log_text.hpp"
#include "base/admin_token.hpp"

#include <chrono>
#include <thread>

#include "model/config.hpp"
#include "model/tokenizer.hpp"
#include "net/http_server.hpp"
#include "profile/torch_profiler.hpp"

#ifndef RLHOST_VERSION
#define RLHOST_VERSION "0.1.0"
#endif

namespace rl::engine {
namespace {

using nlohmann::json;

double unix_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace

json stats_json(const EngineStats& s) {
  return {
      {"num_running", s.num_running},
      {"num_queued", s.num_queued},
      {"num_running_reqs", s.num_running},
      {"num_queue_reqs", s.num_queued},
      {"kv_tokens_total", s.kv_tokens_total},
      {"kv_tokens_used", s.kv_tokens_used},
      {"kv_tokens_cached", s.kv_tokens_cached},
      {"token_usage", s.token_usage},
      {"cache_hit_rate", s.cache_hit_rate},
      {"gen_throughput", s.gen_throughput},
      {"last_gen_throughput", s.gen_throughput},
      {"prompt_tokens_total", s.prompt_tokens_total},
      {"generation_tokens_total", s.generation_tokens_total},
      {"cached_tokens_total", s.cached_tokens_total},
      {"prefill_tokens_computed", s.prefill_tokens_computed},
      {"requests_total", s.requests_total},
      {"requests_finished", s.requests_finished},
      {"requests_aborted", s.requests_aborted},
      {"preemptions_total", s.preemptions_total},
      {"steps", s.steps},
      {"weight_version", s.weight_version},
      {"memory_released", s.memory_released},
  };
}

void reply_json(httplib::Response& res, int status, const json& j) {
  res.status = status;
  res.set_content(j.dump(), "application/json");
}

json error_json(int code, const std::string& message) {
  const char* type = code == 400 ? "BadRequest" : code == 401 ? "Unauthorized" : code == 404 ? "NotFound"
                     : code == 503 ? "ServiceUnavailable" : "InternalServerError";
  return {{"error", {{"message", message}, {"type", type}, {"code", code}}}};
}

EngineServer::EngineServer(std::shared_ptr<Engine> engine, ServerOptions opts)
    : engine_(std::move(engine)), opts_(std::move(opts)),
      metrics_(engine_->options().served_model_name.empty() ? engine_->options().model.filename().string()
                                                            : engine_->options().served_model_name),
      start_time_(unix_now()) {
  const bool loopback = net::HttpServer::is_loopback(opts_.host);
  if (!loopback && opts_.api_key.empty())
    throw Error("engine server: host '" + opts_.host + "' is not a loopback address and no --api-key was given",
                "control endpoints (weights, memory, profile, abort) would be open to the network; pass --api-key "
                "TOKEN (clients send 'Authorization: Bearer TOKEN') or bind 127.0.0.1");
  if (opts_.model_path.empty()) opts_.model_path = engine_->options().model.string();
  if (opts_.admin_token.empty()) opts_.admin_token = admin_token();
  net::HttpServerOptions ho;
  ho.host = opts_.host;
  ho.port = opts_.port;
  ho.threads = opts_.threads;
  ho.allow_remote = !loopback;  // only reachable with an api key (checked above)
  ho.name = "engine server";
  http_ = std::make_unique<net::HttpServer>(ho);
  add_routes();
  http_->start();
  log::info("engine server: serving " + opts_.model_path + " on " + http_->url());
}

EngineServer::~EngineServer() { stop(); }

std::string EngineServer::url() const { return http_->url(); }
int EngineServer::port() const { return http_->port(); }

void EngineServer::stop() {
  if (stopping_.exchange(true)) return;
  // Streaming responses poll stopping_; blocked /generate calls end when the
  // engine finishes or aborts their requests: abort ours so stop() is prompt.
  std::vector<std::shared_ptr<GenerateRun>> live;
  {
    std::lock_guard lk(runs_mu_);
    for (auto& [id, w] : runs_)
      if (auto r = w.lock()) live.push_back(std::move(r));
  }
  for (auto& r : live) r->abort();
  http_->stop();
  if (prof_hook_installed_) engine_->set_step_hook({});  // the hook points at this server
  {
    std::lock_guard lk(prof_mu_);
    if (profiler_ && profiler_->running()) {
      try {
        engine_->run_between_steps([this] { profiler_->cancel(); });
      } catch (const std::exception& e) {
        log::warn(std::string("engine server: dropping the running profile failed: ") + e.what());
      }
    }
  }
}

void EngineServer::add_routes() {
  struct R {
    const char* method;
    const char* path;
    bool control;
    void (EngineServer::*fn)(const Req&, Res&);
  };
  static const R routes[] = {
      {"GET", "/health", false, &EngineServer::on_health},
      {"GET", "/health_generate", false, &EngineServer::on_health_generate},
      {"GET", "/get_model_info", false, &EngineServer::on_model_info},
      {"GET", "/get_server_info", false, &EngineServer::on_server_info},
      {"GET", "/v1/loads", false, &EngineServer::on_loads},
      {"GET", "/metrics", false, &EngineServer::on_metrics},
      {"POST", "/generate", false, &EngineServer::on_generate},
      {"POST", "/flush_cache", true, &EngineServer::on_flush_cache},
      {"GET", "/flush_cache", true, &EngineServer::on_flush_cache},
      {"POST", "/abort_request", true, &EngineServer::on_abort_request},
      {"POST", "/update_weights_from_disk", true, &EngineServer::on_update_weights_from_disk},
      {"POST", "/init_weights_update_group", true, &EngineServer::on_init_weights_update_group},
      {"POST", "/update_weights_from_distributed", true, &EngineServer::on_update_weights_from_distributed},
      {"POST", "/destroy_weights_update_group", true, &EngineServer::on_destroy_weights_update_group},
      {"POST", "/init_weights_shm", true, &EngineServer::on_init_weights_shm},
      {"POST", "/update_weights_from_shm", true, &EngineServer::on_update_weights_from_shm},
      {"POST", "/release_memory_occupation", true, &EngineServer::on_release_memory},
      {"POST", "/resume_memory_occupation", true, &EngineServer::on_resume_memory},
      {"POST", "/start_profile", true, &EngineServer::on_start_profile},
      {"GET", "/start_profile", true, &EngineServer::on_start_profile},
      {"POST", "/stop_profile", true, &EngineServer::on_stop_profile},
      {"GET", "/stop_profile", true, &EngineServer::on_stop_profile},
      {"POST", "/v1/completions", false, &EngineServer::on_completions},
      {"POST", "/v1/chat/completions", false, &EngineServer::on_chat_completions},
      {"GET", "/v1/models", false, &EngineServer::on_models},
  };
  for (const R& r : routes) {
    const bool control = r.control;
    auto fn = r.fn;
    http_->route(r.method, r.path, [this, control, fn](const Req& req, Res& res) { handle(req, res, control, fn); });
  }
  // Unknown paths: a JSON 404 rather than httplib's empty body.
  http_->raw().set_error_handler([](const Req& req, Res& res) {
    if (res.status == 404 && res.body.empty())
      res.set_content(error_json(404, "no endpoint " + req.method + " " + req.path).dump(), "application/json");
  });
}

bool EngineServer::control_authorized(const Req& req) const {
  return bearer_matches(req.get_header_value("Authorization"), opts_.admin_token, opts_.api_key);
}

void EngineServer::handle(const Req& req, Res& res, bool control, void (EngineServer::*fn)(const Req&, Res&)) {
  auto fail = [&](int code, const std::string& msg) {
    res.status = code;
    res.set_content(error_json(code, msg).dump(), "application/json");
  };
  try {
    if (control && !control_authorized(req)) {
      fail(401, req.path + " is a control endpoint: it needs 'Authorization: Bearer <token>' with the run's admin "
                           "token ($RLHOST_ADMIN_TOKEN of the process that started the engine; `rlhost engine` prints "
                           "where it is saved)" + std::string(opts_.api_key.empty() ? "" : " or the --api-key"));
    } else {
      (this->*fn)(req, res);
    }
  } catch (const BadRequest& e) {
    fail(400, e.what());
  } catch (const nlohmann::json::exception& e) {
    // Type errors from reading the client's JSON (a string where a number goes).
    fail(400, std::string("bad request body: ") + e.what());
  } catch (const std::exception& e) {
    log::text(log::Level::error, "engine server: " + req.method + " " + req.path + " failed: " + e.what());
    fail(500, e.what());
  }
  metrics_.count_http(res.status);
}

// ---- runs ----------------------------------------------------------------------------

std::shared_ptr<GenerateRun> EngineServer::start_run(GenerateCall call, GenerateRun::Listener listener) {
  if (stopping_) throw Error("engine server is stopping");
  ServerMetrics* m = &metrics_;
  auto observed = [m, listener = std::move(listener)](size_t i, const RequestOutput& out, bool last) {
    if (out.finished) m->observe(out);
    if (listener) listener(i, out, last);
  };
  auto run = GenerateRun::start(*engine_, std::move(call), std::move(observed));
  std::lock_guard lk(runs_mu_);
  // Forget finished runs as we go (the map only serves /abort_request and stop()).
  for (auto it = runs_.begin(); it != runs_.end();) it = it->second.expired() ? runs_.erase(it) : std::next(it);
  runs_.emplace(next_run_++, run);
  return run;
}

std::vector<RequestOutput> EngineServer::run_blocking(GenerateCall call) {
  auto run = start_run(std::move(call));
  if (!run->wait_for(opts_.request_timeout_s)) {
    run->abort();
    run->wait_for(30);
  }
  return run->outputs();
}

int64_t EngineServer::abort_rid(const std::string& rid) {
  int64_t n = engine_->abort(rid) ? 1 : 0;
  std::vector<std::shared_ptr<GenerateRun>> live;
  {
    std::lock_guard lk(runs_mu_);
    for (auto& [id, w] : runs_)
      if (auto r = w.lock()) live.push_back(std::move(r));
  }
  const std::string prefix = rid + "-";
  for (auto& r : live)
    for (const auto& x : r->rids())
      if (x != rid && x.rfind(prefix, 0) == 0 && engine_->abort(x)) ++n;
  return n;
}

// ---- info endpoints ------------------------------------------------------------------

void EngineServer::on_health(const Req&, Res& res) {
  if (stopping_) {
    res.status = 503;
    return;
  }
  res.status = 200;
}

// One greedy token through the whole engine; 503 when it does not finish in 20 s.
void EngineServer::on_health_generate(const Req&, Res& res) {
  GenerateCall call;
  GenerateRequest r;
  r.rid = "HEALTH_CHECK_" + std::to_string(static_cast<int64_t>(unix_now() * 1e6));
  const auto bos = engine_->tokenizer() ? engine_->tokenizer()->bos_token_id() : std::nullopt;
  r.input_ids = {bos.value_or(0)};
  r.params.temperature = 0;
  r.params.max_new_tokens = 1;
  r.params.ignore_eos = true;
  call.requests.push_back(std::move(r));
  auto run = start_run(std::move(call));
  if (!run->wait_for(20)) {
    run->abort();
    res.status = 503;
    res.set_content(error_json(503, "health_generate: no token within 20 s").dump(), "application/json");
    return;
  }
  const auto out = run->outputs().at(0);
  if (out.finish_reason.type == "abort") {
    res.status = 503;
    res.set_content(error_json(503, "health_generate: aborted: " + out.finish_reason.message).dump(), "application/json");
    return;
  }
  res.status = 200;
}

void EngineServer::on_model_info(const Req&, Res& res) {
  const auto& o = engine_->options();
  const auto& c = engine_->config();
  json j = {
      {"model_path", opts_.model_path},
      {"tokenizer_path", engine_->tokenizer() ? (o.tokenizer.empty() ? o.model.string() : o.tokenizer.string()) : ""},
      {"is_generation", true},
      {"preferred_sampling_params", nullptr},
      {"weight_version", engine_->weight_version()},
      {"has_image_understanding", false},
      {"has_audio_understanding", false},
      {"model_type", c.model_type},
      {"architectures", json::array({c.architecture})},
      {"served_model_name", metrics_name()},
      {"context_length", engine_->context_length()},
      {"vocab_size", c.vocab_size},
  };
  res.set_content(j.dump(), "application/json");
}

std::string EngineServer::metrics_name() const {
  const auto& o = engine_->options();
  return o.served_model_name.empty() ? o.model.filename().string() : o.served_model_name;
}

json EngineServer::server_info() const {
  const auto& o = engine_->options();
  const EngineStats s = engine_->stats();
  json j = {
      {"model_path", opts_.model_path},
      {"tokenizer_path", o.tokenizer.empty() ? o.model.string() : o.tokenizer.string()},
      {"served_model_name", metrics_name()},
      {"host", opts_.host},
      {"port", http_->port()},
      {"dtype", o.dtype},
      {"device", o.device},
      {"max_running_requests", o.max_running_requests},
      {"max_total_tokens", s.kv_tokens_total},
      {"kv_cache_tokens", o.kv_cache_tokens},
      {"page_size", o.block_size},
      {"chunked_prefill_size", o.max_prefill_tokens},
      {"context_length", engine_->context_length()},
      {"disable_radix_cache", !o.enable_prefix_cache},
      {"threads", o.threads},
      {"api_key", opts_.api_key.empty() ? json(nullptr) : json("<set>")},
      {"skip_tokenizer_init", engine_->tokenizer() == nullptr},
      {"version", std::string("rlhost ") + RLHOST_VERSION},
      {"start_time", start_time_},
  };
  for (auto& [k, v] : opts_.server_args.items())
    if (!j.contains(k)) j[k] = v;
  j["internal_states"] = json::array({stats_json(s)});
  return j;
}

void EngineServer::on_server_info(const Req&, Res& res) { res.set_content(server_info().dump(), "application/json"); }

// SGLang's /v1/loads: one entry per data-parallel rank (rlhost: one) plus an
// aggregate; slime's abort loop reads num_total_reqs from here.
json EngineServer::loads() const {
  const EngineStats s = engine_->stats();
  const int64_t max_running = engine_->options().max_running_requests;
  const double utilization = max_running > 0 ? static_cast<double>(s.num_running) / max_running : 0;
  json load = {
      {"dp_rank", 0},
      {"num_running_reqs", s.num_running},
      {"num_waiting_reqs", s.num_queued},
      {"num_total_reqs", s.num_running + s.num_queued},
      {"num_used_tokens", s.kv_tokens_used},
      {"max_total_num_tokens", s.kv_tokens_total},
      {"token_usage", s.token_usage},
      {"gen_throughput", s.gen_throughput},
      {"cache_hit_rate", s.cache_hit_rate},
      {"utilization", utilization},
      {"max_running_requests", max_running},
  };
  return {
      {"timestamp", unix_now()},
      {"version", std::string("rlhost ") + RLHOST_VERSION},
      {"dp_rank_count", 1},
      {"loads", json::array({load})},
      {"aggregate",
       {{"total_running_reqs", s.num_running},
        {"total_waiting_reqs", s.num_queued},
        {"total_reqs", s.num_running + s.num_queued},
        {"avg_token_usage", s.token_usage},
        {"avg_throughput", s.gen_throughput},
        {"avg_utilization", utilization}}},
  };
}

void EngineServer::on_loads(const Req&, Res& res) { res.set_content(loads().dump(), "application/json"); }

void EngineServer::on_metrics(const Req&, Res& res) {
  res.set_content(metrics_.render(engine_->stats()), "text/plain; version=0.0.4; charset=utf-8");
}

}  // namespace rl::engine
