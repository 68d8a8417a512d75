// Prometheus text exposition for the engine server. Names, types and buckets
// follow SGLang's metrics collector (sglang/srt/metrics/collector.py) so that
// scrapers configured for SGLang see the same series; `promtool check metrics`
// passes on the output (tests/e2e/test_engine_server.py runs it).
#include "engine/server_metrics.hpp"


namespace rl::engine {
namespace {

void header(std::string& out, const char* name, const char* type, const char* help) {
  metrics::prom_family(out, name, type, help);
}

void sample(std::string& out, const char* name, const std::string& labels, double v) {
  metrics::prom_sample(out, name, labels, v);
}

// SGLang's buckets (seconds / tokens).
std::vector<double> ttft_buckets() {
  return {0.1, 0.2, 0.4, 0.6, 0.8, 1, 2, 4, 6, 8, 10, 20, 40, 60, 80, 100, 200, 400};
}
std::vector<double> itl_buckets() {
  return {0.002, 0.004, 0.006, 0.008, 0.010, 0.015, 0.020, 0.025, 0.030, 0.035, 0.040, 0.060, 0.080,
          0.100, 0.200, 0.400, 0.600, 0.800, 1.0, 2.0, 4.0, 6.0, 8.0};
}
std::vector<double> e2e_buckets() {
  return {0.1, 0.2, 0.4, 0.6, 0.8, 1, 2, 4, 6, 8, 10, 20, 40, 60, 80, 100, 200, 400, 600, 1200, 1800, 2400};
}
std::vector<double> token_buckets() {
  return {16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768};
}

}  // namespace

ServerMetrics::ServerMetrics(std::string model_name)
    : labels_("model_name=\"" + metrics::prom_label_value(model_name) + "\""),
      ttft_(ttft_buckets()), itl_(itl_buckets()), e2e_(e2e_buckets()), queue_(e2e_buckets()),
      prefill_(ttft_buckets()), decode_(e2e_buckets()), prompt_len_(token_buckets()), gen_len_(token_buckets()),
      kv_speed_({0.01, 0.05, 0.1, 0.5, 1, 2, 5, 10, 20, 50, 100}),
      kv_latency_({0.1, 0.5, 1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 5000}),
      kv_mb_({0.01, 0.1, 0.5, 1, 2, 5, 10, 20, 50, 100, 500, 1000}) {}

void ServerMetrics::set_pd_mode(const std::string& mode) {
  std::lock_guard lk(mu_);
  pd_mode_ = mode;
}

void ServerMetrics::observe_transfer(double bytes, double seconds) {
  std::lock_guard lk(mu_);
  kv_mb_.observe(bytes / 1e6);
  if (seconds > 0) {
    kv_latency_.observe(seconds * 1e3);
    kv_speed_.observe(bytes / 1e9 / seconds);
  }
}

void ServerMetrics::observe(const RequestOutput& out) {
  std::lock_guard lk(mu_);
  const int64_t n = out.completion_tokens();
  if (n > 0) ttft_.observe(out.queue_time + out.prefill_time);
  // Mean gap between output tokens: decode_time spans tokens 1..n.
  if (n > 1) itl_.observe(out.decode_time / static_cast<double>(n - 1));
  e2e_.observe(out.e2e_latency);
  queue_.observe(out.queue_time);
  prefill_.observe(out.prefill_time);
  if (n > 1) decode_.observe(out.decode_time);
  prompt_len_.observe(static_cast<double>(out.prompt_tokens));
  gen_len_.observe(static_cast<double>(n));
  const auto& t = out.finish_reason.type;
  ++finished_by_reason_[t == "stop" ? 0 : t == "length" ? 1 : t == "abort" ? 2 : 3];
}

void ServerMetrics::count_http(int status) {
  std::lock_guard lk(mu_);
  if (status >= 500) ++http_5xx_;
  else if (status >= 400) ++http_4xx_;
  else ++http_2xx_;
}

void ServerMetrics::count_rejected(const std::string& cap) {
  std::lock_guard lk(mu_);
  ++rejected_[cap];
}

std::string ServerMetrics::render(const EngineStats& s, const PdQueues& pd) const {
  std::string o;
  o.reserve(16 << 10);
  const std::string& L = labels_;
  auto gauge = [&](const char* name, const char* help, double v) {
    header(o, name, "gauge", help);
    sample(o, name, L, v);
  };
  auto counter = [&](const char* name, const char* help, double v) {
    header(o, name, "counter", help);
    sample(o, name, L, v);
  };
  gauge("sglang:num_running_reqs", "The number of running requests.", static_cast<double>(s.num_running));
  gauge("sglang:num_queue_reqs", "The number of requests in the waiting queue.", static_cast<double>(s.num_queued));
  gauge("sglang:num_used_tokens", "The number of used tokens (KV cache).", static_cast<double>(s.kv_tokens_used));
  gauge("sglang:max_total_num_tokens", "Maximum total number of tokens in the KV cache.",
        static_cast<double>(s.kv_tokens_total));
  gauge("sglang:token_usage", "The token usage (used / total KV cache tokens).", s.token_usage);
  gauge("sglang:gen_throughput", "The generation throughput (token/s).", s.gen_throughput);
  gauge("sglang:cache_hit_rate", "The prefix cache hit rate (cached / all prompt tokens).", s.cache_hit_rate);
  gauge("sglang:is_memory_released", "1 while the KV cache or weights are released.", s.memory_released ? 1 : 0);

  counter("sglang:prompt_tokens_total", "Number of prefill tokens processed.", static_cast<double>(s.prompt_tokens_total));
  counter("sglang:generation_tokens_total", "Number of generation tokens processed.",
          static_cast<double>(s.generation_tokens_total));
  counter("sglang:cached_tokens_total", "Number of cached prompt tokens.", static_cast<double>(s.cached_tokens_total));
  counter("sglang:num_requests_total", "Number of requests processed.", static_cast<double>(s.requests_total));
  counter("sglang:num_aborted_requests_total", "Number of requests aborted.", static_cast<double>(s.requests_aborted));
  counter("sglang:num_preemptions_total", "Number of requests evicted from the KV cache and recomputed.",
          static_cast<double>(s.preemptions_total));
  counter("sglang:num_steps_total", "Number of engine model steps.", static_cast<double>(s.steps));

  std::lock_guard lk(mu_);
  if (pd_mode_ == "prefill") {
    gauge("sglang:num_prefill_bootstrap_queue_reqs", "Prefill: requests whose K/V wait for their decode's registration.",
          static_cast<double>(pd.bootstrap));
    gauge("sglang:num_prefill_inflight_queue_reqs", "Prefill: K/V transfers in flight.", static_cast<double>(pd.inflight));
  } else if (pd_mode_ == "decode") {
    gauge("sglang:num_decode_prealloc_queue_reqs", "Decode: requests waiting for KV blocks for their prompt.",
          static_cast<double>(s.pd_prealloc));
    gauge("sglang:num_decode_transfer_queue_reqs", "Decode: requests whose prompt K/V are on their way.",
          static_cast<double>(s.pd_transfer));
  }
  header(o, "sglang:num_finished_requests_total", "counter", "Finished requests by finish reason.");
  const char* reasons[] = {"stop", "length", "abort", "other"};
  for (int k = 0; k < 4; ++k)
    sample(o, "sglang:num_finished_requests_total", L + ",reason=\"" + reasons[k] + "\"",
           static_cast<double>(finished_by_reason_[k]));
  header(o, "sglang:num_rejected_requests_total", "counter", "Requests refused by admission control, by the cap they hit.");
  for (const char* cap : {"max_sequences_per_request", "max_queued_requests", "max_tokens_in_flight",
                          "max_response_entries", "stopping"}) {
    auto it = rejected_.find(cap);
    sample(o, "sglang:num_rejected_requests_total", L + ",cap=\"" + cap + "\"",
           static_cast<double>(it == rejected_.end() ? 0 : it->second));
  }
  header(o, "sglang:http_responses_total", "counter", "HTTP responses by status class.");
  sample(o, "sglang:http_responses_total", L + ",code=\"2xx\"", static_cast<double>(http_2xx_));
  sample(o, "sglang:http_responses_total", L + ",code=\"4xx\"", static_cast<double>(http_4xx_));
  sample(o, "sglang:http_responses_total", L + ",code=\"5xx\"", static_cast<double>(http_5xx_));

  auto hist = [&](const Histogram& h, const char* name, const char* help) {
    header(o, name, "histogram", help);
    h.render(o, name, L);
  };
  hist(ttft_, "sglang:time_to_first_token_seconds", "Histogram of time to first token in seconds.");
  hist(itl_, "sglang:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.");
  hist(e2e_, "sglang:e2e_request_latency_seconds", "Histogram of End-to-end request latency in seconds.");
  hist(queue_, "sglang:queue_time_seconds", "Histogram of queueing time in seconds.");
  hist(prefill_, "sglang:prefill_time_seconds", "Histogram of prefill time (scheduled to first token) in seconds.");
  hist(decode_, "sglang:decode_time_seconds", "Histogram of decode time (first to last token) in seconds.");
  hist(prompt_len_, "sglang:request_prompt_tokens", "Histogram of prompt lengths in tokens.");
  hist(gen_len_, "sglang:request_generation_tokens", "Histogram of generated lengths in tokens.");
  if (pd_mode_ == "decode") {
    hist(kv_speed_, "sglang:kv_transfer_speed_gb_s", "Histogram of K/V transfer speed (GB/s), sent to written.");
    hist(kv_latency_, "sglang:kv_transfer_latency_ms", "Histogram of K/V transfer latency (ms), sent to received.");
    hist(kv_mb_, "sglang:kv_transfer_total_mb", "Histogram of K/V bytes per transfer (MB).");
  }
  return o;
}

}  // namespace rl::engine
