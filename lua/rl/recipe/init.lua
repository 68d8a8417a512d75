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

-- Defaults that depend on the model: the default model learns on 2 CPU cores in
-- minutes with these; a real checkpoint gets slime's.
local function fill_defaults(opt, default_model, world_size)
  local function def(k, v) if opt[k] == nil then opt[k] = v end end
  def("rollout_batch_size", 16)
  -- default model: two optimiser steps per rollout (PPO clipping acts on the second)
  def("global_batch_size", default_model and math.floor(opt.rollout_batch_size * opt.n_samples_per_prompt / 2) or nil)
  -- default model: twice the prompts per sampling round, so one round usually fills the batch
  def("over_sampling_batch_size", default_model and 2 * opt.rollout_batch_size or opt.rollout_batch_size)
  def("rollout_max_response_len", default_model and 128 or 1024)
  def("eval_max_response_len", opt.rollout_max_response_len)
  def("eval_temperature", opt.rollout_temperature)  -- slime: eval_temperature falls back to rollout_temperature
  def("lr", default_model and 2e-4 or 1e-6)
  def("eps_clip_high", opt.eps_clip)
  def("micro_batch_size", 16)
  def("threads", math.max(1, math.floor(nproc() / world_size)))   -- the cores shared by the local ranks
  -- the default model is tiny: a whole rollout batch decodes in one wave
  if default_model then def("max_running_requests", 256) end
  def("eval_interval", default_model and 10 or false)
  def("eval_max_prompts", false)
  if opt.over_sampling_batch_size < opt.rollout_batch_size then
    rl.args.usage_error(("--over-sampling-batch-size (%d) must be >= --rollout-batch-size (%d)"):format(
      opt.over_sampling_batch_size, opt.rollout_batch_size))
  end
  for _, k in ipairs { "rollout_batch_size", "n_samples_per_prompt", "num_rollout", "rollout_max_response_len",
                       "num_engines", "micro_batch_size", "threads" } do
    if opt[k] < 1 then rl.args.usage_error(("--%s must be >= 1 (got %d)"):format(k:gsub("_", "-"), opt[k])) end
  end
end

-- Prompts of `path`; `what` names the flag in errors. shuffle: each epoch's order is
-- slime's (random.Random(--rollout-seed + epoch).shuffle), used for the training prompts
-- under --rollout-shuffle; eval sets keep the file's order, as slime's do.
local function load_data(opt, path, tok, what, shuffle)
  local ds, err = rl.data.load(path, { input_key = opt.input_key, label_key = opt.label_key,
    apply_chat_template = opt.apply_chat_template, tokenizer = tok, shuffle = shuffle or false,
    seed = opt.rollout_seed })
  if not ds then rl.args.usage_error(("%s: %s"):format(what, tostring(err))) end
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

local function make_trainer(opt, job)
  local topts = {
    loss = { advantage_estimator = opt.advantage_estimator, eps_clip = opt.eps_clip, eps_clip_high = opt.eps_clip_high,
             use_kl_loss = opt.use_kl_loss, kl_loss_coef = opt.kl_loss_coef, kl_loss_type = opt.kl_loss_type,
             entropy_coef = opt.entropy_coef, calculate_per_token_loss = opt.calculate_per_token_loss },
    optimizer = { lr = opt.lr, weight_decay = opt.weight_decay, clip_grad = opt.clip_grad },
    global_batch_size = opt.global_batch_size, micro_batch_size = opt.micro_batch_size,
    max_tokens_per_gpu = opt.max_tokens_per_gpu, rollout_temperature = opt.rollout_temperature,
    old_logprobs = opt.old_logprobs,
    kl_coef = opt.kl_coef ~= 0 and opt.kl_coef or nil, bf16 = opt.bf16 or nil, device = job.placement.trainer,
  }
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
  return rl.trainer.new(topts), nil
end

local function start_engines(opt, job)
  job.engine_opts = { model = job.model_dir, mode = opt.engine_mode, threads = opt.threads,
                      max_running_requests = opt.max_running_requests }
  if opt.rollout_backend == "vllm" then   -- --vllm-<flag> V: vLLM's --<flag> V
    job.engine_opts.backend, job.engine_opts.vllm_args, job.engine_opts.python = "vllm", opt.vllm_args, opt.vllm_python
  end
  job.engine_opts.device = job.placement.engines
  -- engine groups (--sglang-config, else one from the flags): job.groups.<name>.url
  local groups, policy = require("rl.recipe.engines").start(opt, job, job.engine_opts)
  job.groups, job.policy_group = groups, policy
  if policy then opt.num_engines = #policy.engines end   -- the rollout's concurrency follows the policy's
  local router = (policy or groups[1]).router
  log.info("Router launched at %s", (router.url:gsub("^http://", "")))   -- the line the seed's profiling script greps
  return policy and policy.engines or {}, router
end

-- slime's --custom-rm-path: FILE.lua[:FUNCTION] or MODULE.FUNCTION (FUNCTION default "reward").
local function custom_reward(spec)
  local file, fname = spec:match("^(.-%.lua):?([%w_]*)$")
  local mod, fn
  if file then
    local chunk, err = loadfile(file)
    if not chunk then rl.args.usage_error("--custom-rm-path: " .. tostring(err)) end
    local ok, m = pcall(chunk)
    if not ok then rl.args.usage_error("--custom-rm-path " .. file .. ": " .. tostring(m)) end
    mod, fn = m, fname ~= "" and fname or "reward"
  else
    local name, f = spec:match("^(.+)%.([%w_]+)$")
    local ok, m = pcall(require, name or spec)
    if not ok then rl.args.usage_error("--custom-rm-path " .. spec .. ": " .. tostring(m)) end
    mod, fn = m, f or "reward"
  end
  if type(mod) ~= "table" or type(mod[fn]) ~= "function" then
    rl.args.usage_error(("--custom-rm-path %s: no function '%s' (give FILE.lua:FUNCTION or MODULE.FUNCTION)"):format(spec, fn))
  end
  return mod[fn]
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
  local reward = setup_opts.reward or "gsm8k"
  if opt.rm_type then   -- slime's --rm-type: a built-in reward, per-sample metadata.rm_type first
    local ok, fn = pcall(rl.rewards.by_rm_type, opt.rm_type)
    if not ok then rl.args.usage_error("--rm-type: " .. tostring(fn):gsub("^[^:]*:%d+: ", "")) end
    reward = fn
  end
  if opt.custom_rm_path then reward = custom_reward(opt.custom_rm_path) end
  local job = setmetatable({ opt = opt, started = rl.now() }, require("rl.recipe.job").Job)
  -- Data parallel (`rlhost --nproc N`, or torchrun's environment): rank 0 runs the
  -- engines, rollout, eval and checkpoints; every rank trains on its share.
  job.rank, job.world_size = rl.dist.rank(), rl.dist.world_size()
  job.is_main = job.rank == 0
  if job.world_size > 1 then rl.dist.init { timeout = opt.dist_timeout } end
  if opt.hf_checkpoint then
    job.model_dir = opt.hf_checkpoint:gsub("/+$", "")
    if job.is_main then log.info(("GRPO on %s with prompts %s"):format(job.model_dir, tostring(opt.prompt_data))) end
  else
    job.default_model = true
    if job.is_main then
      log.info("no --hf-checkpoint: running on the embedded default model (a small Llama trained by rlhost on "
        .. "generated GSM8K-format problems). The real run: " .. REAL_RUN)
      job.model_dir = rl.mathgen.default_model(setup_opts.default_model)
    end
    job.model_dir = rl.dist.broadcast_object(job.model_dir)   -- built once, by rank 0
  end
  fill_defaults(opt, job.default_model, job.world_size)
  job.placement = require("rl.recipe.placement").resolve(opt)   -- --device, --rollout-device, --colocate
  if job.is_main and job.placement.trainer ~= "cpu" then log.info(require("rl.recipe.placement").describe(job.placement)) end
  rl.torch.set_num_threads(opt.threads)
  rl.torch.manual_seed(opt.rollout_seed)
  local tok, err = rl.tokenizer.load(job.model_dir)
  if not tok then rl.args.usage_error("--hf-checkpoint: " .. tostring(err)) end
  job.tokenizer = tok
  local prompts = opt.prompt_data or (job.default_model and job.model_dir .. "/data/train.jsonl")
  if not prompts then rl.args.usage_error("--prompt-data is required with --hf-checkpoint (e.g. gsm8k/train.jsonl)") end
  job.data = load_data(opt, prompts, tok, "--prompt-data", opt.rollout_shuffle)
  job.eval_datasets = eval_sets(opt, job)

  job.trainer, job.resumed = make_trainer(opt, job)
  if not job.is_main then   -- a training rank: job:train_worker() is its whole loop
    job:on_interrupt()
    M.current = job
    return job
  end
  if job.resumed and job.resumed.data then job.data:load_state(job.resumed.data) end
  job.start_rollout = job.resumed and job.resumed.next_rollout or 0
  if not opt.load_debug_rollout_data then   -- a replay needs no engines
    if opt.fault_injection and opt.use_fault_tolerance then   -- a drill naming no such group or engine: before any starts
      require("rl.recipe.health").parse_injections(opt.fault_injection, require("rl.recipe.engines").plan(opt, job))
    end
    job.engines, job.router = start_engines(opt, job)
    job.health = require("rl.recipe.health").from_options(opt, job)
    if job.resumed then assert(job.trainer:sync(job.engines)) end
  end
  job.metrics = assert(rl.metrics.configure(opt))
  rl.watchdog.start { timeout = opt.hang_timeout, job = job,
                      dir = job.metrics.jsonl_path and job.metrics.jsonl_path:match("^(.*)/[^/]*$") or "." }
  if opt.metrics_port then   -- the trainer's live /metrics (tools/prometheus.lua --trainer-url)
    local srv, serr = rl.metrics.serve { port = opt.metrics_port }
    if not srv then rl.args.usage_error("--metrics-port " .. opt.metrics_port .. ": " .. tostring(serr)) end
    job.metrics_server = srv
    log.info("trainer metrics for Prometheus: " .. srv:url() .. "/metrics")
  end

  local policy_backend = job.policy_group and job.policy_group.backend or opt.rollout_backend
  local ro_opts = {
    url = job.router and job.router.url, tokenizer = tok, data = job.data, reward = reward, reward_key = opt.reward_key,
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
  }
  for k, v in pairs(setup_opts) do
    if k ~= "reward" and k ~= "sample_hooks" and k ~= "dynamic_filter" and k ~= "default_model" then ro_opts[k] = v end
  end
  job.rollout = rl.rollout.new(ro_opts)
  job:on_interrupt()
  M.current = job   -- for `rlhost attach`: rl.recipe.current.last_batch, :pause(), ...
  return job
end

return M
