#include "nn/kv_cache.hpp"

#include <stdexcept>
#include <string>

namespace rl::nn {

size_t KVCache::bytes() const {
  size_t total = 0;
  for (const auto& t : k) total += t.numel() * t.element_size();
  for (const auto& t : v) total += t.numel() * t.element_size();
  return total;
}

torch::Tensor CachedBatch::slots_from_blocks(const std::vector<std::vector<int64_t>>& block_tables,
                                             const std::vector<int64_t>& lengths, int64_t block_size) {
  if (block_tables.size() != lengths.size())
    throw std::invalid_argument("slots_from_blocks: " + std::to_string(block_tables.size()) + " block tables but " +
                                std::to_string(lengths.size()) + " lengths");
  int64_t max_len = 1;
  for (auto n : lengths) max_len = std::max(max_len, n);
  auto slots = torch::zeros({static_cast<int64_t>(lengths.size()), max_len}, torch::kInt64);
  auto a = slots.accessor<int64_t, 2>();
  for (size_t s = 0; s < lengths.size(); ++s) {
    const auto& blocks = block_tables[s];
    if (static_cast<int64_t>(blocks.size()) * block_size < lengths[s])
      throw std::invalid_argument("slots_from_blocks: sequence " + std::to_string(s) + " has " +
                                  std::to_string(lengths[s]) + " tokens but only " + std::to_string(blocks.size()) +
                                  " blocks of " + std::to_string(block_size));
    for (int64_t j = 0; j < lengths[s]; ++j) a[s][j] = blocks[j / block_size] * block_size + j % block_size;
  }
  return slots;
}

}  // namespace rl::nn
