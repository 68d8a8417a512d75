#include "engine/scheduler.hpp"

#include <algorithm>
#include <unordered_set>

namespace rl::engine {
namespace {

int64_t blocks_for(int64_t tokens, int64_t block_size) { return (tokens + block_size - 1) / block_size; }

}  // namespace

bool Scheduler::reserve_tokens(Sequence& s, int64_t tokens) {
  const int64_t need = blocks_for(tokens, bm_.block_size()) - static_cast<int64_t>(s.blocks.size());
  for (int64_t i = 0; i < need; ++i) {
    auto b = bm_.allocate();
    if (!b) return false;
    s.blocks.push_back(*b);
  }
  return true;
}

bool Scheduler::reserve_slots(Sequence& s) { return reserve_tokens(s, static_cast<int64_t>(s.tokens.size())); }

bool Scheduler::reserve_ahead(Sequence& s) { return reserve_tokens(s, static_cast<int64_t>(s.tokens.size()) + 1); }

void Scheduler::preempt(size_t index) {
  SequencePtr s = std::move(running_[index]);
  running_.erase(running_.begin() + static_cast<std::ptrdiff_t>(index));
  bm_.release(s->blocks);
  s->blocks.clear();
  s->num_computed = 0;
  s->committed = 0;
  s->kv_mixed = false;  // recomputed from scratch
  ++s->out.preemptions;
  ++preemptions;
  waiting_.push_front(std::move(s));
}

void Scheduler::preempt_all() {
  while (!running_.empty()) preempt(running_.size() - 1);
}

bool Scheduler::admit_one(Sequence& s, int64_t& budget, std::vector<uint64_t>& pending, bool& deferred) {
  const int64_t bs = bm_.block_size();
  const int64_t L = static_cast<int64_t>(s.tokens.size());
  // At least the last token is computed (its logits give the next token), and every
  // position a pending prompt log-prob reads (SGLang also stops the match there).
  const uint64_t root = s.prefix_root();
  BlockManager::Match m = bm_.match(s.tokens, s.cacheable_prefix(), root);
  if (m.next_hash && std::find(pending.begin(), pending.end(), *m.next_hash) != pending.end()) {
    deferred = true;  // computed by a sequence admitted in this step: hit it next step
    return false;
  }
  const int64_t cached = m.blocks * bs;
  const int64_t new_tokens = L - cached;
  // A prompt longer than the whole budget still runs, alone.
  if (new_tokens > budget && budget < limits_.max_prefill_tokens) return false;
  const int64_t need = blocks_for(L, bs) - m.blocks;
  // Keep a few blocks for the running sequences' next tokens, to avoid thrashing.
  const int64_t reserve = running_.empty() ? 0 : std::max<int64_t>(1, bm_.num_blocks() / 100);
  if (need + reserve > bm_.num_free() - m.reused_free) return false;

  s.blocks = bm_.acquire_prefix(s.tokens, m.blocks, root);
  for (int64_t i = 0; i < need; ++i) s.blocks.push_back(*bm_.allocate());
  s.num_computed = cached;
  s.committed = cached;
  if (!s.scheduled_once) {
    s.out.cached_tokens = std::min(cached, s.prompt_len);
    bm_.queried_tokens += s.prompt_len;
    bm_.hit_tokens += s.out.cached_tokens;
  }
  auto hashes = bm_.block_hashes(s.tokens, L, root);
  for (size_t i = static_cast<size_t>(m.blocks); i < hashes.size(); ++i) pending.push_back(hashes[i]);
  budget -= new_tokens;
  s.admit_order = next_admit_++;
  return true;
}

std::vector<Sequence*> Scheduler::schedule(double now) {
  // 1. Slots for the running sequences' next tokens; preempt the latest on shortage.
  for (size_t i = 0; i < running_.size();) {
    if (reserve_slots(*running_[i])) {
      ++i;
      continue;
    }
    const size_t victim = running_.size() - 1;
    preempt(victim);
    if (victim == i) break;
  }
  // 2. Admit waiting sequences in order while there is room.
  int64_t budget = limits_.max_prefill_tokens;
  std::vector<uint64_t> pending;
  std::unordered_set<const LoraSlot*> adapters;
  for (const auto& s : running_)
    if (s->lora) adapters.insert(s->lora.get());
  for (auto it = waiting_.begin(); it != waiting_.end() && num_running() < limits_.max_running;) {
    Sequence& s = **it;
    bool deferred = false;
    if (s.lora && !adapters.count(s.lora.get()) && static_cast<int64_t>(adapters.size()) >= limits_.max_loras) {
      ++it;  // another adapter would exceed max_loras: later requests may still fit
      continue;
    }
    if (admit_one(s, budget, pending, deferred)) {
      if (s.lora) adapters.insert(s.lora.get());
      if (!s.scheduled_once) {
        s.scheduled_once = true;
        s.t_scheduled = now;
      }
      running_.push_back(std::move(*it));
      it = waiting_.erase(it);
    } else if (deferred) {
      ++it;
    } else {
      break;  // no room: keep arrival order
    }
  }
  std::vector<Sequence*> out;
  out.reserve(running_.size());
  for (auto& s : running_) out.push_back(s.get());
  return out;
}

std::vector<Sequence*> Scheduler::reserve_imports(double now) {
  std::vector<Sequence*> got;
  const int64_t bs = bm_.block_size();
  for (auto& p : importing_) {
    Sequence& s = *p;
    if (s.pd_reserved) continue;
    const int64_t L = s.prompt_len;
    const uint64_t root = s.prefix_root();
    // All but the last prompt token may come from the cache: only the rest travels.
    BlockManager::Match m = bm_.match(s.tokens, std::min<int64_t>(s.cacheable_prefix(), L - 1), root);
    const int64_t need = blocks_for(L, bs) - m.blocks;
    if (need > bm_.num_free() - m.reused_free) break;  // arrival order: later ones wait too
    s.blocks = bm_.acquire_prefix(s.tokens, m.blocks, root);
    for (int64_t i = 0; i < need; ++i) s.blocks.push_back(*bm_.allocate());
    s.num_computed = s.committed = m.blocks * bs;
    bm_.queried_tokens += L;
    bm_.hit_tokens += s.num_computed;
    s.pd_reserved = true;
    s.t_reserved = now;
    got.push_back(&s);
  }
  return got;
}

void Scheduler::activate(Sequence* seq) {
  for (size_t i = 0; i < importing_.size(); ++i) {
    if (importing_[i].get() != seq) continue;
    seq->admit_order = next_admit_++;
    seq->scheduled_once = true;
    running_.push_back(std::move(importing_[i]));
    importing_.erase(importing_.begin() + static_cast<std::ptrdiff_t>(i));
    return;
  }
}

int64_t Scheduler::num_importing(bool reserved) const {
  return std::count_if(importing_.begin(), importing_.end(), [&](const SequencePtr& s) { return s->pd_reserved == reserved; });
}

SequencePtr Scheduler::remove(Sequence* seq) {
  // Running, waiting or importing: out of its list, its blocks released.
  auto take = [&](auto& list) -> SequencePtr {
    for (auto it = list.begin(); it != list.end(); ++it) {
      if (it->get() != seq) continue;
      SequencePtr s = std::move(*it);
      list.erase(it);
      if (!s->blocks.empty()) bm_.release(s->blocks);
      s->blocks.clear();
      return s;
    }
    return nullptr;
  };
  if (SequencePtr s = take(running_)) return s;
  if (SequencePtr s = take(waiting_)) return s;
  return take(importing_);
}

}  // namespace rl::engine
