--- rl.trainer: the LibTorch trainer (GRPO family, AdamW) of a policy model.
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

local function native() return require("rl.torch")._trainer end

local function as_model(v, what, dtype, device)
  if type(v) == "string" then
    local m, err = require("rl.model").load(v, { dtype = dtype, device = device })
    if not m then error(("rl.trainer.new: %s: %s"):format(what, err), 3) end
    return m
  end
  if type(v) == "table" and v._h then return v end
  error(("rl.trainer.new: %s: a model directory or an rl.model expected, got %s"):format(what, type(v)), 3)
end

local RESERVED = { model = true, ref = true, loss = true, optimizer = true, dtype = true, device = true }

--- A trainer. opts: model (directory or rl.model; trained in place), ref (a
--- directory, an rl.model, or true = a frozen copy of model's checkpoint), loss
--- and optimizer (tables of options), dtype, and the batch options
--- (global_batch_size, micro_batch_size, max_tokens_per_gpu, rollout_temperature,
--- use_rollout_logprobs, kl_coef, gamma, normalize_advantages).
function M.new(opts)
  if type(opts) ~= "table" then error("rl.trainer.new: bad argument #1 'opts' (table expected)", 2) end
  if opts.model == nil then error("rl.trainer.new: opts.model is required (a model directory or an rl.model)", 2) end
  local model = as_model(opts.model, "model", opts.dtype, opts.device)
  local ref
  if opts.ref == true then
    if type(opts.model) ~= "string" then
      error("rl.trainer.new: ref = true needs model to be a directory (or pass ref = <directory>)", 2)
    end
    ref = as_model(opts.model, "ref", opts.dtype, opts.device)
  elseif opts.ref then
    ref = as_model(opts.ref, "ref", opts.dtype, opts.device)
  end
  local flat = {}
  for _, sub in ipairs { opts.loss or {}, opts.optimizer or {} } do
    for k, v in pairs(sub) do flat[k] = v end
  end
  for k, v in pairs(opts) do
    if not RESERVED[k] then flat[k] = v end
  end
  -- Data parallel (rlhost --nproc N, torchrun): join the group from the environment
  -- first; the trainer all-reduces gradients over it.
  require("rl.dist").ensure()
  local h = native().trainer_new(model._h, ref and ref._h, json.encode(flat))
  -- Where the weights came from: checkpoints copy tokenizer files from model_dir and
  -- record ref_dir so that a resumed run gets the same reference model.
  local model_dir = type(opts.model) == "string" and opts.model or model.path
  local ref_dir = (opts.ref == true and model_dir) or (type(opts.ref) == "string" and opts.ref) or (ref and ref.path)
  return setmetatable({ _h = h, model = model, ref = ref, options = flat, model_dir = model_dir, ref_dir = ref_dir },
    Trainer)
end

local function await(op, fname)
  local kind, payload = task.await_op(op, fname)
  if kind == "done" then return json.decode(payload) end
  return nil, payload
end

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

function Trainer:step() return self._h:step() end
--- Micro-batches done and their total in the running (or last) train call.
function Trainer:progress() return self._h:progress() end
function Trainer:lr() return self._h:lr() end

local function tmp_dir()
  local base = io.open("/dev/shm/.rlhost_probe", "w")
  if base then
    base:close()
    os.remove("/dev/shm/.rlhost_probe")
    return "/dev/shm"
  end
  return os.getenv("TMPDIR") or "/tmp"
end

local function http() return require "rl.http" end

-- POST url..path with a JSON body; → the decoded reply or nil, err (any non-200,
-- or success = false).
local function post_json(url, path, body, timeout, api_key)
  -- Weight-sync endpoints are control endpoints: the engine's api key, else the run's admin token.
  local headers = require("rl.engine").control_headers(api_key)
  local resp, err = http().request { method = "POST", url = url .. path, body = json.encode(body), headers = headers,
                                     timeout = timeout }
  if not resp then return nil, tostring(err) end  -- rl.http's error names the method and URL
  local r = json.decode(resp.body)
  if resp.status ~= 200 or (type(r) == "table" and r.success == false) then
    local msg = type(r) == "table" and (r.message or (r.error and r.error.message)) or resp.body
    return nil, ("POST %s%s: HTTP %d: %s"):format(url, path, resp.status, tostring(msg))
  end
  return type(r) == "table" and r or { success = true }
end

-- Runs the trainer's job `op` and one POST per engine concurrently; → true or
-- nil, the first error (the engines' errors first: they say more than a timeout).
local function overlap(op, engines, path, body_of, timeout)
  local tasks = {}
  for i, eng in ipairs(engines) do
    tasks[i] = task.spawn(function()
      return { post_json(eng.url, path, body_of(i), timeout, eng._api_key) }
    end)
  end
  local kind, payload = task.await_op(op, "rl.trainer.Trainer:sync")
  local first
  for i, t in ipairs(tasks) do
    local r = t:wait()
    if not r[1] and not first then first = ("engine %d (%s): %s"):format(i, engines[i].url, tostring(r[2])) end
  end
  if first then return nil, first end
  if kind ~= "done" then return nil, "trainer: " .. tostring(payload) end
  return true
end

local group_seq = 0

-- Drops the weight-update group (after a failure, or for another engine set).
local function drop_group(self)
  local ws = self._wsync
  if not ws then return end
  self._wsync = nil
  for _, eng in ipairs(ws.engines) do
    post_json(eng.url, "/destroy_weights_update_group", { group_name = ws.name }, 5, eng._api_key)
  end
  ws.group:close()
end

-- The broadcast path: one c10d group of the trainer (rank 0) and the engines
-- (ranks 1..n), made on the first sync to this engine set; then per sync every
-- parameter is broadcast while the engines' /update_weights_from_distributed
-- calls receive it.
local function sync_distributed(self, engines, version, o)
  local timeout = o.timeout or 120
  local key = {}
  for i, eng in ipairs(engines) do
    if type(eng) ~= "table" or type(eng.url) ~= "string" then
      error(("rl.trainer.Trainer:sync: engines[%d] has no url (method 'distributed' talks to engine servers; "
        .. "start thread-mode engines with serve = true)"):format(i), 3)
    end
    key[i] = eng.url
  end
  key = table.concat(key, " ")
  if self._wsync and self._wsync.key ~= key then drop_group(self) end
  if not self._wsync then
    group_seq = group_seq + 1
    local name = ("rlhost_weights_%d_%d"):format(math.floor(require("rl._core").loop.now() * 1000), group_seq)
    local g = require("rl.torch")._dist.group_new(json.encode {
      rank = 0, world_size = #engines + 1, master_addr = o.master_address or "127.0.0.1",
      master_port = o.master_port or 0,
      timeout = timeout, name = name, backend = o.backend or "gloo",
    })
    local body = function(i)
      return { master_address = o.master_address or "127.0.0.1", master_port = g:port(), rank_offset = i,
               world_size = #engines + 1, group_name = name, backend = o.backend or "gloo", timeout = timeout }
    end
    local okk, err = overlap(self._h:group_connect(g), engines, "/init_weights_update_group", body, timeout + 10)
    self._wsync = { key = key, group = g, name = name, engines = engines }
    if not okk then
      drop_group(self)
      return nil, "init_weights_update_group: " .. err
    end
  end
  local ws = self._wsync
  local meta = json.decode(self._h:weight_meta())
  local body = function()
    return { names = meta.names, dtypes = meta.dtypes, shapes = meta.shapes, group_name = ws.name,
             flush_cache = true, weight_version = version }
  end
  local okk, err = overlap(self._h:send_weights(ws.group), engines, "/update_weights_from_distributed", body,
    timeout + 10)
  if not okk then
    drop_group(self)
    return nil, "update_weights_from_distributed: " .. err
  end
  return { weight_version = version }
end

-- The shared-memory path (same machine, CPU engines): per engine URL, the layout
-- its /init_weights_shm described and the buffer to write next.
local function drop_shm(self, url)
  local st = self._shm and self._shm[url]
  if not st then return end
  self._shm[url] = nil
  self._h:shm_forget(st.id)
end

--- Forgets what a sync kept for the engine at `url` (its shared weight buffers): the
--- engine is gone (rl.recipe.health).
function Trainer:forget_engine(url) drop_shm(self, url) end

local function sync_shm(self, eng, version, timeout, fname)
  self._shm = self._shm or {}
  for attempt = 1, 2 do
    local st = self._shm[eng.url]
    if not st then
      local r, err = post_json(eng.url, "/init_weights_shm", {}, timeout, eng._api_key)
      if not r then return nil, "init_weights_shm: " .. err, "init" end
      st = { layout = json.encode(r), id = r.id, next = r.next_buffer }
      self._shm[eng.url] = st
    end
    local w, werr = await(self._h:shm_write(st.layout, st.next), fname)
    if not w then
      drop_shm(self, eng.url)
      return nil, "writing shared weights: " .. tostring(werr)
    end
    local r, err = post_json(eng.url, "/update_weights_from_shm",
      { id = st.id, buffer = st.next, weight_version = version }, timeout, eng._api_key)
    if r then
      st.next = r.next_buffer
      return r
    end
    drop_shm(self, eng.url)
    -- The engine released or re-shared its weights: share them anew, once.
    if attempt == 2 or not err:find("no shared weights", 1, true) then return nil, "update_weights_from_shm: " .. err end
  end
end

-- One engine of a non-distributed sync: in memory, shared memory or files.
local function sync_one(self, eng, i, method, version, opts, files, fname)
  if type(eng) ~= "table" then
    error(("%s: engines[%d] is neither an rl.engine nor has update_weights_from_disk"):format(fname, i), 3)
  end
  if eng.mode == "thread" and eng._h and method == "auto" then
    local r, err = await(self._h:sync(eng._h, version), fname)
    return r, err, "memory"
  end
  if method == "shm" or (method == "auto" and eng.mode == "process") then
    if type(eng.url) ~= "string" then
      error(("%s: engines[%d] has no url (method 'shm' talks to engine servers)"):format(fname, i), 3)
    end
    local r, err, stage = sync_shm(self, eng, version, opts.timeout or 120, fname)
    if r or method == "shm" or stage ~= "init" then return r, err, "shm" end
    -- auto: this engine cannot share its weights now (on a GPU, /dev/shm full,
    -- weights released): files this time, shared memory tried again next time.
    self._shm_warned = self._shm_warned or {}
    if not self._shm_warned[eng.url] then
      self._shm_warned[eng.url] = true
      require("rl.log").warn("rl.trainer: %s cannot share its weights (%s); syncing it through files", eng.url, err)
    end
  end
  if not eng.update_weights_from_disk then
    error(("%s: engines[%d] is neither an rl.engine nor has update_weights_from_disk"):format(fname, i), 3)
  end
  local d, err = files()
  if not d then return nil, err end
  local r, uerr = eng:update_weights_from_disk(d, version)
  return r, uerr, "disk"
end

--- Hands the current weights to engines (one or a list). opts: a version, or
--- {version, method, timeout, master_address, backend}. method "auto" (default): thread-mode
--- rl.engines in memory; process-mode rl.engines through shared memory ("shm", falling
--- back to "disk" with a warning when the engine cannot share its weights); anything
--- else with update_weights_from_disk through a safetensors directory on tmpfs ("disk").
--- method "shm": engine servers on this machine, CPU engines (rlhost's
--- /init_weights_shm + /update_weights_from_shm): the trainer writes the weights in the
--- engine's layout into the one of two shared buffers the engine is not reading, and
--- the engine switches buffers between two steps. method "distributed": a c10d broadcast
--- to engine servers (SGLang's /init_weights_update_group and
--- /update_weights_from_distributed; the group is made on the first sync to an
--- engine set; backend "gloo", or "nccl" for GPU engines on a CUDA build), every
--- step bounded by `timeout` (s, default 120). The weight
--- version becomes `version` (default: the trainer's step). On data-parallel ranks
--- other than 0 it does nothing (rank 0 holds the same weights).
--- Returns {seconds, weight_version, methods} (methods[i]: how engine i got them,
--- "memory", "shm" or "disk"; absent for "distributed") or nil, err (the first failure).
local SYNC_OPTS = { version = true, method = true, timeout = true, master_address = true, master_port = true,
                    backend = true }

function Trainer:sync(engines, opts)
  local fname = "rl.trainer.Trainer:sync"
  task.need_task(fname)
  if type(opts) ~= "table" then opts = { version = opts } end
  for k in pairs(opts) do
    if not SYNC_OPTS[k] then
      error(("%s: unknown option '%s' (version, method, timeout, master_address, master_port, backend)")
        :format(fname, tostring(k)), 2)
    end
  end
  local method = opts.method or "auto"
  if method ~= "auto" and method ~= "distributed" and method ~= "disk" and method ~= "shm" then
    error(fname .. ": bad argument 'opts.method' ('auto', 'shm', 'disk' or 'distributed' expected, got '"
      .. tostring(method) .. "')", 2)
  end
  if type(engines) == "string" then engines = { { url = engines } } end
  if type(engines) == "table" and engines[1] == nil and (engines._h or engines.url) then engines = { engines } end
  local version = tostring(opts.version or self:step())
  local t0 = require("rl._core").loop.now()
  if not require("rl.dist").is_main() then return { seconds = 0, weight_version = version, skipped = true } end
  if method == "distributed" then
    local r, err = sync_distributed(self, engines, version, opts)
    if not r then return nil, fname .. ": " .. err end
    self.weight_version = version
    return { seconds = require("rl._core").loop.now() - t0, weight_version = version }
  end
  local dir
  local function files()  -- one safetensors directory on tmpfs for every "disk" engine of this sync
    if not dir then
      dir = ("%s/rlhost-weights-%s-%s"):format(tmp_dir(), os.time() .. "-" .. math.random(1e6), version)
      local ok, serr = self.model:save(dir)
      if not ok then return nil, "rl.trainer: writing weights for sync: " .. tostring(serr) end
    end
    return dir
  end
  local last, methods = nil, {}
  for i, eng in ipairs(engines) do
    local r, err, how = sync_one(self, eng, i, method, version, opts, files, fname)
    if not r then
      if dir then os.execute("rm -rf '" .. dir .. "'") end
      return nil, ("sync to engine %d failed: %s"):format(i, tostring(err))
    end
    last, methods[i] = r, how
  end
  if dir then os.execute("rm -rf '" .. dir .. "'") end
  self.weight_version = last and last.weight_version or version
  return { seconds = require("rl._core").loop.now() - t0, weight_version = last and last.weight_version or version,
           methods = methods }
end

--- Writes the policy as a Hugging Face directory (config.json + safetensors).
function Trainer:save_model(dir, opts) return self.model:save(dir, opts) end

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
    sources = { model = self.model_dir, ref = self.ref_dir }, tokenizer_dir = self.model_dir,
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
  for _, sub in ipairs { opts.loss or {}, opts.optimizer or {} } do
    for k, v in pairs(sub) do o[k] = v end
  end
  for k, v in pairs(opts) do
    if not RESERVED[k] then o[k] = v end
  end
  local dtype = opts.dtype or st.dtype
  local model, err = opts.model or dir, nil
  if type(model) == "string" then
    model, err = require("rl.model").load(model, { dtype = dtype, device = opts.device })
    if not model then return nil, ("%s: model %s: %s"):format(fname, tostring(opts.model or dir), err) end
  end
  local ref = opts.ref
  if ref == nil or ref == true then ref = sources.ref end
  if type(ref) == "string" then
    local r, rerr = require("rl.model").load(ref, { dtype = dtype, device = opts.device })
    if not r then
      local from = type(opts.ref) == "string" and "opts.ref" or "sources.ref in trainer_state.json"
      return nil, ("%s: the reference model %s (%s) cannot be loaded: %s "
        .. "(hint: pass opts.ref = <dir>, or false for none)"):format(fname, ref, from, tostring(rerr))
    end
    ref = r
  end
  o.model, o.ref, o.dtype = model, ref or nil, dtype
  local tr = M.new(o)
  local extra, rerr = restore(tr, dir, opts.model ~= nil, fname)
  if extra == nil then return nil, fname .. ": " .. tostring(rerr) end
  return tr, extra
end

function Trainer:__tostring() return ("rl.trainer(step %d, lr %g)"):format(self:step(), self:lr()) end

return M
