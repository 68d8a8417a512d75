// Prefill/decode disaggregation: K/V rows out of and into the paged cache,
// token-major (engine/pd.hpp), and the transfer checksum.
#include <cstring>

#include "base/errors.hpp"
#include "engine/engine_impl.hpp"
#include "engine/pd.hpp"
#include "nn/weights.hpp"

namespace rl::engine {

namespace pd {

std::string KvLayout::describe() const {
  return std::to_string(layers) + " layers x K,V x " + std::to_string(kv_heads) + " kv heads x " +
         std::to_string(head_dim) + " x " + dtype;
}

// Eight bytes at a time, each word mixed in (a multiply-xorshift chain), then the tail.
uint64_t checksum(const char* data, size_t n) {
  uint64_t h = 0x9e3779b97f4a7c15ull ^ n;
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t w;
    std::memcpy(&w, data + i, 8);
    h ^= w * 0xbf58476d1ce4e5b9ull;
    h = (h << 27 | h >> 37) * 0x94d049bb133111ebull;
  }
  for (; i < n; ++i) h = (h ^ static_cast<unsigned char>(data[i])) * 0x100000001b3ull;
  return h ^ (h >> 31);
}

}  // namespace pd

pd::KvLayout ModelRunner::kv_layout() const {
  pd::KvLayout l;
  l.layers = config_.num_hidden_layers;
  l.kv_heads = config_.num_key_value_heads;
  l.head_dim = config_.head_dim;
  l.elem_size = static_cast<int64_t>(c10::elementSize(dtype_));
  l.dtype = dtype_name();
  return l;
}

namespace {

// Cache slots of tokens [from, to) of a sequence with these blocks.
torch::Tensor slots_of(const std::vector<int32_t>& blocks, int64_t from, int64_t to, int64_t block_size,
                       const torch::Device& device) {
  std::vector<int64_t> slots;
  slots.reserve(static_cast<size_t>(to - from));
  for (int64_t t = from; t < to; ++t) slots.push_back(int64_t{blocks.at(static_cast<size_t>(t / block_size))} * block_size + t % block_size);
  return torch::tensor(slots, torch::kInt64).to(device);
}

}  // namespace

void ModelRunner::read_kv(const std::vector<int32_t>& blocks, int64_t from, int64_t to, char* dst) {
  if (cache_.k.empty()) throw Error("prefill/decode: the KV cache is released");
  const int64_t T = to - from, L = config_.num_hidden_layers;
  if (T <= 0) return;
  torch::Tensor slots = slots_of(blocks, from, to, cache_.block_size, device_);
  torch::Tensor out = torch::from_blob(dst, {T, L, 2, config_.num_key_value_heads, config_.head_dim},
                                       torch::TensorOptions().dtype(dtype_));
  for (int64_t l = 0; l < L; ++l) {
    out.select(1, l).select(1, 0).copy_(cache_.k[l].index_select(0, slots));
    out.select(1, l).select(1, 1).copy_(cache_.v[l].index_select(0, slots));
  }
}

void ModelRunner::write_kv(const std::vector<int32_t>& blocks, int64_t from, int64_t to, const char* src) {
  if (cache_.k.empty()) throw Error("prefill/decode: the KV cache is released");
  const int64_t T = to - from, L = config_.num_hidden_layers;
  if (T <= 0) return;
  torch::Tensor slots = slots_of(blocks, from, to, cache_.block_size, device_);
  torch::Tensor in = torch::from_blob(const_cast<char*>(src), {T, L, 2, config_.num_key_value_heads, config_.head_dim},
                                      torch::TensorOptions().dtype(dtype_));
  if (!device_.is_cpu()) in = in.to(device_);
  for (int64_t l = 0; l < L; ++l) {
    cache_.k[l].index_copy_(0, slots, in.select(1, l).select(1, 0));
    cache_.v[l].index_copy_(0, slots, in.select(1, l).select(1, 1));
  }
}

}  // namespace rl::engine
