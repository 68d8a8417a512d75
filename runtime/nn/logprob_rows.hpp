// The row passes token_logprobs is made of, shared by its blocked form
// (nn/logprobs_blocked.hpp): internal to nn/logprobs*.cpp.
#pragma once
#include <cstdint>

#include <torch/torch.h>

#include "nn/batch_invariant.hpp"

namespace rl::nn::detail {

// Logits [n, rows of w] in the compute dtype (w's), then float32 and scaled by
// 1/temperature, as the engine computes them (on the CPU in float32: the engine's
// batch-invariant kernel, so a row block of w gives those columns bit for bit).
torch::Tensor scaled_logits(const torch::Tensor& h, const torch::Tensor& w, double temperature,
                            const bi::PackedWeight& packed);
// Row-wise log-sum-exp and the targets' log-probs of z [n, V] float32, with the
// engine sampler's arithmetic (bi::logsumexp, the difference taken in double).
void exact_logprobs(const torch::Tensor& z, const torch::Tensor& targets, torch::Tensor lse_out,
                    torch::Tensor logprob_out);
// Entropy of rows [r0, r1) of z [*, V] float32 from their log-sum-exp.
void entropy_rows(const float* z, const float* lse, float* out, int64_t r0, int64_t r1, int64_t V);
// d/dz of g_lp * logprob[target] + g_ent * entropy over columns of log p (`logp`,
// [n, cols] float32), before the target's + g_lp and the 1/T: -p (g_lp + g_ent (log p
// + H)), p = exp(logp). entropy, g_lp, g_ent: [n, 1] float32 columns or undefined.
torch::Tensor softmax_grad(const torch::Tensor& logp, const torch::Tensor& entropy, const torch::Tensor& g_lp,
                           const torch::Tensor& g_ent);
// The dtype the lm_head matmul runs in: the weight's, or autocast's lower precision.
torch::ScalarType compute_dtype(const torch::Tensor& hidden, const torch::Tensor& weight);

}  // namespace rl::nn::detail
