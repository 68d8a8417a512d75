// Decode throughput of rlhost's engine (continuous batching over the paged KV
// cache) for one model directory: B requests of a short prompt, each generating
// NEW tokens with ignore_eos, all submitted at once. Prints RESULT lines that
// bench/engine_decode.sh sets beside its Python peers and the bandwidth roofline.
//
//   bench_engine_decode MODEL_DIR THREADS BATCH[,BATCH...] [new=128] [prompt=16]
// Also: bench_engine_decode --bandwidth THREADS   (read bandwidth, GB/s)
#include <chrono>
#include <ctime>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <sstream>
#include <string>
#include <vector>

#include <torch/torch.h>
#include <ATen/Parallel.h>

#include "engine/engine.hpp"
#include "model/config.hpp"

namespace {

double cpu_now() {
  timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Streaming read of a buffer much larger than the caches: what a decode step
// at batch 1 is bound by (every weight read once per token). 16 independent
// sums per thread, built for AVX-512/AVX2, so the probe is not compute-bound.
__attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
float sum_chunk(const float* __restrict p, int64_t n) {
  float acc[16] = {};
  int64_t i = 0;
  for (; i + 16 <= n; i += 16)
    for (int k = 0; k < 16; ++k) acc[k] += p[i + k];
  float s = 0;
  for (float a : acc) s += a;
  for (; i < n; ++i) s += p[i];
  return s;
}

double read_bandwidth_gbs(int threads) {
  torch::set_num_threads(threads);
  auto buf = torch::ones({int64_t{256} << 20}, torch::kFloat32);  // 1 GiB
  const float* p = buf.data_ptr<float>();
  const int64_t n = buf.numel();
  double best = 0;
  for (int i = 0; i < 5; ++i) {
    std::vector<float> parts(static_cast<size_t>(threads) * 64, 0.0f);
    double t0 = now();
    at::parallel_for(0, n, n / threads + 1, [&](int64_t b, int64_t e) {
      parts[static_cast<size_t>(at::get_thread_num()) * 64] += sum_chunk(p + b, e - b);
    });
    const double dt = now() - t0;
    volatile float sink = parts[0];
    (void)sink;
    best = std::max(best, n * 4.0 / dt / 1e9);
  }
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc >= 3 && std::string(argv[1]) == "--bandwidth") {
    std::printf("RESULT impl=bandwidth threads=%d read_gb_s=%.2f\n", std::atoi(argv[2]),
                read_bandwidth_gbs(std::atoi(argv[2])));
    return 0;
  }
  if (argc < 4) {
    std::fprintf(stderr, "usage: %s MODEL_DIR THREADS BATCH[,BATCH...] [new] [prompt]\n", argv[0]);
    return 2;
  }
  const int threads = std::atoi(argv[2]);
  std::vector<int> batches;
  std::stringstream ss(argv[3]);
  for (std::string b; std::getline(ss, b, ',');) batches.push_back(std::stoi(b));
  const int64_t n_new = argc > 4 ? std::atoll(argv[4]) : 128;
  const int64_t n_prompt = argc > 5 ? std::atoll(argv[5]) : 16;
  torch::set_num_threads(threads);

  rl::engine::EngineOptions opts;
  opts.model = argv[1];
  opts.threads = threads;
  opts.max_running_requests = 64;
  opts.kv_cache_tokens = 64 * (n_prompt + n_new + 16);
  opts.enable_prefix_cache = false;  // distinct decode work per request
  auto engine = rl::engine::Engine::create(opts);
  const int64_t V = engine->config().vocab_size;

  auto run = [&](int batch, int64_t new_tokens, uint64_t salt) {
    std::mutex mu;
    std::condition_variable cv;
    int done = 0;
    double first_token = 0;
    const double t0 = now();
    for (int b = 0; b < batch; ++b) {
      rl::engine::GenerateRequest r;
      for (int64_t i = 0; i < n_prompt; ++i) r.input_ids.push_back(static_cast<int32_t>((salt * 7919 + b * 131 + i * 17) % V));
      r.params.max_new_tokens = new_tokens;
      r.params.temperature = 0;
      r.params.ignore_eos = true;
      engine->submit(std::move(r), [&](const rl::engine::RequestOutput& o) {
        if (!o.finished) return;
        std::lock_guard<std::mutex> lock(mu);
        ++done;
        first_token = std::max(first_token, o.queue_time + o.prefill_time);
        cv.notify_all();
      });
    }
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return done == batch; });
    return std::make_pair(now() - t0, first_token);
  };
  run(1, 8, 0);  // warm-up
  for (int batch : batches) {
    const double cpu0 = cpu_now();
    auto [total, prefill] = run(batch, n_new, static_cast<uint64_t>(batch));
    const double cpu = cpu_now() - cpu0;
    // Decode rate: tokens after the first over the time after the (last) prefill.
    const double decode_s = total - prefill;
    // cpu_s: the process's CPU seconds for the whole run (prefill and decode, all
    // threads); tok_per_cpu_s = generated tokens / cpu_s (the figure to compare on a
    // loaded machine, where wall-clock rates swing).
    std::printf("RESULT impl=rlhost threads=%d batch=%d new=%lld total_s=%.3f decode_tok_s=%.1f cpu_s=%.3f "
                "tok_per_cpu_s=%.1f\n",
                threads, batch, static_cast<long long>(n_new), total, batch * (n_new - 1) / decode_s, cpu,
                batch * n_new / cpu);
    std::fflush(stdout);
  }
  engine->stop();
  return 0;
}
