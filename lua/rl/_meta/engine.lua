---@meta
-- LuaLS type stubs for rl.engine (lua/rl/engine/init.lua over librlhost_torch.so; lua/rl/engine/vllm.lua). docs/engine.md.
-- The options are declared in lua/rl/engine/options.lua; tests/lua/engine_spec.lua checks this list against it.

---@class rl.engine.StartOptions
---@field model string HF model directory or .gguf (required)
---@field mode? "thread"|"process" thread (default): in this process; process: a child `rlhost engine`
---@field tokenizer? string tokenizer directory or tokenizer.json (default: the model directory)
---@field served_model_name? string name in /v1/models and metrics (default: the directory name)
---@field host? string bind address (default 127.0.0.1; non-loopback needs api_key)
---@field port? integer 0 (default in thread mode): any free port
---@field api_key? string Bearer token for the control endpoints
---@field serve? boolean thread mode: false = no HTTP server (url is nil)
---@field dtype? "auto"|"float32"|"bfloat16"|"float16"
---@field device? string "cpu" (default), "cuda", "cuda:N"
---@field max_running_requests? integer sequences decoding at once (default 64)
---@field kv_cache_tokens? integer KV budget in tokens (0: from kv_cache_bytes)
---@field kv_cache_bytes? integer KV budget in bytes when kv_cache_tokens is 0 (default 1 GiB)
---@field block_size? integer tokens per KV block (default 16)
---@field max_prefill_tokens? integer new prompt tokens per step (default 8192)
---@field context_length? integer 0: config's max_position_embeddings
---@field threads? integer LibTorch intra-op threads (0: leave as is)
---@field cpus? string process mode: pin the engine's process to these CPUs ("0-3,6"); vLLM: VLLM_CPU_OMP_THREADS_BIND
---@field nice? integer process mode or vLLM: the engine process's CPU priority, 0-19 (19: it runs on what the trainer leaves idle)
---@field max_connections? integer open HTTP connections the server keeps (default 4096)
---@field max_sequences_per_request? integer prompts x n in one request; more is a 400 (default 4096, 0: no cap)
---@field max_queued_requests? integer sequences waiting beyond max_running_requests; more is a 429 (default 16384, 0: no cap)
---@field max_tokens_in_flight? integer prompt + max_new_tokens of unfinished sequences; more is a 429 (default 0: no cap)
---@field max_top_logprobs? integer top log-probs per position a request may ask for; more is a 400 (default 20)
---@field max_response_entries? integer values one response may hold (output tokens x (id + log-prob + top log-probs), for the longest output each request may produce); more is a 400 (default 4194304, 0: no cap)
---@field enable_prefix_cache? boolean default true
---@field cuda_graph_max_bs? integer CUDA: decode batches up to this size replay CUDA graphs (default 256; 0: none)
---@field disable_cuda_graph? boolean CUDA: every step eager (SGLang's --disable-cuda-graph)
---@field overlap_schedule? "auto"|"on"|"off" launch the next decode step before the last one's tokens reach the host (auto: on for CUDA)
---@field recompute_kv_on_weight_update? boolean a weight update mid-generation recomputes the running sequences' KV under the new weights (default: kept, never reused by new requests)
---@field weight_version? string reported until the first update (default "default")
---@field lora_paths? string[] LoRA adapters loaded at start: "NAME=DIR" (or "DIR"), PEFT directories
---@field max_loras_per_batch? integer distinct LoRA adapters in one step (default 8)
---@field max_lora_rank? integer refuse LoRA adapters of a higher rank (default 0: any); vllm: > 0 serves adapters loaded at run time (--enable-lora, --max-lora-rank)
---@field disaggregation_mode? "null"|"prefill"|"decode" prefill/decode disaggregation (SGLang's): null (default) does both; prefill runs prompts and hands their K/V over; decode takes them and decodes (docs/engine.md)
---@field disaggregation_bootstrap_port? integer prefill: the bootstrap server's port (default 0: a free one; /get_server_info's disaggregation_bootstrap_port)
---@field disaggregation_transfer_backend? "auto"|"shm"|"tcp" decode: how K/V arrive (auto: shm when the prefill is on loopback, else tcp)
---@field disaggregation_transfer_timeout? number seconds each PD wait may take (KV blocks, bootstrap, K/V; default 60)
---@field disaggregation_kv_checksum? boolean both sides checksum the K/V rows; a mismatch fails the request
---@field ready_timeout? number process mode: seconds to wait for the child to serve (default 300)
---@field log_file? string process mode / vllm: the child's stdout/stderr (default a temp file)
---@field server_args? string JSON object text echoed by /get_server_info (`rlhost engine` passes its flags)
---@field backend? "native"|"vllm" native (default): rlhost's engine; vllm: a vLLM server child (docs/engine.md, "vLLM engines")
---@field python? string vllm: the python with vLLM (default $RLHOST_VLLM_PYTHON, else ~/.cache/rlhost/vllm-venv/bin/python)
---@field vllm_args? table<string, string|number|boolean|table> vllm: vLLM's flags ({max_model_len = 384} -> --max-model-len 384; true: bare flag)
---@field env? table<string, string> vllm: extra environment for the server
---@field kv_cache_space? number vllm: VLLM_CPU_KVCACHE_SPACE in GiB (default 1)

---@class rl.engine.Stats
---@field num_running integer
---@field num_queued integer
---@field token_usage number
---@field cache_hit_rate number
---@field gen_throughput number
---@field prompt_tokens_total integer
---@field generation_tokens_total integer
---@field cached_tokens_total integer
---@field requests_total integer
---@field requests_aborted integer
---@field steps integer
---@field weight_version string
---@field memory_released boolean

---@class rl.engine.Engine
---@field spawned_at? number when it was spawned (rl.now(); set by rl.engine.launch/start)
---@field ready_at? number when it was first seen serving (rl.now())
---@field url string|nil the HTTP server ("http://127.0.0.1:PORT"), nil with serve = false
---@field mode "thread"|"process"
---@field pid integer|nil process mode: the child's pid
local Engine = {}

--- SGLang /generate request -> response (a list for batches / n > 1). Yields the task.
---@param req table {text|input_ids, sampling_params?, rid?, return_logprob?, top_logprobs_num?, logprob_start_len?, ...}
---@return table|nil out, string|nil err
function Engine:generate(req) end

---@return rl.engine.Stats|nil stats, string|nil err
function Engine:stats() end

---@return boolean|nil flushed false while requests run
function Engine:flush_cache() end

---@param dir string safetensors directory with the same shapes
---@param weight_version? string
---@return table|nil result {success, weight_version}, string|nil err
function Engine:update_weights_from_disk(dir, weight_version) end

---Loads (or replaces in place) the LoRA adapter `name` from a PEFT directory.
---@param name string the name requests use (/generate lora_path, OpenAI model "<base>:<name>")
---@param dir string PEFT directory: adapter_config.json + adapter_model.safetensors
---@param weight_version? string the adapter's version (default: "1", then previous + 1)
---@return table|nil result {success, weight_version, ...}, string|nil err
function Engine:load_lora(name, dir, weight_version) end

---Unloads the LoRA adapter `name`; nil, err while unfinished requests use it.
---@param name string
---@return table|nil result {success}, string|nil err
function Engine:unload_lora(name) end

---@param tags? string[] "kv_cache", "weights" (default both)
function Engine:release_memory(tags) end
---@param tags? string[]
function Engine:resume_memory(tags) end

---@param rid string
---@return integer aborted
function Engine:abort(rid) end

--- Stops the engine (thread mode) or the child (process mode: SIGTERM, then SIGKILL after 15 s).
---@param drain? number thread mode: first stop accepting and let running requests finish for up to this many seconds
function Engine:stop(drain) end

--- Stops the engine, blocking the calling task at most `timeout` seconds: a thread-mode
--- engine stops on a thread of its own and, still stuck at the deadline, is abandoned
--- (its threads and memory go when they return); a process engine gets SIGKILL.
---@param timeout number seconds
---@return boolean ok
---@return string? err why it was abandoned
function Engine:stop_within(timeout) end

--- The engine's weight-receiving side (rl.weight_sync): memory (thread mode), shared memory and
--- c10d (its server), files; and the version it serves.
---@return rl.weight_sync.Receiver
function Engine:weight_receiver() end

--- Thread mode: drops the control commands (weight syncs, flushes) the scheduler has not
--- taken yet, failing their callers at once; returns the number dropped (0 for a process
--- engine). rl.recipe.health uses it when a sync waits behind a stuck scheduler.
---@return integer
function Engine:cancel_commands() end

--- Fault drill (thread mode; SIGSTOP is the drill for a process engine): the engine's
--- scheduler sleeps `seconds` between two steps while its HTTP server still answers
--- (rl.recipe.health finds it by its step counter: work waiting, no step).
---@param seconds number
function Engine:stall(seconds) end

--- A vLLM server (backend = "vllm"): the same methods, over vLLM's HTTP API.
---@class rl.engine.VllmEngine: rl.engine.Engine
---@field backend "vllm"
---@field log_file string the server's output
---@field weight_version string the last update's version ("default" before)
local VllmEngine = {}

--- Pauses generation until :resume(): "abort" (default) ends in-flight requests as aborted,
--- "wait" lets them finish, "keep" freezes them.
---@param mode? "abort"|"wait"|"keep"
---@return table|nil result, string|nil err
function VllmEngine:pause(mode) end
---@return table|nil result, string|nil err
function VllmEngine:resume() end
--- True when /health answers 200.
---@param timeout? number
---@return boolean
function VllmEngine:health(timeout) end

--- An engine spawned by rl.engine.launch, serving or not yet.
---@class rl.engine.Launch
---@field engine rl.engine.Engine|rl.engine.VllmEngine the engine (its url once ready)
---@field state "starting"|"ready"|"failed"
---@field err? string why it failed (with its log's tail)
---@field spawned_at number
---@field ready_at? number
local Launch = {}
--- One look without waiting.
---@return "starting"|"ready"|"failed"
function Launch:poll() end
--- Yields until it serves: the engine, or nil and why.
---@return rl.engine.Engine|rl.engine.VllmEngine|nil engine, string|nil err
function Launch:wait_ready() end
--- Kills what was spawned, serving or not. Idempotent.
function Launch:stop() end

---@class rl.engine
local engine = {}

--- Spawns an engine without waiting for it to serve (rl.engine.start's options).
---@param opts rl.engine.StartOptions
---@return rl.engine.Launch|nil launch, string|nil err
function engine.launch(opts) end

--- Yields until every launch serves (true) or one fails (false, its index, why).
---@param launches rl.engine.Launch[]
---@return boolean ok, integer|nil index, string|nil err
function engine.wait_all(launches) end

---@param opts rl.engine.StartOptions
---@return rl.engine.Engine|rl.engine.VllmEngine|nil engine, string|nil err
function engine.start(opts) end

--- A handle on an engine server started elsewhere (an rlhost engine or any SGLang-API
--- server): requests, stats and weight syncs over HTTP; stop() leaves it running; weights by
--- shared memory when its URL is loopback, else by files.
---@param url string
---@param opts? {api_key?: string}
---@return rl.engine.Engine
function engine.attach(url, opts) end

--- Headers for an engine's control endpoints (weights, memory, profile, abort,
--- flush): JSON content type and 'Authorization: Bearer <api_key or the run's admin
--- token>'. The admin token is $RLHOST_ADMIN_TOKEN, which engines this run starts inherit.
---@param api_key? string
---@return table<string, string>
function engine.control_headers(api_key) end

--- SIGTERM stops this process like Ctrl-C (`rlhost engine` under a supervisor).
function engine.forward_sigterm() end

return engine
