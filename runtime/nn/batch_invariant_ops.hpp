// The transformer's float32 CPU operations on the batch-invariant kernels
// (nn/batch_invariant.hpp), as differentiable tensor ops. Forward passes run the
// kernels, so the engine's incremental decode and the trainer's full-sequence
// forward compute every hidden state and log-prob with the same bits; backward
// passes use ATen (gradients need no bit-equality, only correctness).
//
// Used where active(): CPU, float32, autocast off (the trainer's bf16 mixed
// precision and CUDA keep ATen's kernels), and not turned off by
// RLHOST_BATCH_INVARIANT=0 (for measuring what the kernels cost).
#pragma once
#include <torch/torch.h>

#include <cstdint>
#include <vector>

#include "nn/batch_invariant.hpp"

namespace rl::nn::bi {

bool active(const torch::Tensor& x);

// x [..., in] @ w^T + b; w [out, in] in any layout (a transposed [in, out] matrix
// is read in place), b [out] or undefined.
torch::Tensor linear(const torch::Tensor& x, const torch::Tensor& w, const torch::Tensor& b);
// The same with w also packed (pack_weight of w's current values): the packed copy
// serves forward-only calls (no gradient wanted), w the rest. Same bits.
torch::Tensor linear(const torch::Tensor& x, const torch::Tensor& w, const torch::Tensor& b, const PackedWeight& packed);
// pack_weight of w [out, in] in any layout (empty where packed_available() is false),
// into `into` where given (as pack_weight takes it).
PackedWeight pack(const torch::Tensor& w, std::shared_ptr<float> into = nullptr);
// pack_weight of a row-major [k, n] matrix (rows ldw apart) into memory from LibTorch's
// CPU allocator, held by the result: a backward pass packs operands of the same sizes
// layer after layer, and the allocator's block cache hands the same memory back
// (fresh mappings would fault in every page each time).
PackedWeight pack_rows(const float* w, int64_t ldw, int64_t k, int64_t n);
// w * x / sqrt(mean(x^2, -1) + eps)
torch::Tensor rms_norm(const torch::Tensor& x, const torch::Tensor& w, double eps);
// silu(g) * u; g and u may be column slices of one matrix.
torch::Tensor silu_mul(const torch::Tensor& g, const torch::Tensor& u);
// Causal self-attention over right-padded sequences: q [B, T, H, D], k and v
// [B, T, KV, D] -> [B, T, H * D], each query attending over its prefix. With `lens`,
// over sequences packed end to end in one row instead (B = 1, T = the sum of lens):
// each query attends over its own sequence's prefix, with the same bits as in the
// padded layout. Throws std::invalid_argument for lens that do not fill T.
torch::Tensor causal_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v, double scale,
                               const std::vector<int64_t>& lens = {});

}  // namespace rl::nn::bi
