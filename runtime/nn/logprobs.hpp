// Per-token log-probabilities (and entropies) of chosen tokens under the
// temperature-scaled softmax of the lm_head, computed chunk by chunk: no more
// than one chunk of full-vocabulary logits is computed at a time. The backward pass
// reuses the forward's chunks while all of them fit a fixed budget (256 MiB of
// logits) and recomputes each chunk's logits past it, so memory never grows with
// the batch beyond that budget.
#pragma once
#include <torch/torch.h>

#include "nn/batch_invariant.hpp"

namespace rl::nn {

struct TokenLogprobs {
  torch::Tensor logprobs;  // [N] float32: log softmax(logits / temperature)[target]
  torch::Tensor entropy;   // [N] float32 when requested, else undefined
};

// hidden [N, H], weight [V, H] (lm_head), targets [N] int64 in [0, V).
// Differentiable with respect to hidden and weight. Logits are computed in the
// weight's dtype (under autocast with a float32 weight: autocast's dtype, bf16 for
// the trainer's mixed precision) and promoted to float32 before scaling, as the
// engine does.
// chunk_tokens <= 0 picks a chunk of about 32M logits; keep_logits < 0 keeps chunks
// for the backward pass, in order, while they total at most 64M logits, and the
// backward pass recomputes the rest (0: keep only the first chunk).
// `packed`: the weight's packed panels for the float32 CPU kernels (Transformer::lm_head_packed),
// so that no chunk packs the lm_head again.
TokenLogprobs token_logprobs(const torch::Tensor& hidden, const torch::Tensor& weight, const torch::Tensor& targets,
                             double temperature = 1.0, bool with_entropy = false, int64_t chunk_tokens = 0,
                             int64_t keep_logits = -1, const bi::PackedWeight* packed = nullptr);

// The engine's sampling distribution: float32 log_softmax(logits / temperature).
torch::Tensor scaled_log_softmax(const torch::Tensor& logits, double temperature);

}  // namespace rl::nn
