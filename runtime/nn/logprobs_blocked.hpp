// token_logprobs (nn/logprobs.hpp) over an lm_head that is never whole in memory:
// the weight comes as row blocks, fetched one at a time (sharded training: block b
// is rank b's rows, broadcast by it), and its gradient leaves block by block
// (summed onto rank b). At most two blocks of the weight and one of its gradient
// are alive, instead of the whole [V, H] matrix and its dense gradient.
//
// The log-probs are token_logprobs' bit for bit (float32 on the CPU: the logits of a
// row block are those columns of the whole product, and the log-softmax runs over
// whole rows as before); the gradients are equal up to summation order.
//
// Every fetch and give is a collective when the blocks come from other ranks: all
// ranks make the same calls in the same order, whatever their number of tokens (a
// rank with none still takes part). The forward pass goes over the weight once per
// pass of up to `pass_rows` tokens (all ranks agree on the pass count through
// `max_over_ranks`); the backward pass once.
#pragma once
#include <cstdint>
#include <functional>
#include <vector>

#include <torch/torch.h>

#include "nn/logprobs.hpp"

namespace rl::nn {

struct HeadBlocks {
  std::vector<int64_t> rows;  // block b covers rows [rows[b], rows[b + 1]); rows.back() = V
  int64_t hidden = 0;         // H
  torch::ScalarType dtype = torch::kFloat32;  // the weight's (the compute dtype follows, as token_logprobs')
  // Issues the fetch of block b ([rows_b, H], the weight's dtype and device); the
  // returned function waits for it and gives the block. Called in order b = 0, 1, ...
  // (the next block is fetched while this one computes).
  std::function<std::function<torch::Tensor()>(size_t b)> fetch;
  // d loss / d W[rows_b] ([rows_b, H] float32) for block b, once per backward pass.
  std::function<void(size_t b, const torch::Tensor& grad)> give;
  // The largest of a value over the ranks that share the blocks (identity for one).
  std::function<int64_t(int64_t)> max_over_ranks;
  // Tokens per forward pass (<= 0: 2^26 logits' worth, as token_logprobs keeps).
  int64_t pass_rows = 0;
  // Logits the forward pass keeps for the backward pass, the first pass's always
  // (< 0: 2^26, as token_logprobs); the backward pass recomputes the others by block.
  int64_t keep_logits = -1;
};

// hidden [N, H] (differentiable), targets [N] int64 in [0, V).
TokenLogprobs token_logprobs_blocked(const torch::Tensor& hidden, const HeadBlocks& head, const torch::Tensor& targets,
                                     double temperature = 1.0, bool with_entropy = false);

}  // namespace rl::nn
