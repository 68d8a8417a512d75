#include "trainer/state_bytes.hpp"

namespace rl::trainer {

double adamw_state_bytes(const std::vector<torch::Tensor>& params, torch::optim::Optimizer& optim) {
  double n = 0;
  for (const auto& p : params) {
    n += static_cast<double>(p.nbytes());
    if (p.grad().defined()) n += static_cast<double>(p.grad().nbytes());
  }
  for (const auto& [key, st] : optim.state()) {
    const auto& s = static_cast<const torch::optim::AdamWParamState&>(*st);
    for (const auto* t : {&s.exp_avg(), &s.exp_avg_sq(), &s.max_exp_avg_sq()})
      if (t->defined()) n += static_cast<double>(t->nbytes());
  }
  return n;
}

}  // namespace rl::trainer
