// Continuous batching: which sequences run in the next model step. Torch-free.
//
// Every step, each running sequence gets the KV slots for its uncomputed tokens
// (one for a decoding sequence); when blocks run out, the most recently admitted
// sequence is preempted — its blocks released (committed ones stay in the prefix
// cache) and it goes back to the front of the queue to be recomputed later.
// Then waiting sequences are admitted in arrival order while there is room:
// fewer than max_running, the step's prefill budget, and free blocks beyond a
// small reserve for the running sequences' growth.
//
// LoRA: a step runs at most max_loras distinct adapters (the base model not
// counted); a waiting sequence under another adapter is passed over (later ones
// may still be admitted) until one of those finishes. Its prefix match starts
// from its adapter's root (Sequence::prefix_root).
//
// Prefix reuse: an admitted sequence acquires the cached blocks of its longest
// cached prefix. A sequence whose next prefix block is being computed in this
// very step (a GRPO group arriving together) waits one step and then hits the
// cache, so a group's shared prompt is prefilled once. A request for prompt
// log-probs matches only the prefix before its first scored position
// (Sequence::cacheable_prefix): those positions' logits must be computed.
#pragma once
#include <cstdint>
#include <deque>
#include <vector>

#include "engine/block_manager.hpp"
#include "engine/sequence.hpp"

namespace rl::engine {

struct SchedulerLimits {
  int64_t max_running = 64;
  int64_t max_prefill_tokens = 8192;
  int64_t max_loras = 8;  // distinct LoRA adapters among the running sequences
};

class Scheduler {
 public:
  Scheduler(BlockManager& blocks, SchedulerLimits limits) : bm_(blocks), limits_(limits) {}

  void add(SequencePtr seq) { waiting_.push_back(std::move(seq)); }
  // Prefill/decode disaggregation: a sequence whose prompt K/V come from elsewhere
  // waits here (not in the queue) until reserve_imports() gives it blocks for its
  // prompt (from the prefix cache where it can), and runs once activate()d with its
  // prompt computed.
  void add_import(SequencePtr seq) { importing_.push_back(std::move(seq)); }
  // In arrival order while blocks suffice: the sequences that got theirs now.
  std::vector<Sequence*> reserve_imports(double now);
  // Its K/V are in: it joins the running sequences (num_computed set by the caller).
  void activate(Sequence* seq);
  int64_t num_importing(bool reserved) const;
  std::vector<SequencePtr>& importing() { return importing_; }
  // The sequences of the next step (running, in order), each with query_len() >= 1.
  // Empty when nothing can run. `now` stamps first scheduling.
  std::vector<Sequence*> schedule(double now);
  // Blocks for one token past the sequence's tokens (a step launched ahead of the
  // one in flight writes its K/V there), without preempting anyone: false when none is free.
  bool reserve_ahead(Sequence& s);
  // Removes a finished (or aborted) sequence, releasing its blocks.
  SequencePtr remove(Sequence* seq);
  // Moves every running sequence back to the queue (their KV is dropped).
  void preempt_all();

  std::deque<SequencePtr>& waiting() { return waiting_; }
  std::vector<SequencePtr>& running() { return running_; }
  int64_t num_running() const { return static_cast<int64_t>(running_.size()); }
  int64_t num_waiting() const { return static_cast<int64_t>(waiting_.size()); }
  int64_t preemptions = 0;

 private:
  bool reserve_tokens(Sequence& s, int64_t tokens);  // blocks for that many; false: out of blocks
  bool reserve_slots(Sequence& s);   // false: out of blocks
  void preempt(size_t index);
  bool admit_one(Sequence& s, int64_t& prefill_budget, std::vector<uint64_t>& pending, bool& deferred);

  BlockManager& bm_;
  SchedulerLimits limits_;
  std::deque<SequencePtr> waiting_;
  std::vector<SequencePtr> running_;  // admission order
  std::vector<SequencePtr> importing_;  // arrival order
  uint64_t next_admit_ = 1;
};

}  // namespace rl::engine
