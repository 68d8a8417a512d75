// Activation recomputation (Megatron's --recompute-granularity full; PyTorch's reentrant
// torch.utils.checkpoint): a block of the forward pass whose inner activations are not
// kept for the backward pass but computed again when its output's gradient arrives.
// Only the block's input stays alive, so a model's activation memory falls from every
// layer's intermediate tensors to one hidden state per block, for one more forward
// pass of each block during backward.
#pragma once
#include <functional>

#include <torch/torch.h>

namespace rl::nn {

// What runs around the second forward pass of a block: begin() just before it, end()
// once the block's backward has run (the trainer's sharded parameters use them to keep
// what the second pass gathered for the backward that follows at once).
struct RecomputeHooks {
  std::function<void()> begin, end;
};

using Block = std::function<torch::Tensor(const torch::Tensor&)>;

// y = block(x). With autograd off, just that. With it on, block runs under no_grad now
// and y is given a backward node that keeps x alone: when y's gradient arrives, block(x)
// runs again under autograd (with the autocast state of this call), then its backward,
// whose gradients accumulate into the leaves it reads (the parameters) as a reentrant
// backward does; x's gradient goes on down the graph. `block` must compute the same
// values both times (no dropout, deterministic kernels: on the CPU's batch-invariant
// kernels the two passes are equal bit for bit) and must own what it reads: it runs
// after this call returns. With retain_graph, each backward pass recomputes again.
torch::Tensor recompute(const torch::Tensor& x, Block block, RecomputeHooks hooks = {});

}  // namespace rl::nn
