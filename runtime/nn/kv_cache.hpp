// A paged KV cache and the batch description the cached forward takes. The cache
// is a flat array of slots (num_blocks * block_size); a sequence owns blocks, and
// the engine's block manager turns its block table into slot indices.
#pragma once
#include <cstdint>
#include <vector>

#include <torch/torch.h>

namespace rl::nn {

struct KVCache {
  int64_t num_blocks = 0;
  int64_t block_size = 0;
  std::vector<torch::Tensor> k, v;  // per layer [num_blocks * block_size, kv_heads, head_dim]
  int64_t num_slots() const { return num_blocks * block_size; }
  size_t bytes() const;
};

// S sequences, each contributing query_lens[s] new tokens (prefill: the prompt or
// its uncached suffix; decode: 1). All tensors int64 on the model's device.
struct CachedBatch {
  torch::Tensor input_ids;             // [N] new tokens, sequences concatenated
  torch::Tensor positions;             // [N] absolute positions
  torch::Tensor slot_mapping;          // [N] cache slot receiving each new token's K/V
  std::vector<int64_t> query_lens;     // [S], sums to N
  std::vector<int64_t> context_lens;   // [S] tokens attended to, including the new ones
  torch::Tensor context_slots;         // [S, max(context_lens)] slots of each context, padded
                                       // with any valid slot (masked out)
  // Builds slot lists from block tables: slot = block * block_size + offset.
  static torch::Tensor slots_from_blocks(const std::vector<std::vector<int64_t>>& block_tables,
                                         const std::vector<int64_t>& lengths, int64_t block_size);
};

}  // namespace rl::nn
