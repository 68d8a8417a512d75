// The GEMM panels of a model's matrices (bi::pack) in one mapping that outlives them
// for the next update (tensor::HugePageArena keeps a released mapping for the next one
// of its size). Every weight update repacks the same shapes; packed into fresh memory,
// each page costs a fault and a zeroing on first touch: on the 2-vCPU VM packing the
// 42M model's 65 MB lm_head took 43-58 ms into fresh memory and 14 ms into memory
// written before.
#pragma once
#include <memory>
#include <vector>

#include <torch/torch.h>

#include "nn/batch_invariant.hpp"

namespace rl::tensor {
class HugePageArena;
}

namespace rl::nn {

class PanelMemory {
 public:
  // Room for the panels of each matrix (as bi::pack takes them: [out, in], any layout).
  explicit PanelMemory(const std::vector<torch::Tensor>& matrices);
  // bi::pack(w) into matrix i's room (w of that matrix's shape); the panels keep the
  // mapping alive.
  bi::PackedWeight pack(size_t i, const torch::Tensor& w) const;

 private:
  std::shared_ptr<tensor::HugePageArena> arena_;  // null when all of it is under a huge page
  std::vector<int64_t> offsets_, bytes_;
};

}  // namespace rl::nn
