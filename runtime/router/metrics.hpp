// Prometheus text for the router: its own series (/metrics) and every worker's
// /metrics merged into one exposition (/engine_metrics).
//
// Own series (prefix rlhost_router_):
//   requests_total{worker,endpoint,status}          counter
//   request_duration_seconds{endpoint}              histogram (router-side, retries included)
//   retries_total{worker}                           counter (attempts that failed over)
//   upstream_errors_total{worker,kind}              counter (connect, timeout, http_5xx)
//   in_flight{worker}                               gauge
//   worker_healthy{worker}                          gauge 1/0
//   worker_circuit_state{worker}                    gauge 0 closed, 1 open, 2 half-open
//   rejected_total{reason}                          counter (no_worker, bad_request, no_prefill_worker, no_decode_worker)
//   pd_requests_total{role,worker}                  counter (PD mode: requests sent to each prefill/decode worker)
//   pd_errors_total{role,worker,kind}               counter (PD mode: connect, timeout, http_5xx per side)
//   workers{worker_type}, healthy_workers{worker_type}  gauges (the pools: regular, prefill, decode)
//
// Written with the one exposition writer (runtime/metrics/prometheus_text.hpp).
// Merging: samples are grouped by metric family (promtool insists that a
// family's samples are contiguous and its HELP/TYPE appear once), each sample
// gets a `worker="<url>"` label, and families are emitted in first-seen order.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

#include "metrics/prometheus_text.hpp"
#include "router/worker_registry.hpp"

namespace rl::router {

class RouterMetrics {
 public:
  void record_request(const std::string& worker, const std::string& endpoint, int status, double seconds);
  void record_duration(const std::string& endpoint, double seconds);
  void record_retry(const std::string& worker) { retries_[worker]++; }
  void record_upstream_error(const std::string& worker, const std::string& kind) { errors_[{worker, kind}]++; }
  void record_rejected(const std::string& reason) { rejected_[reason]++; }
  void record_pd_dispatch(const std::string& role, const std::string& worker) { pd_requests_[{role, worker}]++; }
  void record_pd_error(const std::string& role, const std::string& worker, const std::string& kind) {
    pd_errors_[{role, worker, kind}]++;
  }

  // The whole exposition, with gauges read from `workers` now.
  std::string render(const WorkerRegistry& workers) const;

  uint64_t requests(const std::string& worker) const;  // for tests and /workers

 private:
  std::map<std::tuple<std::string, std::string, int>, uint64_t> requests_;
  std::map<std::string, metrics::PromHistogram> durations_;
  std::map<std::string, uint64_t> retries_;
  std::map<std::pair<std::string, std::string>, uint64_t> errors_;
  std::map<std::string, uint64_t> rejected_;
  std::map<std::pair<std::string, std::string>, uint64_t> pd_requests_;
  std::map<std::tuple<std::string, std::string, std::string>, uint64_t> pd_errors_;
};

// Merges per-worker expositions: (worker url, text or "" when the fetch failed).
// Failed fetches show as rlhost_router_engine_metrics_up{worker} 0.
std::string merge_expositions(const std::vector<std::pair<std::string, std::string>>& sources,
                              const std::vector<std::pair<std::string, std::string>>& errors);

}  // namespace rl::router
