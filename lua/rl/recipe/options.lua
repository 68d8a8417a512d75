--- rl.recipe.options: slime's command-line flags of a GRPO job, as an rl.args spec.
--
--   local opt = rl.args(rl.recipe.options { description = "GRPO on GSM8K" })
--
-- Names and meanings are slime's (kebab-case on the command line). Defaults left nil
-- here are chosen by rl.recipe.setup from the model: the embedded default model gets
-- settings that learn on 2 CPU cores in minutes, a real checkpoint gets slime's.
local M = {}

local TRAINER_FLAGS = require("rl.trainer.options").flags({
  "advantage_estimator", "kl_coef", "use_kl_loss", "kl_loss_coef", "kl_loss_type", "entropy_coef",
  "calculate_per_token_loss", "eps_clip", "eps_clip_high", "lr", "weight_decay", "clip_grad", "bf16",
  "micro_batch_size", "max_tokens_per_gpu", "old_logprobs", "use_tis", "tis_mode", "tis_clip_low", "tis_clip",
  "train_backend", "eps_clip_c", "use_unbiased_kl", "loss_type", "use_rollout_logprobs", "normalize_advantages",
  "min_lr", "adam_beta1", "adam_beta2", "adam_eps", "lr_decay_style", "lr_warmup_iters", "lr_decay_iters",
  "use_opd", "opd_kl_coef", "lora_rank", "lora_alpha", "target_modules",
  "recompute_granularity", "recompute_method", "recompute_num_layers",
  "gamma", "use_critic", "critic_lr", "value_clip", "lambd", "num_critic_only_steps",
}, {
  kl_loss_type = { default = "low_var_kl" },
  lr = { no_default = true, help = "learning rate (default: 2e-4 default model, 1e-6 otherwise)" },
  micro_batch_size = { no_default = true, help = "samples per micro-batch (default 16)" },
  max_tokens_per_gpu = { no_default = true },
  eps_clip_high = { help = "upper clip (default: --eps-clip)" },
})

local FLAGS = {
  -- model and data
  { name = "hf_checkpoint", type = "string", help = "HF model directory (Qwen2.5/Qwen3/Llama); default: the embedded math model" },
  { name = "critic_load", type = "string",
    help = "--use-critic: the value model's initial decoder, a HF directory of the policy's shape (default: --hf-checkpoint)" },
  { name = "prompt_data", type = "string", help = "training prompts (.jsonl/.json/.parquet); default: the default model's problems" },
  { name = "input_key", type = "string", default = "question", help = "prompt field of a row" },
  { name = "label_key", type = "string", default = "answer", help = "label field of a row" },
  { name = "tool_key", type = "string", default = "tools", help = "tool schemas of a row (a list or JSON text)" },
  { name = "apply_chat_template", type = "bool", default = true, help = "format prompts with the tokenizer's chat template" },
  { name = "rm_type", type = "string",
    help = "a built-in reward in place of the recipe's: math, deepscaler, dapo, gsm8k, random, boxed_<type> (a sample's metadata.rm_type wins)" },
  { name = "custom_rm_path", type = "string",
    help = "the reward in place of the recipe's: FILE.lua[:FUNCTION] or MODULE.FUNCTION (FUNCTION default reward)" },
  { name = "reward_key", type = "string", help = "field of a table reward to train on (dapo: score)" },
  { name = "rollout_shuffle", type = "bool", default = true, help = "shuffle --prompt-data each epoch, in slime's order for --rollout-seed" },
  { name = "rollout_seed", type = "int", default = 42, help = "seed of the prompt order and the sampling" },
  { name = "metadata_key", type = "string", default = "metadata", help = "metadata field of a row (sample.metadata)" },
  { name = "num_epoch", type = "int",
    help = "passes over --prompt-data when --num-rollout is not given: num_rollout = rows // --rollout-batch-size × this" },
  -- rollout
  { name = "rollout_function", choices = { "default", "sleep" }, default = "default",
    help = "default: generate and train; sleep: keep engines and router up and idle (profiling, load tests)" },
  { name = "rollout_batch_size", type = "int", help = "prompts per rollout step (default 16)" },
  { name = "n_samples_per_prompt", type = "int", default = 8, help = "responses per prompt (the GRPO group)" },
  { name = "over_sampling_batch_size", type = "int", help = "prompts submitted at a time while filling the batch" },
  { name = "dynamic_sampling_filter", choices = { "nonzero_std", "none" }, default = "nonzero_std",
    help = "nonzero_std: drop groups whose rewards are all equal (the recipe's filter when it has one); none: keep all" },
  { name = "global_batch_size", type = "int", help = "samples per optimiser step (default: the whole rollout batch)" },
  { name = "num_rollout", type = "int", help = "rollout steps to run (default: from --num-epoch, else 100)" },
  { name = "use_dynamic_global_batch_size", type = "bool", default = false,
    help = "one optimiser step per rollout: the global batch is every sample collected (rounded down to a multiple "
      .. "of the data-parallel ranks)" },
  { name = "disable_rollout_trim_samples", type = "bool", default = false,
    help = "train on every sample, not a multiple of --global-batch-size (the last optimiser step is smaller)" },
  { name = "disable_rewards_normalization", type = "bool", default = false,
    help = "train on the raw rewards (no group mean subtracted)" },
  { name = "disable_grpo_std_normalization", type = "bool", default = false,
    help = "subtract the group mean only, no division by the group's std (Dr. GRPO)" },
  { name = "balance_data", type = "bool", default = false,
    help = "split a batch across data-parallel ranks balanced by sequence length (default: strided, i, i+N, ...)" },
  { name = "debug_rollout_only", type = "bool", default = false,
    help = "generate and log rollouts, never train or sync weights (rollout throughput, reward debugging)" },
  { name = "debug_train_only", type = "bool", default = false,
    help = "no engines: train on --load-debug-rollout-data's dumps (which implies this)" },
  { name = "load_debug_rollout_data_subsample", type = "number",
    help = "keep this share of each replayed step's samples (slime's: the first and last halves of the kept rows)" },
  { name = "log_reward_category", type = "string",
    help = "rollout/error_cat/<value>: the share of samples whose table reward has this field equal to <value>" },
  { name = "log_passrate", type = "bool", default = true,
    help = "pass@k of each step's groups (passrate/pass@k) and of eval sets (eval/<name>-pass@k); on by default "
      .. "in rlhost (slime: off)" },
  { name = "rollout_max_response_len", type = "int", help = "max new tokens per response (default: 128 default model, 1024 otherwise)" },
  { name = "rollout_temperature", type = "number", default = 1.0 },
  { name = "rollout_top_p", type = "number", default = 1.0 },
  { name = "rollout_top_k", type = "int", default = -1 },
  -- loss and optimiser: rl.trainer's own options (lua/rl/trainer/options.lua), with the
  -- recipe's defaults where they differ
  TRAINER_FLAGS,
  -- on-policy distillation (slime's --use-opd; rl.recipe.opd): --use-opd and --opd-kl-coef are the trainer's
  { name = "opd_type", choices = { "megatron", "sglang" },
    help = "where the teacher runs: megatron (in the trainer's process, --opd-teacher-load) or sglang (an engine: "
      .. "--opd-teacher-url or --opd-teacher-group)" },
  { name = "opd_teacher_load", type = "string", help = "the teacher's model directory (--opd-type megatron)" },
  { name = "opd_teacher_url", type = "string", help = "an engine or router serving the teacher (--opd-type sglang)" },
  { name = "opd_teacher_group", type = "string",
    help = "a frozen engine group of --sglang-config serving the teacher (--opd-type sglang)" },
  { name = "dist_timeout", type = "number", default = 1800,
    help = "seconds a data-parallel collective may wait (ranks > 0 wait through rank 0's rollout and eval)" },
  -- checkpoints, dumps, eval
  { name = "save", type = "string", help = "checkpoint directory (Megatron layout: iter_NNNNNNN/)" },
  { name = "save_interval", type = "int", help = "save every N rollout steps (and at the end)" },
  { name = "load", type = "string", help = "resume from this checkpoint directory (or iter_ directory)" },
  { name = "save_debug_rollout_data", type = "string", help = "dump each step's samples: a path with {rollout_id}" },
  { name = "load_debug_rollout_data", type = "string", help = "replay dumped steps instead of generating" },
  { name = "eval_interval", type = "int", help = "evaluate every N rollout steps (and before the first)" },
  { name = "eval_prompt_data", type = "list", of = "string",
    help = "NAME PATH [NAME PATH ...] (default: the default model's held-out problems)" },
  { name = "n_samples_per_eval_prompt", type = "int", default = 1 },
  { name = "eval_max_response_len", type = "int" },
  { name = "eval_temperature", type = "number", help = "(default: --rollout-temperature, as slime; 0 is greedy)" },
  { name = "eval_max_prompts", type = "int", help = "evaluate on the first N prompts of each eval set" },
  -- slime's hooks, each a Lua function (rl.recipe.hooks; docs/recipes.md#hooks)
  require("rl.recipe.hooks").flags(),
  -- engines
  { name = "num_engines", type = "int", help = "inference engines behind the router (default 1, or from --rollout-num-gpus)" },
  { name = "rollout_num_gpus", type = "int",
    help = "slime's: GPUs of all engines; engines = this / --rollout-num-gpus-per-engine (on the CPU: engines)" },
  { name = "rollout_num_gpus_per_engine", type = "int", default = 1,
    help = "slime's tensor-parallel size of an engine; rlhost's engines are one device each (1 only)" },
  { name = "sglang_router_ip", type = "string",
    help = "use the router already running at this address (with --sglang-router-port) instead of starting one" },
  { name = "sglang_router_port", type = "int", help = "the router's port (default: a free one)" },
  { name = "sglang_router_request_timeout_secs", type = "number", default = 14400,
    help = "seconds the router lets one request run" },
  { name = "router_prometheus_port", type = "int", help = "the router's metrics for Prometheus on this port (default: a free one)" },
  { name = "rollout_external", type = "bool", default = false,
    help = "train against engines started elsewhere (--rollout-external-engine-addrs); rlhost starts none" },
  { name = "rollout_external_engine_addrs", type = "list", of = "string",
    help = "HOST:PORT of each external engine (rlhost engines, vLLM, or any SGLang-API server)" },
  { name = "router_policy", type = "string", default = "cache_aware",
    help = "slime's --router-policy: how the router spreads requests over engines (round_robin, random, least_load, "
      .. "power_of_two, cache_aware, consistent_hashing; docs/router.md)" },
  { name = "rollout_num_gpus_per_node", type = "int",
    help = "slime's: engines on every host of a multi-host job (each host's first rank starts them; rank 0's router "
      .. "fronts them all; on the CPU it counts engines). Default: engines on rank 0's host only" },
  { name = "remote_weight_sync", choices = { "distributed", "disk", "http" }, default = "distributed",
    help = "how other hosts' engines get the weights: distributed (one c10d broadcast; when it fails, files from "
      .. "--remote-weights-dir if given, else http), disk (always files from --remote-weights-dir) or http (always "
      .. "safetensors POSTed to each engine, the admin token in the header: no shared filesystem, no c10d group)" },
  { name = "remote_weights_dir", type = "string",
    help = "a directory every host reads (a shared filesystem) for the files fallback of the remote weight sync, and "
      .. "for the weights of --rollout-external engines on other machines" },
  { name = "remote_weight_sync_timeout", type = "number", default = 120,
    help = "seconds a weight sync to other hosts' engines may take by each method (the c10d group's timeout, each "
      .. "request's): an engine that stalls in it costs about this much before the fallback" },
  { name = "host_lost_timeout", type = "number", default = 60,
    help = "seconds without a heartbeat from another host's engines before the run ends (--rollout-num-gpus-per-node)" },
  { name = "engine_mode", choices = { "thread", "process" }, default = "thread",
    help = "thread: engines in this process (weights handed over in memory); process: child processes" },
  { name = "rollout_backend", choices = { "native", "vllm" }, default = "native",
    help = "native: rlhost's engines; vllm: vLLM servers (scripts/install_vllm.sh; --vllm-<flag> V passes --<flag> V)" },
  { name = "vllm_python", type = "string", help = "python with vLLM (default $RLHOST_VLLM_PYTHON, else ~/.cache/rlhost/vllm-venv)" },
  { name = "check_weight_update_equal", type = "bool", default = false,
    help = "after each weight sync, check every engine's log-probs of a sampled response against the trainer's" },
  { name = "check_weight_update_tolerance", type = "number", default = 1e-3,
    help = "largest |engine - trainer| log-prob --check-weight-update-equal accepts" },
  { name = "max_running_requests", type = "int",
    help = "sequences an engine decodes at once (default: 256 default model, the engine's 64 otherwise)" },
  { name = "threads", type = "int", help = "LibTorch threads (default: the machine's cores)" },
  -- placement (docs/recipes.md#placement)
  { name = "engine_cpus", type = "string",
    help = "pin each engine process to these CPUs (\"0-3,6\"; --engine-mode process, or vLLM's OpenMP threads)" },
  { name = "engine_nice", type = "int",
    help = "engine processes' CPU priority (nice; 19 on a small CPU machine: engines and trainer share every core, "
      .. "the engines run on what the trainer leaves idle; --engine-mode process)" },
  { name = "trainer_cpus", type = "string",
    help = "run the trainer's compute (its thread and LibTorch's) on these CPUs; with --engine-cpus, engines and "
      .. "trainer on separate cores (the event loop is left to the scheduler)" },
  { name = "device", type = "string", default = "auto",
    help = "the trainer's device: auto (the first GPU when there is one, else cpu), cpu, cuda, cuda:N" },
  { name = "rollout_device", type = "string",
    help = "the engines' device (default: the trainer's, or the next GPU when there is one and no --colocate)" },
  { name = "sglang_config", type = "string",
    help = "engine groups (slime's server groups): a YAML, JSON or Lua file 'sglang: [{name, model_path, update_weights, "
      .. "backend, server_groups: [{worker_type, num_gpus, overrides}]}]'; each model gets its engines and router; backend "
      .. "native or vllm per model, whatever --rollout-backend says; worker_type regular, or prefill and decode "
      .. "(docs/recipes.md)" },
  { name = "prefill_num_servers", type = "int",
    help = "slime's prefill/decode disaggregation: the first N engines (of --num-engines) prefill, the rest decode; "
      .. "the router pairs one of each per request (native engines; docs/recipes.md)" },
  { name = "disaggregation_transfer_backend", choices = { "auto", "shm", "tcp" },
    help = "how a prefill engine hands the KV cache to a decode engine (default: the engine's, auto)" },
  { name = "colocate", type = "bool", default = false,
    help = "slime's: the engines share the trainer's device (--device) and release weights and KV cache while it steps (--offload-rollout)" },
  { name = "offload_rollout", type = "bool",
    help = "release the engines' weights and KV cache while training, resume them around the weight sync" },
  { name = "offload_rollout_level", type = "list", of = "string", default = { "kv_cache", "weight" },
    help = "what --offload-rollout releases: kv_cache, weight" },
  -- fault tolerance (slime's flags; docs/fault_tolerance.md)
  { name = "use_fault_tolerance", type = "bool", default = false,
    help = "probe the engines; restart a dead or stuck one, refit it and put it back in the router" },
  { name = "rollout_health_check_interval", type = "number", default = 30, help = "seconds between probes" },
  { name = "rollout_health_check_timeout", type = "number", default = 30,
    help = "seconds a probe may take; two failed probes in a row: the engine is dead" },
  { name = "rollout_health_check_first_wait", type = "number", default = 0,
    help = "seconds after an engine (re)starts before its first probe" },
  { name = "fault_injection", type = "string",
    help = "drills: ACTION:[GROUP:]ENGINE:STEP[:DELAY_S | :sync],... (kill or stop engine ENGINE of GROUP, default "
      .. "the policy's, DELAY_S s into rollout STEP; e.g. kill:2:2, kill:ref:1:2)" },
  -- failure budgets and the bounded stop (docs/operations.md)
  { name = "reward_timeout", type = "number", default = 30,
    help = "seconds a reward may run, waiting or computing (a busy loop too); past it the sample fails (timeout)" },
  { name = "hook_timeout", type = "number", default = 30,
    help = "seconds a recipe hook (dynamic filter, normalisation, sample hook) may run before it is interrupted" },
  { name = "max_failed_share", type = "number", default = 0.5,
    help = "a step fails once more than this share of its samples failed (reward, generation, environment): of the "
      .. "batch's samples while fewer have finished, of those finished after; 1: off" },
  { name = "max_failed_samples", type = "int", default = 0,
    help = "a step fails at this many failed samples (0: no count limit)" },
  { name = "max_busy_timeouts", type = "int", default = 2,
    help = "a step fails once this many rewards ran Lua code for their whole --reward-timeout (each one holds every "
      .. "other sample and request meanwhile; 0: off)" },
  { name = "over_sampling_limit", type = "number", default = 10,
    help = "a step draws at most this many × --rollout-batch-size prompts; a batch still not full then fails the step, "
      .. "naming the dynamic filter's drops" },
  { name = "stop_grace", type = "number", default = 10,
    help = "seconds the step in flight has after the first SIGTERM or Ctrl-C; then its work is aborted, the last "
      .. "completed step saved and every child stopped; the process exits at the latest 2 × this after the signal" },
  { name = "on_save_failure", choices = { "stop", "continue" }, default = "stop",
    help = "a checkpoint that cannot be written (a full disk) leaves the last good one intact; stop: end the run with "
      .. "status 1; continue: train on and try again at the next save" },
  { name = "hang_timeout", type = "number", default = 1800,
    help = "no sample, request or training step for this many seconds: log a hang report (rl.watchdog; 0: off)" },
  { name = "metrics_port", type = "int",
    help = "serve the step metrics for Prometheus at http://127.0.0.1:PORT/metrics (0: a free port)" },
  { name = "progress", type = "bool", default = true, help = "progress bars for rollout and training" },
  -- a slime launch script's Megatron, Ray and W&B flags: accepted, each logged as not applicable
  require("rl.recipe.slime_flags").flags(),
}

--- Appends the flags to `spec` (skipping names it already declares), then the
--- metrics flags of rl.metrics.add_options; returns the spec.
function M.add(spec)
  spec = spec or {}
  local have = {}
  for _, o in ipairs(spec) do if type(o) == "table" and o.name then have[o.name] = true end end
  local function add(o)
    if o[1] then for _, x in ipairs(o) do add(x) end return end   -- a spliced list
    if not have[o.name] then spec[#spec + 1] = o end
  end
  for _, o in ipairs(FLAGS) do add(o) end
  -- vime's pass-through: --vllm-<flag> V reaches the vLLM servers as --<flag> V (opt.vllm_args)
  spec.passthrough = spec.passthrough or {}
  spec.passthrough.vllm = spec.passthrough.vllm or "vllm_args"
  -- slime's --sglang-<x> server tuning and --wandb-<x>: accepted, logged as not applicable
  for pfx, p in pairs(require("rl.recipe.slime_flags").PASSTHROUGH) do
    spec.passthrough[pfx] = spec.passthrough[pfx] or p.key
  end
  return require("rl.metrics").add_options(spec)
end

return M
