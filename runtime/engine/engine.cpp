// EngineImpl: the scheduler thread, request intake and control commands around
// the Scheduler (who runs), the ModelRunner (one forward) and the sampler.
#include "engine/engine.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <future>
#include <mutex>
#include <random>
#include <thread>
#include <unordered_map>

#include <ATen/Parallel.h>

#include "base/errors.hpp"
#include "base/log_text.hpp"
#include "engine/engine_impl.hpp"
#include "engine/sampler.hpp"
#include "engine/step_batch.hpp"
#include "model/tensor_files.hpp"
#include "model/tokenizer.hpp"
#include "nn/weights_digest.hpp"
#include "tensor/block_cache.hpp"
#include "tensor/huge_pages.hpp"
#include "tensor/torch_env.hpp"

namespace rl::engine {

namespace fs = std::filesystem;

std::string next_weight_version(const std::string& v) {
  if (!v.empty() && std::all_of(v.begin(), v.end(), [](char c) { return c >= '0' && c <= '9'; }) && v.size() < 18)
    return std::to_string(std::stoll(v) + 1);
  return v == "default" ? "1" : v + "+1";
}

double RequestOutput::decode_throughput() const {
  // Tokens after the first over the time they took.
  if (decode_time <= 0 || output_ids.size() < 2) return 0;
  return static_cast<double>(output_ids.size() - 1) / decode_time;
}

namespace {

double mono_now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
double unix_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::string random_rid(std::mt19937_64& rng) {
  static const char* hex = "0123456789abcdef";
  std::string s(32, '0');
  uint64_t a = rng(), b = rng();
  for (int i = 0; i < 16; ++i) {
    s[i] = hex[(a >> (4 * i)) & 15];
    s[16 + i] = hex[(b >> (4 * i)) & 15];
  }
  return s;
}

}  // namespace

EngineImpl::EngineImpl(const EngineOptions& opts) : opts_(opts) {
  if (opts_.max_running_requests < 1)
    throw Error("engine: max_running_requests must be >= 1, got " + std::to_string(opts_.max_running_requests));
  if (opts_.block_size < 1 || opts_.block_size > 1024)
    throw Error("engine: block_size must be in [1, 1024], got " + std::to_string(opts_.block_size));
  if (opts_.max_prefill_tokens < 1)
    throw Error("engine: max_prefill_tokens must be >= 1, got " + std::to_string(opts_.max_prefill_tokens));
  if (!fs::exists(opts_.model))
    throw Error("engine: model path " + opts_.model.string() + " does not exist",
                "give a Hugging Face model directory (config.json + *.safetensors) or a .gguf file");
  // On the CPU, the model's load and the KV cache's allocation run on a passing
  // thread, so the caller keeps no OpenMP pool beside the scheduler thread's
  // (tensor/torch_env.hpp); a GPU engine builds on the caller's thread (its device).
  const bool cpu = opts_.device == "cpu" || opts_.device.rfind("cpu:", 0) == 0;
  if (cpu) tensor::run_on_passing_thread(opts_.threads, [&] { runner_ = std::make_unique<ModelRunner>(opts_); });
  else runner_ = std::make_unique<ModelRunner>(opts_);
  const auto& cfg = runner_->config();
  context_length_ = opts_.context_length > 0 ? opts_.context_length : cfg.max_position_embeddings;
  if (context_length_ <= 0) context_length_ = 4096;

  fs::path tok_path = opts_.tokenizer;
  if (tok_path.empty()) tok_path = fs::is_directory(opts_.model) ? opts_.model : opts_.model.parent_path();
  if (fs::exists(fs::is_directory(tok_path) ? tok_path / "tokenizer.json" : tok_path)) {
    tokenizer_ = std::make_unique<model::Tokenizer>(model::Tokenizer::load(tok_path));
  } else if (!opts_.tokenizer.empty()) {
    throw Error("engine: no tokenizer.json at " + tok_path.string(), "pass a directory or file that has one");
  }
  for (int64_t id : cfg.eos_token_ids) eos_.push_back(static_cast<int32_t>(id));
  if (tokenizer_)
    for (int32_t id : tokenizer_->eos_token_ids())
      if (std::find(eos_.begin(), eos_.end(), id) == eos_.end()) eos_.push_back(id);

  // KV budget: tokens, or what fits in kv_cache_bytes; at least one full context.
  const int64_t per_token = runner_->kv_bytes_per_token();
  int64_t tokens = opts_.kv_cache_tokens;
  if (tokens <= 0) tokens = std::max<int64_t>(opts_.kv_cache_bytes / per_token, 1);
  if (opts_.kv_cache_tokens <= 0) tokens = std::min(tokens, opts_.max_running_requests * context_length_);
  num_blocks_ = std::max<int64_t>((tokens + opts_.block_size - 1) / opts_.block_size, 1);
  blocks_ = std::make_unique<BlockManager>(num_blocks_, opts_.block_size, opts_.enable_prefix_cache);
  if (opts_.max_loras_per_batch < 1)
    throw Error("engine: max_loras_per_batch must be >= 1, got " + std::to_string(opts_.max_loras_per_batch));
  if (opts_.max_lora_rank < 0)
    throw Error("engine: max_lora_rank must be >= 0 (0: any), got " + std::to_string(opts_.max_lora_rank));
  scheduler_ = std::make_unique<Scheduler>(*blocks_, SchedulerLimits{opts_.max_running_requests,
                                                                      opts_.max_prefill_tokens,
                                                                      opts_.max_loras_per_batch});
  runner_->configure_steps(context_length_);
  if (opts_.overlap_schedule != "auto" && opts_.overlap_schedule != "on" && opts_.overlap_schedule != "off")
    throw Error("engine: overlap_schedule must be auto, on or off, got '" + opts_.overlap_schedule + "'");
  overlap_ = opts_.overlap_schedule == "on" || (opts_.overlap_schedule == "auto" && runner_->async());
  layout_ = runner_->kv_layout();
  if (cpu) tensor::run_on_passing_thread(opts_.threads, [&] { runner_->allocate_cache(num_blocks_, opts_.block_size); });
  else runner_->allocate_cache(num_blocks_, opts_.block_size);
  weight_version_ = opts_.weight_version;
  rid_rng_.seed(std::random_device{}());
  if (opts_.served_model_name.empty())
    opts_.served_model_name = (fs::is_directory(opts_.model) ? opts_.model : opts_.model.parent_path())
                                  .lexically_normal().filename().string();
  log::info("engine: " + opts_.model.string() + " (" + std::to_string(cfg.num_parameters()) + " parameters, " +
            runner_->dtype_name() + ", " + runner_->device_name() + "), KV cache " +
            std::to_string(num_blocks_ * opts_.block_size) + " tokens in " + std::to_string(num_blocks_) +
            " blocks of " + std::to_string(opts_.block_size) + " (" +
            std::to_string((num_blocks_ * opts_.block_size * per_token) >> 20) + " MiB), max " +
            std::to_string(opts_.max_running_requests) + " running, context " + std::to_string(context_length_));
  load_startup_loras();
  publish_stats();
  thread_ = std::thread([this] { loop(); });
}

EngineImpl::~EngineImpl() { stop(); }

std::unique_ptr<Engine> Engine::create(const EngineOptions& opts) { return std::make_unique<EngineImpl>(opts); }

void EngineImpl::stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

// ---- intake -------------------------------------------------------------------

SequencePtr EngineImpl::make_sequence(GenerateRequest req, UpdateFn on_update) {
  const auto& cfg = runner_->config();
  if (req.input_ids.empty())
    throw Error("input_ids: the prompt is empty", "send text or at least one token id");
  for (size_t i = 0; i < req.input_ids.size(); ++i) {
    int32_t id = req.input_ids[i];
    if (id < 0 || id >= cfg.vocab_size)
      throw Error("input_ids[" + std::to_string(i) + "]: token id " + std::to_string(id) +
                  " is outside the vocabulary [0, " + std::to_string(cfg.vocab_size) + ")");
  }
  const int64_t L = static_cast<int64_t>(req.input_ids.size());
  if (L >= context_length_)
    throw Error("input_ids: the prompt has " + std::to_string(L) + " tokens but the context length is " +
                    std::to_string(context_length_),
                "shorten the prompt");
  int64_t max_new = req.params.max_new_tokens;
  if (max_new == std::numeric_limits<int64_t>::max()) max_new = context_length_ - L;
  if (L + max_new > context_length_)
    throw Error("sampling_params.max_new_tokens: " + std::to_string(L) + " prompt tokens + " +
                    std::to_string(max_new) + " new tokens exceed the context length " +
                    std::to_string(context_length_),
                "lower max_new_tokens or leave it null for 'up to the context length'");
  if (L + 1 > num_blocks_ * opts_.block_size)
    throw Error("input_ids: the prompt has " + std::to_string(L) + " tokens but the KV cache holds " +
                    std::to_string(num_blocks_ * opts_.block_size),
                "raise --kv-cache-tokens");
  if (!req.params.stop.empty() && !tokenizer_)
    throw Error("sampling_params.stop: stop strings need a tokenizer and this engine has none",
                "use stop_token_ids, or give the engine a tokenizer.json");
  if (req.top_logprobs_num < 0) throw Error("top_logprobs_num: must be >= 0");
  if (req.logprob_start_len < -1 || req.logprob_start_len >= L)
    throw Error("logprob_start_len: " + std::to_string(req.logprob_start_len) + " is not a position of the " +
                    std::to_string(L) + "-token prompt",
                "give -1 (no prompt log-probs) or a position in [0, " + std::to_string(L - 1) + "]");

  auto s = std::make_unique<Sequence>();
  std::mt19937_64 seeder;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (req.rid.empty()) req.rid = random_rid(rid_rng_);
    seeder.seed(rid_rng_());
  }
  s->rng.seed(req.params.seed ? *req.params.seed : seeder());
  s->tokens = req.input_ids;
  s->prompt_len = L;
  // SGLang reports position logprob_start_len itself as null: scored positions start after it.
  s->input_logprob_next = req.return_logprob && req.logprob_start_len >= 0 ? req.logprob_start_len + 1 : L;
  s->max_new_tokens = max_new;
  s->stop_ids = req.params.stop_token_ids;
  if (!req.params.ignore_eos)
    for (int32_t id : eos_) s->stop_ids.push_back(id);
  s->text = std::make_unique<OutputText>(tokenizer_.get(), req.params.stop, req.params.skip_special_tokens,
                                         req.params.no_stop_trim);
  s->out.rid = req.rid;
  s->out.prompt_tokens = L;
  s->out.arrival_time = unix_now();
  s->t_arrival = mono_now();
  s->weights_epoch = weights_epoch_.load();
  s->req = std::move(req);
  s->on_update = std::move(on_update);
  return s;
}

std::string EngineImpl::submit(GenerateRequest req, UpdateFn on_update) {
  SequencePtr s = make_sequence(std::move(req), std::move(on_update));
  std::string rid = s->out.rid;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) throw Error("engine: stopped");
    if (known_rids_.count(rid)) throw Error("rid: a request with id '" + rid + "' is already running");
    if (!s->req.lora_name.empty()) {
      auto it = loras_.find(s->req.lora_name);
      if (it == loras_.end()) throw Error("lora_path: " + unknown_lora_message(s->req.lora_name), unknown_lora_hint());
      s->lora = it->second;
      s->lora_root = s->lora->root;
      ++s->lora->requests;
    }
    known_rids_.insert(rid);
    inbox_.push_back(std::move(s));
  }
  cv_.notify_all();
  return rid;
}

bool EngineImpl::abort(const std::string& rid) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!known_rids_.count(rid)) return false;
    aborts_.push_back(rid);
  }
  cv_.notify_all();
  return true;
}

bool EngineImpl::deliver_kv(const std::string& rid, std::shared_ptr<const pd::Delivery> kv) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!known_rids_.count(rid)) return false;
    deliveries_.emplace_back(rid, std::move(kv));
  }
  cv_.notify_all();
  return true;
}

int64_t EngineImpl::abort_all() {
  int64_t n;
  {
    std::lock_guard<std::mutex> lock(mu_);
    n = static_cast<int64_t>(known_rids_.size());
    abort_everything_ = true;
  }
  cv_.notify_all();
  return n;
}

// ---- control ------------------------------------------------------------------

void EngineImpl::run_between_steps(const std::function<void()>& fn) {
  if (std::this_thread::get_id() == thread_.get_id()) {
    fn();
    return;
  }
  auto task = std::make_shared<std::packaged_task<void()>>(fn);
  auto done = task->get_future();
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) throw Error("engine: stopped");
    commands_.push_back([task] { (*task)(); });
  }
  task.reset();  // the queue owns it: a dropped command breaks its promise (cancel_pending_commands)
  cv_.notify_all();
  try {
    done.get();  // rethrows
  } catch (const std::future_error&) {  // dropped before it ran: cancel_pending_commands
    throw Error("engine: the command was cancelled before the scheduler ran it",
                "the scheduler was stuck; the engine is being replaced (rl.recipe.health)");
  }
}

int64_t EngineImpl::cancel_pending_commands() {
  std::vector<std::function<void()>> dropped;
  {
    std::lock_guard<std::mutex> lock(mu_);
    dropped.swap(commands_);
  }
  // Destroying a queued task that never ran breaks its promise: its waiter throws.
  return static_cast<int64_t>(dropped.size());
}

void EngineImpl::set_step_hook(std::function<void()> hook) {
  run_between_steps([this, &hook] { step_hook_ = std::move(hook); });
}

bool EngineImpl::flush_cache() {
  bool ok = false;
  run_between_steps([&] {
    if (scheduler_->num_running() > 0 || scheduler_->num_waiting() > 0) return;
    blocks_->flush();
    ok = true;
  });
  return ok;
}

void EngineImpl::update_weights_from_disk(const fs::path& dir, const std::optional<std::string>& version) {
  run_between_steps([&] {
    if (!runner_->has_weights()) throw Error("update_weights_from_disk: weights are released", "resume them first");
    runner_->load_weights_from(dir);
    weights_swapped(version);
    log::info("engine: weights updated from " + dir.string() + " (weight_version " + weight_version_ + ")");
  });
}

void EngineImpl::update_weights_in_memory(const std::vector<std::pair<std::string, torch::Tensor>>& tensors,
                                          const std::optional<std::string>& version) {
  update_weights_with([&](ModelRunner& r) { r.copy_weights(tensors); }, "update_weights", version);
}

std::unique_ptr<nn::WeightStage> EngineImpl::plan_weight_stage(const std::vector<std::string>& names,
                                                               const std::vector<std::vector<int64_t>>& shapes) {
  std::unique_ptr<nn::WeightStage> stage;
  run_between_steps([&] { stage = runner_->plan_stage(names, shapes); });
  return stage;
}

void EngineImpl::install_weight_stage(nn::WeightStage& stage, const std::optional<std::string>& version) {
  update_weights_with([&](ModelRunner& r) { r.install_stage(stage); }, "update_weights", version);
}

void EngineImpl::update_weights_with(const std::function<void(ModelRunner&)>& fn, const char* what,
                                     const std::optional<std::string>& version) {
  run_between_steps([&] {
    if (!runner_->has_weights()) throw Error(std::string(what) + ": weights are released", "resume them first");
    fn(*runner_);
    weights_swapped(version);
  });
}

// Between steps, after new weights went in: the running sequences stay (no drain, no
// abort). Their KV computed under the old weights is kept and never committed for
// prefix reuse, or dropped and recomputed (recompute_kv_on_weight_update); no new
// request reuses a prefix computed before the update.
void EngineImpl::weights_swapped(const std::optional<std::string>& version) {
  ++weights_epoch_;  // a request that ran across it carries no logprob digest
  blocks_->flush();
  if (opts_.recompute_kv_on_weight_update) {
    scheduler_->preempt_all();  // back to the queue, recomputed next step under the new weights
  } else {
    for (auto& s : scheduler_->running()) s->kv_mixed = true;
  }
  weight_version_ = version ? *version : next_weight_version(weight_version_);
  publish_stats();
}

namespace {
bool has_tag(const std::vector<std::string>& tags, const char* t) {
  return tags.empty() || std::find(tags.begin(), tags.end(), t) != tags.end();
}
void check_tags(const std::vector<std::string>& tags) {
  for (const auto& t : tags)
    if (t != "kv_cache" && t != "weights")
      throw Error("tags: unknown memory tag '" + t + "'", "use \"kv_cache\" and/or \"weights\"");
}
}  // namespace

void EngineImpl::release_memory(const std::vector<std::string>& tags) {
  check_tags(tags);
  run_between_steps([&] {
    if (has_tag(tags, "kv_cache") && !kv_released_) {
      // Prompts whose K/V are on their way have nowhere to land: they end.
      for (auto& s : scheduler_->importing()) {
        s->abort_requested = true;
        s->abort_message = "the KV cache was released while this request's prompt K/V were on their way";
      }
      finish_aborted_and_empty();
      scheduler_->preempt_all();  // their KV goes; they recompute after resume
      blocks_->flush();
      runner_->free_cache();
      kv_released_ = true;
    }
    if (has_tag(tags, "weights") && runner_->has_weights()) {
      scheduler_->preempt_all();
      runner_->free_weights();
      ++weights_epoch_;
    }
    if (has_tag(tags, "weights")) tensor::HugePageArena::drop_kept();  // the last updates' buffers
    // The freed tensors sit in the CPU block cache and glibc's heap: hand the pages
    // back, so that releasing lowers the process's RSS on a CPU.
    tensor::return_free_memory();
    log::info(std::string("engine: memory released (") + (has_tag(tags, "kv_cache") ? "kv_cache " : "") +
              (has_tag(tags, "weights") ? "weights" : "") + ")");
    publish_stats();
  });
}

void EngineImpl::resume_memory(const std::vector<std::string>& tags) {
  check_tags(tags);
  run_between_steps([&] {
    if (has_tag(tags, "weights") && !runner_->has_weights()) ++weights_epoch_;
    if (has_tag(tags, "weights") && !runner_->has_weights() && !runner_->restore_weights()) {
      // The last update is gone (in memory, or a deleted directory): the model's own
      // weights come back, under the version they had at start; a sync follows.
      weight_version_ = opts_.weight_version;
      log::info("engine: weights resumed from " + opts_.model.string() +
                " (the last update was not on disk); weight_version back to " + weight_version_);
    }
    if (has_tag(tags, "kv_cache") && kv_released_) {
      runner_->allocate_cache(num_blocks_, opts_.block_size);
      kv_released_ = false;
    }
    publish_stats();
  });
  cv_.notify_all();
}

// ---- the scheduler thread -----------------------------------------------------

void EngineImpl::loop() {
  if (opts_.threads > 0) {
    at::init_num_threads();
    at::set_num_threads(opts_.threads);
  }
  for (;;) {
    std::deque<SequencePtr> arrived;
    std::vector<std::string> aborts;
    std::vector<std::function<void()>> commands;
    std::vector<std::pair<std::string, std::shared_ptr<const pd::Delivery>>> deliveries;
    bool abort_everything = false, stopping = false;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] {
        return stopping_ || !inbox_.empty() || !aborts_.empty() || !commands_.empty() || abort_everything_ ||
               !deliveries_.empty() || can_step() || inflight_.has_value();
      });
      arrived.swap(inbox_);
      deliveries.swap(deliveries_);
      aborts.swap(aborts_);
      commands.swap(commands_);
      abort_everything = abort_everything_;
      abort_everything_ = false;
      stopping = stopping_;
    }
    for (auto& s : arrived) {
      index_[s->out.rid] = s.get();
      if (s->req.pd_import) {
        s->input_logprob_next = s->prompt_len;  // prompt log-probs come from the prefill
        scheduler_->add_import(std::move(s));
      }
      else scheduler_->add(std::move(s));
      ++requests_total_;
    }
    // Commands (weight updates, flushes, memory release) and stopping see no step in flight.
    if (!commands.empty() || stopping) drain();
    for (auto& c : commands) c();  // packaged tasks: exceptions go to the waiter
    if (stopping) abort_everything = true;
    for (const auto& rid : aborts) mark_abort(rid, "aborted by request");
    if (abort_everything) {
      for (auto& [rid, s] : index_) {
        s->abort_requested = true;
        s->abort_message = stopping ? "engine stopped" : "aborted by request (abort_all)";
      }
    }
    finish_aborted_and_empty();
    for (auto& [rid, kv] : deliveries) take_delivery(rid, *kv);
    if (!stopping && !kv_released_) reserve_imports();
    if (stopping) {
      drain();
      publish_stats();
      notify_finished();
      // Commands queued after the last swap still have waiters.
      std::lock_guard<std::mutex> lock(mu_);
      for (auto& c : commands_) c();
      commands_.clear();
      break;
    }
    if (can_step()) step();
    publish_stats();
    notify_finished();
  }
  publish_stats();
  notify_finished();
}

// Scheduler thread only (also inside its wait predicate): reads state only it writes.
bool EngineImpl::can_step() const {
  if (kv_released_ || !runner_->has_weights()) return false;
  return scheduler_->num_running() > 0 || scheduler_->num_waiting() > 0;
}

void EngineImpl::mark_abort(const std::string& rid, const std::string& why) {
  auto it = index_.find(rid);
  if (it == index_.end()) return;
  it->second->abort_requested = true;
  it->second->abort_message = why;
}

void EngineImpl::finish_aborted_and_empty() {
  std::vector<Sequence*> done;
  // max_new_tokens 0 with prompt log-probs still runs its prefill (it finishes in complete()).
  for (auto& [rid, s] : index_)
    if (s->abort_requested || (s->max_new_tokens == 0 && !s->wants_input_logprobs())) done.push_back(s);
  for (Sequence* s : done) {
    if (s->abort_requested) {
      s->out.finish_reason.type = "abort";
      s->out.finish_reason.message = s->abort_message;
      ++requests_aborted_;
    } else {
      s->out.finish_reason.type = "length";
      s->out.finish_reason.length = 0;
    }
    finish(s);
  }
}

void EngineImpl::step() {
  if (inflight_) {
    // The step in flight has not reached the host: launch the next one first when it
    // is the same sequences decoding the tokens that step samples (on the device),
    // then take that step's tokens.
    std::vector<Sequence*> next;
    const std::vector<int32_t> ahead = ahead_rows(next);
    InFlight done = std::move(*inflight_);
    inflight_.reset();
    if (!next.empty()) launch(std::move(next), &ahead);
    complete(done);
    return;
  }
  const double t0 = mono_now();
  std::vector<Sequence*> batch = scheduler_->schedule(t0);
  if (batch.empty()) {
    if (scheduler_->num_waiting() > 0 && scheduler_->num_running() == 0) {
      // Cannot happen with validated prompts (one always fits an empty cache);
      // fail loudly instead of spinning.
      Sequence* s = scheduler_->waiting().front().get();
      s->abort_requested = true;
      s->abort_message = "the KV cache cannot hold this request";
      finish_aborted_and_empty();
    }
    return;
  }
  launch(std::move(batch), nullptr);
  if (!overlap_) drain();
}

void EngineImpl::launch(std::vector<Sequence*> batch, const std::vector<int32_t>* ahead) {
  InFlight f;
  f.id = ++launches_;
  for (Sequence* s : batch)
    if (!ahead && (s->query_len() > 1 || s->t_first < 0)) f.prefill_tokens += s->query_len();
  f.rows.resize(batch.size());
  const int64_t vocab = runner_->config().vocab_size;
  for (size_t i = 0; i < batch.size(); ++i) {
    Sequence* s = batch[i];
    // A step ahead samples the token after the one in flight.
    const int64_t n_out = s->out.completion_tokens() + (ahead ? 1 : 0);
    const bool below_min = n_out < s->req.params.min_new_tokens;
    f.rows[i] = SampleRow{&s->req.params, &s->rng, s->req.top_logprobs_num, below_min ? &s->stop_ids : nullptr,
                          s->req.return_logprob};
    // A step scoring prompt log-probs runs synchronously (ModelRunner::launch): none ahead of it.
    f.cpu_rows = f.cpu_rows || (runner_->async() && (needs_cpu_sampler(f.rows[i], vocab) || s->wants_input_logprobs() ||
                                                     s->lora != nullptr));
  }
  f.batch = std::move(batch);
  runner_->launch(f.batch, f.rows, ahead);
  if (ahead) ++overlap_steps_;
  inflight_ = std::move(f);
}

// The run-ahead batch: the in-flight step's sequences that surely go on after it
// (none finishes by length with the token it samples), each with a KV slot for one
// more token, when no sequence waits for a place (admitting it takes a scheduled
// step) and every row of that step is sampled on the device. Returns each one's row
// in the step in flight; empty: take that step's tokens first.
std::vector<int32_t> EngineImpl::ahead_rows(std::vector<Sequence*>& next) {
  std::vector<int32_t> rows;
  if (!overlap_ || inflight_->cpu_rows) return rows;
  if (scheduler_->num_waiting() > 0 && scheduler_->num_running() < opts_.max_running_requests) return rows;
  const auto& batch = inflight_->batch;
  for (size_t i = 0; i < batch.size(); ++i) {
    Sequence* s = batch[i];
    if (s->out.finished || s->abort_requested) continue;
    if (s->out.completion_tokens() + 1 >= s->max_new_tokens ||
        static_cast<int64_t>(s->tokens.size()) + 1 >= context_length_)
      continue;
    if (!scheduler_->reserve_ahead(*s)) {
      next.clear();
      return {};
    }
    next.push_back(s);
    rows.push_back(static_cast<int32_t>(i));
  }
  if (next.empty()) rows.clear();
  return rows;
}

void EngineImpl::drain() {
  if (!inflight_) return;
  InFlight done = std::move(*inflight_);
  inflight_.reset();
  complete(done);
}

void EngineImpl::complete(InFlight& f) {
  SampleOutput sampled = runner_->collect();
  std::vector<Sequence*>& batch = f.batch;
  const double t1 = mono_now();
  ++steps_;
  prefill_tokens_computed_ += f.prefill_tokens;
  int64_t generated = 0;
  std::vector<Sequence*> finished;
  for (size_t i = 0; i < batch.size(); ++i) {
    Sequence* s = batch[i];
    if (s->out.finished) continue;  // finished (or aborted) while the step ran: its token is dropped
    s->num_computed = static_cast<int64_t>(s->tokens.size());
    if (i < sampled.input_logprobs.size() && !sampled.input_logprobs[i].empty()) {
      auto& lps = sampled.input_logprobs[i];
      s->input_logprob_next += static_cast<int64_t>(lps.size());
      s->out.input_logprobs.insert(s->out.input_logprobs.end(), lps.begin(), lps.end());
      for (auto& top : sampled.input_top_logprobs[i]) s->out.input_top_logprobs.push_back(std::move(top));
    }
    if (s->max_new_tokens == 0) {
      // Prompt scoring only (max_new_tokens 0 with prompt log-probs): the sampled token is dropped.
      if (!s->kv_mixed) blocks_->commit(s->tokens, s->blocks, s->num_computed, s->committed, s->prefix_root());
      s->out.finish_reason.type = "length";
      s->out.finish_reason.length = 0;
      s->t_first = s->t_last = t1;
      finished.push_back(s);
      continue;
    }
    ++generated;
    std::vector<std::pair<int32_t, float>> top;
    if (s->req.return_logprob && s->req.top_logprobs_num > 0) top = std::move(sampled.top_logprobs[i]);
    if (accept_token(s, sampled.tokens[i], s->req.return_logprob ? sampled.logprobs[i] : 0.f, std::move(top), t1,
                     weight_version_))
      finished.push_back(s);
  }
  generation_tokens_total_ += generated;
  throughput_window_.emplace_back(t1, generated);
  while (!throughput_window_.empty() && throughput_window_.front().first < t1 - 5.0) throughput_window_.pop_front();

  for (Sequence* s : batch) {
    if (!s->req.stream || !s->out.finish_reason.type.empty()) continue;
    fill_output(*s, t1);
    s->on_update(s->out);
  }
  for (Sequence* s : finished) finish(s);
  completed_ = f.id;
  std::erase_if(retired_, [&](const auto& r) { return r.first <= completed_; });
  if (step_hook_) step_hook_();
}

bool EngineImpl::accept_token(Sequence* s, int32_t tok, float logprob, std::vector<std::pair<int32_t, float>>&& top,
                              double t1, const std::string& version) {
  s->tokens.push_back(tok);
  if (!s->kv_mixed) blocks_->commit(s->tokens, s->blocks, s->num_computed, s->committed, s->prefix_root());
  s->out.output_ids.push_back(tok);
  auto& spans = s->out.weight_version_spans;
  if (spans.empty() || spans.back().second != version) spans.emplace_back(s->out.completion_tokens() - 1, version);
  if (s->req.return_logprob) {
    s->out.output_logprobs.push_back(logprob);
    if (s->req.top_logprobs_num > 0) s->out.output_top_logprobs.push_back(std::move(top));
  }
  if (s->t_first < 0) s->t_first = t1;
  s->t_last = t1;
  auto matched = s->text->push(tok);
  auto& fr = s->out.finish_reason;
  const int64_t n_out = s->out.completion_tokens();
  if (n_out >= s->req.params.min_new_tokens &&
      std::find(s->stop_ids.begin(), s->stop_ids.end(), tok) != s->stop_ids.end()) {
    fr.type = "stop";
    fr.matched_token = tok;
  } else if (matched) {
    fr.type = "stop";
    fr.matched_str = *matched;
  } else if (n_out >= s->max_new_tokens || static_cast<int64_t>(s->tokens.size()) >= context_length_) {
    fr.type = "length";
    fr.length = n_out;
  }
  return !fr.type.empty();
}

void EngineImpl::fill_output(Sequence& s, double now) {
  RequestOutput& o = s.out;
  o.text = s.text->visible();
  o.weight_version = weight_version_;
  if (s.lora) o.lora_version = s.lora->version;  // written on this thread (install_lora_now)
  // The digest of the weights every token was computed with: the base's, plus the
  // adapter's when the request ran under one that stayed the same throughout (the trainer's
  // nn::lora_weights_digest); none when either changed meanwhile.
  o.weights_digest.clear();
  if (s.weights_epoch == weights_epoch_.load() && runner_->has_weights()) {
    std::string base = runner_->model().exact_weights_digest();
    if (!s.lora) o.weights_digest = std::move(base);
    else if (!base.empty() && !s.lora->digest.empty() && s.lora_root == s.lora->root)
      o.weights_digest = nn::add_digests(base, s.lora->digest);
  }
  o.queue_time = s.t_scheduled >= 0 ? s.t_scheduled - s.t_arrival : now - s.t_arrival;
  o.prefill_time = s.t_first >= 0 && s.t_scheduled >= 0 ? s.t_first - s.t_scheduled : 0;
  o.decode_time = s.t_first >= 0 ? s.t_last - s.t_first : 0;
  o.e2e_latency = now - s.t_arrival;
  if (s.t_delivered >= 0) {  // a decode engine's request: the prefill's K/V came at t_delivered
    auto it = std::find_if(o.pd_meta.begin(), o.pd_meta.end(), [](const auto& m) { return m.first == "pd_decode_forward_duration"; });
    if (it == o.pd_meta.end()) it = o.pd_meta.insert(o.pd_meta.end(), {"pd_decode_forward_duration", 0.0});
    it->second = std::max(0.0, s.t_last - s.t_delivered);
  }
}

void EngineImpl::finish(Sequence* s) {
  if (s->req.pd_export) export_kv(s);  // before its blocks go back
  SequencePtr owned = scheduler_->remove(s);
  index_.erase(s->out.rid);
  if (!owned) return;
  owned->text->finish();
  owned->out.finished = true;
  fill_output(*owned, mono_now());
  ++requests_finished_;
  prompt_tokens_total_ += owned->prompt_len;
  cached_tokens_total_ += owned->out.cached_tokens;
  finished_.push_back(std::move(owned));
}

// After publish_stats(), so a client that sees its request finish also sees
// stats without it.
void EngineImpl::notify_finished() {
  std::vector<SequencePtr> done;
  done.swap(finished_);
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& s : done) {
      known_rids_.erase(s->out.rid);
      if (s->lora) --s->lora->requests;
    }
  }
  for (auto& s : done) {
    s->on_update(s->out);
    // A step in flight may still have it in its batch: kept until that step completes.
    if (inflight_) retired_.emplace_back(inflight_->id, std::move(s));
  }
}

// ---- stats ----------------------------------------------------------------------

void EngineImpl::publish_stats() {
  EngineStats st;
  st.num_running = scheduler_->num_running();
  st.num_queued = scheduler_->num_waiting();
  st.kv_tokens_total = num_blocks_ * opts_.block_size;
  st.kv_tokens_used = blocks_->num_used() * opts_.block_size;
  st.kv_tokens_cached = blocks_->num_cached_free() * opts_.block_size;
  st.token_usage = st.kv_tokens_total ? static_cast<double>(st.kv_tokens_used) / st.kv_tokens_total : 0;
  st.cache_hit_rate =
      blocks_->queried_tokens ? static_cast<double>(blocks_->hit_tokens) / blocks_->queried_tokens : 0;
  if (throughput_window_.size() >= 1) {
    int64_t n = 0;
    for (auto& [t, k] : throughput_window_) n += k;
    const double span = std::max(mono_now() - throughput_window_.front().first, 1e-3);
    st.gen_throughput = mono_now() - throughput_window_.back().first > 5.0 ? 0 : n / std::max(span, 1.0);
  }
  st.prompt_tokens_total = prompt_tokens_total_;
  st.generation_tokens_total = generation_tokens_total_;
  st.cached_tokens_total = cached_tokens_total_;
  st.prefill_tokens_computed = prefill_tokens_computed_;
  st.requests_total = requests_total_;
  st.requests_finished = requests_finished_;
  st.requests_aborted = requests_aborted_;
  st.preemptions_total = scheduler_->preemptions;
  st.steps = steps_;
  st.overlap_steps = overlap_steps_;
  if (const GpuStepper* g = runner_->gpu_stepper()) {
    st.cuda_graphs = g->stats().graphs;
    st.cuda_graph_steps = g->stats().graph_steps;
  }
  st.weight_version = weight_version_;
  st.memory_released = kv_released_ || !runner_->has_weights();
  st.lora_adapters = lora_count_.load();
  st.pd_prealloc = scheduler_->num_importing(false);
  st.pd_transfer = scheduler_->num_importing(true);
  std::lock_guard<std::mutex> lock(stats_mu_);
  stats_ = std::move(st);
}

EngineStats EngineImpl::stats() const {
  std::lock_guard<std::mutex> lock(stats_mu_);
  return stats_;
}

std::string EngineImpl::weight_version() const {
  std::lock_guard<std::mutex> lock(stats_mu_);
  return stats_.weight_version;
}

bool EngineImpl::idle() const {
  std::lock_guard<std::mutex> lock(mu_);
  return known_rids_.empty() && inbox_.empty();
}

const model::ModelConfig& EngineImpl::config() const { return runner_->config(); }

}  // namespace rl::engine
