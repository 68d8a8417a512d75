#include "trainer/stepwise.hpp"

#include <algorithm>
#include <limits>
#include <stdexcept>

#include "nn/logprobs.hpp"
#include "tensor/block_cache.hpp"

namespace rl::trainer {

StepwiseTrainer::StepwiseTrainer(std::shared_ptr<nn::Transformer> model, std::shared_ptr<nn::LoraAdapter> adapter)
    : model_(std::move(model)), adapter_(std::move(adapter)) {
  if (!model_) throw std::invalid_argument("StepwiseTrainer: no model");
  if (adapter_) {
    model_->set_requires_grad(false);  // the base stays frozen
    params_ = adapter_->parameters();
  } else {
    for (auto& [name, t] : model_->named_parameters()) params_.push_back(t);
  }
  for (auto& p : params_) p.set_requires_grad(true);
  torch::optim::AdamWOptions ao(AdamParams{}.learning_rate);
  optim_ = std::make_unique<torch::optim::AdamW>(params_, ao);
}

// Each datum's log-probs of its target tokens: one forward over the call's data, end
// to end on the CPU (no padding: Transformer::forward_packed), right-padded elsewhere.
// The batch-invariant kernels make each row's values independent of the others and
// of the layout, so they equal the engine's for the same tokens.
std::vector<torch::Tensor> StepwiseTrainer::target_logprobs(const std::vector<Datum>& data, bool grad) {
  model_->set_lora(adapter_);
  torch::AutoGradMode mode(grad);
  const auto& opts = model_->options();
  std::vector<const std::vector<int64_t>*> seqs;
  for (const auto& d : data) seqs.push_back(&d.tokens);
  const auto laid = nn::lay_out(seqs, /*end_to_end=*/opts.device.is_cpu());
  std::vector<int64_t> rows, targets;
  for (size_t b = 0; b < data.size(); ++b) {
    const auto tt = data[b].inputs.at("target_tokens").to(torch::kInt64).contiguous();
    const int64_t* tp = tt.data_ptr<int64_t>();
    for (int64_t i = 0; i < static_cast<int64_t>(data[b].tokens.size()); ++i) {
      rows.push_back(laid.starts[b] + i);
      targets.push_back(tp[i]);
    }
  }
  auto hidden = model_->forward(laid);
  auto flat = hidden.reshape({-1, hidden.size(2)}).index_select(0, torch::tensor(rows, torch::kInt64).to(opts.device));
  // an adapter on lm_head (train_unembed): the merged unembedding, as the engine samples with
  auto tgt = torch::tensor(targets, torch::kInt64).to(opts.device);
  auto lp = (model_->lora_lm_head()
                 ? nn::token_logprobs(flat, model_->effective_lm_head(), tgt, 1.0, false)
                 : nn::token_logprobs(flat, model_->lm_head_weight(), tgt, 1.0, false, 0, -1, &model_->lm_head_packed()))
                .logprobs;
  std::vector<torch::Tensor> out;
  int64_t at = 0;
  for (const auto& d : data) {
    const int64_t n = static_cast<int64_t>(d.tokens.size());
    out.push_back(lp.narrow(0, at, n));
    at += n;
  }
  return out;
}

StepResult StepwiseTrainer::run(const std::vector<Datum>& data, const std::string& loss_fn,
                                const std::map<std::string, double>& config, bool backward) {
  validate_datums(loss_fn, data, config, model_->config().vocab_size);
  tensor::MemoryInUse busy;  // an idle engine server in this process leaves the freed memory to the pass
  auto lp = target_logprobs(data, backward);
  torch::AutoGradMode mode(backward);
  auto loss = datum_loss(loss_fn, data, lp, config);
  if (backward) {
    loss.loss.backward();
    ++pending_;
  }
  StepResult r;
  for (auto& t : lp) r.logprobs.push_back(t.detach().to(torch::kCPU, torch::kFloat32).contiguous());
  r.elementwise = std::move(loss.elementwise);
  r.metrics["loss:sum"] = loss.loss.detach().item<double>();
  return r;
}

StepResult StepwiseTrainer::forward(const std::vector<Datum>& data, const std::string& loss_fn,
                                    const std::map<std::string, double>& config) {
  return run(data, loss_fn, config, false);
}

StepResult StepwiseTrainer::forward_backward(const std::vector<Datum>& data, const std::string& loss_fn,
                                             const std::map<std::string, double>& config) {
  return run(data, loss_fn, config, true);
}

std::vector<torch::Tensor> StepwiseTrainer::logprobs(const std::vector<Datum>& data) {
  for (size_t i = 0; i < data.size(); ++i)
    if (!data[i].inputs.count("target_tokens"))
      throw std::invalid_argument("data[" + std::to_string(i) + "].loss_fn_inputs['target_tokens'] is missing");
  auto lp = target_logprobs(data, false);
  for (auto& t : lp) t = t.to(torch::kCPU, torch::kFloat32).contiguous();
  return lp;
}

std::map<std::string, double> StepwiseTrainer::optim_step(const AdamParams& p) {
  if (!(p.learning_rate >= 0) || !(p.beta1 >= 0 && p.beta1 < 1) || !(p.beta2 >= 0 && p.beta2 < 1) || !(p.eps >= 0) ||
      !(p.weight_decay >= 0) || !(p.grad_clip_norm >= 0))
    throw std::invalid_argument(
        "adam_params: need learning_rate >= 0, 0 <= beta1, beta2 < 1, eps >= 0, weight_decay >= 0, grad_clip_norm >= 0");
  for (auto& g : optim_->param_groups()) {
    auto& o = static_cast<torch::optim::AdamWOptions&>(g.options());
    o.lr(p.learning_rate).betas({p.beta1, p.beta2}).eps(p.eps).weight_decay(p.weight_decay);
  }
  std::vector<torch::Tensor> with_grad;
  for (auto& t : params_)
    if (t.grad().defined()) with_grad.push_back(t);
  double norm = 0;
  if (!with_grad.empty()) {
    norm = p.grad_clip_norm > 0 ? torch::nn::utils::clip_grad_norm_(with_grad, p.grad_clip_norm)
                                : torch::nn::utils::clip_grad_norm_(with_grad, std::numeric_limits<double>::infinity());
  }
  optim_->step();
  optim_->zero_grad(true);
  if (!adapter_) model_->weights_changed();  // an adapter's version follows its tensors' own
  ++steps_;
  pending_ = 0;
  return {{"grad_norm", norm}, {"learning_rate", p.learning_rate}, {"optim_steps", static_cast<double>(steps_)}};
}

void StepwiseTrainer::zero_grad() {
  optim_->zero_grad(true);
  pending_ = 0;
}

}  // namespace rl::trainer
