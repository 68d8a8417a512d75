// The trainer's optimiser step in ATen's multi-tensor kernels, on every device: the
// gradient norm and clip through _foreach_norm / _foreach_mul_ (what
// torch.nn.utils.clip_grad_norm_ runs), and torch::optim::AdamW's update through
// _fused_adamw_ (what torch.optim.AdamW(fused=True) runs): a few launches for the
// whole model instead of several per parameter on CUDA, one pass over each tensor
// instead of a dozen on the CPU. Same state as torch::optim::AdamW (exp_avg,
// exp_avg_sq, step), so checkpoints are unchanged; the same arithmetic up to
// rounding (tests/cpp/torch/test_optim_fused.cpp checks it against AdamW).
#pragma once
#include <cstdint>
#include <vector>

#include <torch/torch.h>

namespace rl::trainer {

// 2-norm of all gradients; when max_norm > 0 and the norm exceeds it, the gradients
// are scaled by max_norm / (norm + 1e-6), as clip_grad_norm_ does.
double clip_grad_norm_foreach(const std::vector<torch::Tensor>& params, double max_norm);

class FusedAdamW {
 public:
  // One AdamW step of `opt`'s parameters that have gradients, with its options and state.
  void step(torch::optim::AdamW& opt);

 private:
  // Per parameter, the step count as the float tensor the kernel reads, and the
  // count it mirrors (a loaded checkpoint changes the state: rebuilt then).
  std::vector<torch::Tensor> steps_;
  std::vector<int64_t> mirrored_;
};

}  // namespace rl::trainer
