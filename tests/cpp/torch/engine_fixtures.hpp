// Shared fixtures for the engine tests: a collector of finished outputs, a request, and
// stories260K's engine options (data paths: test_support.hpp).
#pragma once
#include <catch2/catch.hpp>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "../test_support.hpp"
#include "engine/engine.hpp"

namespace rl::test {

// Collects final outputs of submitted requests; wait() blocks until all are in.
struct Collector {
  std::mutex mu;
  std::condition_variable cv;
  std::map<std::string, engine::RequestOutput> done;
  std::map<std::string, int> updates;

  engine::UpdateFn fn() {
    return [this](const engine::RequestOutput& o) {
      std::lock_guard<std::mutex> lock(mu);
      ++updates[o.rid];
      if (o.finished) done[o.rid] = o;
      cv.notify_all();
    };
  }
  void wait(size_t n) {
    std::unique_lock<std::mutex> lock(mu);
    CATCH_REQUIRE(cv.wait_for(lock, std::chrono::seconds(120), [&] { return done.size() >= n; }));
  }
};

// Greedy by default, log-probs on, EOS ignored (the lengths are the test's).
inline engine::GenerateRequest request(std::vector<int32_t> ids, int64_t max_new, double temperature = 0.0,
                                       const std::string& rid = "") {
  engine::GenerateRequest r;
  r.rid = rid;
  r.input_ids = std::move(ids);
  r.params.max_new_tokens = max_new;
  r.params.temperature = temperature;
  r.params.ignore_eos = true;
  r.return_logprob = true;
  return r;
}

inline engine::EngineOptions stories_options() {
  engine::EngineOptions o;
  o.model = stories_dir();
  o.threads = 1;
  return o;
}

// A prompt of n ids (BOS first), varied by seed.
inline std::vector<int32_t> prompt_of(int n, int seed) {
  std::vector<int32_t> ids{1};
  for (int i = 1; i < n; ++i) ids.push_back(3 + (seed * 131 + i * 37) % 500);
  return ids;
}

}  // namespace rl::test
