// The engine's HTTP server: SGLang's native API (/generate, control endpoints,
// /metrics) and the OpenAI API (/v1/completions, /v1/chat/completions,
// /v1/models) over one rl::engine::Engine. docs/engine.md describes every
// endpoint and field.
//
// Threads: one event loop on its own thread serves every connection through
// rl::net::EventServer (keep-alive, pipelining, header/body deadlines, a cap on
// connections; no thread per connection). dispatch() is the one place a
// request arrives (method, path, headers, body): it checks auth, finds the
// route and turns exceptions into JSON errors. Quick endpoints answer on the
// loop; /generate and /v1/* submit to the engine on the loop and answer when
// the engine's scheduler thread posts the last update back (streams: each
// update); long operations (weights, profile, memory, cache, health_generate)
// run on a worker thread each and post their answer back. Nothing here
// touches Lua.
//
// Admission (server_admission.cpp): caps on sequences per request, sequences
// waiting and tokens in flight refuse work with 400/429 + Retry-After before
// anything is queued; when the engine goes idle after a burst, freed heap is
// returned to the OS.
//
// Files: server.cpp (lifecycle, routing, dispatch, workers, info endpoints),
// server_generate.cpp (/generate, deferred and SSE answers),
// server_admission.cpp (caps, in-flight accounting), server_control.cpp
// (cache, weights, memory, abort, profiler), server_weights.cpp (distributed
// weight sync), server_lora.cpp (LoRA adapters), server_openai.cpp (/v1/*),
// server_metrics.cpp (/metrics).
// LibTorch-free header; the profiler lives in runtime/profile/.
#pragma once
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/engine.hpp"
#include "engine/engine_http_weights.hpp"
#include "engine/generate_api.hpp"
#include "engine/pd_bridge.hpp"
#include "engine/server_metrics.hpp"
#include "net/event_server.hpp"

namespace rl {
class EventLoop;
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
  size_t max_connections = 4096;  // open client connections; beyond, new ones are closed at once
  double header_timeout_s = 30;   // a request not complete (head and body) by then: 408 and close
  double idle_timeout_s = 300;    // keep-alive connection with no request
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
  // Admission (0: no cap). A call over a cap is refused before anything is queued.
  int64_t max_sequences_per_request = 4096;  // prompts x n in one call: 400 beyond
  int64_t max_queued_requests = 16384;       // sequences admitted beyond max_running_requests: 429 beyond
  int64_t max_tokens_in_flight = 0;          // prompt + max_new_tokens of unfinished sequences: 429 beyond
  int64_t max_top_logprobs = 20;             // top log-probs per position a call may ask for: 400 beyond
  int64_t max_response_entries = int64_t{4} << 20;  // values a response may hold (CallLimits): 400 beyond
  double retry_after_s = 1;                  // Retry-After sent with 429/503
  // Prefill/decode disaggregation (engine/pd_bridge.hpp): mode "null" serves as one engine.
  PdOptions pd;
};

// What a handler answers. Handlers on the loop thread may instead keep
// `responder` and answer later (deferred = true): see respond_when_done().
struct Reply {
  int status = 200;
  std::string body;
  std::string content_type;
  net::ResponseHeaders headers;
  void set_content(std::string b, std::string type) {
    body = std::move(b);
    content_type = std::move(type);
  }
  void set_header(std::string name, std::string value) { headers.emplace_back(std::move(name), std::move(value)); }
  std::shared_ptr<net::Responder> responder;  // set for handlers that run on the loop thread
  bool deferred = false;
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
  // Graceful shutdown, first half: stops accepting connections, refuses new
  // generations (503, /health too) and waits up to `timeout_s` for the ones in
  // flight to finish. stop() then ends what is left.
  void drain(double timeout_s);
  // Stops accepting, aborts the requests this server submitted (their clients
  // get what was generated so far, finish_reason abort), closes connections,
  // joins the loop and worker threads. The engine is left running (its owner
  // stops it). Idempotent.
  void stop();

  Engine& engine() { return *engine_; }
  ServerMetrics& metrics() { return metrics_; }
  nlohmann::json server_info() const;  // /get_server_info's body
  std::string metrics_name() const;    // served model name (the model_name label)
  nlohmann::json loads() const;        // /v1/loads's body

 private:
  using Req = net::ServerRequest;
  using Res = Reply;
  using Handler = void (EngineServer::*)(const Req&, Res&);
  struct Route;

  // Loop thread: every request arrives here (auth, routing, errors, metrics).
  void dispatch(net::ServerRequest& req, std::shared_ptr<net::Responder> res);
  // Runs `fn` under the error wrapper: JSON errors (400 for BadRequest / bad
  // JSON, the refusal's status, 500 otherwise). Any thread.
  void run_handler(const Req& req, Res& res, Handler fn);
  // Inside a catch: res becomes the current exception's JSON error (what: for the log).
  void error_reply(const std::string& what, Res& res);
  bool on_loop_thread() const;
  // Called by a handler running on a worker thread (a large generation body): runs
  // fn(reply) on the loop instead, answering with what it leaves in the reply (or
  // what it defers); returns false on the loop thread, where the caller goes on.
  bool hand_to_loop(Res& res, std::function<void(Res&)> fn);
  // Loop thread: sends a finished Reply (and counts it in the metrics).
  void send(net::Responder& res, const Reply& r);
  // Runs a long handler on a worker thread; its reply is posted back to the loop.
  void run_on_worker(net::ServerRequest req, std::shared_ptr<net::Responder> res, Handler fn);
  void join_workers(bool all);
  // Runs fn on another thread's behalf: posts to the loop while it runs.
  bool post(std::function<void()> fn);
  bool authorized(const Req& req) const;

  // server.cpp
  void on_health(const Req&, Res&);
  void on_health_generate(const Req&, Res&);
  void on_model_info(const Req&, Res&);
  void on_server_info(const Req&, Res&);
  void on_loads(const Req&, Res&);
  void on_metrics(const Req&, Res&);
  // server_generate.cpp
  void on_generate(const Req&, Res&);
  // Loop thread. Submits `call` and answers once every request finished with
  // the JSON `body` returns; the request timeout and a client that goes away
  // abort the run.
  using BodyFormatter = std::function<std::string(const std::vector<RequestOutput>&)>;
  void respond_when_done(GenerateCall call, Res& res, BodyFormatter body);
  // SSE: each engine update becomes the `data:` payloads `format` returns;
  // `trailer` adds payloads after the last update; then `data: [DONE]`. A client
  // that goes away aborts the run.
  using ChunkFormatter = std::function<std::vector<std::string>(size_t index, const RequestOutput& out)>;
  void respond_stream(GenerateCall call, Res& res, ChunkFormatter format,
                      std::function<std::vector<std::string>(const std::vector<RequestOutput>&)> trailer = {});
  // Loop thread: stream `id` has updates queued (or finished).
  void drain_stream(uint64_t id);
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
  // server_weights_http.cpp: safetensors bodies over HTTP (engines on other hosts)
  void on_update_weights_from_safetensors(const Req&, Res&);
  // ... and a LoRA adapter's tensors by the same two paths
  void on_init_lora_shm(const Req&, Res&);
  void on_update_lora_from_shm(const Req&, Res&);
  void on_update_lora_from_distributed(const Req&, Res&);
  // server_lora.cpp: LoRA adapters
  void on_load_lora_adapter(const Req&, Res&);
  void on_unload_lora_adapter(const Req&, Res&);
  nlohmann::json loaded_adapters() const;  // {name: path}
  // server_openai.cpp
  void on_completions(const Req&, Res&);
  void on_chat_completions(const Req&, Res&);
  void on_models(const Req&, Res&);
  // server_pd.cpp: prefill/decode disaggregation
  void on_disagg_kv(const Req&, Res&);
  void dispatch_bootstrap(net::ServerRequest& req, std::shared_ptr<net::Responder> res);

 public:
  // Admits and submits a call, tracked for /abort_request, admission and
  // metrics; throws Refused (a cap, or stopping) or BadRequest from
  // submission. Used by /generate, /v1/*, /health_generate.
  std::shared_ptr<GenerateRun> start_run(GenerateCall call, GenerateRun::Listener listener = {});
  // Aborts runs whose requests carry `rid` (exactly, or as a fan-out "<rid>-<j>").
  int64_t abort_rid(const std::string& rid);

 private:
  // server_admission.cpp. Called by start_run (any thread): throws Refused
  // when `call` does not fit; otherwise counts it in flight until finish().
  struct Admitted {
    int64_t sequences = 0, tokens = 0;
  };
  Admitted admit(const GenerateCall& call);
  void finish(const Admitted& a);  // scheduler thread, once per admitted call
  void trim_heap_when_idle();      // loop thread
  void note_response_bytes(size_t bytes);  // loop thread: a large answer went out (trim soon)

  // Shared with closures that outlive a call (engine listeners on the
  // scheduler thread): cleared by stop() so they stop posting to the loop.
  struct Link {
    std::mutex mu;
    EventLoop* loop = nullptr;
  };

  std::shared_ptr<Engine> engine_;
  ServerOptions opts_;
  CallLimits limits_;  // from opts_, plus the prompt-text bound of the engine's context
  ServerMetrics metrics_;
  std::unique_ptr<EventLoop> loop_;
  std::unique_ptr<net::EventServer> http_;
  std::thread loop_thread_;
  std::thread::id loop_id_;  // set by the loop thread as it starts
  std::shared_ptr<Link> link_ = std::make_shared<Link>();
  std::unique_ptr<PdBridge> pd_;  // prefill/decode disaggregation, or none (loop thread)
  std::atomic<bool> stopping_{false};
  std::atomic<bool> draining_{false};
  double start_time_ = 0;

  // Worker threads for long handlers; finished ones are joined as new ones start.
  struct Worker {
    std::thread thread;
    std::shared_ptr<std::atomic<bool>> done;
  };
  std::mutex workers_mu_;
  std::vector<Worker> workers_;

  // Deferred answers and streams by run (loop thread only).
  struct Deferred;
  struct Stream;
  uint64_t next_deferred_ = 1;
  std::unordered_map<uint64_t, std::shared_ptr<Deferred>> deferred_;
  std::unordered_map<uint64_t, std::shared_ptr<Stream>> streams_;

  // In flight through this server (admission): sequences, tokens, and the peak
  // since the heap was last trimmed.
  std::atomic<int64_t> seqs_in_flight_{0};
  std::atomic<int64_t> tokens_in_flight_{0};
  std::atomic<int64_t> seqs_since_trim_{0};
  std::atomic<int64_t> bytes_since_trim_{0};

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
  std::shared_ptr<dist::ProcessGroup> joined_group(const std::string& name, const char* ep);  // or 400
  bool receive_in_group(const std::string& name, Res& res, const std::function<void()>& receive);
  // An update over HTTP in several requests, staged until its last (server_weights_http.cpp).
  WeightStaging weight_staging_;
};

// EngineStats under their own names (plus SGLang's num_running_reqs /
// num_queue_reqs / last_gen_throughput): /get_server_info's internal_states and
// rl.engine handles' :stats() in both modes.
nlohmann::json stats_json(const EngineStats& s);

// One LoRA adapter as /get_server_info and the load reply describe it.
nlohmann::json lora_json(const LoraInfo& a);

// The request body as JSON; BadRequest on malformed or (unless allow_empty) empty bodies.
nlohmann::json parse_json_body(const net::ServerRequest& req, bool allow_empty = false);
// The same, keeping the client's key order (chat templates render tool schemas).
nlohmann::ordered_json parse_json_body_ordered(const net::ServerRequest& req);

// {"error": {"message", "type": "BadRequest", "code": 400}}
nlohmann::json error_json(int code, const std::string& message);

// Sets res to `status` with j as its JSON body.
void reply_json(Reply& res, int status, const nlohmann::json& j);

}  // namespace rl::engine
