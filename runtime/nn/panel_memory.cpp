#include "nn/panel_memory.hpp"

#include <stdexcept>
#include <string>

#include "nn/batch_invariant_ops.hpp"
#include "tensor/huge_pages.hpp"

namespace rl::nn {

PanelMemory::PanelMemory(const std::vector<torch::Tensor>& matrices) {
  int64_t total = 0;
  for (const auto& w : matrices) {
    const bool packs = w.defined() && w.dim() == 2;
    const auto n = packs ? static_cast<int64_t>(bi::packed_bytes(w.size(1), w.size(0))) : 0;
    offsets_.push_back(total);
    bytes_.push_back(n);
    total += (n + 63) / 64 * 64;
  }
  if (bi::packed_available() && total >= tensor::kHugePageBytes) arena_ = tensor::HugePageArena::make(total);
}

bi::PackedWeight PanelMemory::pack(size_t i, const torch::Tensor& w) const {
  if (i >= offsets_.size()) throw std::out_of_range("PanelMemory::pack: matrix " + std::to_string(i));
  if (!arena_ || !w.defined() || w.dim() != 2 || static_cast<int64_t>(bi::packed_bytes(w.size(1), w.size(0))) != bytes_[i])
    return bi::pack(w);
  auto room = std::make_shared<c10::Storage>(arena_->storage(offsets_[i], bytes_[i]));
  return bi::pack(w, std::shared_ptr<float>(room, static_cast<float*>(room->mutable_data())));
}

}  // namespace rl::nn
