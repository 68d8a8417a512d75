#include "trainer/fsdp.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <utility>
#include <stdexcept>

#include "dist/dist.hpp"
#include "tensor/block_cache.hpp"

namespace rl::trainer {

namespace {

// A tensor's storage without its bytes, and the bytes back (uninitialised). Views and
// autograd's saved tensors keep the storage object, so what is written into it after
// regrow() is what they see: how a unit's gathered parameters are dropped between the
// forward and the backward pass without autograd noticing (no version bump).
void release(const c10::Storage& s) {
  auto* impl = s.unsafeGetStorageImpl();
  impl->set_data_ptr_noswap(c10::DataPtr(nullptr, impl->device()));
  impl->set_nbytes(0);
}

void regrow(const c10::Storage& s, size_t nbytes) {
  auto* impl = s.unsafeGetStorageImpl();
  impl->set_data_ptr_noswap(impl->allocator()->allocate(nbytes));
  impl->set_nbytes(nbytes);
}

// What a model whose ShardedModel is gone answers: its own storage was released.
struct GoneHooks : nn::UnitHooks {
  std::vector<torch::Tensor> enter(int) override {
    throw std::logic_error("this model was sharded by a trainer that no longer exists; load it again");
  }
  torch::Tensor leave(int, const torch::Tensor& out) override { return out; }
};
GoneHooks g_gone;

}  // namespace

// One gathered copy of a unit: its storage (released after the unit's forward, filled
// again for its backward when `refill`), and the gather in flight into it, if any.
struct ShardedModel::Use {
  int unit = 0;
  c10::Storage storage;
  size_t nbytes = 0;
  bool refill = false;   // the backward reads the parameters: gathered again for it
  bool filled = true;    // the storage holds the parameters now
  // A frozen unit's (no gradient: a LoRA adapter's base) that its backward reads: no
  // reduce-scatter ends that backward, so the next refill (an earlier unit's) or settle()
  // releases it.
  bool frozen = false;
  std::shared_ptr<dist::ProcessGroup::Pending> pending;
};

// A tensor over a use's (regrown) storage with its own version counter: gathers write
// into it without autograd seeing the saved views change.
torch::Tensor ShardedModel::alias(const Use& use, const Unit& u) {
  return torch::from_blob(use.storage.mutable_data(), {static_cast<int64_t>(use.nbytes / u.local.element_size())},
                          u.local.options().requires_grad(false));
}

struct ShardedModel::Prefetch {
  int unit = -1;
  torch::Tensor full;
  std::shared_ptr<dist::ProcessGroup::Pending> pending;
};

// The gathered unit as an autograd node: forward all-gathers the shards, backward
// reduce-scatters the unit's gradient onto them (mean over ranks).
struct GatherUnit : torch::autograd::Function<GatherUnit> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& shard, ShardedModel* self,
                               int64_t unit, int64_t use_id) {
    ctx->saved_data["self"] = static_cast<int64_t>(reinterpret_cast<intptr_t>(self));
    ctx->saved_data["use"] = use_id;
    (void)shard;
    return self->gather(static_cast<int>(unit), use_id);
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    auto* self = reinterpret_cast<ShardedModel*>(static_cast<intptr_t>(ctx->saved_data["self"].toInt()));
    return {self->reduce_grad(ctx->saved_data["use"].toInt(), grads[0]), torch::Tensor(), torch::Tensor(),
            torch::Tensor()};
  }
};

ShardedModel::ShardedModel(std::shared_ptr<nn::Transformer> model, std::shared_ptr<dist::ProcessGroup> group,
                           bool trainable, const model::TensorSet* source)
    : model_(std::move(model)), group_(std::move(group)) {
  if (!model_) throw std::invalid_argument("fsdp: no model");
  if (model_->unit_hooks()) throw std::invalid_argument("fsdp: the model is sharded already (one trainer per model)");
  if (model_->options().inference_layout)
    throw std::invalid_argument("fsdp: the model uses the engine's inference layout; load it for training");
  if (group_) {
    world_ = group_->world_size();
    rank_ = group_->rank();
  }
  torch::NoGradGuard ng;
  const auto& params = model_->named_parameters();
  for (const auto& idx : model_->parameter_units()) {
    Unit u;
    for (size_t i : idx) {
      const auto& [name, t] = params[i];
      u.names.push_back(name);
      u.shapes.push_back(t.sizes().vec());
      u.offsets.push_back(u.numel);
      u.numel += t.numel();
      u.split.push_back(t.numel());
    }
    u.shard = std::max<int64_t>(1, (u.numel + world_ - 1) / world_);
    const int at = static_cast<int>(units_.size());
    if ((at == 0 || at == model_->lm_head_unit()) && idx.size() == 1 && u.shapes[0].size() == 2) {
      // The embedding and the lm_head: whole rows per rank (embed(), head_blocks()).
      const int64_t rows = u.shapes[0][0], cols = u.shapes[0][1];
      u.shard = std::max<int64_t>(1, (rows + world_ - 1) / world_ * cols);
    }
    if (const int64_t pad = u.shard * world_ - u.numel; pad > 0) u.split.push_back(pad);
    const auto& first = params[idx.at(0)].second;
    if (source) {  // filled below, by load(): this rank's slices straight from the mapped files
      u.local = torch::zeros({u.shard}, first.options().requires_grad(false));
      if (trainable) u.local.requires_grad_(true);
      units_.push_back(std::move(u));
      continue;
    }
    // Rank 0's values everywhere (as the replicated trainer broadcasts them), this
    // rank's slice kept.
    auto flat = torch::zeros({u.shard * world_}, first.options().requires_grad(false));
    for (size_t j = 0; j < idx.size(); ++j)
      flat.narrow(0, u.offsets[j], params[idx[j]].second.numel()).copy_(params[idx[j]].second.reshape({-1}));
    if (world_ > 1) {
      std::vector<torch::Tensor> one{flat};
      group_->broadcast(one, 0, "the parameters of " + u.names.front() + (idx.size() > 1 ? ", ..." : ""));
    }
    u.local = flat.narrow(0, u.shard * rank_, u.shard).clone();
    if (trainable) u.local.requires_grad_(true);
    units_.push_back(std::move(u));
  }
  if (source) load(*source);
  // The model's own copy goes: from here its forward takes each unit from the shards.
  for (const auto& [name, t] : params) release(t.storage());
  model_->set_unit_hooks(this);
  // The freed copy (and the whole units staged above) back to the system now: glibc
  // keeps freed heap pages otherwise, and they would count against this rank for good.
  tensor::return_free_memory();
}

ShardedModel::~ShardedModel() {
  try {
    settle();
  } catch (...) {
  }
  model_->set_unit_hooks(&g_gone);
}

std::vector<torch::Tensor> ShardedModel::shards() const {
  std::vector<torch::Tensor> out;
  for (const auto& u : units_) out.push_back(u.local);
  return out;
}

std::pair<int64_t, int64_t> ShardedModel::range(size_t u) const {
  const auto& x = units_.at(u);
  const int64_t b = std::min(x.numel, x.shard * rank_), e = std::min(x.numel, x.shard * (rank_ + 1));
  return {b, e};
}

void ShardedModel::load(const model::TensorSet& tensors) {
  model::validate_tensors(tensors, model_->config());
  torch::NoGradGuard ng;
  for (size_t i = 0; i < units_.size(); ++i) {
    auto& u = units_[i];
    const auto [b, e] = range(i);
    for (size_t j = 0; j < u.names.size(); ++j) {
      const int64_t pb = u.offsets[j], pe = pb + u.split[j];
      const int64_t lo = std::max(b, pb), hi = std::min(e, pe);
      if (hi <= lo) continue;
      const auto src = nn::tensor_over_view(*tensors.find(u.names[j])).reshape({-1});
      u.local.narrow(0, lo - b, hi - lo).copy_(src.narrow(0, lo - pb, hi - lo));
    }
  }
}

int ShardedModel::next_in_forward(int unit) const {
  const int layers = static_cast<int>(model_->config().num_hidden_layers);
  if (unit <= layers) return unit + 1;          // embedding, layers: the next layer, then the final norm
  if (unit == layers + 1) return blocked_head() ? -1 : model_->lm_head_unit();  // the final norm: the whole lm_head
  return -1;
}

torch::Tensor ShardedModel::gather(int unit, int64_t use_id) {
  auto& u = units_.at(static_cast<size_t>(unit));
  torch::Tensor full;
  if (ahead_ && ahead_->unit == unit) {
    wait_gather(*ahead_->pending);
    full = ahead_->full;
    ahead_.reset();
  } else {
    if (ahead_) {  // issued on every rank, so waited on every rank: the collectives stay in step
      wait_gather(*ahead_->pending);
      ahead_.reset();
    }
    full = torch::empty({u.shard * world_}, u.local.options().requires_grad(false));
    fill(u, full);
  }
  const auto& r = recomputing_;
  prefetch(!r.on ? next_in_forward(unit) : unit >= r.first && unit < r.last ? unit + 1 : r.next);
  auto use = std::make_shared<Use>();
  use->unit = unit;
  use->storage = full.storage();
  use->nbytes = full.storage().nbytes();
  uses_[use_id] = std::move(use);
  return full;
}

void ShardedModel::prefetch(int unit) {
  if (unit < 0 || world_ == 1) return;
  if (ahead_) {  // issued on every rank, so waited on every rank: the collectives stay in step
    wait_gather(*ahead_->pending);
    ahead_.reset();
  }
  auto& n = units_.at(static_cast<size_t>(unit));
  auto p = std::make_shared<Prefetch>();
  p->unit = unit;
  p->full = torch::empty({n.shard * world_}, n.local.options().requires_grad(false));
  p->pending = issue_gather(n, p->full);
  ahead_ = std::move(p);
}

std::vector<torch::Tensor> ShardedModel::views(int unit, const torch::Tensor& full) const {
  const auto& u = units_.at(static_cast<size_t>(unit));
  auto parts = full.split_with_sizes(u.split);
  std::vector<torch::Tensor> out;
  for (size_t i = 0; i < u.names.size(); ++i) out.push_back(parts[i].view(u.shapes[i]));
  return out;
}

std::vector<torch::Tensor> ShardedModel::enter(int unit) {
  if (unit < 0 || static_cast<size_t>(unit) >= units_.size())
    throw std::out_of_range("fsdp: no unit " + std::to_string(unit));
  const int64_t id = next_use_++;
  const auto& u = units_[static_cast<size_t>(unit)];
  torch::Tensor full = torch::GradMode::is_enabled() && u.local.requires_grad()
                           ? GatherUnit::apply(u.local, this, static_cast<int64_t>(unit), id)
                           : gather(unit, id);
  open_[unit] = id;
  return views(unit, full);
}

torch::Tensor ShardedModel::leave(int unit, const torch::Tensor& out) { return finish(unit, out, unit != 0); }

torch::Tensor ShardedModel::finish(int unit, const torch::Tensor& out, bool backward_reads) {
  const auto o = open_.find(unit);
  if (o == open_.end()) throw std::logic_error("fsdp: unit " + std::to_string(unit) + " left without entering");
  const int64_t id = o->second;
  open_.erase(o);
  const auto it = uses_.find(id);
  if (it == uses_.end()) return out;
  auto use = it->second;
  const bool graph = torch::GradMode::is_enabled() && out.requires_grad();
  if (recomputing_.on && graph) {  // its backward runs next: kept until then
    recomputing_.uses.push_back(id);
    return out;
  }
  release(use->storage);
  use->filled = false;
  // A frozen unit is differentiated through too when its output needs a gradient (the
  // LoRA adapter inside it, or one before it): its backward reads its parameters.
  if (!graph) {  // nothing will read these parameters again
    uses_.erase(it);
    return out;
  }
  use->frozen = !units_[static_cast<size_t>(unit)].local.requires_grad();
  // The embedding's backward needs only the token ids; every other unit's reads its
  // parameters again: gathered back when its output's gradient arrives.
  use->refill = backward_reads;
  if (backward_reads) {
    auto y = out;
    y.register_hook([this, id](const torch::Tensor& g) {
      refill(id);
      return g;
    });
    return y;
  }
  return out;
}

void ShardedModel::refill(int64_t use_id) {
  // Backward reaches the units in reverse: a frozen use refilled before this one is done.
  for (auto f = refilled_.begin(); f != refilled_.end();) {
    if (*f == use_id) {
      ++f;
      continue;
    }
    if (auto done = uses_.find(*f); done != uses_.end()) {
      release(done->second->storage);
      uses_.erase(done);
    }
    f = refilled_.erase(f);
  }
  const auto it = uses_.find(use_id);
  if (it == uses_.end()) return;
  auto& use = *it->second;
  const auto& u = units_[static_cast<size_t>(use.unit)];
  if (use.pending) {
    wait_gather(*use.pending);
    use.pending.reset();
  } else if (!use.filled) {
    regrow(use.storage, use.nbytes);
    fill(u, alias(use, u));
  }
  use.filled = true;
  if (use.frozen) refilled_.insert(use_id);
  prefetch_refill(use_id);
}

// The next unit the backward pass reaches (the latest earlier use still to be
// refilled): its gather issued now, while this unit's backward computes.
void ShardedModel::prefetch_refill(int64_t below) {
  if (world_ == 1) return;
  for (auto it = uses_.lower_bound(below); it != uses_.begin();) {
    --it;
    auto& use = *it->second;
    if (!use.refill || use.filled || use.pending) continue;
    const auto& u = units_[static_cast<size_t>(use.unit)];
    regrow(use.storage, use.nbytes);
    use.pending = issue_gather(u, alias(use, u));
    return;
  }
}

torch::Tensor ShardedModel::reduce_grad(int64_t use_id, const torch::Tensor& grad_full) {
  const auto it = uses_.find(use_id);
  if (it == uses_.end()) throw std::logic_error("fsdp: a gradient for a unit use that is gone");
  auto use = it->second;
  uses_.erase(it);
  if (use->pending) use->pending->wait();
  release(use->storage);
  const auto& u = units_[static_cast<size_t>(use->unit)];
  torch::NoGradGuard ng;
  auto g = grad_full.defined() ? grad_full.contiguous() : torch::zeros({u.shard * world_}, u.local.options());
  auto out = torch::empty({u.shard}, g.options());
  if (world_ == 1) {
    out.copy_(g);
  } else {
    const auto t0 = std::chrono::steady_clock::now();
    group_->reduce_scatter_sum(out, g, "the gradients of " + u.names.front());
    stats_.reduce_scatter_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    out.mul_(1.0 / world_);
  }
  return out;
}

void ShardedModel::recompute_begin(int first, int last, int next) {
  recomputing_ = {true, first, last, next, {}};
}

void ShardedModel::recompute_end() {
  // A trainable unit's use ended with its gradient's reduce-scatter; a frozen one's
  // (a LoRA adapter's base) ends here.
  for (const int64_t id : recomputing_.uses)
    if (auto it = uses_.find(id); it != uses_.end()) {
      if (it->second->pending) it->second->pending->wait();
      release(it->second->storage);
      uses_.erase(it);
    }
  recomputing_ = {};
}

void ShardedModel::settle() {
  if (ahead_) {
    ahead_->pending->wait();
    ahead_.reset();
  }
  for (auto& [id, use] : uses_)
    if (use->pending) use->pending->wait();
  uses_.clear();
  refilled_.clear();
  open_.clear();
  recomputing_ = {};
}

void ShardedModel::for_each_unit(const std::function<void(const nn::NamedTensors&)>& fn) {
  settle();
  torch::NoGradGuard ng;
  for (size_t i = 0; i < units_.size(); ++i) {
    const auto& u = units_[i];
    auto full = torch::empty({u.shard * world_}, u.local.options().requires_grad(false));
    fill(u, full);
    const auto v = views(static_cast<int>(i), full);
    nn::NamedTensors named;
    for (size_t j = 0; j < v.size(); ++j) named.emplace_back(u.names[j], v[j]);
    fn(named);
  }
}

std::shared_ptr<dist::ProcessGroup::Pending> ShardedModel::issue_gather(const Unit& u, const torch::Tensor& full) {
  ++stats_.gathers;
  stats_.gathered_bytes += static_cast<double>(full.nbytes());
  return group_->all_gather_async(full, u.local.detach(), "the parameters of " + u.names.front());
}

void ShardedModel::fill(const Unit& u, const torch::Tensor& full) {
  if (world_ == 1) full.copy_(u.local.detach());
  else wait_gather(*issue_gather(u, full));
}

void ShardedModel::wait_gather(dist::ProcessGroup::Pending& p) {
  const auto t0 = std::chrono::steady_clock::now();
  p.wait();
  stats_.gather_wait_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

ShardedModel::Stats ShardedModel::take_stats() { return std::exchange(stats_, Stats{}); }

double ShardedModel::local_grad_sq() const {
  // In float64, 4M values at a time: no float64 copy of a whole shard next to the state
  // (the step's peak; 2 x 272 MB for Qwen2.5-0.5B's embedding shard at 4 ranks).
  constexpr int64_t kChunk = int64_t(1) << 22;
  double sq = 0;
  torch::NoGradGuard ng;
  for (const auto& u : units_) {
    const auto& g = u.local.grad();
    if (!g.defined()) continue;
    for (int64_t s = 0; s < g.numel(); s += kChunk)
      sq += g.narrow(0, s, std::min(kChunk, g.numel() - s)).to(torch::kFloat64).square().sum().item<double>();
  }
  return sq;
}

}  // namespace rl::trainer
