// A digest of a model's weights by value, whatever their layout: the trainer's [out, in]
// matrices and the engine's transposed, fused inference layout give the same digest for
// the same values. Engine and trainer use it to prove that a rollout's log-probs are the
// trainer's own (docs/trainer.md, "Old log-probs from the rollout"): the engine reports
// logprob_digest(its weights, the request's temperature) beside its log-probs when they
// come from the batch-invariant float32 CPU kernels, and the trainer compares it with its
// own.
#pragma once
#include <string>
#include <utility>
#include <vector>

#include <torch/torch.h>

namespace rl::nn {

// 128 bits as 32 hex digits: for each named float32 tensor (any strides, at most 2-d),
// the sum over its elements of a 64-bit mix of (name, shape, logical index, value bits),
// twice with different keys. Order of the list and memory layout do not matter.
// Throws std::invalid_argument for a tensor that is not float32 on the CPU.
std::string weights_digest(const std::vector<std::pair<std::string, torch::Tensor>>& params);

// The digest of the union of two disjoint sets of tensors, from their digests (the
// sums add): how a sharded trainer digests its model one gathered unit at a time.
std::string add_digests(const std::string& x, const std::string& y);

// The digest a request's log-probs carry: the weights' digest and the temperature the
// log-probs are of (1 for greedy requests), folded into one 32-hex-digit string.
std::string logprob_digest(const std::string& weights, double temperature);

}  // namespace rl::nn
