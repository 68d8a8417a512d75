// The engine's internals (LibTorch side): ModelRunner runs one batched forward
// over the paged KV cache; EngineImpl drives the scheduler thread. Included by
// engine*.cpp and by code that hands the engine tensors (engine_weights.hpp).
#pragma once
#include <atomic>
#include <condition_variable>
#include <deque>
#include <map>
#include <filesystem>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include <torch/torch.h>

#include "engine/block_manager.hpp"
#include "engine/engine.hpp"
#include "engine/gpu_step.hpp"
#include "engine/sampler.hpp"
#include "engine/scheduler.hpp"
#include "model/config.hpp"
#include "nn/kv_cache.hpp"
#include "nn/shared_weights.hpp"
#include "nn/weight_stage.hpp"
#include "nn/transformer.hpp"

namespace rl::engine {

// A version after `v`: numeric + 1, "default" -> "1", else "<v>+1".
std::string next_weight_version(const std::string& v);

class ModelRunner {
 public:
  explicit ModelRunner(const EngineOptions& opts);
  const model::ModelConfig& config() const { return config_; }
  int64_t kv_bytes_per_token() const;
  std::string dtype_name() const;
  std::string device_name() const;

  void allocate_cache(int64_t num_blocks, int64_t block_size);
  void free_cache();
  bool has_weights() const { return model_ != nullptr; }
  void free_weights();
  // Reloads released weights: from the last directory loaded when it still exists
  // and no in-memory/shared-memory update came after it, else from the model
  // directory. Returns true when that is the weights the engine served before.
  bool restore_weights();
  void load_weights_from(const std::filesystem::path& dir);
  void copy_weights(const std::vector<std::pair<std::string, torch::Tensor>>& tensors);
  // A staged update of the parameters named (nn/weight_stage.hpp), or null when the
  // weights live in shared memory (the shm path's buffers must stay where they are).
  std::unique_ptr<nn::WeightStage> plan_stage(const std::vector<std::string>& names,
                                              const std::vector<std::vector<int64_t>>& shapes);
  // Swaps a complete stage in (between two steps). Throws rl::Error when the weights
  // were released, reloaded or shared since the stage was planned.
  void install_stage(nn::WeightStage& stage);
  // Moves the weights into a new two-buffer shared-memory file in `dir` (the
  // previous one, if any, goes once nothing reads it) and describes it.
  const nn::SharedLayout& share_weights(const std::string& dir);
  // Reads buffer `k` of the shared file `id` from now on (a writer has filled it).
  // The weights' GEMM panels as buffer `k` of shared weights `id` holds them
  // (Transformer::panel_sources() read there): pack them, off the scheduler thread,
  // before use_shared_buffer swaps to it. Throws as use_shared_buffer.
  std::vector<torch::Tensor> shared_panel_sources(const std::string& id, int k) const;
  void use_shared_buffer(const std::string& id, int k, std::vector<nn::bi::PackedWeight> panels = {});
  nn::Transformer& model() { return *model_; }
  // Where LoRA adapters live: float32 on the engine's device (nn/lora.hpp).
  torch::TensorOptions lora_options() const { return torch::TensorOptions().dtype(torch::kFloat32).device(device_); }

  // One step: computes every sequence's uncomputed tokens, writes their K/V and
  // returns the logits of each sequence's last token, [S, V] float32. With `next`,
  // sequence i's only input is next[i], after all of its tokens. With `scored`, the
  // prompt positions whose log-probs sequences still want (Sequence::input_logprob_next)
  // add their logits as rows after those S, described in order in *scored.
  torch::Tensor forward(const std::vector<Sequence*>& batch, const std::vector<int32_t>* next = nullptr,
                        std::vector<ScoreRow>* scored = nullptr);
  // A step and its sampling, in two halves so that the next step can be launched
  // before this one's tokens reach the host: launch() enqueues it (on CUDA through
  // GpuStepper: CUDA graphs, sampling on the device; on the CPU it computes at once
  // with forward() and sample_tokens()); collect() returns the oldest launched
  // step's tokens. `ahead`: sequence i's input is the token the step in flight
  // samples in its row ahead[i] (not on the host yet), at position tokens.size().
  void launch(const std::vector<Sequence*>& batch, const std::vector<SampleRow>& rows,
              const std::vector<int32_t>* ahead = nullptr);
  SampleOutput collect();
  // Prefill/decode disaggregation (pd_kv.cpp): the K/V of tokens [from, to) of a
  // sequence with these blocks, token-major (engine/pd.hpp), out of / into the cache.
  pd::KvLayout kv_layout() const;
  void read_kv(const std::vector<int32_t>& blocks, int64_t from, int64_t to, char* dst);
  void write_kv(const std::vector<int32_t>& blocks, int64_t from, int64_t to, const char* src);
  // Whether a launched step runs while the host goes on (CUDA).
  bool async() const { return gpu_ != nullptr; }
  // Once the engine knows its context length: on a CUDA device (and a CUDA build,
  // unless RLHOST_GPU_KERNELS=0), steps go through GpuStepper from now on.
  void configure_steps(int64_t context_length);
  const GpuStepper* gpu_stepper() const { return gpu_.get(); }

 private:
  EngineOptions opts_;
  model::ModelConfig config_;
  torch::ScalarType dtype_;
  torch::Device device_;
  std::unique_ptr<nn::Transformer> model_;
  nn::KVCache cache_;
  std::filesystem::path weights_dir_;  // last update_weights_from_disk directory (empty: the model)
  bool updated_in_memory_ = false;     // a copy/shm update came after weights_dir_ (not on disk)
  std::unique_ptr<nn::SharedWeights> shared_;  // weights in shared memory (share_weights), or none
  std::unique_ptr<GpuStepper> gpu_;            // CUDA steps (configure_steps), or none
  std::deque<SampleOutput> done_;              // CPU: launched steps' tokens, not yet collected
  // LoRA adapters on lm_head: each one's unembedding merged with the base's (W + s·B A,
  // as the trainer computes it), kept while the adapter, its values and the base
  // weights stay the same; a handful at most (adapters in recent batches).
  struct MergedHead {
    std::shared_ptr<const nn::LoraAdapter> adapter;
    uint64_t adapter_version = 0, weights_generation = 0;
    torch::Tensor weight;
  };
  std::vector<MergedHead> merged_heads_;
  const torch::Tensor& merged_lm_head(const std::shared_ptr<const nn::LoraAdapter>& adapter);
};

class EngineImpl final : public Engine {
 public:
  explicit EngineImpl(const EngineOptions& opts);
  ~EngineImpl() override;

  std::string submit(GenerateRequest req, UpdateFn on_update) override;
  bool abort(const std::string& rid) override;
  bool deliver_kv(const std::string& rid, std::shared_ptr<const pd::Delivery> kv) override;
  pd::KvLayout kv_layout() const override { return layout_; }
  int64_t abort_all() override;
  int64_t cancel_pending_commands() override;
  bool flush_cache() override;
  void update_weights_from_disk(const std::filesystem::path& dir,
                                const std::optional<std::string>& weight_version = {}) override;
  void update_weights_in_memory(const std::vector<std::pair<std::string, torch::Tensor>>& tensors,
                                const std::optional<std::string>& weight_version);
  // A staged update: planned on the scheduler thread, filled by the caller off it,
  // installed between two steps.
  std::unique_ptr<nn::WeightStage> plan_weight_stage(const std::vector<std::string>& names,
                                                     const std::vector<std::vector<int64_t>>& shapes);
  void install_weight_stage(nn::WeightStage& stage, const std::optional<std::string>& weight_version);
  // Between steps: fn changes the weights, then the prefix cache is flushed and the
  // version moves on (`what` names the call in errors).
  void update_weights_with(const std::function<void(ModelRunner&)>& fn, const char* what,
                           const std::optional<std::string>& weight_version);
  LoraInfo load_lora_adapter(const std::string& name, const std::filesystem::path& dir,
                             const std::optional<std::string>& version = {}) override;
  void unload_lora_adapter(const std::string& name) override;
  std::vector<LoraInfo> lora_adapters() const override;
  // Adds `adapter` under `name`, or replaces the one of that name (between steps;
  // engine_lora.cpp). `path`: where it came from ("" from memory).
  LoraInfo install_lora(const std::string& name, std::shared_ptr<const nn::LoraAdapter> adapter,
                        const std::string& path, const std::optional<std::string>& version);
  // LoRA adapters through shared memory (engine_lora_sync.cpp): a staging adapter on the
  // CPU whose storages live in a two-buffer file, kept per adapter name until the adapter
  // is unloaded or shared again.
  struct SharedLora {
    std::shared_ptr<nn::LoraAdapter> stage;
    std::unique_ptr<nn::SharedWeights> file;
    std::mutex mu;  // one update reads the stage at a time
  };
  std::shared_ptr<SharedLora> shared_lora(const std::string& name) const;
  void put_shared_lora(const std::string& name, std::shared_ptr<SharedLora> shared);
  void release_memory(const std::vector<std::string>& tags) override;
  void resume_memory(const std::vector<std::string>& tags) override;
  void run_between_steps(const std::function<void()>& fn) override;
  void set_step_hook(std::function<void()> hook) override;
  EngineStats stats() const override;
  const EngineOptions& options() const override { return opts_; }
  const model::ModelConfig& config() const override;
  const model::Tokenizer* tokenizer() const override { return tokenizer_.get(); }
  std::vector<int32_t> eos_token_ids() const override { return eos_; }
  int64_t context_length() const override { return context_length_; }
  std::string weight_version() const override;
  bool idle() const override;
  void stop() override;

  ModelRunner& runner() { return *runner_; }  // scheduler thread only (run_between_steps)

 private:
  SequencePtr make_sequence(GenerateRequest req, UpdateFn on_update);
  // A launched step until its tokens are applied (complete()).
  struct InFlight {
    int64_t id = 0;
    std::vector<Sequence*> batch;
    std::vector<SampleRow> rows;
    int64_t prefill_tokens = 0;
    bool cpu_rows = false;  // rows the CPU samples (after the step): no step can run ahead of it
  };
  void loop();
  bool can_step() const;
  void step();
  void launch(std::vector<Sequence*> batch, const std::vector<int32_t>* ahead);
  std::vector<int32_t> ahead_rows(std::vector<Sequence*>& next);
  void complete(InFlight& f);
  void drain();  // completes the step in flight, if any
  void weights_swapped(const std::optional<std::string>& version);
  void mark_abort(const std::string& rid, const std::string& why);
  void finish_aborted_and_empty();
  void finish(Sequence* s);
  // Output bookkeeping for a token sampled for s (under weight version `version`): its
  // log-probs, stop and length checks. True when it ends the sequence.
  bool accept_token(Sequence* s, int32_t tok, float logprob, std::vector<std::pair<int32_t, float>>&& top,
                    double now, const std::string& version);
  // Prefill/decode disaggregation (engine_pd.cpp), scheduler thread.
  void reserve_imports();                      // blocks for waiting imports; tells their servers
  void take_delivery(const std::string& rid, const pd::Delivery& kv);  // K/V in: it runs on
  void export_kv(Sequence* s);                 // a prefill request finishing: hand its K/V over
  void notify_finished();
  void fill_output(Sequence& s, double now);
  void publish_stats();
  LoraInfo install_lora_now(const std::string& name, std::shared_ptr<const nn::LoraAdapter> adapter,
                        const std::string& path, const std::optional<std::string>& version);
  LoraInfo lora_info(const LoraSlot& slot) const;  // under mu_
  void load_startup_loras();                        // EngineOptions::lora_paths, before the thread starts
  std::string unknown_lora_message(const std::string& name) const;  // under mu_
  static std::string unknown_lora_hint();

  EngineOptions opts_;
  std::unique_ptr<ModelRunner> runner_;
  std::unique_ptr<model::Tokenizer> tokenizer_;
  std::vector<int32_t> eos_;
  int64_t context_length_ = 0;
  int64_t num_blocks_ = 0;
  pd::KvLayout layout_;
  std::unique_ptr<BlockManager> blocks_;
  std::unique_ptr<Scheduler> scheduler_;

  // Shared with other threads, under mu_.
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<SequencePtr> inbox_;
  std::vector<std::string> aborts_;
  std::vector<std::pair<std::string, std::shared_ptr<const pd::Delivery>>> deliveries_;
  std::vector<std::function<void()>> commands_;
  std::unordered_set<std::string> known_rids_;  // submitted and not finished
  // LoRA adapters by name (engine_lora.cpp): the map under mu_; a slot's adapter and
  // root change on the scheduler thread, under mu_ too.
  std::map<std::string, LoraSlotPtr> loras_;
  uint64_t lora_loads_ = 0;  // makes each load's prefix-cache root unique
  std::atomic<int64_t> lora_count_{0};
  std::map<std::string, std::shared_ptr<SharedLora>> shared_loras_;  // under mu_
  bool abort_everything_ = false;
  bool stopping_ = false;
  std::mt19937_64 rid_rng_;

  // Scheduler thread only.
  std::unordered_map<std::string, Sequence*> index_;
  std::vector<SequencePtr> finished_;  // to notify after the stats are published
  // Overlap: the next step is launched before the one in flight reaches the host.
  bool overlap_ = false;
  std::optional<InFlight> inflight_;
  int64_t launches_ = 0, completed_ = 0;  // ids of the last launched and completed steps
  int64_t overlap_steps_ = 0;
  // Finished while a step that has them in its batch was in flight: freed once it completes.
  std::vector<std::pair<int64_t, SequencePtr>> retired_;
  bool kv_released_ = false;
  std::string weight_version_;
  // Counts weight changes (updates, release, resume): a request that saw none reports
  // the weights' digest with its log-probs (RequestOutput::weights_digest).
  std::atomic<uint64_t> weights_epoch_{0};
  std::function<void()> step_hook_;
  std::deque<std::pair<double, int64_t>> throughput_window_;
  int64_t steps_ = 0, requests_total_ = 0, requests_finished_ = 0, requests_aborted_ = 0;
  int64_t prompt_tokens_total_ = 0, generation_tokens_total_ = 0, cached_tokens_total_ = 0,
          prefill_tokens_computed_ = 0;

  mutable std::mutex stats_mu_;
  EngineStats stats_;
  std::thread thread_;
};

}  // namespace rl::engine
