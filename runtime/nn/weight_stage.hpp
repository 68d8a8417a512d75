// A weight update written beside the live weights, then swapped in at once: the
// engine's distributed receive (engine/engine_dist.cpp) copies each tensor into
// spare storage, in the engine's own layout (transposed, fused), as it arrives and
// while the engine keeps generating; between two steps the live storages take the
// spare memory: a pointer swap, so the views the model holds stay valid (as the
// shared-memory path's buffer switch, nn/shared_weights.hpp).
//
// The spare storages lie in one mapping in the order the update first writes them, so
// tensors sent one after the other into storages or parts of a fused matrix that follow
// each other are one range of memory (a bucket of several is received into it whole:
// dist::receive_weights). A storage that the update's tensors do not wholly cover
// starts as a copy of the live one. Memory: one storage's worth per storage touched, freed with the stage
// (which holds the old weights after the swap).
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <torch/torch.h>

#include "nn/batch_invariant.hpp"
#include "nn/panel_memory.hpp"

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
  // once, before swap_in; any thread: it only reads the live weights). Covered: the
  // tensors' views join up to the whole storage, dense ones end to end, or the column
  // blocks of one fused matrix kept transposed ([in, q|k|v]) side by side.
  void copy_uncovered();
  int64_t uncovered_bytes() const;
  // Writes tensor `index` (of the names given) into its spare view, converting
  // dtype and layout (nn::copy_weight); a `src` that is that view's memory (target())
  // is only marked. Any thread, one call at a time.
  void put(size_t index, const torch::Tensor& src);
  // Tensor `index`'s spare view where it is dense in the HF shape (the engine's dtype):
  // values sent in that dtype can be received straight into it. Else undefined.
  torch::Tensor target(size_t index) const;
  // How many tensors were put as target() memory (received in place), of how many.
  size_t in_place() const { return in_place_; }
  size_t size() const { return views_.size(); }
  // Every tensor was put.
  bool complete() const;
  // Whether `params` still are the storages this stage was planned for.
  bool matches(const std::vector<std::pair<std::string, torch::Tensor>>& params) const;
  // The live storages take the spare memory (the stage keeps the old). Requires
  // complete() and matches(); call between two steps, on the thread that runs them.
  void swap_in();
  int64_t spare_bytes() const;
  // The matrices whose GEMM panels the model packs after a swap
  // (Transformer::panel_sources(), views on the live weights), set before any put():
  // each is then packed from the same view of the spare memory as soon as the last
  // tensor that writes part of it is put (while later ones are still on their way and
  // the engine goes on generating): what weights_changed() would pack after the swap,
  // done before it.
  void set_panel_sources(std::vector<torch::Tensor> live);
  // Packs those no put() packed (matrices the update does not touch), once every
  // tensor was put. take_panels() then hands all of them over, once.
  void pack_panels();
  std::vector<bi::PackedWeight> take_panels() { return std::move(panels_); }

 private:
  struct Slot {
    c10::Storage live, spare;
    bool covered = false;
  };
  std::vector<Slot> slots_;
  std::vector<std::pair<size_t, torch::Tensor>> views_;  // per name: its slot, its view on the spare
  std::vector<bool> put_;
  size_t in_place_ = 0;
  void pack_source(size_t s);
  std::vector<torch::Tensor> panel_sources_;   // views on the spare memory
  std::vector<bi::PackedWeight> panels_;       // per source, once packed
  std::unique_ptr<PanelMemory> panel_memory_;  // where they are packed
  std::vector<size_t> parts_left_;             // per source, tensors still to put that write into it
  std::vector<std::vector<size_t>> feeds_;     // per tensor, the sources it writes into
  std::vector<const c10::StorageImpl*> planned_;  // per parameter, its live storage
  bool copied_ = false, swapped_ = false;
};

}  // namespace rl::nn
