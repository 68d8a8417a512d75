// A trainer driven one call at a time, with Tinker's training-client semantics:
// forward (log-probs and the loss, no update), forward_backward (the same, and the
// loss's gradients added to what earlier calls left), optim_step (one AdamW step with
// the caller's hyperparameters, then the gradients are cleared). The model is shared:
// several StepwiseTrainers (one per LoRA adapter) train over one frozen base, each
// with its own adapter and optimiser state; their calls must not overlap (the owner
// runs them one at a time). Knows nothing of HTTP or Lua (the Tinker server is
// lua/rl/tinker, bindings/torch_stepwise.cpp wraps this).
#pragma once
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "nn/lora.hpp"
#include "nn/transformer.hpp"
#include "trainer/datum_losses.hpp"

namespace rl::trainer {

// Tinker's AdamParams (its defaults), with torch.optim.AdamW's semantics (decoupled
// weight decay); grad_clip_norm > 0 clips the global norm first.
struct AdamParams {
  double learning_rate = 1e-4;
  double beta1 = 0.9, beta2 = 0.95, eps = 1e-12;
  double weight_decay = 0.0;
  double grad_clip_norm = 0.0;
};

struct StepResult {
  std::vector<torch::Tensor> logprobs;     // per datum [N] float32: log p(target_tokens[i] | tokens[..i])
  std::vector<torch::Tensor> elementwise;  // per datum [N] float32: each token's loss
  std::map<std::string, double> metrics;   // "loss:sum"
};

class StepwiseTrainer {
 public:
  // `adapter` null: every parameter of `model` trains (full fine-tuning); else only
  // the adapter's, over a base whose parameters never get gradients.
  StepwiseTrainer(std::shared_ptr<nn::Transformer> model, std::shared_ptr<nn::LoraAdapter> adapter);

  StepResult forward(const std::vector<Datum>& data, const std::string& loss_fn,
                     const std::map<std::string, double>& config);
  StepResult forward_backward(const std::vector<Datum>& data, const std::string& loss_fn,
                              const std::map<std::string, double>& config);
  // The loss's log-probs only, with no loss (compute_logprobs-style callers).
  std::vector<torch::Tensor> logprobs(const std::vector<Datum>& data);
  // One AdamW step over the accumulated gradients; metrics: grad_norm (before clipping),
  // learning_rate, and optim_steps (this trainer's count).
  std::map<std::string, double> optim_step(const AdamParams& p);
  // Clears accumulated gradients without a step.
  void zero_grad();

  int64_t steps() const { return steps_; }
  int64_t pending_forward_backwards() const { return pending_; }
  const std::shared_ptr<nn::LoraAdapter>& adapter() const { return adapter_; }
  nn::Transformer& model() { return *model_; }
  std::vector<torch::Tensor>& parameters() { return params_; }
  torch::optim::AdamW& optimizer() { return *optim_; }
  void set_steps(int64_t s) { steps_ = s; }

 private:
  std::vector<torch::Tensor> target_logprobs(const std::vector<Datum>& data, bool grad);
  StepResult run(const std::vector<Datum>& data, const std::string& loss_fn,
                 const std::map<std::string, double>& config, bool backward);

  std::shared_ptr<nn::Transformer> model_;
  std::shared_ptr<nn::LoraAdapter> adapter_;
  std::vector<torch::Tensor> params_;
  std::unique_ptr<torch::optim::AdamW> optim_;
  int64_t steps_ = 0, pending_ = 0;
};

}  // namespace rl::trainer
