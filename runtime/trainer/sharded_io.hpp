// A sharded trainer's weights and optimizer state on disk (train_backend = fsdp;
// docs/trainer.md, "Sharded training"): whole Hugging Face directories written by rank
// 0 while the units are gathered one at a time, so no rank holds the whole model.
// Knows nothing of Lua.
#pragma once
#include <cstddef>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "model/tensor_files.hpp"
#include "trainer/checkpoint_state.hpp"
#include "trainer/trainer.hpp"

namespace rl::trainer {

// Weight sync from a sharded trainer is driven by rank 0 (it alone knows the engines):
// each pass over the units is announced on the trainer's group ("pass"), the other
// ranks join it in follow_passes, and "done" ends their loop. No-ops when replicated.
void driven_pass(Trainer& t, const std::function<void(const nn::NamedTensors&)>& fn);
int follow_passes(Trainer& t);   // ranks > 0: until rank 0's passes_done; → passes joined
void passes_done(Trainer& t);    // rank 0

// The policy as a Hugging Face directory (config.json + safetensors) in `dtype`.
// Replicated: written from the model. Sharded: a collective (every rank calls it); the
// units are gathered in turn and rank 0 streams them into the files (other ranks write
// nothing).
// `driven`: rank 0 alone calls it, inside a sync (driven_pass).
void save_policy(Trainer& t, const std::filesystem::path& dir, torch::ScalarType dtype, size_t max_shard_bytes,
                 bool driven = false);

// ---- AdamW state of a sharded trainer -------------------------------------------
//
// Each rank writes its part: `dir/optimizer.shard_<R>_of_<W>.pt`, per unit the range
// [begin, end) of the unit's flat parameter vector it holds, with that range's
// exp_avg and exp_avg_sq and the unit's step count, plus every parameter name in unit
// order (checked on load). Ranges are in parameter space, not shard space, so any
// world size can read any other's files (and a replicated trainer can read them all).

std::string sharded_optimizer_file(int rank, int world);  // "optimizer.shard_0_of_2.pt"
void write_sharded_optimizer(Trainer& t, const std::filesystem::path& dir);
// The world size whose shard files `dir` holds (0: none).
int sharded_optimizer_world(const std::filesystem::path& dir);
// This sharded trainer's AdamW state from a checkpoint: shard files of any world size,
// or a replicated checkpoint's optimizer.pt. Reads and checks first; then applies.
void load_sharded_optimizer(Trainer& t, const std::filesystem::path& dir);
// A replicated trainer's per-parameter slots assembled from the shard files.
std::vector<std::optional<AdamWSlot>> read_sharded_optimizer_whole(const std::filesystem::path& dir,
                                                                   const nn::Transformer& model);
// A sharded trainer's weights from a Hugging Face directory: each rank copies its
// ranges straight from the mapped files (nothing gathered).
void load_sharded_weights(Trainer& t, const model::TensorSet& tensors);

}  // namespace rl::trainer
