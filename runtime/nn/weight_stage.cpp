#include "nn/weight_stage.hpp"

#include <algorithm>
#include <sstream>
#include <unordered_map>

#include "base/errors.hpp"
#include "nn/batch_invariant_ops.hpp"
#include "nn/weights.hpp"
#include "tensor/huge_pages.hpp"

namespace rl::nn {
namespace {

// The bytes of a storage, as a flat uint8 tensor (CPU or CUDA alike).
torch::Tensor bytes_of(const c10::Storage& s) {
  const auto n = static_cast<int64_t>(s.nbytes());
  return torch::empty({0}, torch::TensorOptions().dtype(torch::kUInt8).device(s.device())).set_(s, 0, {n}, {1});
}

// [first, last) bytes of the storage that a view's elements lie within.
std::pair<int64_t, int64_t> extent(const torch::Tensor& t) {
  int64_t span = 1;
  for (int64_t d = 0; d < t.dim(); ++d) span += (t.size(d) - 1) * t.stride(d);
  const int64_t e = t.element_size();
  return {t.storage_offset() * e, (t.storage_offset() + (t.numel() == 0 ? 0 : span)) * e};
}

// The same when the view is dense (no holes), else nullopt-like {0, 0}.
std::pair<int64_t, int64_t> dense_span(const torch::Tensor& t) {
  const auto [a, b] = extent(t);
  return t.numel() > 0 && b - a == t.numel() * t.element_size() ? std::pair<int64_t, int64_t>{a, b}
                                                                 : std::pair<int64_t, int64_t>{0, 0};
}

// A 2-D view as `count` lines of `len` consecutive values, `pitch` apart, from value
// `first` of its storage (a transposed matrix: one line per input; a block of columns
// of a fused one: lines shorter than the pitch). {0, 0, 0, 0} when it is not one.
struct Lines {
  int64_t first = 0, len = 0, pitch = 0, count = 0;
};
Lines lines_of(const torch::Tensor& t) {
  if (t.dim() != 2 || t.numel() == 0) return {};
  const int inner = t.stride(0) == 1 ? 0 : (t.stride(1) == 1 ? 1 : -1);
  if (inner < 0) return {};
  const int outer = 1 - inner;
  if (t.size(outer) > 1 && t.stride(outer) < t.size(inner)) return {};
  const int64_t pitch = t.size(outer) > 1 ? t.stride(outer) : t.size(inner);
  return {t.storage_offset(), t.size(inner), pitch, t.size(outer)};
}

// Whether views of one storage of `values` values, each as lines_of() gives it, tile
// it: all with one pitch and a line per row of it, their columns side by side.
bool lines_cover(std::vector<Lines> v, int64_t values) {
  if (v.empty() || v[0].pitch <= 0 || values % v[0].pitch != 0) return false;
  const int64_t pitch = v[0].pitch, rows = values / pitch;
  for (const auto& l : v)
    if (l.len == 0 || l.pitch != pitch || l.count != rows || l.first + l.len > pitch) return false;
  std::sort(v.begin(), v.end(), [](const Lines& a, const Lines& b) { return a.first < b.first; });
  int64_t reach = 0;
  for (const auto& l : v)
    if (l.first <= reach) reach = std::max(reach, l.first + l.len);
  return reach >= pitch;
}

// `live`'s view (offset, sizes, strides) on the storage `other`.
torch::Tensor same_view_on(const c10::Storage& other, const torch::Tensor& live) {
  return torch::empty({0}, live.options().requires_grad(false))
      .set_(other, live.storage_offset(), live.sizes(), live.strides());
}

}  // namespace

WeightStage::WeightStage(const std::vector<std::pair<std::string, torch::Tensor>>& params,
                         const std::vector<std::string>& names, const std::vector<std::vector<int64_t>>& shapes) {
  std::unordered_map<std::string, size_t> index;
  std::unordered_map<const c10::StorageImpl*, size_t> slot_of;
  for (size_t i = 0; i < params.size(); ++i) {
    index.emplace(params[i].first, i);
    const auto& s = params[i].second.storage();
    planned_.push_back(s.unsafeGetStorageImpl());
    if (slot_of.emplace(s.unsafeGetStorageImpl(), slots_.size()).second) slots_.push_back(Slot{s, {}, false});
  }
  // The update's tensors, each checked, and the slot it writes into.
  std::vector<size_t> slot_of_name, param_of_name;
  std::vector<bool> seen(params.size(), false);
  for (size_t k = 0; k < names.size(); ++k) {
    auto it = index.find(names[k]);
    if (it == index.end())
      throw Error("update_weights: the model has no parameter '" + names[k] + "' (" + std::to_string(params.size()) +
                  " parameters)", "send this model's weights under their Hugging Face names");
    if (seen[it->second]) throw Error("update_weights: '" + names[k] + "' is sent twice");
    seen[it->second] = true;
    const torch::Tensor& live = params[it->second].second;
    if (k < shapes.size() && live.sizes() != c10::IntArrayRef(shapes[k])) {
      std::ostringstream os;
      os << "update_weights: " << names[k] << " has shape " << c10::IntArrayRef(shapes[k]) << " but the engine's is "
         << live.sizes();
      throw Error(os.str());
    }
    param_of_name.push_back(it->second);
    slot_of_name.push_back(slot_of.at(live.storage().unsafeGetStorageImpl()));
  }
  // Host memory: one mapping in huge pages for every spare storage (each written in full
  // as the update arrives: 4 KiB pages would fault once each; tensor/huge_pages.hpp),
  // the storages in the order the update first writes them (the rest after): tensors
  // sent one after the other into storages laid out one after the other (a fused matrix,
  // the parts in their order; sizes in whole 64-byte lines) are one range of it, which
  // a bucket of several is received into (dist::receive_weights).
  std::vector<size_t> layout;
  std::vector<bool> placed(slots_.size(), false);
  for (size_t s : slot_of_name)
    if (!placed[s]) placed[s] = true, layout.push_back(s);
  for (size_t s = 0; s < slots_.size(); ++s)
    if (!placed[s]) layout.push_back(s);
  int64_t host_bytes = 0;
  std::vector<int64_t> offsets(slots_.size(), -1);
  for (size_t s : layout) {
    if (!slots_[s].live.device().is_cpu()) continue;
    offsets[s] = host_bytes;
    host_bytes += (static_cast<int64_t>(slots_[s].live.nbytes()) + 63) / 64 * 64;
  }
  std::shared_ptr<tensor::HugePageArena> arena;
  if (host_bytes > 0) arena = tensor::HugePageArena::make(host_bytes);  // a small model's too: one range
  for (size_t s = 0; s < slots_.size(); ++s) {
    auto& slot = slots_[s];
    const auto n = static_cast<int64_t>(slot.live.nbytes());
    if (arena && offsets[s] >= 0) slot.spare = arena->storage(offsets[s], n);
    else slot.spare = torch::empty({n}, torch::TensorOptions().dtype(torch::kUInt8).device(slot.live.device())).storage();
  }
  std::vector<std::vector<std::pair<int64_t, int64_t>>> spans(slots_.size());
  std::vector<std::vector<Lines>> lines(slots_.size());
  std::vector<int64_t> value_bytes(slots_.size(), 1);
  for (size_t k = 0; k < names.size(); ++k) {
    const torch::Tensor& live = params[param_of_name[k]].second;
    const size_t slot = slot_of_name[k];
    views_.emplace_back(slot, same_view_on(slots_[slot].spare, live));
    spans[slot].push_back(dense_span(live));
    lines[slot].push_back(lines_of(live));
    value_bytes[slot] = live.element_size();
  }
  put_.assign(views_.size(), false);
  for (size_t s = 0; s < slots_.size(); ++s) {  // covered: the dense spans join up to the whole storage
    auto& v = spans[s];
    std::sort(v.begin(), v.end());
    int64_t reach = 0;
    for (const auto& [a, b] : v)
      if (b > a && a <= reach) reach = std::max(reach, b);
    const auto nbytes = static_cast<int64_t>(slots_[s].live.nbytes());
    slots_[s].covered = reach >= nbytes || lines_cover(lines[s], nbytes / value_bytes[s]);
  }
}

WeightStage::~WeightStage() = default;

void WeightStage::copy_uncovered() {
  if (copied_) return;
  torch::NoGradGuard ng;
  for (auto& slot : slots_)
    if (!slot.covered) bytes_of(slot.spare).copy_(bytes_of(slot.live));
  copied_ = true;
}

void WeightStage::put(size_t index, const torch::Tensor& src) {
  if (index >= views_.size()) throw Error("update_weights: tensor " + std::to_string(index) + " was not announced");
  torch::NoGradGuard ng;
  const torch::Tensor& dst = views_[index].second;
  const bool same = src.data_ptr() == dst.data_ptr() && src.sizes() == dst.sizes() &&
                    src.strides() == dst.strides() && src.scalar_type() == dst.scalar_type();
  if (!same) copy_weight(dst, src);
  else if (!put_[index]) ++in_place_;
  if (!put_[index] && index < feeds_.size())
    for (size_t s : feeds_[index])
      if (--parts_left_[s] == 0 && copied_) pack_source(s);  // else pack_panels() does
  put_[index] = true;
}

void WeightStage::set_panel_sources(std::vector<torch::Tensor> live) {
  if (std::any_of(put_.begin(), put_.end(), [](bool b) { return b; }))
    throw std::logic_error("WeightStage::set_panel_sources after a put()");
  panel_sources_.clear();
  feeds_.assign(views_.size(), {});
  parts_left_.assign(live.size(), 0);
  panels_.assign(live.size(), {});
  for (size_t s = 0; s < live.size(); ++s) {
    const auto& w = live[s];
    auto slot = std::find_if(slots_.begin(), slots_.end(), [&](const Slot& x) {
      return x.live.unsafeGetStorageImpl() == w.storage().unsafeGetStorageImpl();
    });
    if (slot == slots_.end()) throw std::logic_error("WeightStage: a panel source outside the staged weights");
    const size_t si = static_cast<size_t>(slot - slots_.begin());
    panel_sources_.push_back(same_view_on(slot->spare, w));
    const auto [a, b] = extent(w);
    for (size_t k = 0; k < views_.size(); ++k) {
      if (views_[k].first != si) continue;
      const auto [c, d] = extent(views_[k].second);
      if (c < b && a < d) {
        feeds_[k].push_back(s);
        ++parts_left_[s];
      }
    }
  }
  panel_memory_ = std::make_unique<PanelMemory>(panel_sources_);
}

void WeightStage::pack_source(size_t s) {
  torch::NoGradGuard ng;
  panels_[s] = panel_memory_->pack(s, panel_sources_[s]);
}

torch::Tensor WeightStage::target(size_t index) const {
  if (index >= views_.size()) return {};
  const torch::Tensor& v = views_[index].second;
  return v.is_contiguous() && v.device().is_cpu() ? v : torch::Tensor();
}

int64_t WeightStage::uncovered_bytes() const {
  int64_t n = 0;
  for (const auto& s : slots_)
    if (!s.covered) n += static_cast<int64_t>(s.live.nbytes());
  return n;
}

bool WeightStage::complete() const { return std::all_of(put_.begin(), put_.end(), [](bool b) { return b; }); }

bool WeightStage::matches(const std::vector<std::pair<std::string, torch::Tensor>>& params) const {
  if (params.size() != planned_.size()) return false;
  for (size_t i = 0; i < params.size(); ++i)
    if (params[i].second.storage().unsafeGetStorageImpl() != planned_[i]) return false;
  return true;
}

void WeightStage::swap_in() {
  if (swapped_ || !complete() || !copied_) throw Error("update_weights: the staged update is not complete");
  for (auto& slot : slots_) {
    c10::StorageImpl* live = slot.live.unsafeGetStorageImpl();
    c10::StorageImpl* spare = slot.spare.unsafeGetStorageImpl();
    at::DataPtr old = live->set_data_ptr(std::move(spare->mutable_data_ptr()));
    spare->set_data_ptr_noswap(std::move(old));
  }
  swapped_ = true;
}

void WeightStage::pack_panels() {
  if (!complete() || !copied_ || swapped_) throw Error("update_weights: panels packed before the update was staged");
  for (size_t s = 0; s < panel_sources_.size(); ++s)
    if (parts_left_[s] == 0 && !panels_[s].defined()) pack_source(s);
}

int64_t WeightStage::spare_bytes() const {
  int64_t n = 0;
  for (const auto& s : slots_) n += static_cast<int64_t>(s.spare.nbytes());
  return n;
}

}  // namespace rl::nn
