// Decode attention straight from the paged KV cache: one query token per
// sequence attends over its context slots without gathering them into a padded
// copy first (that copy costs as much memory traffic as the attention itself
// at long contexts and large batches). CPU, float32; other devices and dtypes
// take forward_cached's gather + SDPA path.
#pragma once
#include <cstdint>
#include <vector>

#include <torch/torch.h>

namespace rl::nn {

// q [S, H, D] (one query per sequence, position = context_len - 1), k_cache and
// v_cache [slots, KV, D], context_slots [S, >= max context] int64 (row s valid
// up to context_lens[s]). Returns [S, H, D]. H must be a multiple of KV.
torch::Tensor paged_decode_attention(const torch::Tensor& q, const torch::Tensor& k_cache,
                                     const torch::Tensor& v_cache, const torch::Tensor& context_slots,
                                     const std::vector<int64_t>& context_lens, double scale);

// The general form: query i (of q [Q, H, D]) attends over the first
// context_of_query[i] slots of row seq_of_query[i] of context_slots. A prefill's
// queries each see their causal prefix; the trainer's full-sequence forward runs
// through it too, so engine and trainer attend with the same arithmetic. With `lse`,
// also each query's and head's log-sum-exp of its scaled scores, [Q, H] float32 (what
// a flash-attention backward pass takes).
torch::Tensor paged_attention(const torch::Tensor& q, const torch::Tensor& k_cache, const torch::Tensor& v_cache,
                              const torch::Tensor& context_slots, const std::vector<int64_t>& seq_of_query,
                              const std::vector<int64_t>& context_of_query, double scale,
                              torch::Tensor* lse = nullptr);

// cache.index_copy_(0, slots, src): each new token's K or V rows [KV, D] into its
// slot; on the CPU in float32 as plain row copies (src may be a view with a row
// stride, as k and v are into the fused qkv projection).
void write_cache_rows(torch::Tensor& cache, const torch::Tensor& slots, const torch::Tensor& src);

bool paged_decode_supported(const torch::Tensor& q, const torch::Tensor& k_cache);

}  // namespace rl::nn
