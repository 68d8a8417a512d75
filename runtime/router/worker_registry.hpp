// The router's workers: identity, health (from probes), circuit breaker (from
// request outcomes) and load (requests in flight through this router).
//
// Two independent signals decide whether a worker gets traffic:
//  * health: the periodic GET /health probe; `failure_threshold` consecutive
//    failures mark it unhealthy, `success_threshold` successes bring it back.
//    A new worker is *pending* until its first probe: shown as not healthy, and
//    given traffic only while no probed-healthy worker can take it;
//  * circuit breaker: consecutive request failures (connect errors, 5xx) open
//    the circuit for `open_s`; then it is half-open and lets one trial request
//    through: success closes it, failure opens it again.
// Loop-thread only (the router's own loop); no locking.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace rl::router {

enum class Circuit { closed, open, half_open };
const char* circuit_name(Circuit c);

// A worker's role: a plain engine, or one side of prefill/decode disaggregation
// (docs/router.md#prefilldecode-disaggregation). Prefill and decode workers only
// exist in a router started in PD mode.
enum class WorkerType { regular, prefill, decode };
const char* worker_type_name(WorkerType t);
// "regular", "prefill" or "decode"; false for anything else.
bool parse_worker_type(std::string_view s, WorkerType& out);

struct BreakerOptions {
  int failure_threshold = 5;  // consecutive request failures that open the circuit
  int success_threshold = 1;  // trial successes in half-open that close it
  double open_s = 5;          // how long it stays open before a trial
};

struct Worker {
  uint64_t id = 0;
  std::string url;  // "http://host:port", no trailing slash
  WorkerType type = WorkerType::regular;
  // Prefill workers: the KV bootstrap port decode workers connect to. 0 while
  // unknown (not given: asked from the worker's /server_info), -1 when the worker
  // said it has none (requests then carry bootstrap_port null, as sglang-router's).
  int bootstrap_port = 0;
  bool bootstrap_asking = false;  // a /server_info request for it is in flight
  bool healthy = true;
  bool pending = true;       // no probe has answered yet
  int probe_failures = 0;    // consecutive failed health probes
  int probe_successes = 0;   // consecutive good ones (while unhealthy)
  std::string last_error;    // last probe or request failure
  Circuit circuit = Circuit::closed;
  int request_failures = 0;  // consecutive, for the breaker
  int trial_successes = 0;
  double opened_at = 0;
  bool trial_in_flight = false;
  int in_flight = 0;         // requests through this router now
  uint64_t requests = 0;     // dispatched in total
  uint64_t failures = 0;     // connect errors and 5xx in total
  uint64_t circuit_opens = 0;
  double next_probe_at = 0;  // health prober's schedule (loop clock)
  bool probing = false;
};

class WorkerRegistry {
 public:
  explicit WorkerRegistry(BreakerOptions breaker = {}) : breaker_(breaker) {}

  // Normalises `url` ("host:port" gets "http://", the trailing '/' goes) and adds
  // it. Returns the worker, or nullptr with `error` set (bad or duplicate URL;
  // a link-local host unless allow_link_local).
  Worker* add(std::string_view url, std::string& error, bool allow_link_local = false);
  // Removes by id (decimal), or by URL. False when unknown.
  bool remove(std::string_view id_or_url);
  Worker* find(std::string_view id_or_url);
  Worker* by_id(uint64_t id);
  const std::vector<std::unique_ptr<Worker>>& all() const { return workers_; }
  size_t size() const { return workers_.size(); }
  uint64_t version() const { return version_; }  // bumps on every add/remove

  // Workers that may take a request now (healthy, circuit not refusing; pending
  // ones only when no probed one can). An open circuit whose time is up turns
  // half-open here. `exclude`: already tried. `type`: only workers of that role.
  std::vector<Worker*> available(double now, const std::vector<uint64_t>& exclude = {},
                                 std::optional<WorkerType> type = std::nullopt);
  // Outcome of a request dispatched to `w` (before: on_dispatch).
  void on_dispatch(Worker& w);
  void on_success(Worker& w);
  void on_failure(Worker& w, double now, const std::string& error);
  // A failure that must not move the circuit breaker (a PD transfer timeout or 5xx:
  // the room is the other side's as much as this one's): counted and shown only.
  void on_soft_failure(Worker& w, const std::string& error);
  void on_released(Worker& w);  // the request ended (either way): load goes down
  // Health probe outcome; thresholds from the router's options.
  void on_probe(Worker& w, bool ok, const std::string& error, int failure_threshold, int success_threshold);

  // A human-readable reason why nothing is available (for the 503 message).
  std::string why_unavailable(double now, std::optional<WorkerType> type = std::nullopt) const;

  // http(s)://host[:port] only: no user info, path, query or fragment; a
  // link-local host (169.254.0.0/16, fe80::/10: cloud metadata services live
  // there) only with allow_link_local.
  static std::string normalize_url(std::string_view url, std::string& error, bool allow_link_local = true);
  // "pending", "healthy" or "unhealthy".
  static const char* status_name(const Worker& w);

 private:
  BreakerOptions breaker_;
  std::vector<std::unique_ptr<Worker>> workers_;
  uint64_t next_id_ = 1;
  uint64_t version_ = 0;
};

}  // namespace rl::router
