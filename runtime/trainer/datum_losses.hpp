// Tinker's built-in losses (tinker-docs "Loss Functions") over Datums: each datum is
// one sequence whose loss inputs are aligned with its model input (position i predicts
// target_tokens[i]); every loss is a sum over tokens and over the call's data, never a
// mean. Inputs (float32 [N] unless said):
//   cross_entropy        target_tokens (int64), weights            → −Σ w·logp
//   importance_sampling  target_tokens, logprobs (the sampler's), advantages
//                                                                  → −Σ exp(logp − q)·A
//   ppo                  same; clip_low_threshold / clip_high_threshold (0.8 / 1.2)
//                                                                  → −Σ min(r·A, clip(r)·A)
//   cispo                same; the same thresholds                 → −Σ sg(clip(r))·logp·A
//   dro                  same; beta (0.05)                         → −Σ (logp·A − β/2·(logp − q)²)
// `weights` is optional for the policy losses (a mask; default ones), as the cookbook
// sends it only for cross_entropy.
#pragma once
#include <map>
#include <string>
#include <vector>

#include <torch/torch.h>

namespace rl::trainer {

// One sequence of a forward / forward_backward call (Tinker's Datum).
struct Datum {
  std::vector<int64_t> tokens;                   // model_input, [N]
  std::map<std::string, torch::Tensor> inputs;   // loss_fn_inputs by name, each [N] (CPU)
};

// The names a loss takes and the config keys it reads, for validation and docs.
const std::vector<std::string>& datum_loss_names();

// Throws std::invalid_argument naming the datum, input and problem (a missing input,
// a length other than the datum's N, a target outside [0, vocab), an unknown loss or
// config key) before any compute.
void validate_datums(const std::string& loss_fn, const std::vector<Datum>& data,
                     const std::map<std::string, double>& config, int64_t vocab_size);

struct DatumLoss {
  torch::Tensor loss;                            // scalar, differentiable through logp
  std::vector<torch::Tensor> elementwise;        // per datum [N] float32 (detached): each token's loss
};

// `logp`: per datum, the policy's log-probs of its target tokens [N] (float32, on any
// device; differentiable for forward_backward).
DatumLoss datum_loss(const std::string& loss_fn, const std::vector<Datum>& data,
                     const std::vector<torch::Tensor>& logp, const std::map<std::string, double>& config);

}  // namespace rl::trainer
