// Greedy decoding through the cached path: the reference loop the parity tests and
// `model:generate` use (the engine has its own scheduler and sampler).
#pragma once
#include <cstdint>
#include <vector>

#include "nn/transformer.hpp"

namespace rl::nn {

// Appends up to max_new_tokens argmax tokens to `prompt`, stopping after any of
// `stop_ids`. Returns only the new tokens.
std::vector<int64_t> greedy_generate(Transformer& model, const std::vector<int64_t>& prompt, int64_t max_new_tokens,
                                     const std::vector<int64_t>& stop_ids = {}, int64_t block_size = 16);

}  // namespace rl::nn
