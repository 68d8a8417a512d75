// Prefill/decode disaggregation on the scheduler thread (engine/pd.hpp): a prefill
// request hands over its prompt's K/V as it finishes; a decode request reserves
// blocks for its prompt, takes the K/V and first token when they arrive, and runs.
#include <chrono>
#include <sstream>

#include "base/log_text.hpp"
#include "engine/engine_impl.hpp"

namespace rl::engine {

namespace {

double mono_now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

void set_meta(RequestOutput& o, const std::string& key, double value) {
  for (auto& [k, v] : o.pd_meta)
    if (k == key) {
      v = value;
      return;
    }
  o.pd_meta.emplace_back(key, value);
}

double meta_of(const std::vector<std::pair<std::string, double>>& meta, const std::string& key) {
  for (const auto& [k, v] : meta)
    if (k == key) return v;
  return 0;
}

}  // namespace

void EngineImpl::reserve_imports() {
  if (scheduler_->importing().empty()) return;
  for (Sequence* s : scheduler_->reserve_imports(mono_now())) {
    set_meta(s->out, "pd_decode_prealloc_duration", s->t_reserved - s->t_arrival);
    s->req.pd_import->on_reserved(s->num_computed);
  }
}

void EngineImpl::take_delivery(const std::string& rid, const pd::Delivery& kv) {
  auto it = index_.find(rid);
  if (it == index_.end()) return;
  Sequence* s = it->second;
  if (!s->req.pd_import || s->out.finished || s->t_delivered >= 0 || s->abort_requested) return;
  auto fail = [&](const std::string& why) {
    s->abort_requested = true;
    s->abort_message = why;
    finish_aborted_and_empty();
  };
  if (!kv.error.empty()) return fail(kv.error);
  if (!s->pd_reserved) return fail("prefill/decode: the prompt's K/V arrived before this engine reserved blocks for it");
  if (!(kv.layout == layout_))
    return fail("prefill/decode: the prefill's K/V are " + kv.layout.describe() + " but this engine's are " +
                layout_.describe() + " (serve the same model with the same --dtype on both)");
  if (kv.from != s->num_computed || kv.from + kv.tokens != s->prompt_len)
    return fail("prefill/decode: K/V of prompt tokens [" + std::to_string(kv.from) + ", " +
                std::to_string(kv.from + kv.tokens) + ") arrived, this engine needs [" + std::to_string(s->num_computed) +
                ", " + std::to_string(s->prompt_len) + ")");
  if (!kv.first.sampled) return fail("prefill/decode: the prefill sampled no first token");
  try {
    runner_->write_kv(s->blocks, kv.from, s->prompt_len, kv.data);
  } catch (const std::exception& e) {
    return fail(e.what());
  }
  const double now = mono_now();
  s->t_delivered = now;
  s->t_scheduled = s->t_reserved;
  s->num_computed = s->prompt_len;
  s->out.cached_tokens = kv.cached_tokens;
  // Computed under other weights than this engine's: flagged (its first token's weight
  // version, no digest) and never served to another request from the prefix cache.
  if (kv.weight_version != weight_version_) s->kv_mixed = true;
  if (kv.weights_digest.empty() || !runner_->has_weights() || kv.weights_digest != runner_->model().exact_weights_digest())
    s->weights_epoch = ~uint64_t{0};
  if (!s->kv_mixed) blocks_->commit(s->tokens, s->blocks, s->num_computed, s->committed, s->prefix_root());
  for (const auto& [k, v] : kv.meta) set_meta(s->out, k, v);
  const double bootstrap = meta_of(kv.meta, "pd_decode_bootstrap_duration");
  set_meta(s->out, "pd_decode_transfer_duration", std::max(0.0, now - s->t_reserved - bootstrap));
  if (!kv.first.rng_state.empty()) {
    std::istringstream in(kv.first.rng_state);
    in >> s->rng;
  }
  scheduler_->activate(s);
  auto top = kv.first.top;
  if (accept_token(s, kv.first.id, kv.first.logprob, std::move(top), now, kv.weight_version)) finish(s);
}

void EngineImpl::export_kv(Sequence* s) {
  auto e = s->req.pd_export;
  s->req.pd_export.reset();  // once
  const auto& fr = s->out.finish_reason;
  if (s->abort_requested || fr.type == "abort") {
    e->error = s->abort_message.empty() ? "the request was aborted on the prefill engine" : s->abort_message;
  } else if (s->num_computed < s->prompt_len) {
    e->error = "prefill/decode: the prefill engine did not compute the prompt";
  } else {
    try {
      e->layout = layout_;
      e->prompt_len = s->prompt_len;
      e->kv.resize(static_cast<size_t>(layout_.bytes(s->prompt_len)));
      runner_->read_kv(s->blocks, 0, s->prompt_len, e->kv.data());
      if (!s->out.output_ids.empty()) {
        e->first.sampled = true;
        e->first.id = s->out.output_ids.front();
        if (!s->out.output_logprobs.empty()) e->first.logprob = s->out.output_logprobs.front();
        if (!s->out.output_top_logprobs.empty()) e->first.top = s->out.output_top_logprobs.front();
        std::ostringstream rng;
        rng << s->rng;
        e->first.rng_state = rng.str();
      }
      e->weight_version = s->out.weight_version_spans.empty() ? weight_version_ : s->out.weight_version_spans.front().second;
      if (s->weights_epoch == weights_epoch_.load() && runner_->has_weights())
        e->weights_digest = runner_->model().exact_weights_digest();
      e->cached_tokens = s->out.cached_tokens;
      e->queue_time = s->t_scheduled >= 0 ? s->t_scheduled - s->t_arrival : 0;
      e->forward_time = s->t_first >= 0 && s->t_scheduled >= 0 ? s->t_first - s->t_scheduled : 0;
      e->ok = true;
    } catch (const std::exception& ex) {
      e->kv.clear();
      e->error = std::string("prefill/decode: reading the prompt's K/V failed: ") + ex.what();
    }
  }
  if (e->on_ready) e->on_ready(e);
}

}  // namespace rl::engine
