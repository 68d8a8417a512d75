// PPO's critic (slime's critic role): a second copy of the decoder whose final-norm
// hidden states go through a scalar value head, Linear(hidden, 1), trained with its
// own AdamW on the clipped value loss (losses.hpp, value_loss). The trainer owns it
// (trainer.hpp: use_critic); checkpoints save it beside the policy (checkpoint.hpp).
#pragma once
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "nn/transformer.hpp"
#include "nn/weights.hpp"

namespace rl::trainer {

class Critic {
 public:
  // `model`: the decoder (trained in place; its lm_head is never used). The value head
  // is drawn normal(0, initializer_range) with a zero bias (slime re-initialises the
  // critic's output layer so), from a fixed seed; data-parallel ranks then take rank
  // 0's. AdamW with the policy's betas, eps and weight decay at learning rate `lr`.
  Critic(std::shared_ptr<nn::Transformer> model, double lr, double beta1, double beta2, double eps,
         double weight_decay);

  nn::Transformer& model() { return *model_; }
  // V for hidden-state rows [N, H] → [N] float32.
  torch::Tensor head(const torch::Tensor& hidden_rows) const;
  // What the critic trains and checkpoints: the decoder's parameters without the
  // lm_head, then value_head.weight [1, H] and value_head.bias [1].
  const nn::NamedTensors& named_parameters() const { return named_; }
  std::vector<torch::Tensor>& parameters() { return params_; }
  torch::optim::AdamW& optimizer() { return *optim_; }
  // After its parameters were written in place (an optimiser step, a checkpoint, a broadcast).
  void weights_changed() { model_->weights_changed(); }
  double state_bytes() const;

 private:
  std::shared_ptr<nn::Transformer> model_;
  torch::Tensor head_w_, head_b_;
  nn::NamedTensors named_;
  std::vector<torch::Tensor> params_;
  std::unique_ptr<torch::optim::AdamW> optim_;
};

// The critic in a trainer checkpoint directory: critic.safetensors (named_parameters,
// in the critic's dtype) and critic_optimizer.pt (its AdamW state, as optimizer.pt).
inline constexpr const char* kCriticFile = "critic.safetensors";
inline constexpr const char* kCriticOptimizerFile = "critic_optimizer.pt";

void save_critic(Critic& c, const std::filesystem::path& dir);

// Reads both files and checks them against `c` (names, shapes) without changing it;
// apply() then copies them in. Throws rl::Error naming the file, with a hint.
struct CriticRestore {
  std::vector<torch::Tensor> weights;  // in named_parameters order, CPU
  std::function<void()> apply_optimizer;
  void apply(Critic& c) const;
};
CriticRestore read_critic(Critic& c, const std::filesystem::path& dir);

}  // namespace rl::trainer
