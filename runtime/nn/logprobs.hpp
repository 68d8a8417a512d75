// Per-token log-probabilities (and entropies) of chosen tokens under the
// temperature-scaled softmax of the lm_head, computed chunk by chunk: no more
// than one chunk of full-vocabulary logits exists at any time, in the forward
// pass or in the backward pass (which recomputes each chunk's logits).
#pragma once
#include <torch/torch.h>

namespace rl::nn {

struct TokenLogprobs {
  torch::Tensor logprobs;  // [N] float32: log softmax(logits / temperature)[target]
  torch::Tensor entropy;   // [N] float32 when requested, else undefined
};

// hidden [N, H], weight [V, H] (lm_head), targets [N] int64 in [0, V).
// Differentiable with respect to hidden and weight. Logits are computed in the
// weight's dtype and promoted to float32 before scaling, as the engine does.
// chunk_tokens <= 0 picks a chunk of about 32M logits.
TokenLogprobs token_logprobs(const torch::Tensor& hidden, const torch::Tensor& weight, const torch::Tensor& targets,
                             double temperature = 1.0, bool with_entropy = false, int64_t chunk_tokens = 0);

// The engine's sampling distribution: float32 log_softmax(logits / temperature).
torch::Tensor scaled_log_softmax(const torch::Tensor& logits, double temperature);

}  // namespace rl::nn
