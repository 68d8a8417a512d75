// The engine's HTTP server: SGLang's native API (/generate, control endpoints,
// /metrics) and the OpenAI API (/v1/completions, /v1/chat/completions,
// /v1/models) over one rl::engine::Engine. docs/engine.md describes every
// endpoint and field.
//
// Threads: handlers are synchronous on rl::net::HttpServer's workers (one per
// connection); a /generate handler blocks its worker until the engine finishes
// (or, streaming, writes each update). The engine's scheduler thread only
// copies outputs and notifies. Nothing here touches Lua.
//
// Files: server.cpp (routing, errors, auth, info endpoints), server_generate.cpp
// (/generate), server_control.cpp (cache, weights, memory, abort, profiler),
// server_openai.cpp (/v1/*), server_metrics.cpp (/metrics). LibTorch-free
// header; the profiler lives in runtime/profile/.
#pragma once
#include <atomic>
#include <functional>
#include <vector>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include <nlohmann/json.hpp>

#include "engine/engine.hpp"
#include "engine/generate_api.hpp"
#include "engine/server_metrics.hpp"

namespace httplib {
struct Request;
struct Response;
}  // namespace httplib

namespace rl::net {
class HttpServer;
}
namespace rl::profile {
class TorchProfiler;
}
namespace rl::dist {
class ProcessGroup;
}

namespace rl::engine {

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 0;              // 0: an ephemeral port
  int threads = 256;         // HTTP workers: one per open client connection
  // Bearer token for the control endpoints (weights, memory, profile, abort,
  // flush). Required when `host` is not loopback; optional otherwise.
  std::string api_key;
  // The run's admin token (base/admin_token.hpp; "" = that one): control
  // endpoints need it, or api_key, even on loopback, so other local users
  // cannot drive the engine.
  std::string admin_token;
  std::string model_path;    // reported by /get_model_info (default: engine options)
  double request_timeout_s = 3600;  // a non-streaming /generate waits at most this long
  nlohmann::json server_args = nlohmann::json::object();  // extra args echoed by /get_server_info
};

class EngineServer {
 public:
  // Binds (port known afterwards) and starts serving. Throws rl::Error
  // (port in use, non-loopback host without api_key, ...).
  EngineServer(std::shared_ptr<Engine> engine, ServerOptions opts);
  ~EngineServer();  // stop()
  EngineServer(const EngineServer&) = delete;
  EngineServer& operator=(const EngineServer&) = delete;

  std::string url() const;
  int port() const;
  // Aborts streaming and waiting requests' waits, stops serving, joins the
  // workers. The engine is left running (its owner stops it). Idempotent.
  void stop();

  Engine& engine() { return *engine_; }
  ServerMetrics& metrics() { return metrics_; }
  nlohmann::json server_info() const;  // /get_server_info's body
  std::string metrics_name() const;    // served model name (the model_name label)
  nlohmann::json loads() const;        // /v1/loads's body

 private:
  using Req = httplib::Request;
  using Res = httplib::Response;
  friend struct ServerRoutes;

  void add_routes();
  // Wraps a handler: JSON errors (400 for BadRequest / bad JSON, 500 otherwise),
  // auth for control endpoints, metrics of response codes.
  void handle(const Req& req, Res& res, bool control, void (EngineServer::*fn)(const Req&, Res&));
  // Control endpoints: 'Authorization: Bearer <admin token or api key>'.
  bool control_authorized(const Req& req) const;

  // server.cpp
  void on_health(const Req&, Res&);
  void on_health_generate(const Req&, Res&);
  void on_model_info(const Req&, Res&);
  void on_server_info(const Req&, Res&);
  void on_loads(const Req&, Res&);
  void on_metrics(const Req&, Res&);
  // server_generate.cpp
  void on_generate(const Req&, Res&);
  // SSE: each engine update becomes the `data:` payloads `format` returns;
  // `trailer` adds payloads after the last update; then `data: [DONE]`. A client
  // that goes away aborts the run.
  using ChunkFormatter = std::function<std::vector<std::string>(size_t index, const RequestOutput& out)>;
  void respond_stream(GenerateCall call, Res& res, ChunkFormatter format,
                      std::function<std::vector<std::string>(const std::vector<RequestOutput>&)> trailer = {});
  // server_control.cpp
  void on_flush_cache(const Req&, Res&);
  void on_abort_request(const Req&, Res&);
  void on_update_weights_from_disk(const Req&, Res&);
  void on_release_memory(const Req&, Res&);
  void on_resume_memory(const Req&, Res&);
  void on_start_profile(const Req&, Res&);
  void on_stop_profile(const Req&, Res&);
  // server_weights.cpp: distributed weight sync (SGLang's endpoints)
  void on_init_weights_update_group(const Req&, Res&);
  void on_update_weights_from_distributed(const Req&, Res&);
  void on_destroy_weights_update_group(const Req&, Res&);
  void on_init_weights_shm(const Req&, Res&);
  void on_update_weights_from_shm(const Req&, Res&);
  // server_openai.cpp
  void on_completions(const Req&, Res&);
  void on_chat_completions(const Req&, Res&);
  void on_models(const Req&, Res&);

 public:
  // Runs a call to completion, tracked for /abort_request and metrics; throws
  // BadRequest from submission. Used by /generate, /v1/*, /health_generate.
  std::shared_ptr<GenerateRun> start_run(GenerateCall call, GenerateRun::Listener listener = {});
  std::vector<RequestOutput> run_blocking(GenerateCall call);
  // Aborts runs whose requests carry `rid` (exactly, or as a fan-out "<rid>-<j>").
  int64_t abort_rid(const std::string& rid);

 private:
  std::shared_ptr<Engine> engine_;
  ServerOptions opts_;
  ServerMetrics metrics_;
  std::unique_ptr<net::HttpServer> http_;
  std::atomic<bool> stopping_{false};
  double start_time_ = 0;

  mutable std::mutex runs_mu_;
  uint64_t next_run_ = 1;
  std::unordered_map<uint64_t, std::weak_ptr<GenerateRun>> runs_;  // in flight

  // Profiler state (server_control.cpp): guarded by prof_mu_; start/stop run on
  // the engine's scheduler thread.
  // The profiler object is only touched on the scheduler thread (start and stop
  // run there through run_between_steps, auto-stop in the step hook). prof_mu_
  // serialises the handlers and may be held while waiting for the engine;
  // prof_state_mu_ guards the results and is never held while waiting.
  std::mutex prof_mu_;
  std::unique_ptr<profile::TorchProfiler> profiler_;
  std::atomic<int64_t> prof_steps_left_{0};  // > 0: auto-stop after that many engine steps
  std::mutex prof_state_mu_;
  std::vector<std::string> prof_paths_;      // traces written, oldest first
  std::string prof_error_;                   // last auto-stop failure
  bool prof_hook_installed_ = false;
  void finish_profile_on_engine_thread();    // scheduler thread

  // Weight-update groups by name (server_weights.cpp). A group's collectives run
  // under its own mutex; groups_mu_ only guards the map.
  std::mutex groups_mu_;
  std::unordered_map<std::string, std::shared_ptr<dist::ProcessGroup>> weight_groups_;
  std::shared_ptr<dist::ProcessGroup> weight_group(const std::string& name);
};

// EngineStats under their own names (plus SGLang's num_running_reqs /
// num_queue_reqs / last_gen_throughput): /get_server_info's internal_states and
// rl.engine handles' :stats() in both modes.
nlohmann::json stats_json(const EngineStats& s);

// The request body as JSON; BadRequest on malformed or (unless allow_empty) empty bodies.
nlohmann::json parse_json_body(const httplib::Request& req, bool allow_empty = false);

// {"error": {"message", "type": "BadRequest", "code": 400}}
nlohmann::json error_json(int code, const std::string& message);

// Sets res to `status` with j as its JSON body.
void reply_json(httplib::Response& res, int status, const nlohmann::json& j);

}  // namespace rl::engine
