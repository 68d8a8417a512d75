// A paged KV cache and the batch description the cached forward takes. The cache
// is a flat array of slots (num_blocks * block_size); a sequence owns blocks, and
// the engine's block manager turns its block table into slot indices.
#pragma once
#include <cstdint>
#include <vector>

#include <torch/torch.h>

#include "nn/lora.hpp"

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
  LoraBatch lora;                      // adapters per new token (empty: the base model alone)
  // Builds slot lists from block tables: slot = block * block_size + offset.
  static torch::Tensor slots_from_blocks(const std::vector<std::vector<int64_t>>& block_tables,
                                         const std::vector<int64_t>& lengths, int64_t block_size);
};

// The same batch for the engine's CUDA path (Transformer::forward_paged): int32
// tensors on the device, block tables instead of slot lists, and nothing the host
// must read back, so a decode step can be captured in a CUDA graph and replayed
// over new contents of the same tensors.
struct PagedBatch {
  torch::Tensor input_ids;     // [N] int32, ids within the vocabulary (checked by the caller)
  torch::Tensor positions;     // [N] int32
  torch::Tensor slot_mapping;  // [N] int32 cache slot of each new token's K/V; negative: padding, not stored
  torch::Tensor block_tables;  // [S, W] int32 block ids of each sequence (slot = block * block_size + offset)
  torch::Tensor query_seq;     // [N] int32 row of block_tables of each new token
  torch::Tensor query_ctx;     // [N] int32 keys each new token attends to, itself included; 0: padding
  int64_t max_position = 0;    // on the host: no position exceeds it (sizes the RoPE tables)
};

}  // namespace rl::nn
