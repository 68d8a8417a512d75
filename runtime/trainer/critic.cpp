#include "trainer/critic.hpp"
#include "trainer/state_bytes.hpp"

#include <stdexcept>

namespace rl::trainer {

Critic::Critic(std::shared_ptr<nn::Transformer> model, double lr, double beta1, double beta2, double eps,
               double weight_decay)
    : model_(std::move(model)) {
  if (!model_) throw std::invalid_argument("trainer: use_critic needs a critic model");
  if (model_->options().inference_layout)
    throw std::invalid_argument("trainer: the critic uses the engine's inference layout; load it for training");
  model_->set_requires_grad(true);
  const auto& cfg = model_->config();
  const auto opts = torch::TensorOptions().dtype(model_->options().dtype).device(model_->options().device);
  {
    torch::NoGradGuard ng;
    // Drawn in float32 on the CPU from its own generator: the same head whatever the
    // dtype, device or the global generator's state.
    auto gen = at::make_generator<at::CPUGeneratorImpl>(0x5eed);
    const double std = cfg.raw.value("initializer_range", 0.02);
    head_w_ = at::normal(0.0, std, {1, cfg.hidden_size}, gen).to(opts);
    head_b_ = torch::zeros({1}, opts);
  }
  head_w_.set_requires_grad(true);
  head_b_.set_requires_grad(true);
  for (const auto& [name, t] : model_->named_parameters()) {
    if (name == "lm_head.weight") {
      t.set_requires_grad(false);  // the critic never reads it
      continue;
    }
    named_.emplace_back(name, t);
  }
  named_.emplace_back("value_head.weight", head_w_);
  named_.emplace_back("value_head.bias", head_b_);
  for (const auto& [name, t] : named_) params_.push_back(t);
  torch::optim::AdamWOptions ao(lr);
  ao.betas({beta1, beta2}).eps(eps).weight_decay(weight_decay);
  optim_ = std::make_unique<torch::optim::AdamW>(params_, ao);
}

torch::Tensor Critic::head(const torch::Tensor& hidden_rows) const {
  return torch::nn::functional::linear(hidden_rows, head_w_, head_b_).squeeze(-1).to(torch::kFloat32);
}

double Critic::state_bytes() const { return adamw_state_bytes(params_, *optim_); }

}  // namespace rl::trainer
