// The memory a trained model's state holds (perf/trainer_state_bytes).
#pragma once
#include <vector>

#include <torch/torch.h>

namespace rl::trainer {

// Bytes of `params`, their gradients (where defined) and the AdamW moments `optim` keeps.
double adamw_state_bytes(const std::vector<torch::Tensor>& params, torch::optim::Optimizer& optim);

}  // namespace rl::trainer
