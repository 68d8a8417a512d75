// A weight update written beside the live weights, then swapped in at once: the
// engine's distributed receive (engine/engine_dist.cpp) copies each tensor into
// spare storage, in the engine's own layout (transposed, fused), as it arrives and
// while the engine keeps generating; between two steps the live storages take the
// spare memory: a pointer swap, so the views the model holds stay valid (as the
// shared-memory path's buffer switch, nn/shared_weights.hpp).
//
// A storage that the update's tensors do not wholly cover starts as a copy of the
// live one. Memory: one storage's worth per storage touched, freed with the stage
// (which holds the old weights after the swap).
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <torch/torch.h>

namespace rl::nn {

class WeightStage {
 public:
  // Plans spare storage for the parameters named (each once), with their shapes:
  // `params` are the model's (Transformer::named_parameters()). Throws rl::Error
  // naming an unknown name, a repeated one or a shape that differs from the model's.
  WeightStage(const std::vector<std::pair<std::string, torch::Tensor>>& params,
              const std::vector<std::string>& names, const std::vector<std::vector<int64_t>>& shapes);
  ~WeightStage();
  WeightStage(const WeightStage&) = delete;
  WeightStage& operator=(const WeightStage&) = delete;

  // Copies the live bytes of every storage the update does not wholly cover (call
  // once, before swap_in; any thread: it only reads the live weights).
  void copy_uncovered();
  // Writes tensor `index` (of the names given) into its spare view, converting
  // dtype and layout (nn::copy_weight). Any thread, one call at a time.
  void put(size_t index, const torch::Tensor& src);
  // Every tensor was put.
  bool complete() const;
  // Whether `params` still are the storages this stage was planned for.
  bool matches(const std::vector<std::pair<std::string, torch::Tensor>>& params) const;
  // The live storages take the spare memory (the stage keeps the old). Requires
  // complete() and matches(); call between two steps, on the thread that runs them.
  void swap_in();
  int64_t spare_bytes() const;

 private:
  struct Slot {
    c10::Storage live, spare;
    bool covered = false;
  };
  std::vector<Slot> slots_;
  std::vector<std::pair<size_t, torch::Tensor>> views_;  // per name: its slot, its view on the spare
  std::vector<bool> put_;
  std::vector<const c10::StorageImpl*> planned_;  // per parameter, its live storage
  bool copied_ = false, swapped_ = false;
};

}  // namespace rl::nn
