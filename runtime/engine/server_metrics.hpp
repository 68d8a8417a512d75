// The engine server's Prometheus metrics, named as SGLang names them
// (`sglang:*` with a `model_name` label), so dashboards and the router's
// /engine_metrics work unchanged. Gauges and token counters come from
// Engine::stats(); latency histograms are observed here per finished request.
// Thread-safe. LibTorch-free. Written with the one exposition writer
// (runtime/metrics/prometheus_text.hpp).
#pragma once
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "engine/engine.hpp"
#include "metrics/prometheus_text.hpp"

namespace rl::engine {

using Histogram = metrics::PromHistogram;

// A prefill engine's transfer queues (ServerMetrics::render).
struct PdQueueCounts {
  int64_t bootstrap = 0, inflight = 0;  // waiting for the decode's registration; pushing
};

class ServerMetrics {
 public:
  explicit ServerMetrics(std::string model_name);

  // A finished request (any path: HTTP, OpenAI, in-process Lua).
  void observe(const RequestOutput& out);
  void count_http(int status);  // responses by class, for errors seen by clients
  void count_rejected(const std::string& cap);  // admission refusals, by the cap hit
  // Prefill/decode disaggregation (SGLang's PD metrics): the engine's role, its
  // transfer queues (set before each render) and each K/V transfer received.
  using PdQueues = PdQueueCounts;
  void set_pd_mode(const std::string& mode);
  void observe_transfer(double bytes, double seconds);
  // The exposition text (version 0.0.4).
  std::string render(const EngineStats& s, const PdQueues& pd = {}) const;

 private:
  std::string labels_;  // model_name="..."
  mutable std::mutex mu_;
  Histogram ttft_, itl_, e2e_, queue_, prefill_, decode_;
  Histogram prompt_len_, gen_len_;
  uint64_t finished_by_reason_[4] = {0, 0, 0, 0};  // stop, length, abort, other
  uint64_t http_2xx_ = 0, http_4xx_ = 0, http_5xx_ = 0;
  std::map<std::string, uint64_t> rejected_;
  std::string pd_mode_ = "null";
  Histogram kv_speed_, kv_latency_, kv_mb_;
};

}  // namespace rl::engine
