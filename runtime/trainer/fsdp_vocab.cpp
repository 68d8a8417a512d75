// The vocabulary-sized units of a sharded model (trainer/fsdp.hpp): the embedding and
// the lm_head (one matrix when tied) are sharded by whole rows, and neither is ever
// gathered whole for training. The lookup moves only the rows the tokens use; the
// lm_head goes by row blocks, one rank's at a time (nn/logprobs_blocked.hpp). For
// Qwen2.5-0.5B's 151,936 x 896 that is 545 MB a rank no longer holds, twice over
// (the matrix and its dense gradient).
#include <algorithm>
#include <chrono>
#include <stdexcept>
#include <string>

#include "trainer/fsdp.hpp"

namespace rl::trainer {

namespace {

// The lm_head's rows go in blocks of at most this many bytes: with the next block in
// flight and one block's gradient, three of them are alive at a time.
constexpr int64_t kHeadBlockBytes = int64_t(64) << 20;

double since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

// The lookup as an autograd node over unit 0's shard: forward fetches the rows of the
// ids, backward adds each rank's row gradients to the shards that hold the rows.
struct VocabLookup : torch::autograd::Function<VocabLookup> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& shard,
                               const torch::Tensor& ids, ShardedModel* self) {
    (void)shard;
    ShardedModel::Lookup l;
    auto out = self->lookup_rows(ids, l);
    ctx->saved_data["self"] = static_cast<int64_t>(reinterpret_cast<intptr_t>(self));
    ctx->saved_data["per"] = l.per;
    ctx->saved_data["n"] = ids.numel();
    ctx->save_for_backward({l.all_ids});
    return out;
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    auto* self = reinterpret_cast<ShardedModel*>(static_cast<intptr_t>(ctx->saved_data["self"].toInt()));
    ShardedModel::Lookup l;
    l.all_ids = ctx->get_saved_variables().at(0);
    l.per = ctx->saved_data["per"].toInt();
    auto g = grads[0];  // every rank takes part, with or without a gradient
    if (!g.defined())
      g = torch::zeros({ctx->saved_data["n"].toInt(), self->units_[0].shapes[0][1]}, self->units_[0].local.options());
    return {self->lookup_grad(l, g), torch::Tensor(), torch::Tensor()};
  }
};

bool ShardedModel::by_rows(int unit) const {
  const Unit& u = units_.at(static_cast<size_t>(unit));
  return (unit == 0 || unit == model_->lm_head_unit()) && u.names.size() == 1 && u.shapes[0].size() == 2 &&
         u.shapes[0][1] > 0 && u.shard % u.shapes[0][1] == 0;
}

bool ShardedModel::blocked_head() const { return by_rows(model_->lm_head_unit()) && !model_->lora_lm_head(); }

std::pair<int64_t, int64_t> ShardedModel::own_rows(int unit) const {
  const Unit& u = units_.at(static_cast<size_t>(unit));
  const int64_t V = u.shapes[0][0], per = u.shard / u.shapes[0][1];
  return {std::min(V, per * rank_), std::min(V, per * (rank_ + 1))};
}

int64_t ShardedModel::max_over_ranks(int64_t v) {
  if (world_ == 1) return v;
  auto all = torch::zeros({world_}, units_[0].local.options().dtype(torch::kInt64).requires_grad(false));
  all[rank_] = v;
  std::vector<torch::Tensor> one{all};
  group_->allreduce_sum(one, "token counts");
  return all.max().cpu().item<int64_t>();
}

torch::Tensor ShardedModel::embed(const torch::Tensor& ids) {
  if (!by_rows(0)) return UnitHooks::embed(ids);
  const Unit& u = units_[0];
  prefetch(next_in_forward(0));  // the first layer's gather runs while the rows are looked up
  auto flat = ids.reshape({-1}).to(torch::kInt64);
  torch::Tensor rows;
  if (torch::GradMode::is_enabled() && u.local.requires_grad()) {
    rows = VocabLookup::apply(u.local, flat, this);
  } else {
    Lookup l;
    rows = lookup_rows(flat, l);
  }
  return rows.view({ids.size(0), ids.size(1), u.shapes[0][1]});
}

torch::Tensor ShardedModel::lookup_rows(const torch::Tensor& ids, Lookup& l) {
  torch::NoGradGuard ng;
  const Unit& u = units_[0];
  const int64_t H = u.shapes[0][1], n = ids.numel();
  const auto [first, end] = own_rows(0);
  auto mine = u.local.detach().narrow(0, 0, (end - first) * H).view({end - first, H});
  if (world_ == 1) {
    l.all_ids = ids;
    l.per = n;
    return mine.index_select(0, ids);
  }
  const auto t0 = std::chrono::steady_clock::now();
  l.per = max_over_ranks(n);
  auto padded = torch::full({l.per}, -1, ids.options());
  padded.narrow(0, 0, n).copy_(ids);
  l.all_ids = torch::empty({world_ * l.per}, ids.options());
  group_->all_gather_async(l.all_ids, padded, "the token ids")->wait();
  auto at = ((l.all_ids >= first).logical_and_(l.all_ids < end)).nonzero().squeeze(1);
  auto filled = torch::zeros({world_ * l.per, H}, u.local.options().requires_grad(false));
  filled.index_copy_(0, at, mine.index_select(0, l.all_ids.index_select(0, at) - first));
  auto out = torch::empty({l.per, H}, filled.options());
  group_->reduce_scatter_sum(out.view({-1}), filled.view({-1}), "the embedding rows of the tokens");
  ++stats_.gathers;
  stats_.gathered_bytes += static_cast<double>(filled.nbytes());
  stats_.gather_wait_s += since(t0);
  return out.narrow(0, 0, n);
}

torch::Tensor ShardedModel::lookup_grad(const Lookup& l, const torch::Tensor& grad) {
  torch::NoGradGuard ng;
  const Unit& u = units_[0];
  const int64_t H = u.shapes[0][1];
  const auto [first, end] = own_rows(0);
  auto g = grad.reshape({-1, H}).to(u.local.scalar_type());
  auto shard = torch::zeros({u.shard}, u.local.options().requires_grad(false));
  auto rows = shard.narrow(0, 0, (end - first) * H).view({end - first, H});
  if (world_ == 1) {
    rows.index_add_(0, l.all_ids, g);
    return shard;
  }
  const auto t0 = std::chrono::steady_clock::now();
  auto padded = torch::zeros({l.per, H}, g.options());
  padded.narrow(0, 0, g.size(0)).copy_(g);
  auto all = torch::empty({world_ * l.per, H}, g.options());
  group_->all_gather_async(all.view({-1}), padded.view({-1}), "the embedding gradients of the tokens")->wait();
  stats_.reduce_scatter_s += since(t0);
  auto at = ((l.all_ids >= first).logical_and_(l.all_ids < end)).nonzero().squeeze(1);
  rows.index_add_(0, l.all_ids.index_select(0, at) - first, all.index_select(0, at).mul_(1.0 / world_));
  return shard;
}

nn::HeadBlocks ShardedModel::head_blocks() {
  const int unit = model_->lm_head_unit();
  if (!by_rows(unit)) throw std::logic_error("fsdp: the lm_head's unit is not one matrix sharded by rows");
  const Unit& u = units_.at(static_cast<size_t>(unit));
  const int64_t V = u.shapes[0][0], H = u.shapes[0][1], per = u.shard / H;
  // Each rank's rows in blocks of at most kHeadBlockBytes, all of a rank's alike.
  const int64_t cap = std::max<int64_t>(1, kHeadBlockBytes / (H * static_cast<int64_t>(u.local.element_size())));
  const int64_t k = (per + cap - 1) / cap, sub = (per + k - 1) / k;
  nn::HeadBlocks head;
  std::vector<int> owner;
  for (int r = 0; r < world_; ++r)
    for (int64_t j = 0; j < k; ++j) {
      head.rows.push_back(std::min(V, per * r + std::min(per, sub * j)));
      owner.push_back(r);
    }
  head.rows.push_back(V);
  head.hidden = H;
  head.dtype = u.local.scalar_type();
  const std::vector<int64_t> rows = head.rows;
  // Block b: its owner, and its rows' offset into the owner's shard.
  auto where = [rows, owner, per](size_t b) { return std::make_pair(owner[b], (rows[b] - per * owner[b])); };
  head.fetch = [this, unit, rows, H, where](size_t b) -> std::function<torch::Tensor()> {
    const Unit& u = units_[static_cast<size_t>(unit)];
    const auto [o, off] = where(b);
    const int64_t nb = rows[b + 1] - rows[b];
    if (world_ == 1) return [t = u.local.detach().narrow(0, off * H, nb * H).view({nb, H})] { return t; };
    auto buf = o == rank_ ? u.local.detach().narrow(0, off * H, nb * H)
                          : torch::empty({nb * H}, u.local.options().requires_grad(false));
    ++stats_.gathers;
    stats_.gathered_bytes += static_cast<double>(buf.nbytes());
    auto pending = group_->broadcast_async(buf, o, "the lm_head rows of rank " + std::to_string(o));
    return [this, pending, buf, nb, H] {
      wait_gather(*pending);
      return buf.view({nb, H});
    };
  };
  head.give = [this, unit, H, where](size_t b, const torch::Tensor& grad) {
    auto& local = units_[static_cast<size_t>(unit)].local;
    if (!local.requires_grad()) return;  // frozen (a LoRA adapter's base): nothing to sum
    torch::NoGradGuard ng;
    const auto [o, off] = where(b);
    auto g = grad.reshape({-1}).contiguous();
    if (world_ > 1) {
      const auto t0 = std::chrono::steady_clock::now();
      group_->reduce_sum(g, o, "the lm_head gradient of rank " + std::to_string(o));
      stats_.reduce_scatter_s += since(t0);
      if (o != rank_) return;
    }
    if (!local.grad().defined()) local.mutable_grad() = torch::zeros_like(local.detach());
    local.mutable_grad().narrow(0, off * H, g.numel()).add_(g.to(local.scalar_type()), 1.0 / world_);
  };
  head.max_over_ranks = [this](int64_t v) { return max_over_ranks(v); };
  return head;
}

}  // namespace rl::trainer
