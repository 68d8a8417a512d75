// EngineServer: construction, stop, routing (dispatch: the one place a request
// arrives), worker threads for long handlers, the error/auth wrapper every handler goes
// through, and the read-only info endpoints (/health, /get_model_info,
// /get_server_info, /v1/loads, /metrics).
#include "engine/server.hpp"

#include "base/admin_token.hpp"
#include "base/json_input.hpp"

#include "base/log_text.hpp"

#include <chrono>
#include <cmath>
#include <condition_variable>
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
      {"num_decode_prealloc_queue_reqs", s.pd_prealloc},
      {"num_decode_transfer_queue_reqs", s.pd_transfer},
      {"steps", s.steps},
      {"cuda_graphs", s.cuda_graphs},
      {"cuda_graph_steps", s.cuda_graph_steps},
      {"overlap_steps", s.overlap_steps},
      {"weight_version", s.weight_version},
      {"memory_released", s.memory_released},
      {"lora_adapters", s.lora_adapters},
  };
}

void reply_json(Reply& res, int status, const json& j) {
  res.status = status;
  res.set_content(json_input::dump_reply(j), "application/json");  // messages may quote client bytes
}

json error_json(int code, const std::string& message) {
  const char* type = code == 400 ? "BadRequest" : code == 401 ? "Unauthorized" : code == 404 ? "NotFound"
                     : code == 429 ? "TooManyRequests" : code == 503 ? "ServiceUnavailable" : "InternalServerError";
  return {{"error", {{"message", message}, {"type", type}, {"code", code}}}};
}

// ---- routes --------------------------------------------------------------------------

struct EngineServer::Route {
  const char* method;
  const char* path;
  bool control;  // needs the api key when one is set
  bool worker;   // may block (engine control, weights, profile): runs on a worker thread
  Handler fn;
  bool generation = false;  // parses a prompt: on a worker thread when the body is large
};

namespace {

// Long operations (weight loads, profiles, collectives) at once; beyond: 503.
constexpr size_t kMaxWorkers = 16;
// A generation body above this is parsed and tokenized on a worker thread.
constexpr size_t kParseOnLoopBytes = 64 * 1024;

}  // namespace

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
  limits_.max_sequences = opts_.max_sequences_per_request;
  limits_.max_top_logprobs = opts_.max_top_logprobs;
  limits_.max_response_entries = opts_.max_response_entries;
  limits_.max_text_bytes = text_bytes_bound(*engine_);
  limits_.pd_fields = opts_.pd.mode != "null";
  if (opts_.admin_token.empty()) opts_.admin_token = admin_token();
  net::EventServer::Options so;
  so.host = opts_.host;
  so.port = opts_.port;
  so.allow_remote = !loopback;  // only reachable with an api key (checked above)
  so.max_connections = opts_.max_connections;
  so.header_timeout_s = opts_.header_timeout_s;
  so.idle_timeout_s = opts_.idle_timeout_s;
  so.name = "engine server";
  loop_ = std::make_unique<EventLoop>();
  http_ = std::make_unique<net::EventServer>(*loop_, so, [this](net::ServerRequest& req, std::shared_ptr<net::Responder> res) {
    dispatch(req, std::move(res));
  });
  try {
    http_->start();
  } catch (const std::exception& e) {
    throw Error(e.what());
  }
  link_->loop = loop_.get();
  if (opts_.pd.mode != "null") {
    // Each side calls the other's control endpoint with this: the --api-key when given
    // (the same on every engine of a deployment), else the run's admin token.
    opts_.pd.admin_token = opts_.api_key.empty() ? opts_.admin_token : opts_.api_key;
    if (opts_.pd.advertise_url.empty()) opts_.pd.advertise_url = http_->url();
    if (opts_.pd.bootstrap_host.empty()) opts_.pd.bootstrap_host = opts_.host;
    // The engine may call back after this server is gone (it outlives it): through the
    // link, which stop() clears, never through `this`.
    pd_ = std::make_unique<PdBridge>(*engine_, *loop_, opts_.pd, [link = link_](std::function<void()> fn) {
      std::lock_guard lk(link->mu);
      if (!link->loop) return false;
      link->loop->post(std::move(fn));
      return true;
    });
    pd_->on_transfer = [this](const PdBridge::TransferStat& t) { metrics_.observe_transfer(t.bytes, t.seconds); };
    metrics_.set_pd_mode(opts_.pd.mode);
    if (pd_->prefill())
      pd_->start_bootstrap([this](net::ServerRequest& req, std::shared_ptr<net::Responder> res) {
        dispatch_bootstrap(req, std::move(res));
      });
  }
  loop_thread_ = std::thread([this] {
    loop_id_ = std::this_thread::get_id();  // before any request: workers start from the loop
    loop_->run();
  });
  log::info("engine server: serving " + opts_.model_path + " on " + http_->url());
}

EngineServer::~EngineServer() { stop(); }

std::string EngineServer::url() const { return http_->url(); }
int EngineServer::port() const { return http_->port(); }

bool EngineServer::post(std::function<void()> fn) {
  std::lock_guard lk(link_->mu);
  if (!link_->loop) return false;
  link_->loop->post(std::move(fn));
  return true;
}

void EngineServer::drain(double timeout_s) {
  if (stopping_ || draining_.exchange(true)) return;
  if (loop_thread_.joinable()) post([this] { http_->stop_accepting(); });
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(std::max(0.0, timeout_s));
  while (seqs_in_flight_.load() > 0 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
}

void EngineServer::stop() {
  if (stopping_.exchange(true)) return;
  // What this server submitted ends now rather than when the engine gets to
  // it; the aborted calls' answers (what was generated, finish_reason abort)
  // get a moment to go out before the connections close.
  std::vector<std::shared_ptr<GenerateRun>> live;
  {
    std::lock_guard lk(runs_mu_);
    for (auto& [id, w] : runs_)
      if (auto r = w.lock()) live.push_back(std::move(r));
  }
  for (auto& r : live) r->abort();
  if (loop_thread_.joinable()) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(2);
    while (seqs_in_flight_.load() > 0 && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    // On the loop (after the answers posted so far): stop accepting, close
    // every connection, drop what is pending.
    std::mutex mu;
    std::condition_variable cv;
    bool done = false;
    loop_->post([&] {
      if (pd_) pd_->stop();
      http_->stop();
      deferred_.clear();
      streams_.clear();
      std::lock_guard lk(mu);
      done = true;
      cv.notify_one();
    });
    {
      std::unique_lock lk(mu);
      cv.wait(lk, [&] { return done; });
    }
    {
      std::lock_guard lk(link_->mu);
      link_->loop = nullptr;  // engine listeners stop posting
      loop_->stop();
    }
    loop_thread_.join();
  }
  join_workers(true);
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

// ---- dispatch ------------------------------------------------------------------------

void EngineServer::dispatch(net::ServerRequest& req, std::shared_ptr<net::Responder> res) {
  static const Route routes[] = {
      {"GET", "/health", false, false, &EngineServer::on_health},
      {"GET", "/health_generate", false, true, &EngineServer::on_health_generate},
      {"GET", "/get_model_info", false, false, &EngineServer::on_model_info},
      {"GET", "/get_server_info", false, false, &EngineServer::on_server_info},
      {"GET", "/v1/loads", false, false, &EngineServer::on_loads},
      {"GET", "/metrics", false, false, &EngineServer::on_metrics},
      {"POST", "/generate", false, false, &EngineServer::on_generate, true},
      {"POST", "/flush_cache", true, true, &EngineServer::on_flush_cache},
      {"GET", "/flush_cache", true, true, &EngineServer::on_flush_cache},
      {"POST", "/abort_request", true, false, &EngineServer::on_abort_request},
      {"POST", "/update_weights_from_disk", true, true, &EngineServer::on_update_weights_from_disk},
      {"POST", "/init_weights_update_group", true, true, &EngineServer::on_init_weights_update_group},
      {"POST", "/update_weights_from_distributed", true, true, &EngineServer::on_update_weights_from_distributed},
      {"POST", "/destroy_weights_update_group", true, true, &EngineServer::on_destroy_weights_update_group},
      {"POST", "/init_weights_shm", true, true, &EngineServer::on_init_weights_shm},
      {"POST", "/update_weights_from_shm", true, true, &EngineServer::on_update_weights_from_shm},
      {"POST", "/update_weights_from_safetensors", true, true, &EngineServer::on_update_weights_from_safetensors},
      {"POST", "/load_lora_adapter", true, true, &EngineServer::on_load_lora_adapter},
      {"POST", "/init_lora_shm", true, true, &EngineServer::on_init_lora_shm},
      {"POST", "/update_lora_from_shm", true, true, &EngineServer::on_update_lora_from_shm},
      {"POST", "/update_lora_from_distributed", true, true, &EngineServer::on_update_lora_from_distributed},
      {"POST", "/unload_lora_adapter", true, true, &EngineServer::on_unload_lora_adapter},
      {"POST", "/release_memory_occupation", true, true, &EngineServer::on_release_memory},
      {"POST", "/resume_memory_occupation", true, true, &EngineServer::on_resume_memory},
      {"POST", "/start_profile", true, true, &EngineServer::on_start_profile},
      {"GET", "/start_profile", true, true, &EngineServer::on_start_profile},
      {"POST", "/stop_profile", true, true, &EngineServer::on_stop_profile},
      {"GET", "/stop_profile", true, true, &EngineServer::on_stop_profile},
      {"POST", "/v1/completions", false, false, &EngineServer::on_completions, true},
      {"POST", "/v1/chat/completions", false, false, &EngineServer::on_chat_completions, true},
      {"GET", "/v1/models", false, false, &EngineServer::on_models},
      {"POST", "/disagg/kv", true, false, &EngineServer::on_disagg_kv},
  };
  // HEAD is served by GET routes (the event server drops the body).
  const std::string_view method = req.method == "HEAD" ? std::string_view("GET") : std::string_view(req.method);
  const Route* route = nullptr;
  bool path_known = false;
  for (const Route& r : routes) {
    if (req.path != r.path) continue;
    path_known = true;
    if (method == r.method) {
      route = &r;
      break;
    }
  }
  Reply reply;
  if (!route) {
    const int code = path_known ? 405 : 404;
    reply_json(reply, code, error_json(code, (path_known ? "method not allowed: " : "no endpoint ") + req.method + " " + json_input::excerpt(req.path)));
    send(*res, reply);
    return;
  }
  if (route->control && !authorized(req)) {
    reply_json(reply, 401,
               error_json(401, json_input::excerpt(req.path) +
                                   " is a control endpoint: it needs 'Authorization: Bearer <token>' with the run's admin "
                                   "token ($RLHOST_ADMIN_TOKEN of the process that started the engine; `rlhost engine` "
                                   "prints where it is saved)" +
                                   std::string(opts_.api_key.empty() ? "" : " or the --api-key")));
    send(*res, reply);
    return;
  }
  // Long operations, and generation requests whose body is large enough that parsing
  // and tokenizing it would hold the loop (every other connection) for a while, run on
  // a worker thread; a generation then hands its run back to the loop.
  // (A prefill/decode engine parses them on the loop: their rooms live there.)
  if (route->worker || (route->generation && !pd_ && req.body.size() > kParseOnLoopBytes)) {
    run_on_worker(std::move(req), std::move(res), route->fn);
    return;
  }
  reply.responder = res;
  run_handler(req, reply, route->fn);
  if (!reply.deferred) send(*res, reply);
}

void EngineServer::run_handler(const Req& req, Res& res, Handler fn) {
  try {
    (this->*fn)(req, res);
  } catch (...) {
    error_reply(req.method + " " + req.path, res);
  }
  if (res.deferred && res.status >= 400) res.deferred = false;  // failed before handing off: answer now
}

void EngineServer::error_reply(const std::string& what, Res& res) {
  auto fail = [&](int code, const std::string& msg) {
    res.headers.clear();
    reply_json(res, code, error_json(code, msg));
  };
  try {
    throw;
  } catch (const Refused& e) {
    metrics_.count_rejected(e.cap);
    fail(e.status, e.what());
    if (e.retry_after_s > 0) res.set_header("Retry-After", std::to_string(static_cast<int64_t>(std::ceil(e.retry_after_s))));
  } catch (const BadRequest& e) {
    fail(400, e.what());
  } catch (const nlohmann::json::exception& e) {
    // Type errors from reading the client's JSON (a string where a number goes).
    fail(400, std::string("bad request body: ") + e.what());
  } catch (const std::exception& e) {
    log::text(log::Level::error, "engine server: " + what + " failed: " + e.what());
    fail(500, e.what());
  } catch (...) {
    log::text(log::Level::error, "engine server: " + what + " failed");
    fail(500, "internal error");
  }
}

bool EngineServer::on_loop_thread() const { return std::this_thread::get_id() == loop_id_; }

bool EngineServer::hand_to_loop(Res& res, std::function<void(Res&)> fn) {
  if (on_loop_thread()) return false;
  res.deferred = true;
  std::shared_ptr<net::Responder> responder = res.responder;
  post([this, responder, fn = std::move(fn)] {
    if (!responder->alive()) return;  // the client left while its request was parsed
    Reply r;
    r.responder = responder;
    try {
      fn(r);
    } catch (...) {
      error_reply("handing a request to the loop", r);
      r.deferred = false;
    }
    if (!r.deferred) send(*responder, r);
  });
  return true;
}

void EngineServer::send(net::Responder& res, const Reply& r) {
  metrics_.count_http(r.status);
  net::ResponseHeaders h = r.headers;
  if (!r.content_type.empty()) h.emplace_back("Content-Type", r.content_type);
  res.send(r.status, h, r.body);
}

void EngineServer::run_on_worker(net::ServerRequest req, std::shared_ptr<net::Responder> res, Handler fn) {
  join_workers(false);
  std::lock_guard lk(workers_mu_);
  if (workers_.size() >= kMaxWorkers) {
    Reply r;
    reply_json(r, 503, error_json(503, req.path + ": " + std::to_string(kMaxWorkers) +
                                           " long operations are already running (hint: retry when one finished)"));
    r.set_header("Retry-After", std::to_string(static_cast<int64_t>(std::ceil(opts_.retry_after_s))));
    send(*res, r);
    return;
  }
  auto done = std::make_shared<std::atomic<bool>>(false);
  std::thread t([this, req = std::move(req), res = std::move(res), fn, done]() mutable {
    auto reply = std::make_shared<Reply>();
    reply->responder = res;  // a generation hands its run back to the loop with it (hand_to_loop)
    run_handler(req, *reply, fn);
    if (!reply->deferred) post([this, res = std::move(res), reply] { send(*res, *reply); });
    done->store(true);
  });
  workers_.push_back({std::move(t), std::move(done)});
}

void EngineServer::join_workers(bool all) {
  std::vector<std::thread> joinable;
  {
    std::lock_guard lk(workers_mu_);
    for (auto it = workers_.begin(); it != workers_.end();) {
      if (all || it->done->load()) {
        joinable.push_back(std::move(it->thread));
        it = workers_.erase(it);
      } else {
        ++it;
      }
    }
  }
  for (auto& t : joinable) t.join();
}

// Control endpoints: 'Authorization: Bearer <admin token or api key>', even on loopback.
bool EngineServer::authorized(const Req& req) const {
  return bearer_matches(std::string(req.header("authorization")), opts_.admin_token, opts_.api_key);
}

// ---- runs ----------------------------------------------------------------------------

std::shared_ptr<GenerateRun> EngineServer::start_run(GenerateCall call, GenerateRun::Listener listener) {
  if (stopping_ || draining_) throw Refused(503, "stopping", "engine server is shutting down", opts_.retry_after_s);
  const Admitted admitted = admit(call);  // throws Refused
  ServerMetrics* m = &metrics_;
  std::shared_ptr<Link> link = link_;
  // The listener may outlive this server (an aborted run's last update): it
  // reaches the server only while the link is set.
  auto observed = [this, m, link, admitted, listener = std::move(listener)](size_t i, const RequestOutput& out, bool last) {
    std::lock_guard lk(link->mu);
    if (!link->loop) return;
    if (out.finished) m->observe(out);
    if (last) finish(admitted);  // before the listener answers: a client that got its answer sees the room
    if (listener) listener(i, out, last);
  };
  std::shared_ptr<GenerateRun> run;
  try {
    run = GenerateRun::start(*engine_, std::move(call), std::move(observed));
  } catch (...) {
    finish(admitted);
    throw;
  }
  std::lock_guard lk(runs_mu_);
  // Forget finished runs as we go (the map only serves /abort_request and stop()).
  for (auto it = runs_.begin(); it != runs_.end();) it = it->second.expired() ? runs_.erase(it) : std::next(it);
  runs_.emplace(next_run_++, run);
  return run;
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
  if (stopping_ || draining_) {
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
  j["disaggregation_mode"] = opts_.pd.mode;
  if (pd_ && pd_->prefill()) j["disaggregation_bootstrap_port"] = pd_->bootstrap_port();
  if (pd_) j["disaggregation_transfer_backend"] = opts_.pd.transfer_backend;
  j["max_loras_per_batch"] = o.max_loras_per_batch;
  j["max_lora_rank"] = o.max_lora_rank;
  j["lora_paths"] = loaded_adapters();  // loaded now: {name: path}
  j["lora_adapters"] = json::array();
  for (const LoraInfo& a : engine_->lora_adapters()) j["lora_adapters"].push_back(lora_json(a));
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
  ServerMetrics::PdQueues q;
  if (pd_) q = {pd_->bootstrap_queue(), pd_->inflight_queue()};
  res.set_content(metrics_.render(engine_->stats(), q), "text/plain; version=0.0.4; charset=utf-8");
}

}  // namespace rl::engine
