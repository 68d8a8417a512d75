---@meta
-- LuaLS type stubs for rl.rollout (lua/rl/rollout/). See docs/lua-api.md ("rl.rollout").

---@class rl.rollout.Options
---@field url? string a router or engine base URL (POST /generate)
---@field engine? table an rl.engine handle, called in process instead of HTTP
---@field backend? "native"|"vllm" vllm: the engines behind url are vLLM servers (/v1/completions, /abort_requests)
---@field weight_version? string vllm: the weight version samples report (vLLM's completions carry none; the recipe sets it after each sync)
---@field tokenizer? table an rl.tokenizer, to encode prompts that have no tokens yet
---@field data? table an rl.data source (generate_rollout)
---@field reward? string|fun(sample: table): any a reward function or an rl.rewards name
---@field reward_key? string
---@field reward_timeout? number seconds a reward may run, waiting or busy (30)
---@field hook_timeout? number seconds a dynamic filter or sample hook may run before it is interrupted (30)
---@field max_failed_share? number a step fails once more than this share of its samples failed (0.5; 1: off)
---@field max_failed_samples? integer a step fails at this many failed samples (0: off)
---@field max_busy_timeouts? integer a step fails once this many rewards ran busy for their whole limit (2; 0: off)
---@field over_sampling_limit? number a step draws at most this × rollout_batch_size prompts (10)
---@field group_rm? boolean|fun(group: table[]): table rewards per group after generation
---@field dynamic_filter? string|fun(ro: rl.rollout.Rollout, group: table[]): boolean|rl.rollout.FilterOutput
---@field rollout_batch_size? integer groups kept per step (32)
---@field n_samples_per_prompt? integer (8)
---@field over_sampling_batch_size? integer groups submitted at a time (rollout_batch_size)
---@field rollout_temperature? number
---@field rollout_top_p? number
---@field rollout_top_k? integer
---@field rollout_max_response_len? integer
---@field rollout_stop? string[]
---@field rollout_stop_token_ids? integer[]
---@field rollout_skip_special_tokens? boolean
---@field extra_sampling_params? table merged into every request's sampling_params
---@field deterministic? boolean per-sample sampling_seed = rollout_seed + i
---@field rollout_seed? integer (42)
---@field concurrency? integer requests in flight per engine (512)
---@field num_engines? integer (1)
---@field partial_rollout? boolean aborted groups go back to the data source and resume next step
---@field mask_offpolicy_in_partial_rollout? boolean
---@field retries? integer (60, 1 s apart: transport errors and 5xx)
---@field retry_interval? number
---@field request_timeout? number (3600)
---@field abort_retry_interval? number (3: an abort is sent again this often while an engine still holds requests; polled every 20-250 ms)
---@field on_engine_failure? fun(err: string): boolean after a failed request: true when the engines were gone and serve again (then tried again without counting a retry, at most 3 times)
---@field sample_hooks? fun(ro: rl.rollout.Rollout, sample: table, evaluation: boolean): table|nil | function[]
---@field sample_filter? fun(ro: rl.rollout.Rollout, groups: table[][])
---@field all_samples_process? fun(ro: rl.rollout.Rollout, all_groups: table[][], data: table)
---@field custom_generate? fun(ro: rl.rollout.Rollout, sample: table, params: table, evaluation: boolean): table|table[]
---@field eval_datasets? rl.rollout.EvalDataset[]
---@field save_debug_rollout_data? string rl.dump path template, e.g. "dump/rollout_{rollout_id}.pt"
---@field load_debug_rollout_data? string replay dumps instead of generating
---@field load_debug_rollout_data_subsample? number
---@field generate? fun(ro: rl.rollout.Rollout, sample: table, params: table, evaluation: boolean): table replaces the step
---@field generate_and_rm? function replaces the step
---@field generate_and_rm_group? function replaces the step

---@class rl.rollout.FilterOutput
---@field keep boolean
---@field reason? string
---@field keep_when_insufficient? boolean

---@class rl.rollout.EvalDataset
---@field name string
---@field data table an rl.data source (every prompt is used once, in file order)
---@field n_samples_per_eval_prompt? integer
---@field temperature? number
---@field top_p? number
---@field top_k? integer
---@field max_response_len? integer
---@field reward? string|function

---@class rl.rollout.Rollout
---@field aborted boolean
---@field counters table
---@field last_rollout_time number seconds of the last generate_rollout
---@field last_generate_error? string the error of the last sample whose generation failed
local Rollout = {}

---@param rollout_id integer
---@param opts? {data?: table}
---@return table[][] groups
---@return table<string, number> metrics
---@return table[][] aborted
function Rollout:generate_rollout(rollout_id, opts) end

---@param group table[]
---@param params table
---@param evaluation? boolean
---@return table[]
function Rollout:generate_and_rm_group(group, params, evaluation) end

---@return table sample
function Rollout:generate_and_rm(sample, params, evaluation) end

---@return table sample
function Rollout:generate(sample, params, evaluation) end

--- Encodes the sample's prompt into sample.tokens once (chat template for message lists).
---@return integer[] tokens
function Rollout:tokenize_prompt(sample) end

--- One /generate from sample.tokens as they stand with params as given; the output ids
--- and log-probs go to on_output(ids, logprobs, meta_info, text), default append_response.
---@param on_output? fun(ids: integer[], logprobs: number[], meta: table, text: string)
---@return table sample
function Rollout:generate_call(sample, params, on_output) end

---@return table[][] aborted groups
function Rollout:abort(rollout_id, done_queue) end

---@return table<string, {rewards: any[], truncated: boolean[], samples: table[], n_samples_per_prompt: integer}> results
---@return table<string, number> metrics eval/<name>, eval/<name>-pass@k, ...
function Rollout:eval(rollout_id, datasets) end
--- An eval pass's results (the built-in's or a hook's) dumped when asked, and their eval/ metrics.
---@return table results
---@return table<string, number> metrics
function Rollout:finish_eval(rollout_id, results) end

---@return table sampling params
function Rollout:sampling_params(overrides) end

---@return string[]
function Rollout:worker_urls() end

---@class rl.rollout
---@field Rollout rl.rollout.Rollout
---@field filters rl.rollout.filters
---@field metrics rl.rollout.metrics
---@field train_data rl.rollout.train_data
rl.rollout = {}

---@class rl.rollout.SleepOptions
---@field interval? number seconds between "rollout sleep for N hours" lines (3600)
---@field duration? number return "duration" after this many seconds (default: never)
---@field stop? fun(): boolean polled every `poll` seconds; true returns "stopped"
---@field poll? number (1)
---@field router_url? string logged at the start
---@field workers? string[] logged at the start
---@field log? fun(line: string) instead of rl.log.info

--- slime's sleep_rollout: keeps engines and router up and idle until Ctrl-C
--- ("interrupted"), stop() ("stopped") or `duration` ("duration").
---@param opts? rl.rollout.SleepOptions
---@return "interrupted"|"stopped"|"duration"
function rl.rollout.sleep(opts) end

---@param opts rl.rollout.Options
---@return rl.rollout.Rollout
function rl.rollout.new(opts) end

--- sglang_generate end attrs: slime's meta attrs + router and engine phases.
---@return table
function rl.rollout.generate_trace_attrs(meta, info) end

---@class rl.rollout.filters
--- rl.rollout.stream: continuous generation (fully asynchronous RL): at most `capacity`
--- groups held (generating, done, or taken by a step not synced yet).
---@class rl.rollout.Stream
local Stream = {}
--- Starts the producer for steps from rollout_id on (default 0).
---@param rollout_id integer|nil
function Stream:start(rollout_id) end
--- n groups once n are eligible under the policy, and the step's rollout/ and async/ metrics.
---@param rollout_id integer
---@param n integer
---@return table[][] groups, table metrics
function Stream:take(rollout_id, n) end
--- The engines now run version index v (one per sync): taken groups free their places.
---@param v integer
function Stream:set_version(v) end
--- The data's state with every held group not trained put back first.
---@param trained boolean|nil the groups of the step in flight are trained
---@return table
function Stream:data_state(trained) end
--- Seconds no group was generating since the last call.
---@return number
function Stream:idle_time() end
--- Stops the producer and cancels the groups in flight.
---@param reason string|nil
function Stream:stop(reason) end
rl.rollout.stream = {}
---@param ro rl.Rollout
---@param opts {capacity: integer, max_staleness: integer, policy: "wait"|"drop"|"keep"|nil, data: rl.data.Source|nil}
---@return rl.rollout.Stream
function rl.rollout.stream.new(ro, opts) end

rl.rollout.filters = {}
---@return rl.rollout.FilterOutput
function rl.rollout.filters.nonzero_std(ro, group) end
---@return rl.rollout.FilterOutput
function rl.rollout.filters.nonzero_std_with_fallback(ro, group) end
---@return function
function rl.rollout.filters.get(name) end

---@class rl.rollout.metrics
rl.rollout.metrics = {}
---@return {mean: number, median: number, max: number, min: number}|nil
function rl.rollout.metrics.statistics(values) end
---@return table<string, number>
function rl.rollout.metrics.from_samples(samples, opts) end
---@return table<string, number>
function rl.rollout.metrics.perf_from_samples(samples, rollout_time, opts) end
---@return table<string, number>
function rl.rollout.metrics.rollout_metrics(rollout_id, samples, rollout_time, extra, opts) end
---@return number
function rl.rollout.metrics.pass_at_k(rewards, n, k) end
---@return table<string, number>
function rl.rollout.metrics.eval_metrics(results, rollout_id, opts) end
--- slime's has_repetition: over 10000 characters, the last 10000 compressing more than 10x (zlib, level 9).
---@return boolean
function rl.rollout.metrics.has_repetition(text) end
--- pass@k (k = 1, 2, 4, ... <= n) over the groups of n samples: {["pass@1"] = ..., ...}.
---@return table<string, number>
function rl.rollout.metrics.passrate(samples, n, reward_key) end
--- str(round(x, 1)) as Python writes it (zero_std/count_<r> keys).
---@return string
function rl.rollout.metrics.round1(x) end

---@class rl.rollout.TrainBatch
---@field size integer
---@field tokens integer[][]
---@field response_lengths integer[]
---@field total_lengths integer[]
---@field rewards number[]
---@field raw_reward number[]
---@field truncated integer[]
---@field sample_indices integer[]
---@field group_indices integer[]
---@field rollout_ids integer[]
---@field loss_masks integer[][]
---@field rollout_log_probs? number[][]
---@field advantage_estimator? string the estimator the rewards were normalised for (the trainer checks it)

---@class rl.rollout.train_data
rl.rollout.train_data = {}
---@param samples table
---@param opts? {estimator?: string|function, normalize_group?: fun(rewards: number[], estimator: string): number[], normalize?: boolean, std?: boolean, reward_key?: string, global_batch_size?: integer}
---@return rl.rollout.TrainBatch
---@return table<string, number> metrics
function rl.rollout.train_data.convert(samples, opts) end
--- Strided split (rank r: rows r, r + ranks, ...) with opts.balance == false, else balanced by length.
---@param opts? {balance?: boolean}
---@return rl.rollout.TrainBatch[]
function rl.rollout.train_data.split(batch, ranks, opts) end
--- A batch from slime's --custom-convert-samples-to-train-data-path dict, checked and completed.
---@return rl.rollout.TrainBatch
---@return table<string, number> metrics
function rl.rollout.train_data.from_hook(dict, samples, what) end
---@return integer[][] parts
---@return number[] sums
function rl.rollout.train_data.balanced_partitions(lengths, parts) end
---@return rl.rollout.TrainBatch
function rl.rollout.train_data.select(batch, idx) end
