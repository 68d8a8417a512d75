// The engine's model step on CUDA: forward (Transformer::forward_paged), the
// last tokens' logits and sampling all on the GPU; only the batch description goes
// in (one pinned copy) and only a token id and a log-prob per sequence come back
// (pinned). A step whose sequences all decode one token replays a CUDA graph
// captured for its batch-size bucket (1, 2, 4, 8, then steps of 8 to 64 and of 16
// beyond), over static buffers, padding rows writing nothing; other steps
// (prefills, bigger batches) run the same kernels eagerly.
//
// launch() only enqueues: the engine launches the next decode step before it has
// this one's tokens (its inputs are then this step's sampled tokens, read on the
// device), so the GPU never waits for the host between steps. Two steps may be in
// flight; collect() returns the oldest one's tokens.
//
// Rows that need what only the CPU sampler has (top-k / top-p / min-p, banned
// tokens, top log-probs) take their logits row to the host and that sampler.
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "engine/sampler.hpp"
#include "engine/sequence.hpp"
#include "nn/kv_cache.hpp"
#include "nn/transformer.hpp"

namespace rl::engine {

struct GpuStepStats {
  int64_t graphs = 0;         // buckets captured
  int64_t graph_steps = 0;    // steps replayed from a graph
  int64_t eager_steps = 0;    // steps run op by op
  int64_t ahead_steps = 0;    // steps launched before the previous one's tokens reached the host
  int64_t cpu_rows = 0;       // rows sampled on the CPU (filters, banned, top log-probs)
  double capture_seconds = 0; // time spent capturing
};

class GpuStepper {
 public:
  // graph_max_bs 0: no graphs. max_rows: the most sequences a step has.
  // context_length bounds positions (sizes the tables).
  GpuStepper(int64_t graph_max_bs, int64_t max_rows, int64_t context_length, int64_t block_size);
  ~GpuStepper();

  // Enqueues a step (ModelRunner::launch says what `ahead` means). The sequences and
  // the rows' parameters must stay alive until it is collected.
  void launch(nn::Transformer& model, nn::KVCache& cache, const std::vector<Sequence*>& batch,
              const std::vector<SampleRow>& rows, const std::vector<int32_t>* ahead);
  SampleOutput collect();
  // The captured graphs point at the cache's and the weights' memory: drop them
  // when either is reallocated (they are captured again on use). Nothing may be in flight.
  void invalidate();
  const GpuStepStats& stats() const;

  // The bucket a decode batch of `n` rows replays (n itself past the largest).
  static int64_t bucket_for(int64_t n);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// True when this build can run GpuStepper (a CUDA build).
bool gpu_step_built();

}  // namespace rl::engine
