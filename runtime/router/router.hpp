// The router: an HTTP front (sglang-router's surface) over a set of workers
// (native engines, SGLang or vLLM servers), on its own thread and event loop.
//
// Why its own thread: a router started from a recipe must never stall on the
// recipe's Lua loop (a long reward function) nor stall it; and a standalone
// `rlhost router` is the same object with nothing else running.
//
// Everything inside runs on the router's loop: EventServer for clients,
// HttpClient (libcurl multi, keep-alive pools) for workers. The public methods
// below are thread-safe: they post to that loop and wait for the answer.
// See docs/router.md.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "router/policies.hpp"
#include "router/worker_registry.hpp"

namespace rl::router {

struct RouterOptions {
  std::string host = "127.0.0.1";
  int port = 0;               // 0 = a free port (see port())
  bool allow_remote = false;  // bind a non-loopback host
  // Worker changes (/add_worker, /remove_worker, POST /workers, DELETE
  // /workers/X) and /flush_cache need `Authorization: Bearer <admin_token>`,
  // also on loopback; the router sends it on to workers' /flush_cache. Empty:
  // those endpoints refuse every request (base/admin_token.hpp has the run's).
  std::string admin_token;
  bool allow_link_local_workers = false;  // worker URLs on 169.254/16 or fe80::/10
  std::string policy = "cache_aware";
  PolicyOptions policy_opts;
  BreakerOptions breaker;
  std::vector<std::string> workers;

  // Prefill/decode disaggregation (sglang-router's PD mode; docs/router.md): each
  // generation goes to one prefill and one decode worker at once, with the prefill's
  // KV bootstrap address added to the body. Prefill and decode workers exist only
  // in this mode.
  struct PrefillWorker {
    std::string url;
    int bootstrap_port = 0;  // 0: ask the worker (GET /server_info's disaggregation_bootstrap_port)
  };
  bool pd_disaggregation = false;
  std::vector<PrefillWorker> prefill;
  std::vector<std::string> decode;
  std::string prefill_policy;  // "": the policy
  std::string decode_policy;   // "": the policy

  double health_interval_s = 5;    // probe period per worker
  double health_timeout_s = 2;
  int health_failure_threshold = 2;  // consecutive failed probes -> unhealthy
  int health_success_threshold = 1;  // consecutive good probes -> healthy again
  std::string health_path = "/health";

  int max_retries = 3;               // extra attempts on other workers (connect error / 5xx, before streaming)
  double retry_backoff_s = 0.02;     // first backoff; doubles per attempt, with jitter
  double retry_max_backoff_s = 1.0;
  double request_timeout_s = 600;    // whole request, retries included (504 after)
  double connect_timeout_s = 5;
  double metrics_timeout_s = 5;      // /engine_metrics and /flush_cache fan-out per worker
  int max_conns_per_worker = 2048;   // upstream transfers per worker at once (the rest queue FIFO)
  size_t max_body_bytes = 256u << 20;
  size_t max_connections = 20000;    // client connections
  double idle_timeout_s = 60;
};

struct WorkerInfo {
  uint64_t id = 0;
  std::string url;
  bool healthy = false;        // probed healthy (false while pending)
  std::string status;          // "pending" (not probed yet), "healthy", "unhealthy"
  int load = 0;
  std::string circuit;
  uint64_t requests = 0;
  uint64_t failures = 0;
  std::string last_error;
  std::string type = "regular";  // "regular", "prefill" or "decode"
  int bootstrap_port = 0;        // prefill: the KV bootstrap port (0 while unknown)
};

class Router {
 public:
  // Validates options (throws std::invalid_argument naming the bad one).
  explicit Router(RouterOptions opts);
  ~Router();  // stop()
  Router(const Router&) = delete;
  Router& operator=(const Router&) = delete;

  // Binds (throws std::runtime_error with host:port and reason) and starts the thread.
  void start();
  // Stops serving, closes connections and joins the thread. Idempotent.
  void stop();
  bool running() const;

  int port() const;
  std::string url() const;
  const RouterOptions& options() const;

  // Thread-safe control. add_worker: "" on success, else why not (a bad URL, a
  // prefill/decode worker without PD mode, a regular one in it, a bad bootstrap port).
  std::string add_worker(const std::string& url, WorkerInfo* added = nullptr,
                         WorkerType type = WorkerType::regular, int bootstrap_port = 0);
  bool remove_worker(const std::string& id_or_url);
  std::vector<WorkerInfo> workers();
  std::string metrics_text();

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace rl::router
