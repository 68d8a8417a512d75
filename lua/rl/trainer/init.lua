--- rl.trainer: the LibTorch trainer (GRPO family, PPO with a critic, AdamW) of a policy model.
--
--   local tr = rl.trainer.new { model = "/models/qwen", ref = true,
--                               loss = { advantage_estimator = "grpo", eps_clip = 0.2, use_kl_loss = true,
--                                        kl_loss_coef = 0.01 },
--                               optimizer = { lr = 1e-6, lr_decay_style = "cosine", lr_decay_iters = 100 },
--                               global_batch_size = 64, micro_batch_size = 4 }
--   local batch = rl.rollout.train_data.convert(groups, { estimator = "grpo" })   -- batch.advantage_estimator
--   local metrics = assert(tr:train(batch))      -- train/loss, train/pg_clipfrac, perf/step_time, ...
--   tr:sync(engine)                              -- new weights to the engines
--   tr:save("/ckpt", { extra = { data = ds:state() } })   -- /ckpt/iter_0000001 + latest pointer
--   local tr2, extra = rl.trainer.load("/ckpt")            -- resume: weights, AdamW, step, RNG
--
-- train, sync, save and load run on a helper thread: the calling task waits, everything
-- else (servers, other tasks, the REPL) keeps running. Options use slime's names
-- (docs/trainer.md); an unknown one raises naming the closest known option.
local json = require "rl.json"
local task = require "rl.task"

local M = {}
local Trainer = {}
Trainer.__index = Trainer
--- LoRA: the name the engines serve this trainer's adapter under (the rollout's lora_path).
Trainer.lora_name = "policy"

local function native() return require("rl.torch")._trainer end

-- skeleton: parameters allocated, not read (a sharded trainer reads its slices itself).
local function as_model(v, what, dtype, device, skeleton)
  if type(v) == "string" then
    local m, err = require("rl.model").load(v, { dtype = dtype, device = device, weights = not skeleton })
    if not m then error(("rl.trainer.new: %s: %s"):format(what, err), 3) end
    return m
  end
  if require("rl.model").handle(v) then return v end
  error(("rl.trainer.new: bad argument 'opts.%s' (a model directory or an rl.model expected, got %s)")
    :format(what, type(v)), 3)
end

local options = require "rl.trainer.options"   -- every option, declared once

local function is_dir(path) return path:sub(-5) ~= ".gguf" end   -- a model directory, not a GGUF file

--- A trainer. opts: model (directory or rl.model; trained in place), ref (a
--- directory, an rl.model, or true = a frozen copy of model's checkpoint), loss
--- and optimizer (tables of options), dtype, and the batch options
--- (global_batch_size, micro_batch_size, max_tokens_per_gpu, rollout_temperature,
--- use_rollout_logprobs, kl_coef, gamma, normalize_advantages): lua/rl/trainer/options.lua.
--- With use_critic (advantage_estimator "ppo"): critic (a directory, an rl.model, or
--- true = the model's checkpoint again, the default) becomes the value model, trained
--- beside the policy (critic_lr, value_clip, lambd, num_critic_only_steps).
function M.new(opts)
  if type(opts) ~= "table" then error("rl.trainer.new: bad argument #1 'opts' (table expected)", 2) end
  if opts.model == nil then error("rl.trainer.new: opts.model is required (a model directory or an rl.model)", 2) end
  local flat = options.flatten(opts, "rl.trainer.new")
  -- Sharded, from a directory: each rank reads only its own slices of the files, so no
  -- rank ever holds the whole model (the handles are skeletons).
  local sharded = flat.train_backend == "fsdp"
  local function from_files(v) return sharded and type(v) == "string" and is_dir(v) end
  local model = as_model(opts.model, "model", opts.dtype, opts.device, from_files(opts.model))
  local ref, ref_src
  if opts.ref == true then
    if type(opts.model) ~= "string" then
      error("rl.trainer.new: ref = true needs model to be a directory (or pass ref = <directory>)", 2)
    end
    ref_src = opts.model
  elseif opts.ref then
    ref_src = opts.ref
  end
  local need_ref = flat.use_kl_loss or (flat.kl_coef or 0) ~= 0
  if ref_src then ref = as_model(ref_src, "ref", opts.dtype, opts.device, need_ref and from_files(ref_src)) end
  -- The critic: its own copy of a decoder (by default the model's checkpoint again).
  local critic, critic_src
  if opts.critic ~= nil and opts.critic ~= false and not flat.use_critic then
    error("rl.trainer.new: opts.critic is given without use_critic = true", 2)
  end
  if flat.use_critic then
    critic_src = (opts.critic == nil or opts.critic == true) and opts.model or opts.critic
    if critic_src == opts.model and type(critic_src) ~= "string" then
      error("rl.trainer.new: use_critic needs its own model: pass critic = <directory> (or model as a directory)", 2)
    end
    critic = as_model(critic_src, "critic", opts.dtype, opts.device, false)
  end
  -- Data parallel (rlhost --nproc N, torchrun): join the group from the environment
  -- first; the trainer all-reduces gradients over it.
  require("rl.dist").ensure()
  local handle = require("rl.model").handle
  local h = native().trainer_new(handle(model), ref and handle(ref), json.encode(flat),
    from_files(opts.model) and opts.model or nil, ref_src and need_ref and from_files(ref_src) and ref_src or nil,
    critic and handle(critic))
  -- Where the weights came from: checkpoints copy tokenizer files from model_dir and
  -- record ref_dir so that a resumed run gets the same reference model.
  local model_dir = type(opts.model) == "string" and opts.model or model.path
  local ref_dir = (opts.ref == true and model_dir) or (type(opts.ref) == "string" and opts.ref) or (ref and ref.path)
  local critic_dir = type(critic_src) == "string" and critic_src or (critic and critic.path) or nil
  return setmetatable({ _h = h, model = model, ref = ref, critic = critic, options = flat, model_dir = model_dir,
                        ref_dir = ref_dir, critic_dir = critic_dir }, Trainer)
end

local await = task.await_json

--- Trains on a batch (rl.rollout.train_data.convert's: tokens, response_lengths,
--- rewards, loss_masks, rollout_log_probs?) — ceil(size / global_batch_size)
--- optimiser steps. Returns the metrics of the last step and per-sample stats
--- ({advantage, loss_weight, clipped_frac, logp_mean, step} in batch order), or
--- nil, err (a bad batch raises naming the field). With batch.samples, each sample's
--- trace gets an actor_train event with those stats. batch.advantage_estimator (set
--- by convert) must be the loss's advantage_estimator: rewards normalised for one
--- estimator and trained with another would be a silent mistake, so it raises.
function Trainer:train(batch, opts)
  task.need_task("rl.trainer.Trainer:train")
  local est = type(batch) == "table" and batch.advantage_estimator
  if est ~= nil and est ~= (self.options.advantage_estimator or "grpo") then
    error(("rl.trainer.Trainer:train: batch.advantage_estimator is '%s' but this trainer's loss uses '%s' "
      .. "(hint: give rl.rollout.train_data.convert the estimator of rl.trainer.new{loss = "
      .. "{advantage_estimator = ...}})"):format(tostring(est), self.options.advantage_estimator or "grpo"), 2)
  end
  local op = self._h:train(batch)
  local poll
  if opts and opts.progress then   -- a bar over micro-batches while the helper thread trains
    local bar = require("rl.progress").new { label = type(opts.progress) == "string" and opts.progress or "train",
                                             unit = "micro", total = 0 }
    poll = task.every(0.2, function()
      local done, total = self._h:progress()
      bar:set(done, total)
    end)
    poll.bar = bar
  end
  local ok, r, err = pcall(await, op, "rl.trainer.Trainer:train")
  if poll then
    poll:cancel()
    poll.bar:set(self._h:progress())
    poll.bar:finish()
  end
  if not ok then error(r, 0) end
  if not r then return nil, err end
  if type(batch.samples) == "table" then M.trace_samples(batch.samples, r.samples) end
  return r.metrics, r.samples
end

--- The trainer's part of each sample's trace: an actor_train event on samples[i]
--- (the sample objects, as rl.rollout.train_data.convert puts them in batch.samples)
--- from stats[i] (what Trainer:train returns second; on data parallel ranks, gathered).
function M.trace_samples(samples, stats)
  local trace = require "rl.trace"
  for i, st in ipairs(stats or {}) do
    local s = samples[i]
    if s then
      trace.event(s, "actor_train", { train_step = st.step, advantage = st.advantage, loss_weight = st.loss_weight,
                                      clipped_token_frac = st.clipped_frac, logp_mean = st.logp_mean })
    end
  end
end

--- Log-probs of each sample's response tokens under the current weights.
function Trainer:logprobs(batch) return self._h:response_logprobs(batch) end

--- The critic's value of each sample's response positions (use_critic): per sample, a
--- list of numbers (the state before each response token, as the GAE uses them).
function Trainer:values(batch)
  if not self.critic then error("rl.trainer.Trainer:values: this trainer has no critic (use_critic = true)", 2) end
  return self._h:response_values(batch)
end

function Trainer:step() return self._h:step() end

--- LoRA (lora_rank > 0): the adapter being trained (an rl.model LoRA adapter: save_peft,
--- parameters, config), else nil.
function Trainer:lora()
  local h = self._h:lora()
  return h and require("rl.model")._wrap_lora(h) or nil
end

--- LoRA: writes the trained adapter as PEFT files into `dir` (base_model_name_or_path:
--- the model's directory). → true | nil, err
function Trainer:save_lora(dir)
  if type(dir) ~= "string" then
    error("rl.trainer:save_lora: bad argument #1 'dir' (string expected, got " .. type(dir) .. ")", 2)
  end
  local l = self:lora()
  if not l then return nil, "rl.trainer:save_lora: this trainer has no LoRA adapter (lora_rank = 0)" end
  return l:save_peft(dir, self.model_dir)
end
--- Micro-batches done and their total in the running (or last) train call.
function Trainer:progress() return self._h:progress() end

--- Runs the trainer's work — its helper thread, and the LibTorch threads that thread
--- starts — on the CPUs of `list` ("0-3,6"; nil: anywhere). The calling process (its event
--- loop: the rollout, HTTP, rewards) stays where it is. Raises naming a bad list or a CPU
--- the machine lacks.
function Trainer:set_cpus(list)
  if list ~= nil and type(list) ~= "string" and type(list) ~= "number" then
    error("rl.trainer.Trainer:set_cpus: bad argument #1 'list' (a CPU list such as \"0-3,6\" or nil expected, got "
      .. type(list) .. ")", 2)
  end
  self._h:set_cpus(list ~= nil and tostring(list) or nil)
end
function Trainer:lr() return self._h:lr() end

-- ---- weights to the engines (rl.weight_sync) -----------------------------------

--- The trainer's weights as an rl.weight_sync source: the policy's tensors, read on the
--- trainer's helper thread (so never during a train step); each call waits in its task.
function Trainer:weight_source()
  local h, model, fname = self._h, self.model, "rl.trainer.Trainer:sync"
  local function done(op)
    local r, err = task.await_json(op, fname)
    if not r then return nil, err end
    return true
  end
  local src = {
    meta = function() return json.decode(h:weight_meta()) end,
    copy_to_engine = function(_, native_engine, version) return task.await_json(h:sync(native_engine, version), fname) end,
    write_shm = function(_, layout, buffer) return done(h:shm_write(layout, buffer)) end,
    forget_shm = function(_, id) h:shm_forget(id) end,
    join_group = function(_, group) return done(h:group_connect(group)) end,
    broadcast = function(_, group, bucket_bytes) return done(h:send_weights(group, bucket_bytes)) end,
    -- a sharded trainer gathers and sends a unit at a time: one broadcast per tensor
    can_bucket = function() return not self:is_sharded() end,
    save = function(_, dir)
      if not self:is_sharded() then return model:save(dir) end
      return done(h:save_model(dir, nil, nil, true))   -- rank 0 drives the gathers (Trainer:sync)
    end,
  }
  if self:lora() then   -- LoRA: the adapter is what moves, loaded by the engines under lora_name
    src.lora_name = self.lora_name
    src.lora_meta = function() return json.decode(h:weight_meta(true)) end
    src.save_lora = function(_, dir) return self:save_lora(dir) end
    src.copy_lora_to_engine = function(_, native_engine, name, version)
      return task.await_json(h:sync_lora(native_engine, name, version), fname)
    end
    src.write_lora_shm = function(_, layout, buffer) return done(h:shm_write(layout, buffer, true)) end
    src.broadcast_lora = function(_, group, bucket_bytes) return done(h:send_weights(group, bucket_bytes, true)) end
  end
  return src
end

--- Sharded over data-parallel ranks: rank 0 runs fn (any number of syncs to engines)
--- while the other ranks follow (Trainer:follow); they are released when fn returns or
--- fails. fn's results, or its error raised again. Elsewhere just fn().
function Trainer:lead(fn)
  local dist = require "rl.dist"
  if not (self:is_sharded() and dist.world_size() > 1 and dist.is_main()) then return fn() end
  self._leading = true
  local res = (function(...) return { n = select("#", ...), ... } end)(pcall(fn))
  self._leading = false
  local d, derr = task.await_json(self._h:gathers_done(), "rl.trainer.Trainer:lead")
  if not res[1] then error(res[2], 0) end
  if not d then return nil, derr end
  return unpack(res, 2, res.n)
end

--- Ranks other than 0 of a sharded trainer: joins each gather rank 0 makes for its
--- engines (Trainer:sync, Trainer:lead) until it is done. → true or nil, err.
function Trainer:follow()
  local r, err = task.await_json(self._h:follow_gathers(), "rl.trainer.Trainer:follow")
  if not r then return nil, err end
  return true
end

--- The policy's weights digest (32 hex digits; the same values give the same digest
--- whatever their layout), "" unless it computes with the exact kernels, and "" for a
--- sharded trainer: data-parallel replicas compare theirs after each step.
function Trainer:replica_digest()
  local r, err = task.await_json(self._h:replica_digest(), "rl.trainer.Trainer:replica_digest")
  if not r then return nil, err end
  return r.digest
end

--- True when the trainer shards its state over the data-parallel ranks (train_backend = "fsdp").
function Trainer:is_sharded() return self.options.train_backend == "fsdp" end

local function sender(self)
  self._sender = self._sender or require("rl.weight_sync").sender(self:weight_source())
  return self._sender
end

--- Forgets what a sync kept for the engine at `url` (its shared weight buffers): the
--- engine is gone (fault tolerance).
function Trainer:forget_engine(url)
  if self._sender then self._sender:forget(url) end
end

local SYNC_OPTS = { version = true, method = true, timeout = true, master_address = true, master_port = true,
                    backend = true, tmp_dir = true, keep_going = true, guard = true, bucket_bytes = true,
                    lora_name = true }

--- Hands the current weights to engines (one or a list: rl.engines, vLLM engines,
--- rl.weight_sync receivers, engine server URLs) through rl.weight_sync. opts: a version,
--- or {version, method, timeout, master_address, master_port, backend, tmp_dir,
--- keep_going, guard} (rl.weight_sync's Sender:push). method "auto" (default):
--- thread-mode rl.engines in memory; process-mode ones through shared memory (files, with
--- a warning, when one cannot share); anything else through a safetensors directory on
--- tmpfs. "shm", "disk", "distributed" (a c10d broadcast; backend "gloo" or "nccl"),
--- "http" (safetensors buckets POSTed to each engine server; bucket_bytes) force one. The weight version becomes `version` (default: the trainer's step). On
--- data-parallel ranks other than 0 it does nothing (rank 0 holds the same weights).
--- Returns {seconds, weight_version, methods, versions, errors} (per engine i: how it got
--- them — "memory", "shm", "disk", "distributed", "http"; a LoRA trainer's adapter alone moves:
--- "lora/memory", "lora/shm", ... —, the version it serves or false, why not) or nil, err
--- (the first failure, unless keep_going).
function Trainer:sync(engines, opts)
  local fname = "rl.trainer.Trainer:sync"
  task.need_task(fname)
  if type(opts) ~= "table" then opts = { version = opts } end
  for k in pairs(opts) do
    if not SYNC_OPTS[k] then
      error(("%s: bad argument 'opts.%s' (unknown option; version, method, timeout, master_address, master_port, "
        .. "backend, tmp_dir, keep_going, guard, bucket_bytes, lora_name)"):format(fname, tostring(k)), 2)
    end
  end
  local version = tostring(opts.version or self:step())
  local dist = require "rl.dist"
  local sharded = self:is_sharded() and dist.world_size() > 1
  if not dist.is_main() then
    -- A sharded trainer's weights are gathered a unit at a time, every gather a
    -- collective: this rank joins each pass rank 0 makes for its engines.
    if sharded then
      local r, err = self:follow()
      if not r then return nil, err end
    end
    return { seconds = 0, weight_version = version, skipped = true }
  end
  local o = {}
  for k, v in pairs(opts) do o[k] = v end
  o.version = version
  local ok, r, err = pcall(sender(self).push, sender(self), engines, o, fname)
  if sharded and not self._leading then   -- the other ranks leave follow_gathers, whatever happened here
    local d, derr = task.await_json(self._h:gathers_done(), fname)
    if ok and not d then r, err = nil, derr end
  end
  if not ok then error(r, 0) end
  if not r then return nil, fname .. ": " .. err end
  self.weight_version = r.weight_version
  return r
end

--- Writes the policy as a Hugging Face directory (config.json + safetensors). opts:
--- {dtype, max_shard_bytes}. Sharded (train_backend = "fsdp"): every rank calls it; the
--- layers are gathered in turn and rank 0 writes `dir` (the other ranks' dir is unused).
function Trainer:save_model(dir, opts)
  if not self:is_sharded() then return self.model:save(dir, opts) end
  task.need_task("rl.trainer.Trainer:save_model")
  opts = opts or {}
  local r, err = task.await_json(self._h:save_model(dir, opts.dtype, opts.max_shard_bytes, false),
    "rl.trainer.Trainer:save_model")
  if not r then return nil, err end
  return true
end

-- ---- checkpoints (docs/trainer.md, "Checkpoints") ----------------------------------

local function check_string(v, fname, what)
  if type(v) ~= "string" or v == "" then
    error(("%s: bad argument #1 '%s' (non-empty string expected, got %s)"):format(fname, what, type(v)), 3)
  end
end

--- Saves a checkpoint under `dir` (slime's --save): `dir/iter_<N>/` (N = opts.iteration,
--- default the step: config.json, model.safetensors, tokenizer files, optimizer.pt,
--- trainer_state.json) written atomically, then `dir/latest_checkpointed_iteration.txt`
--- = N. opts.extra: a JSON-able table stored with it (the data source's state(), the
--- recipe's counters) that load returns. → {path, iteration, files, seconds} or nil, err.
function Trainer:save(dir, opts)
  local fname = "rl.trainer.Trainer:save"
  check_string(dir, fname, "dir")
  if opts ~= nil and type(opts) ~= "table" then error(fname .. ": bad argument #2 'opts' (table expected)", 2) end
  opts = opts or {}
  for k in pairs(opts) do
    if k ~= "extra" and k ~= "iteration" then
      error(("%s: unknown option '%s' (extra, iteration)"):format(fname, tostring(k)), 2)
    end
  end
  if opts.extra ~= nil and type(opts.extra) ~= "table" then error(fname .. ": opts.extra must be a table", 2) end
  local it = opts.iteration
  if it ~= nil and (type(it) ~= "number" or it < 0 or it ~= math.floor(it)) then
    error(fname .. ": opts.iteration must be a non-negative integer, got " .. tostring(it), 2)
  end
  task.need_task(fname)
  local okk, meta = pcall(json.encode, {
    options = self.options, extra = opts.extra or {}, weight_version = self.weight_version,
    sources = { model = self.model_dir, ref = self.ref_dir, critic = self.critic_dir }, tokenizer_dir = self.model_dir,
  })
  if not okk then error(fname .. ": opts.extra cannot be written as JSON: " .. tostring(meta), 2) end
  return await(self._h:save(dir, it, meta), fname)
end

local function restore(self, dir, weights, fname)
  local st, err = await(self._h:load(dir, weights), fname)
  if not st then return nil, err end
  self.weight_version = st.weight_version
  self.checkpoint = { path = dir, iteration = st.iteration, step = st.step }
  return st.extra or {}, st
end

--- Restores a checkpoint into this trainer (same model shape): weights, AdamW
--- state, step (so the schedule continues), generator states. `path` is a save
--- directory (its latest iteration) or an iter_* directory. → the checkpoint's
--- extra table and its whole trainer_state.json, or nil, err (nothing changed).
function Trainer:load(path)
  local fname = "rl.trainer.Trainer:load"
  check_string(path, fname, "path")
  task.need_task(fname)
  local dir, st = native().checkpoint_resolve(path)
  if not dir then return nil, st end
  return restore(self, dir, true, fname)
end

--- A trainer resumed from a checkpoint (slime's --load): the model is the
--- checkpoint's own (or opts.model), the options those saved, overridden by
--- opts (same shape as rl.trainer.new's), the reference model the one it was
--- saved with (or opts.ref; false for none). → trainer, extra or nil, err.
function M.load(path, opts)
  local fname = "rl.trainer.load"
  check_string(path, fname, "path")
  if opts ~= nil and type(opts) ~= "table" then error(fname .. ": bad argument #2 'opts' (table expected)", 2) end
  opts = opts or {}
  task.need_task(fname)
  local dir, text = native().checkpoint_resolve(path)
  if not dir then return nil, fname .. ": " .. text end
  local st = json.decode(text)
  local sources = type(st.sources) == "table" and st.sources or {}
  local o = {}
  if type(st.options) == "table" then
    for k, v in pairs(st.options) do o[k] = v end
  end
  for k, v in pairs(options.flatten(opts, fname)) do o[k] = v end
  local dtype = opts.dtype or st.dtype
  local model, err = opts.model or dir, nil
  if st.lora and opts.model == nil then
    -- A LoRA checkpoint holds the adapter only: the base is the model it was trained on.
    model = sources.model
    if type(model) ~= "string" then
      return nil, ("%s: %s is a LoRA checkpoint whose base model is unknown (no sources.model in "
        .. "trainer_state.json); pass opts.model = <the base model's directory>"):format(fname, dir)
    end
  end
  local sharded = o.train_backend == "fsdp"
  if type(model) == "string" and not sharded then   -- sharded: rl.trainer.new reads each rank's slices
    model, err = require("rl.model").load(model, { dtype = dtype, device = opts.device })
    if not model then return nil, ("%s: model %s: %s"):format(fname, tostring(opts.model or dir), err) end
  end
  local ref = opts.ref
  if ref == nil or ref == true then ref = sources.ref end
  if type(ref) == "string" and not sharded then
    local r, rerr = require("rl.model").load(ref, { dtype = dtype, device = opts.device })
    if not r then
      local from = type(opts.ref) == "string" and "opts.ref" or "sources.ref in trainer_state.json"
      return nil, ("%s: the reference model %s (%s) cannot be loaded: %s "
        .. "(hint: pass opts.ref = <dir>, or false for none)"):format(fname, ref, from, tostring(rerr))
    end
    ref = r
  end
  -- The critic's decoder takes the checkpoint's own shape (its config.json); its weights
  -- and AdamW state then come from critic.safetensors and critic_optimizer.pt.
  if o.use_critic then o.critic = opts.critic == nil and dir or opts.critic end
  o.model, o.ref, o.dtype = model, ref or nil, dtype
  local made, tr = pcall(M.new, o)
  if not made then return nil, ("%s: %s"):format(fname, tostring(tr)) end
  local extra, rerr = restore(tr, dir, opts.model ~= nil or st.lora == true, fname)
  if extra == nil then return nil, fname .. ": " .. tostring(rerr) end
  return tr, extra
end

function Trainer:__tostring() return ("rl.trainer(step %d, lr %g)"):format(self:step(), self:lr()) end

return M
