// The native inference engine: one model, a paged KV cache with prefix reuse,
// and a scheduler thread doing continuous batching. Thread-safe; knows nothing
// of HTTP or Lua (runtime/engine/server*.cpp and bindings/ wrap it).
//
// Threads: the engine owns one scheduler thread that runs every model step.
// submit()/abort() may be called from any thread; the UpdateFn of a request is
// called on the scheduler thread and must not block (copy and post elsewhere).
// Control calls (flush_cache, update_weights_*, release/resume) run on the
// scheduler thread between two steps; the caller waits for them.
//
// This header is LibTorch-free so servers and bindings that only talk to the
// engine compile fast; engine_weights.hpp has the in-memory weight update.
#pragma once
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/pd.hpp"
#include "engine/sampling_params.hpp"

namespace rl::model {
class Tokenizer;
struct ModelConfig;
}  // namespace rl::model

namespace rl::engine {

struct EngineOptions {
  std::filesystem::path model;            // HF model directory or .gguf
  std::filesystem::path tokenizer;        // default: the model directory
  std::string served_model_name;          // default: the model directory's name
  std::string dtype = "auto";             // auto (config's torch_dtype on CUDA, float32 on CPU) | float32 | bfloat16 | float16
  std::string device = "cpu";             // cpu | cuda | cuda:N
  int64_t max_running_requests = 64;      // sequences decoding at once
  int64_t kv_cache_tokens = 0;            // KV budget in tokens; 0: what fits in kv_cache_bytes
  int64_t kv_cache_bytes = int64_t{1} << 30;  // used when kv_cache_tokens is 0
  int64_t block_size = 16;                // tokens per KV block (prefix reuse works on whole blocks)
  int64_t max_prefill_tokens = 8192;      // new prompt tokens per step (a longer prompt runs alone)
  int64_t context_length = 0;             // 0: the config's max_position_embeddings
  int threads = 0;                        // LibTorch intra-op threads for this engine; 0: leave as is
  bool enable_prefix_cache = true;
  std::string weight_version = "default"; // reported in meta_info until the first update
  // CUDA: decode steps of up to this many sequences replay a CUDA graph captured
  // per batch-size bucket (SGLang's --cuda-graph-max-bs); larger ones run eagerly.
  int64_t cuda_graph_max_bs = 256;
  bool disable_cuda_graph = false;        // SGLang's --disable-cuda-graph: every step eager
  // Launch the next decode step before the one in flight reaches the host (SGLang's
  // overlap scheduler): auto = on where steps run asynchronously (CUDA), on, off
  // (--disable-overlap-schedule).
  std::string overlap_schedule = "auto";
  // A weight update mid-generation: running sequences keep the KV computed under the
  // old weights (false, PipelineRL's and AReaL's choice) or recompute it under the new
  // ones before their next token (true, NeMo-RL's). Either way no request is aborted,
  // and no new request reuses a prefix computed under older weights.
  bool recompute_kv_on_weight_update = false;
  // LoRA adapters (SGLang's --lora-paths): "name=dir" (or "dir": named after it), PEFT
  // directories loaded at start; more come and go with load_lora_adapter.
  std::vector<std::string> lora_paths;
  int64_t max_loras_per_batch = 8;        // distinct adapters in one step (the base model not counted)
  int64_t max_lora_rank = 0;              // refuse adapters of a higher rank; 0: any
};

// One loaded LoRA adapter (Engine::lora_adapters).
struct LoraInfo {
  std::string name;
  std::string path;              // the PEFT directory it came from ("" from memory)
  int64_t rank = 0;
  double alpha = 0;
  std::vector<std::string> targets;
  std::string version;           // "1" at load, then like the weight version at each replacement
  int64_t requests = 0;          // unfinished requests using it
};

struct FinishReason {
  std::string type;                       // "" while running; stop | length | abort
  std::optional<int32_t> matched_token;   // stop: the stop or EOS token
  std::optional<std::string> matched_str; // stop: the stop string
  int64_t length = 0;                     // length: the limit hit
  std::string message;                    // abort: why
};

// Everything a client sees of one request, cumulative.
struct RequestOutput {
  std::string rid;
  std::vector<int32_t> output_ids;
  std::string text;                        // decoded output (stop-trimmed unless no_stop_trim)
  std::vector<float> output_logprobs;      // per output token, when return_logprob
  std::vector<std::vector<std::pair<int32_t, float>>> output_top_logprobs;  // when top_logprobs_num > 0
  // Prompt log-probs (GenerateRequest::logprob_start_len = k >= 0): log p(prompt[j] | prompt[<j])
  // for j = k+1 .. prompt end, filled by the prefill (SGLang reports position k itself as null).
  std::vector<float> input_logprobs;
  std::vector<std::vector<std::pair<int32_t, float>>> input_top_logprobs;  // same positions, top_logprobs_num > 0
  // The weights each output token was sampled under: (index of the first output token
  // sampled under a version, that version), one entry per version, in order.
  std::vector<std::pair<int64_t, std::string>> weight_version_spans;
  bool finished = false;
  FinishReason finish_reason;
  int64_t prompt_tokens = 0;
  int64_t cached_tokens = 0;               // prompt tokens served from the prefix cache
  std::string weight_version;
  std::string lora_version;                // under a LoRA adapter: its version (LoraInfo::version); else ""
  // nn::weights_digest of the weights every token was computed with, when the engine's
  // log-probs come from the batch-invariant float32 CPU kernels (the trainer's); else "".
  std::string weights_digest;
  // Seconds. arrival_time is Unix time; the rest are durations.
  double arrival_time = 0;
  double queue_time = 0;                   // arrival -> first scheduled (prefill start)
  double prefill_time = 0;                 // prefill start -> first token sampled
  double decode_time = 0;                  // first token -> last token
  double e2e_latency = 0;                  // arrival -> finish (or now, while running)
  int64_t preemptions = 0;                 // times evicted from the KV cache and recomputed
  // Prefill/decode disaggregation: pd_prefill_* / pd_decode_* durations (seconds) and
  // pd_transfer_* figures, for meta_info (the trace viewer's [P]/[D] lanes).
  std::vector<std::pair<std::string, double>> pd_meta;
  int64_t completion_tokens() const { return static_cast<int64_t>(output_ids.size()); }
  double decode_throughput() const;        // completion tokens / decode_time (0 if unknown)
};

struct GenerateRequest {
  std::string rid;                         // empty: the engine makes one
  std::vector<int32_t> input_ids;
  SamplingParams params;
  bool return_logprob = false;
  int64_t top_logprobs_num = 0;
  // With return_logprob: the first prompt position whose log-prob is reported (SGLang's
  // logprob_start_len; -1: none). Positions from it are computed, never served from the
  // prefix cache; max_new_tokens 0 then scores the prompt without generating.
  int64_t logprob_start_len = -1;
  bool stream = false;                     // true: an update after every step, not only at the end
  // A loaded LoRA adapter's name (SGLang's lora_path); "": the base model.
  std::string lora_name;
  // Prefill/decode disaggregation (engine/pd.hpp): on a prefill engine, the prompt's
  // K/V and first token are handed over as the request finishes; on a decode engine,
  // the prompt's K/V arrive through deliver_kv instead of being computed.
  std::shared_ptr<pd::Export> pd_export;
  std::shared_ptr<pd::Import> pd_import;
};

// Called on the scheduler thread: after each step when streaming, and exactly
// once with finished == true.
using UpdateFn = std::function<void(const RequestOutput&)>;

struct EngineStats {
  int64_t num_running = 0, num_queued = 0;
  int64_t kv_tokens_total = 0, kv_tokens_used = 0, kv_tokens_cached = 0;  // cached: free but reusable
  double token_usage = 0;                  // used / total
  double cache_hit_rate = 0;               // cached prompt tokens / prompt tokens, all time
  double gen_throughput = 0;               // generated tokens/s over the last few seconds
  int64_t prompt_tokens_total = 0, generation_tokens_total = 0, cached_tokens_total = 0;
  int64_t prefill_tokens_computed = 0;     // prompt tokens actually run through the model
  int64_t requests_total = 0, requests_finished = 0, requests_aborted = 0, preemptions_total = 0;
  int64_t steps = 0;
  int64_t cuda_graphs = 0;                 // CUDA: decode batch sizes captured so far
  int64_t cuda_graph_steps = 0;            // CUDA: steps replayed from a graph
  int64_t overlap_steps = 0;               // steps launched before the previous one's tokens reached the host
  std::string weight_version;
  bool memory_released = false;
  int64_t lora_adapters = 0;               // loaded LoRA adapters
  int64_t pd_prealloc = 0;                 // decode: requests waiting for KV blocks for their prompt
  int64_t pd_transfer = 0;                 // decode: requests whose prompt K/V is on its way
};

class Engine {
 public:
  // Loads the model and tokenizer, allocates the KV cache, starts the scheduler.
  // Throws rl::Error naming the path/option on bad input.
  static std::unique_ptr<Engine> create(const EngineOptions& opts);
  virtual ~Engine() = default;

  // Validates (rl::Error naming the field: empty input, ids out of the vocabulary,
  // prompt + max_new_tokens beyond the context, prompt beyond the KV budget) and
  // queues. Returns the rid.
  virtual std::string submit(GenerateRequest req, UpdateFn on_update) = 0;
  virtual bool abort(const std::string& rid) = 0;  // false: unknown or finished
  // A decode engine's request (GenerateRequest::pd_import) gets its prompt's K/V and
  // first token, or an error that ends it (finish_reason abort with that message).
  // False: no such request waits for its K/V (finished, aborted, unknown).
  virtual bool deliver_kv(const std::string& rid, std::shared_ptr<const pd::Delivery> kv) = 0;
  virtual pd::KvLayout kv_layout() const = 0;  // how this engine's K/V travel
  virtual int64_t abort_all() = 0;                 // number aborted
  // Drops the control commands (weight updates, flushes, ...) the scheduler has not
  // taken yet; each caller gets an rl::Error. For a scheduler that is stuck: without
  // this, a weight sync queued behind it waits forever. Returns the number dropped.
  virtual int64_t cancel_pending_commands() = 0;

  // Control, between steps. flush_cache fails (returns false) while requests run.
  virtual bool flush_cache() = 0;
  // Loads safetensors from `dir` into the live weights (shapes must match) and
  // sets the weight version (default: the previous one + 1 when numeric, else
  // "<previous>+1"). The prefix cache is flushed. Throws rl::Error on bad files.
  virtual void update_weights_from_disk(const std::filesystem::path& dir,
                                        const std::optional<std::string>& weight_version = {}) = 0;
  // LoRA adapters by name. load_lora_adapter reads a PEFT directory (adapter_config.json
  // + adapter_model.safetensors) on the calling thread, then, between steps, adds it or
  // replaces the adapter of that name in place: requests running under it go on with
  // the new tensors (their KV is handled as on a weight update) and no prefix computed
  // under the old one is reused. The version defaults to the previous one + 1 ("1" for
  // a new name). unload_lora_adapter refuses (rl::Error) while requests use the adapter.
  // Both throw rl::Error naming the name/path/field; a failed load changes nothing.
  virtual LoraInfo load_lora_adapter(const std::string& name, const std::filesystem::path& dir,
                                     const std::optional<std::string>& version = {}) = 0;
  virtual void unload_lora_adapter(const std::string& name) = 0;
  virtual std::vector<LoraInfo> lora_adapters() const = 0;
  // tags: "kv_cache", "weights" (empty = both). Released KV cache: requests wait
  // (and new ones queue) until resumed. Released weights are re-read on resume
  // from the last directory loaded.
  virtual void release_memory(const std::vector<std::string>& tags) = 0;
  virtual void resume_memory(const std::vector<std::string>& tags) = 0;
  // Runs fn on the scheduler thread between steps and waits for it (used by
  // in-memory weight updates and the profiler). Exceptions propagate.
  virtual void run_between_steps(const std::function<void()>& fn) = 0;
  // Called after every model step on the scheduler thread (profiler stepping).
  virtual void set_step_hook(std::function<void()> hook) = 0;

  virtual EngineStats stats() const = 0;
  virtual const EngineOptions& options() const = 0;
  virtual const model::ModelConfig& config() const = 0;
  virtual const model::Tokenizer* tokenizer() const = 0;  // nullptr: ids only
  virtual std::vector<int32_t> eos_token_ids() const = 0;
  virtual int64_t context_length() const = 0;
  virtual std::string weight_version() const = 0;
  virtual bool idle() const = 0;  // nothing running or queued

  // Aborts everything and joins the scheduler thread. Idempotent.
  virtual void stop() = 0;
};

}  // namespace rl::engine
