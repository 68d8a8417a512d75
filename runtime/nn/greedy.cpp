#include "nn/greedy.hpp"

#include <algorithm>
#include <numeric>
#include <stdexcept>

namespace rl::nn {

std::vector<int64_t> greedy_generate(Transformer& model, const std::vector<int64_t>& prompt, int64_t max_new_tokens,
                                     const std::vector<int64_t>& stop_ids, int64_t block_size) {
  if (prompt.empty()) throw std::invalid_argument("greedy_generate: the prompt is empty");
  torch::NoGradGuard no_grad;
  const int64_t total = static_cast<int64_t>(prompt.size()) + max_new_tokens;
  const int64_t blocks = (total + block_size - 1) / block_size;
  auto cache = model.new_kv_cache(blocks, block_size);
  std::vector<int64_t> table(blocks);
  std::iota(table.begin(), table.end(), 0);
  auto dev = model.options().device;
  auto i64 = torch::TensorOptions().dtype(torch::kInt64);

  std::vector<int64_t> out;
  std::vector<int64_t> step(prompt);  // tokens fed this step
  int64_t done = 0;                   // tokens already in the cache
  while (static_cast<int64_t>(out.size()) < max_new_tokens) {
    const int64_t n = static_cast<int64_t>(step.size());
    CachedBatch b;
    b.input_ids = torch::tensor(step, i64).to(dev);
    b.positions = torch::arange(done, done + n, i64).to(dev);
    b.slot_mapping = b.positions;  // blocks are 0..k-1 in order: slot == position
    b.query_lens = {n};
    b.context_lens = {done + n};
    b.context_slots = CachedBatch::slots_from_blocks({table}, {done + n}, block_size).to(dev);
    if (model.lora()) {  // the model's adapter (set_lora) on every row, as forward() applies it
      b.lora.adapters = {model.lora()};
      b.lora.rows = {torch::arange(n, i64).to(dev)};
    }
    auto hidden = model.forward_cached(b, cache);
    const int64_t next = model.logits(hidden.narrow(0, n - 1, 1)).argmax(-1).item<int64_t>();
    out.push_back(next);
    done += n;
    if (std::find(stop_ids.begin(), stop_ids.end(), next) != stop_ids.end()) break;
    step = {next};
  }
  return out;
}

}  // namespace rl::nn
