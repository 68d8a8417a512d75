// Sharded training (the trainer's train_backend = "fsdp"; docs/trainer.md, "Sharded
// training"): each rank of the data-parallel group keeps 1/N of every parameter, of its
// gradient and of its AdamW state, as one flat shard per unit (the embedding, each
// decoder layer, the final norm, an untied lm_head: Transformer::parameter_units).
//
// Forward: a unit's parameters are all-gathered just before it runs (the next unit's
// gather is issued while this one computes) and released right after. With autograd
// on, the released storage is gathered again when the unit's output gradient arrives
// (a hook on that output), and the gathered tensor's backward reduce-scatters the
// unit's gradient onto the shards: sum over ranks, / N, as the replicated trainer's
// all-reduce mean. The optimizer steps on the shards. A frozen model (a LoRA adapter's
// base, trainable = false) is gathered back for its backward the same way when
// gradients flow through it, and released after it; it has no gradients to reduce.
//
// Training gathers neither the embedding nor the lm_head whole (trainer/fsdp_vocab.cpp):
// the lookup moves only the rows its tokens use, the lm_head goes by row blocks (whole
// only with a LoRA adapter on it, merged into it for each use).
//
// Every forward and backward is a collective: all ranks run the same sequence of them
// (the trainer pads ranks with fewer micro-batches with empty passes). Knows nothing
// of Lua.
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "nn/logprobs_blocked.hpp"
#include "nn/transformer.hpp"
#include "dist/dist.hpp"
#include "model/tensor_files.hpp"
#include "nn/weights.hpp"

namespace rl::trainer {

class ShardedModel : public nn::UnitHooks {
 public:
  // Takes the model's parameters (rank 0's values, broadcast) into this rank's shards,
  // releases the model's own parameter storage and installs itself as the model's
  // UnitHooks. `group` null: one rank (shards are the whole units). `trainable`: the
  // shards require gradients (the policy; not the reference model).
  // `source` (a model directory's tensors, mapped): each rank copies its own slices from
  // it instead, and nothing is broadcast or read whole (the model may be a skeleton
  // whose parameters were never filled).
  ShardedModel(std::shared_ptr<nn::Transformer> model, std::shared_ptr<dist::ProcessGroup> group, bool trainable,
               const model::TensorSet* source = nullptr);
  ~ShardedModel() override;
  ShardedModel(const ShardedModel&) = delete;
  ShardedModel& operator=(const ShardedModel&) = delete;

  struct Unit {
    std::vector<std::string> names;
    std::vector<std::vector<int64_t>> shapes;
    std::vector<int64_t> offsets;  // of each parameter in the unit's flat vector
    int64_t numel = 0;             // parameters in the unit (the flat vector, unpadded)
    int64_t shard = 0;             // elements per rank: ceil(numel / world) (embedding, lm_head: whole rows)
    std::vector<int64_t> split;    // the gathered vector's pieces: each parameter's numel, then the padding
    torch::Tensor local;           // this rank's [shard] (zeros past numel)
  };
  const std::vector<Unit>& units() const { return units_; }
  int world() const { return world_; }
  int rank() const { return rank_; }
  // The shards, one per unit: what the optimizer steps on.
  std::vector<torch::Tensor> shards() const;
  // This rank's part of unit u's flat vector: [begin, end) (end <= numel).
  std::pair<int64_t, int64_t> range(size_t u) const;
  // This rank's slices copied from a model directory's tensors (mapped): nothing is
  // read whole. Validates the set against the model's config first.
  void load(const model::TensorSet& tensors);

  // nn::UnitHooks (the model's forward calls them).
  std::vector<torch::Tensor> enter(int unit) override;
  torch::Tensor leave(int unit, const torch::Tensor& out) override;
  // The embedding lookup without gathering the embedding (trainer/fsdp_vocab.cpp):
  // every rank's ids are all-gathered, each rank fills in the rows it holds and a
  // reduce-scatter hands each rank its own tokens' rows (the other ranks add zeros:
  // exact). The backward pass all-gathers every rank's row gradients, and each rank
  // adds those of its rows to its shard. Traffic and memory grow with the tokens, not
  // the vocabulary.
  torch::Tensor embed(const torch::Tensor& ids) override;
  // Recomputed layers (nn::Recompute): their second forward gathers each unit once for
  // it and the backward that follows (prefetching the next unit, then `next`), and
  // recompute_end() releases what a frozen unit kept.
  void recompute_begin(int first, int last, int next) override;
  void recompute_end() override;
  // The lm_head as row blocks for nn::token_logprobs_blocked (the trainer's
  // log-softmax): block b is rank b's rows (the lm_head's unit is sharded by whole
  // rows), broadcast by rank b when fetched; a block's gradient is summed onto rank b
  // and added, / N, to its shard's gradient. The whole [V, H] matrix is never gathered.
  nn::HeadBlocks head_blocks();
  // Whether the lm_head goes by head_blocks(); else (a LoRA adapter merged into it)
  // whole, for one use by the caller, and the end of that use (its output).
  bool blocked_head() const;
  torch::Tensor lm_head() { return enter(model_->lm_head_unit()).at(0); }
  torch::Tensor lm_head_done(const torch::Tensor& out) { return finish(model_->lm_head_unit(), out, true); }

  // Waits for any gather still in flight and forgets it (before the weights change).
  void settle();
  // Every unit's parameters, gathered one unit at a time, to fn on every rank (a
  // collective: all ranks call it). The tensors are valid during the call only.
  void for_each_unit(const std::function<void(const nn::NamedTensors&)>& fn);
  // The sum of squares of this rank's gradient shards (for the global norm).
  double local_grad_sq() const;

  // Where a step's communication went (reset by take_stats): time the compute waited
  // for gathers (what prefetching did not hide), time in reduce-scatters (not
  // overlapped: autograd waits for each), and the gathers issued.
  struct Stats {
    double gather_wait_s = 0, reduce_scatter_s = 0;
    int64_t gathers = 0;
    double gathered_bytes = 0;
  };
  Stats take_stats();

 private:
  struct Use;  // one gathered copy of a unit, from its gather to its release
  // An embedding lookup's ids: every rank's, each padded with -1 to `per`.
  struct Lookup {
    torch::Tensor all_ids;
    int64_t per = 0;
  };
  friend struct VocabLookup;
  torch::Tensor lookup_rows(const torch::Tensor& ids, Lookup& l);        // [n, H] for ids [n]
  torch::Tensor lookup_grad(const Lookup& l, const torch::Tensor& grad);  // grad [n, H] -> unit 0's [shard]
  std::pair<int64_t, int64_t> own_rows(int unit) const;                   // [first, end) rows of a by-row unit
  bool by_rows(int unit) const;  // the unit is one matrix sharded by whole rows
  int64_t max_over_ranks(int64_t v);
  void prefetch(int unit);  // the gather of unit (< 0: none) issued now, for a later gather()
  static torch::Tensor alias(const Use& use, const Unit& u);
  friend struct GatherUnit;
  torch::Tensor gather(int unit, int64_t use_id);             // called by GatherUnit::forward
  torch::Tensor reduce_grad(int64_t use_id, const torch::Tensor& grad_full);  // its backward
  std::vector<torch::Tensor> views(int unit, const torch::Tensor& full) const;
  torch::Tensor finish(int unit, const torch::Tensor& out, bool backward_reads);
  void refill(int64_t use_id);
  void prefetch_refill(int64_t below);
  int next_in_forward(int unit) const;

  std::shared_ptr<nn::Transformer> model_;
  std::shared_ptr<dist::ProcessGroup> group_;
  int world_ = 1, rank_ = 0;
  std::vector<Unit> units_;
  std::map<int64_t, std::shared_ptr<Use>> uses_;  // gathered and not yet released for good
  std::map<int, int64_t> open_;  // unit -> its use between enter() and leave()
  std::set<int64_t> refilled_;   // frozen uses refilled for their backward (released by the next refill)
  int64_t next_use_ = 0;
  // The next unit's gather, issued while this one computes.
  struct Prefetch;
  std::shared_ptr<Prefetch> ahead_;
  // Between recompute_begin() and recompute_end(): the units recomputed, the one after
  // them, and the uses gathered for them.
  struct Recomputing {
    bool on = false;
    int first = 0, last = 0, next = -1;
    std::vector<int64_t> uses;
  };
  Recomputing recomputing_;
  Stats stats_;
  // Issues a gather of unit u's shards into `full` (counted in stats_).
  std::shared_ptr<dist::ProcessGroup::Pending> issue_gather(const Unit& u, const torch::Tensor& full);
  void wait_gather(dist::ProcessGroup::Pending& p);  // timed into stats_.gather_wait_s
  void fill(const Unit& u, const torch::Tensor& full);  // the whole unit into `full`, now
};

}  // namespace rl::trainer
