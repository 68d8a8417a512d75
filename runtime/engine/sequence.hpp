// One request inside the engine: its tokens, KV blocks, sampling state, output
// and timings. Owned by the scheduler thread.
#pragma once
#include <algorithm>
#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "engine/engine.hpp"
#include "engine/lora_slot.hpp"
#include "engine/output_text.hpp"

namespace rl::engine {

struct Sequence {
  GenerateRequest req;
  UpdateFn on_update;
  RequestOutput out;                  // what the client sees
  std::vector<int32_t> tokens;        // prompt + output so far
  int64_t prompt_len = 0;
  int64_t max_new_tokens = 0;         // after clamping to the context
  std::vector<int32_t> blocks;        // KV blocks, in order
  int64_t num_computed = 0;           // tokens whose K/V sit in the cache
  int64_t committed = 0;              // tokens registered for prefix reuse
  std::unique_ptr<OutputText> text;
  std::mt19937_64 rng;
  std::vector<int32_t> stop_ids;      // stop_token_ids, plus EOS unless ignore_eos
  std::vector<int32_t> banned;        // stop_ids while below min_new_tokens
  uint64_t admit_order = 0;           // for choosing whom to preempt (the latest)
  LoraSlotPtr lora;                   // its adapter, or none (the base model)
  uint64_t weights_epoch = 0;         // the engine's weights when it arrived (EngineImpl::weights_epoch_)
  uint64_t lora_root = 0;             // its adapter's LoraSlot::root when it arrived (a new one each install)
  // Prompt log-probs: the next prompt position whose log-prob is still to compute
  // (logprob_start_len + 1 up to prompt_len; prompt_len: none pending).
  int64_t input_logprob_next = 0;
  bool scheduled_once = false;
  // A decode engine's request whose prompt K/V come from a prefill (GenerateRequest::pd_import):
  // blocks reserved for the prompt (Scheduler::reserve_imports), then delivered.
  bool pd_reserved = false;
  double t_reserved = -1, t_delivered = -1;
  // Its KV cache holds keys/values computed under weights older than the engine's
  // (kept across a weight update): never committed for prefix reuse.
  bool kv_mixed = false;
  bool abort_requested = false;
  std::string abort_message;
  // Monotonic seconds (EventLoop::now-like clock).
  double t_arrival = 0, t_scheduled = -1, t_first = -1, t_last = -1;

  // Where its prefix-cache chain starts: KV under one adapter never serves another (or the base).
  uint64_t prefix_root() const { return lora ? lora->root : 0; }
  int64_t query_len() const { return static_cast<int64_t>(tokens.size()) - num_computed; }
  bool wants_input_logprobs() const { return input_logprob_next < prompt_len; }
  // Tokens the prefix cache may serve: none whose hidden state a pending prompt
  // log-prob needs (position input_logprob_next - 1 onwards), else all but the last.
  int64_t cacheable_prefix() const {
    const int64_t all = static_cast<int64_t>(tokens.size()) - 1;
    return wants_input_logprobs() ? std::min(all, input_logprob_next - 1) : all;
  }
};
using SequencePtr = std::unique_ptr<Sequence>;

}  // namespace rl::engine
