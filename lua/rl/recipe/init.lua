--- rl.recipe: the plumbing of a GRPO job, so that a recipe reads like the algorithm.
--
--   local opt = rl.args(rl.recipe.options { description = "GRPO on GSM8K" })
--   local job = rl.recipe.setup(opt, { reward = "gsm8k" })
--   for step = job.start_rollout, opt.num_rollout - 1 do ... end
--   job:finish()
--
-- setup resolves the model (a real checkpoint, or the embedded default model built
-- and cached on first use), loads prompts and eval sets, starts engines behind a
-- router, makes or resumes the trainer, configures the metric sinks and builds the
-- rollout. The job also keeps the step's timers, checkpoints and the final summary
-- (lua/rl/recipe/job.lua).
local rl = require "rl"
local log = require "rl.log"

local M = {}

M.options = require("rl.recipe.options").add
M.async = require "rl.recipe.async"   -- one-step-off: the next rollout while this step trains

local REAL_RUN = "rlhost recipes/grpo_gsm8k.lua --hf-checkpoint /models/Qwen2.5-0.5B-Instruct "
  .. "--prompt-data /data/gsm8k/train.jsonl --input-key question --label-key answer --lr 1e-6 "
  .. "--rollout-max-response-len 1024"

local function exists(path)
  local f = io.open(path, "rb")
  if f then f:close() end
  return f ~= nil
end

local function nproc()
  local p = io.popen("nproc 2>/dev/null")
  local n = p and tonumber(p:read("*l"))
  if p then p:close() end
  return n or 2
end

-- What each numeric flag may be, checked after the defaults are filled in: a value
-- out of range is a usage error naming the flag (exit 2), never a traceback or a run
-- that misbehaves later (a save interval of 0, a NaN learning rate from 1e999 - 1e999).
-- {flag, kind, lo, hi, hint}: kind "int" or "number" (finite); lo/hi inclusive; lo_open: > lo.
local NUMERIC = {
  { "rollout_batch_size", "int", 1 }, { "n_samples_per_prompt", "int", 1 }, { "num_rollout", "int", 1 },
  { "rollout_max_response_len", "int", 1 }, { "num_engines", "int", 1 }, { "micro_batch_size", "int", 1 },
  { "threads", "int", 1 }, { "global_batch_size", "int", 1 }, { "over_sampling_batch_size", "int", 1 },
  { "save_interval", "int", 1 }, { "eval_interval", "int", 1 }, { "n_samples_per_eval_prompt", "int", 1 },
  { "eval_max_response_len", "int", 1 }, { "eval_max_prompts", "int", 1 }, { "max_running_requests", "int", 1 },
  { "max_tokens_per_gpu", "int", 1 }, { "rollout_top_k", "int", -1 }, { "rollout_seed", "int", 0 },
  { "metrics_port", "int", 0, 65535 }, { "num_epoch", "int", 1 }, { "rollout_num_gpus", "int", 1 },
  { "rollout_num_gpus_per_engine", "int", 1 }, { "sglang_router_port", "int", 1, 65535 },
  { "prefill_num_servers", "int", 1, nil },
  { "sglang_router_request_timeout_secs", "number", 0, nil, lo_open = true },
  { "load_debug_rollout_data_subsample", "number", 0, 1, lo_open = true },
  { "rollout_temperature", "number", 0 }, { "eval_temperature", "number", 0 },
  { "rollout_top_p", "number", 0, 1, lo_open = true }, { "lr", "number", 0, nil, lo_open = true },
  { "weight_decay", "number", 0 }, { "clip_grad", "number", 0 }, { "eps_clip", "number", 0 },
  { "eps_clip_high", "number", 0 }, { "kl_coef", "number", 0 }, { "kl_loss_coef", "number", 0 },
  { "entropy_coef", "number" }, { "dist_timeout", "number", 0, nil, lo_open = true },
  { "critic_lr", "number", 0 }, { "value_clip", "number", 0 }, { "lambd", "number", 0, 1 }, { "gamma", "number", 0, 1 },
  { "num_critic_only_steps", "int", 0 },
  { "check_weight_update_tolerance", "number", 0 }, { "host_lost_timeout", "number", 0, nil, lo_open = true },
  { "remote_weight_sync_timeout", "number", 0, nil, lo_open = true }, { "rollout_health_check_first_wait", "number", 0 },
  { "rollout_health_check_interval", "number", 0, nil, lo_open = true },
  { "rollout_health_check_timeout", "number", 0, nil, lo_open = true }, { "engine_nice", "int", 0, 19 },
}

local function check_numbers(opt)
  for _, r in ipairs(NUMERIC) do
    local k, kind, lo, hi = r[1], r[2], r[3], r[4]
    local v = opt[k]
    if type(v) == "number" then
      local flag = "--" .. k:gsub("_", "-")
      local bad = v ~= v or v == math.huge or v == -math.huge or (kind == "int" and v % 1 ~= 0)
        or (lo and (v < lo or (r.lo_open and v == lo))) or (hi and v > hi)
      if bad then
        local what = kind == "int" and "an integer" or "a finite number"
        local want = what
        if lo and hi then want = ("in %s%s, %s]"):format(r.lo_open and "(" or "[", lo, hi)
        elseif lo then want = ("%s %s"):format(r.lo_open and ">" or ">=", lo) end
        rl.args.usage_error(("%s must be %s (%s; got %s)"):format(flag, want, what, tostring(v)))
      end
    end
  end
  local h = opt.hang_timeout
  if type(h) == "number" and (h ~= h or h < 0 or (h > 0 and h < 1) or h == math.huge) then
    rl.args.usage_error(("--hang-timeout must be 0 (off) or at least 1 second (got %s)"):format(tostring(h)))
  end
end

-- Defaults that depend on the model: the default model learns on 2 CPU cores in
-- minutes with these; a real checkpoint gets slime's.
local function fill_defaults(opt, default_model, world_size)
  local function def(k, v) if opt[k] == nil then opt[k] = v end end
  require("rl.recipe.slime_flags").check(opt)   -- slime's engine-count, debug, external and router flags
  def("rollout_batch_size", 16)
  -- default model: two optimiser steps per rollout (PPO clipping acts on the second)
  def("global_batch_size", default_model and math.floor(opt.rollout_batch_size * opt.n_samples_per_prompt / 2) or nil)
  -- default model: twice the prompts per sampling round, so one round usually fills the batch
  def("over_sampling_batch_size", default_model and 2 * opt.rollout_batch_size or opt.rollout_batch_size)
  def("rollout_max_response_len", default_model and 128 or 1024)
  def("eval_max_response_len", opt.rollout_max_response_len)
  def("eval_temperature", opt.rollout_temperature)  -- slime: eval_temperature falls back to rollout_temperature
  def("lr", default_model and 2e-4 or 1e-6)
  def("micro_batch_size", 16)
  -- the cores shared by this host's ranks (torchrun's and srun's LOCAL_WORLD_SIZE across hosts)
  local local_ranks = tonumber(os.getenv("LOCAL_WORLD_SIZE") or "") or world_size
  def("threads", math.max(1, math.floor(nproc() / math.max(local_ranks, 1))))
  -- the default model is tiny: a whole rollout batch decodes in one wave
  if default_model then def("max_running_requests", 256) end
  def("eval_interval", default_model and 10 or false)
  def("eval_max_prompts", false)
  if opt.n_samples_per_prompt == 1 and opt.dynamic_sampling_filter ~= "none" then
    -- a group of one has no spread for the filter to see (slime keeps every group by default)
    log.info("--n-samples-per-prompt 1: the dynamic sampling filter is off (a group of one has no reward spread)")
    opt.dynamic_sampling_filter = "none"
  end
  if opt.over_sampling_batch_size < opt.rollout_batch_size then
    rl.args.usage_error(("--over-sampling-batch-size (%d) must be >= --rollout-batch-size (%d)"):format(
      opt.over_sampling_batch_size, opt.rollout_batch_size))
  end
  check_numbers(opt)
  M.check_critic(opt)
  M.check_limits(opt)
  require("rl.recipe.hosts").check_options(opt)   -- --rollout-num-gpus-per-node
  require("rl.recipe.opd").check_options(opt)     -- --use-opd
  if opt.engine_cpus and opt.engine_mode ~= "process" and opt.rollout_backend ~= "vllm" then
    rl.args.usage_error("--engine-cpus needs --engine-mode process (a thread engine runs in the trainer's process, "
      .. "its threads beside the trainer's)")
  end
  if opt.engine_nice and opt.engine_mode ~= "process" and opt.rollout_backend ~= "vllm" then
    rl.args.usage_error("--engine-nice needs --engine-mode process (a thread engine runs in the trainer's process, "
      .. "at its priority)")
  end
end

local function flag(k) return "--" .. k:gsub("_", "-") end

--- PPO's critic flags, checked together (a usage error naming the flag).
function M.check_critic(opt)
  local ppo = opt.advantage_estimator == "ppo"
  if ppo and not opt.use_critic then   -- slime's rule: ppo trains a critic
    log.info("--advantage-estimator ppo: a critic (value model) trains beside the policy, as slime's use_critic")
    opt.use_critic = true
  end
  if opt.use_critic and not ppo then
    rl.args.usage_error(("--use-critic trains a value model for --advantage-estimator ppo, but it is %s; add "
      .. "--advantage-estimator ppo or drop --use-critic"):format(tostring(opt.advantage_estimator)))
  end
  if opt.use_critic and opt.train_backend == "fsdp" then
    rl.args.usage_error("--use-critic does not work with --train-backend fsdp yet (the critic is not sharded); use "
      .. "--train-backend replicated")
  end
  if not opt.use_critic then
    for _, k in ipairs { "critic_load", "critic_lr", "num_critic_only_steps" } do
      local v = opt[k]
      if v ~= nil and not (k == "num_critic_only_steps" and v == 0) then
        rl.args.usage_error(flag(k) .. " needs --use-critic (and --advantage-estimator ppo)")
      end
    end
  end
end

--- The failure budgets and time limits, checked (a usage error naming the flag).
function M.check_limits(opt)
  for _, k in ipairs { "reward_timeout", "hook_timeout", "stop_grace", "over_sampling_limit" } do
    local v = opt[k]
    if v ~= nil and not (v > 0 and v < math.huge) then
      rl.args.usage_error(("%s must be a positive number of %s (got %s)"):format(flag(k),
        k == "over_sampling_limit" and "batches" or "seconds", tostring(v)))
    end
  end
  local share = opt.max_failed_share
  if share ~= nil and not (share > 0 and share <= 1) then
    rl.args.usage_error(("--max-failed-share must be in (0, 1] (got %s; 1 turns the share limit off)"):format(tostring(share)))
  end
  for _, k in ipairs { "max_failed_samples", "max_busy_timeouts" } do
    if opt[k] ~= nil and opt[k] < 0 then rl.args.usage_error(("%s must be >= 0 (got %d; 0: off)"):format(flag(k), opt[k])) end
  end
end

-- Prompts of `path`; `what` names the flag in errors. shuffle: each epoch's order is
-- slime's (random.Random(--rollout-seed + epoch).shuffle), used for the training prompts
-- under --rollout-shuffle; eval sets keep the file's order, as slime's do.
local function load_data(opt, path, tok, what, shuffle)
  -- A file rl.data cannot use (missing, not Parquet, no such column, ...) is a usage error
  -- naming the flag, not a traceback.
  local ok, ds = pcall(rl.data.load, path, { input_key = opt.input_key, label_key = opt.label_key,
    metadata_key = opt.metadata_key, tool_key = opt.tool_key,
    apply_chat_template = opt.apply_chat_template, tokenizer = tok, shuffle = shuffle or false,
    seed = opt.rollout_seed })
  if not ok then
    if type(ds) ~= "string" then error(ds, 0) end  -- a cancellation (Ctrl-C), not the file's fault
    rl.args.usage_error(("%s: %s"):format(what, ds))
  end
  return ds
end

-- --eval-prompt-data NAME PATH [NAME PATH ...] → rl.rollout eval datasets.
local function eval_sets(opt, job)
  local pairs_ = opt.eval_prompt_data
  if #pairs_ == 0 and job.default_model then pairs_ = { "heldout", job.model_dir .. "/data/test.jsonl" } end
  if #pairs_ % 2 ~= 0 then
    rl.args.usage_error("--eval-prompt-data takes NAME PATH pairs (got " .. #pairs_ .. " values)")
  end
  local sets = {}
  for i = 1, #pairs_, 2 do
    local ds = load_data(opt, pairs_[i + 1], job.tokenizer, "--eval-prompt-data " .. pairs_[i])
    if opt.eval_max_prompts and #ds.prompts > opt.eval_max_prompts then
      for j = #ds.prompts, opt.eval_max_prompts + 1, -1 do ds.prompts[j] = nil end
    end
    sets[#sets + 1] = { name = pairs_[i], data = ds, n_samples_per_eval_prompt = opt.n_samples_per_eval_prompt,
                        temperature = opt.eval_temperature, max_response_len = opt.eval_max_response_len }
  end
  return sets
end

-- A checkpoint to resume from: --load naming a save directory with
-- latest_checkpointed_iteration.txt, or an iter_ directory.
local function checkpoint_in(dir)
  if not dir then return nil end
  if exists(dir .. "/latest_checkpointed_iteration.txt") or exists(dir .. "/trainer_state.json") then return dir end
  return nil
end

-- --save (and the folder of --save-debug-rollout-data's files): a directory this run can
-- write, checked (and made) as the job starts rather than at its first save, after the
-- training that save was to keep.
local function check_save_dir(path, flag)
  flag = flag or "--save"
  local probe = path:gsub("/+$", "") .. ("/.rlhost-write-check-%d"):format(rl.process.pid())
  local f, err = io.open(probe, "wb")
  if not f then
    os.execute("mkdir -p -- '" .. path:gsub("'", "'\\''") .. "' 2>/dev/null")
    f, err = io.open(probe, "wb")
  end
  local ok, werr = f and f:write("x")
  if f then f:close(); os.remove(probe) end
  if not f or not ok then
    rl.args.usage_error(("%s %s: %s cannot be written there (%s) (hint: a directory this user can "
      .. "write, on a file system with room)"):format(flag, path, flag == "--save" and "checkpoints" or "files",
      tostring(err or werr):gsub("^.*: ", "")))
  end
end

-- --load that names nothing: an error, unless it is also --save's directory (the way to
-- resume a run where it stopped, or start it fresh the first time).
local function check_load_path(opt)
  local path = opt.load
  if not path or checkpoint_in(path) then return end
  local same = opt.save and (opt.save:gsub("/+$", "")) == (path:gsub("/+$", ""))
  if same then return end
  local f = io.open(path, "rb")
  if f then f:close() end
  rl.args.usage_error(("--load %s: %s (hint: a --save directory holding latest_checkpointed_iteration.txt, or one "
    .. "of its iter_NNNNNNN directories; give the same path to --load and --save to resume a run or start it "
    .. "fresh)"):format(path, f and "holds no checkpoint" or "no such file or directory"))
end

local function make_trainer(opt, job)
  if (opt.lora_rank or 0) > 0 then   -- the adapter travels to the engines by name (Engine:load_lora)
    local _, rerr = require("rl.engine.vllm").lora_rank(opt.lora_rank)
    if opt.rollout_backend == "vllm" and rerr then
      rl.args.usage_error(("--lora-rank %d with --rollout-backend vllm: %s"):format(opt.lora_rank, rerr))
    end
  end
  -- the trainer's declared loss and optimiser options the flags hold (rl.trainer.options)
  local loss, optimizer, critic, lora = require("rl.trainer.options").from_flags(opt)
  local topts = {
    loss = loss, optimizer = optimizer, gamma = opt.gamma, normalize_advantages = opt.normalize_advantages,
    -- --use-dynamic-global-batch-size: each batch is one optimiser step, whatever its size
    global_batch_size = not opt.use_dynamic_global_batch_size and opt.global_batch_size or nil,
    micro_batch_size = opt.micro_batch_size,
    max_tokens_per_gpu = opt.max_tokens_per_gpu, rollout_temperature = opt.rollout_temperature,
    old_logprobs = opt.old_logprobs, train_backend = opt.train_backend,
    kl_coef = opt.kl_coef ~= 0 and opt.kl_coef or nil, bf16 = opt.bf16 or nil, device = job.placement.trainer,
    use_opd = opt.use_opd or nil, opd_kl_coef = opt.use_opd and opt.opd_kl_coef or nil,
    use_rollout_logprobs = opt.use_rollout_logprobs or nil,
    recompute_granularity = opt.recompute_granularity,
    recompute_method = opt.recompute_granularity and opt.recompute_method or nil,
    recompute_num_layers = opt.recompute_granularity and opt.recompute_num_layers or nil,
  }
  for k, v in pairs(critic) do topts[k] = v end
  if (opt.lora_rank or 0) > 0 then for k, v in pairs(lora) do topts[k] = v end end
  local need_ref = opt.use_kl_loss or opt.kl_coef ~= 0
  local ckpt = checkpoint_in(opt.load)
  if ckpt then
    local tr, extra = rl.trainer.load(ckpt, topts)
    if not tr then rl.args.usage_error("--load " .. ckpt .. ": " .. tostring(extra)) end
    log.info(("resumed from %s: trainer step %d, next rollout %d"):format(ckpt, tr:step(), extra.next_rollout or 0))
    return tr, extra
  end
  if opt.load then log.info("--load " .. opt.load .. " holds no checkpoint yet: starting from " .. job.model_dir) end
  topts.model = job.model_dir
  topts.ref = need_ref and job.model_dir or nil
  topts.critic = opt.use_critic and (opt.critic_load or job.model_dir) or nil
  return rl.trainer.new(topts), nil
end

-- rl.engine.start's options from the flags (a group's backend, model and overrides go on top).
local function engine_options(opt, job)
  local eo = { model = job.model_dir, mode = opt.engine_mode, threads = opt.threads,
               max_running_requests = opt.max_running_requests, cpus = opt.engine_cpus,
               nice = opt.engine_nice }
  if opt.rollout_backend == "vllm" then   -- --vllm-<flag> V: vLLM's --<flag> V
    eo.backend, eo.vllm_args, eo.python = "vllm", opt.vllm_args, opt.vllm_python
  end
  eo.device = job.placement.engines
  return eo
end

local function start_engines(opt, job)
  -- engine groups (--sglang-config, else one from the flags): job.groups.<name>.url
  local groups, policy = require("rl.recipe.engines").start(opt, job, job.engine_opts)
  job.groups, job.policy_group = groups, policy
  if policy then opt.num_engines = #policy.engines end   -- the rollout's concurrency follows the policy's
  local router = (policy or groups[1]).router
  -- the router's metrics on a port of their own, as sglang-router's --prometheus-port (slime's --router-prometheus-port)
  local prom, perr = rl.http.serve { port = opt.router_prometheus_port or 0, threads = 2, handler = function(req)
    if req.path ~= "/metrics" then return { status = 404, body = "GET /metrics\n" } end
    local text, err = router:metrics()
    if not text then return { status = 502, body = "router metrics: " .. tostring(err) .. "\n" } end
    return { headers = { ["content-type"] = "text/plain; version=0.0.4" }, body = text }
  end }
  if not prom then rl.args.usage_error("--router-prometheus-port: " .. tostring(perr)) end
  job.router_prometheus = prom
  -- the line the seed's profiling script greps (slime's words)
  log.info("Router %s at %s, Prometheus port: %d", router.reused and "reused" or "launched",
    (router.url:gsub("^http://", "")), prom:port())
  return policy and policy.engines or {}, router
end

-- The reward: the recipe's (a function or an rl.rewards name, default gsm8k), else
-- slime's --rm-type (a built-in, per-sample metadata.rm_type first) or --custom-rm-path.
local function choose_reward(opt, setup_opts)
  local reward = setup_opts.reward or "gsm8k"
  if opt.rm_type then
    local ok, fn = pcall(rl.rewards.by_rm_type, opt.rm_type)
    if not ok then rl.args.usage_error("--rm-type: " .. tostring(fn):gsub("^[^:]*:%d+: ", "")) end
    reward = fn
  end
  -- slime's --custom-rm-path: FILE.lua[:FUNCTION] or MODULE.FUNCTION (FUNCTION default reward), reloadable
  if opt.custom_rm_path then reward = require("rl.recipe.hooks").load("custom_rm_path", opt.custom_rm_path, "reward") end
  return reward
end

-- The model: --hf-checkpoint, else the embedded default model (built once, by rank 0).
local function resolve_model(opt, job, setup_opts)
  if opt.hf_checkpoint then
    job.model_dir = opt.hf_checkpoint:gsub("/+$", "")
    if job.is_main then log.info(("GRPO on %s with prompts %s"):format(job.model_dir, tostring(opt.prompt_data))) end
    return
  end
  job.default_model = true
  if job.is_main then
    log.info("no --hf-checkpoint: running on the embedded default model (a small Llama trained by rlhost on "
      .. "generated GSM8K-format problems). The real run: " .. REAL_RUN)
    job.model_dir = rl.mathgen.default_model(setup_opts.default_model)
  end
  job.model_dir = rl.dist.broadcast_object(job.model_dir)
end

-- The tokenizer, the training prompts and the eval sets.
local function load_inputs(opt, job)
  local tok, err = rl.tokenizer.load(job.model_dir)
  if not tok then rl.args.usage_error("--hf-checkpoint: " .. tostring(err)) end
  local shape = require("rl._model_shape").read(job.model_dir)
  if shape and tok.vocab_size > shape.vocab then   -- ids the model has no embedding for: fail now, not mid-run
    rl.args.usage_error(("--hf-checkpoint %s: its tokenizer has %d tokens, more than the model's vocab_size %d "
      .. "(config.json) (hint: the tokenizer of another model?)"):format(job.model_dir, tok.vocab_size, shape.vocab))
  end
  job.tokenizer = tok
  job.data = require("rl.recipe.hooks").data_source(job.hooks, opt, tok)   -- --data-source-path
  if not job.data then
    local prompts = opt.prompt_data or (job.default_model and job.model_dir .. "/data/train.jsonl")
    if not prompts then rl.args.usage_error("--prompt-data is required with --hf-checkpoint (e.g. gsm8k/train.jsonl)") end
    job.data = load_data(opt, prompts, tok, "--prompt-data", opt.rollout_shuffle)
  end
  job.eval_datasets = eval_sets(opt, job)
  -- slime's get_num_rollout_per_epoch: --num-epoch passes over the prompts
  if opt.num_rollout == nil and opt.num_epoch then
    local size = job.data.size and job.data:size() or #(job.data.prompts or {})
    opt.num_rollout = math.floor(size / opt.rollout_batch_size) * opt.num_epoch
    if opt.num_rollout < 1 then
      rl.args.usage_error(("--num-epoch %d: %d prompts make no rollout of --rollout-batch-size %d (hint: a smaller "
        .. "batch, or --num-rollout)"):format(opt.num_epoch, size, opt.rollout_batch_size))
    end
    if job.is_main then log.info("--num-epoch %d: %d rollouts of %d prompts", opt.num_epoch, opt.num_rollout, size) end
  end
  if opt.num_rollout == nil then opt.num_rollout = 100 end
end

-- Engines behind routers, their health monitor and fault drills (none for a replay of
-- --load-debug-rollout-data); a resumed trainer's weights go to them at once.
local function start_serving(opt, job)
  if opt.load_debug_rollout_data then return end
  if opt.fault_injection and opt.use_fault_tolerance then   -- a drill naming no such group or engine: before any starts
    require("rl.recipe.faults").parse(opt.fault_injection, require("rl.recipe.engines").plan(opt, job))
  end
  job.engines, job.router = start_engines(opt, job)
  local hosts = require "rl.recipe.hosts"
  if hosts.role(opt) == "controller" then   -- the other hosts' engines, registered as they come
    job.hosts = hosts.controller(job.router, hosts.host_count() - 1,
      { lost_timeout = opt.host_lost_timeout, ready_timeout = opt.dist_timeout, method = opt.remote_weight_sync,
        files_dir = opt.remote_weights_dir, sync_timeout = opt.remote_weight_sync_timeout })
    -- an engine joins at once while the trainer holds the weights it loaded (no step yet;
    -- with LoRA, after the first sync: requests name the adapter it hands out)
    job.hosts:wait_ready(function() return not job.resumed and job.trainer:step() == 0 and not job.trainer:lora() end)
  end
  job.health = require("rl.recipe.health").from_options(opt, job)
  job.faults = require("rl.recipe.faults").from_options(opt, job)
  -- LoRA: the engines serve the trainer's adapter (requests name it) from the first rollout on
  if job.resumed or job.trainer:lora() then
    assert(job:with_trainer_ranks("sync", function()
      local r = assert(job.trainer:sync(job.engines))
      if job.hosts then job.hosts:sync(job.trainer, r.weight_version) end
      return r
    end))
  end
end

-- Metric sinks, the hang watchdog and the trainer's live /metrics (--metrics-port).
local function start_observing(opt, job)
  job.metrics = assert(rl.metrics.configure(opt))
  rl.watchdog.start { timeout = opt.hang_timeout, job = job,
                      dir = job.metrics.jsonl_path and job.metrics.jsonl_path:match("^(.*)/[^/]*$") or "." }
  if opt.metrics_port then   -- tools/prometheus.lua --trainer-url
    local srv, serr = rl.metrics.serve { port = opt.metrics_port }
    if not srv then rl.args.usage_error("--metrics-port " .. opt.metrics_port .. ": " .. tostring(serr)) end
    job.metrics_server = srv
    log.info("trainer metrics for Prometheus: " .. srv:url() .. "/metrics")
  end
end

local SETUP_ONLY = { reward = true, sample_hooks = true, dynamic_filter = true, default_model = true }

-- The rollout: slime's flags, the policy group's backend, the recipe's overrides.
local function make_rollout(opt, job, reward, setup_opts)
  local policy_backend = job.policy_group and job.policy_group.backend or opt.rollout_backend
  local ro_opts = {
    url = job.router and job.router.url, tokenizer = job.tokenizer, data = job.data, reward = reward,
    reward_key = opt.reward_key,
    -- the recipe's filter, else the library's by name; --dynamic-sampling-filter none turns either off
    dynamic_filter = opt.dynamic_sampling_filter ~= "none" and (setup_opts.dynamic_filter or opt.dynamic_sampling_filter)
      or nil,
    rollout_batch_size = opt.rollout_batch_size, n_samples_per_prompt = opt.n_samples_per_prompt,
    over_sampling_batch_size = opt.over_sampling_batch_size, rollout_max_response_len = opt.rollout_max_response_len,
    rollout_temperature = opt.rollout_temperature, rollout_top_p = opt.rollout_top_p, rollout_top_k = opt.rollout_top_k,
    rollout_seed = opt.rollout_seed, num_engines = opt.num_engines, eval_datasets = job.eval_datasets,
    -- the policy group's backend (--rollout-backend, or its --sglang-config entry's)
    backend = policy_backend == "vllm" and "vllm" or nil,
    weight_version = policy_backend == "vllm" and job.engines and job.engines[1] and job.engines[1].weight_version or nil,
    save_debug_rollout_data = opt.save_debug_rollout_data, load_debug_rollout_data = opt.load_debug_rollout_data,
    sample_hooks = job:sample_hooks(setup_opts.sample_hooks),
    -- --use-fault-tolerance: a request that finds the engines gone waits for their restart
    on_engine_failure = job.health and function() return job.health:await_engines() end or nil,
    reward_timeout = opt.reward_timeout, hook_timeout = opt.hook_timeout, max_failed_share = opt.max_failed_share,
    max_failed_samples = opt.max_failed_samples, max_busy_timeouts = opt.max_busy_timeouts,
    over_sampling_limit = opt.over_sampling_limit, load_debug_rollout_data_subsample = opt.load_debug_rollout_data_subsample,
    metric_options = job:metric_options(),
    lora_path = job.trainer and job.trainer:lora() and job.trainer.lora_name or nil,
  }
  for k, v in pairs(setup_opts) do
    if not SETUP_ONLY[k] then ro_opts[k] = v end
  end
  -- slime's hook flags (--rollout-function-path, ...) over the recipe's own
  for k, v in pairs(require("rl.recipe.hooks").rollout_overrides(job.hooks, opt)) do ro_opts[k] = v end
  return rl.rollout.new(ro_opts)
end

--- Sets the job up (see the module comment). setup_opts: reward (function or
--- rl.rewards name, default "gsm8k"), dynamic_filter (function or rl.rollout.filters
--- name, default --dynamic-sampling-filter's; off under --dynamic-sampling-filter none),
--- sample_hooks (extra hooks), default_model (options of rl.mathgen.default_model when
--- there is no --hf-checkpoint, e.g. {tools = true}), and any rl.rollout.new option to
--- override. Returns the job.
function M.setup(opt, setup_opts)
  local reloading = require("rl.reload").loading()
  if reloading then
    error(("rl.recipe.setup: called while rl.reload re-reads %s for its functions; the reload stops at "
      .. "rl.reload.inline(...), which this run did not reach (is the call inside a branch or a block comment?)")
      :format(reloading), 2)
  end
  setup_opts = setup_opts or {}
  local reward = choose_reward(opt, setup_opts)
  local job = setmetatable({ opt = opt, started = rl.now() }, require("rl.recipe.job").Job)
  job.hooks = require("rl.recipe.hooks").from_options(opt)   -- --rollout-function-path, ... (reloadable)
  if rl.dist.rank() == 0 then
    log.info("Args parsed: %s", require("rl.recipe.slime_flags").args_line(opt))   -- slime's first line
    require("rl.recipe.slime_flags").report(opt)   -- Megatron/Ray/W&B flags: not applicable, one line each
  end
  -- Data parallel (`rlhost --nproc N`, or torchrun's environment): rank 0 runs the
  -- engines, rollout, eval and checkpoints; every rank trains on its share.
  job.rank, job.world_size = rl.dist.rank(), rl.dist.world_size()
  job.is_main = job.rank == 0
  if job.world_size > 1 then rl.dist.init { timeout = opt.dist_timeout } end
  resolve_model(opt, job, setup_opts)
  fill_defaults(opt, job.default_model, job.world_size)
  check_load_path(opt)
  if opt.save and job.is_main then check_save_dir(opt.save) end
  local dump_dir = opt.save_debug_rollout_data and opt.save_debug_rollout_data:match("^(.*)/[^/]*$")
  if dump_dir and job.is_main and not dump_dir:find("{", 1, true) then
    check_save_dir(dump_dir, "--save-debug-rollout-data")
  end
  job.placement = require("rl.recipe.placement").resolve(opt)   -- --device, --rollout-device, --colocate
  if job.is_main and job.placement.trainer ~= "cpu" then log.info(require("rl.recipe.placement").describe(job.placement)) end
  if job.is_main and not opt.load_debug_rollout_data and not opt.rollout_external then   -- engines against the machine
    job.engine_opts = engine_options(opt, job)
    require("rl.recipe.engines").check_capacity(opt, job, job.engine_opts)
  end
  rl.torch.set_num_threads(opt.threads)
  rl.torch.manual_seed(opt.rollout_seed)
  load_inputs(opt, job)
  job.trainer, job.resumed = make_trainer(opt, job)
  if opt.trainer_cpus then   -- its helper thread and the LibTorch threads it starts; the event loop floats
    local ok, err = pcall(job.trainer.set_cpus, job.trainer, opt.trainer_cpus)
    if not ok then rl.args.usage_error("--trainer-cpus: " .. tostring(err):gsub("^.-set_cpus: ", "")) end
    log.info("trainer pinned to CPUs %s (%d LibTorch threads); engines on %s", opt.trainer_cpus, opt.threads,
      opt.engine_cpus or "any CPU")
  end
  if opt.engine_nice then
    log.info("engine processes at nice %d: they run on what the trainer (%d LibTorch threads) leaves idle",
      opt.engine_nice, opt.threads)
  end
  if not job.is_main and require("rl.recipe.hosts").role(opt) == "host" then   -- this host's engines
    job.node = require("rl.recipe.hosts").host(engine_options(opt, job), opt.rollout_num_gpus_per_node)
  end
  if job.is_main then   -- a training rank's whole loop is job:train_worker()
    if job.resumed and job.resumed.data then job.data:load_state(job.resumed.data) end
    job.start_rollout = job.resumed and job.resumed.next_rollout or 0
    start_serving(opt, job)
    job.opd = require("rl.recipe.opd").new(opt, job)   -- --use-opd: the teacher
    start_observing(opt, job)
    job.rollout = make_rollout(opt, job, reward, setup_opts)
  end
  job:on_interrupt()
  M.current = job   -- for `rlhost attach`: rl.recipe.current.last_batch, :pause(), ...
  return job
end

return M
