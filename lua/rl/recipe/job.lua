--- The job rl.recipe.setup returns: what a recipe's loop calls between the steps of
--- the algorithm — timers, progress, the step's metrics line, eval and checkpoint
--- schedules, graceful Ctrl-C and the final summary.
local rl = require "rl"
local log = require "rl.log"
local trace = require "rl.trace"
local task = require "rl.task"
local engines = require "rl.recipe.engines"
local budget = require "rl.rollout.budget"

local M = {}
local Job = {}
Job.__index = Job
M.Job = Job

-- slime's names for the three parts of a step.
local TIMES = { rollout = "perf/rollout_time", train = "perf/actor_train_time", sync = "perf/update_weights_time",
                eval = "perf/eval_time", save = "perf/save_time" }

--- Runs fn(...) under the named timer (rollout, train, sync, eval, save); returns
--- its results. The step's metrics get perf/<slime name>.
local function pack(...) return { n = select("#", ...), ... } end

-- Phases the stop never cuts short: the trainer's state (train), the checkpoint being
-- written (save) and the ranks' collectives (scatter) finish first.
local UNINTERRUPTIBLE = { train = true, save = true, scatter = true }

local function is_stop(err) return task.is_cancelled(err) and err.reason == "stopping" end

function Job:timed(name, fn, ...)
  if self.aborting then self:shutdown(name, "before") end
  self.times = self.times or {}
  local t0 = rl.now()
  self.phase, self.phase_since = name, t0   -- for rl.watchdog's report
  local r = pack(pcall(fn, ...))
  self.phase = nil
  if name ~= "paused" then self.times[name] = (self.times[name] or 0) + (rl.now() - t0) end
  if not r[1] then
    local err = r[2]
    if is_stop(err) or (self.aborting and task.is_cancelled(err)) then self:shutdown(name, "in") end
    if (name == "rollout" or name == "rollout_wait") and not task.is_cancelled(err) and getmetatable(err) ~= rl._Exit then
      self:fail(err)   -- the step failed (a budget, a hook): write what we have, exit 1
    end
    error(err, 0)
  end
  if self.aborting then self:shutdown(name, "after") end
  return unpack(r, 2, r.n)
end

-- Sample hooks: each finished sample ticks the rollout bar, and its trace names the
-- version (content hash) of every reloadable module the recipe watches.
function Job:sample_hooks(extra)
  local hooks = {}
  hooks[1] = function(_, s, evaluation)
    local attrs = require("rl.reload").trace_attrs()
    if next(attrs) then trace.event(s, "modules", attrs) end
    if self.bar and not evaluation then self.bar:add(1, { tokens = s.response_length or 0 }) end
    rl.watchdog.progress("sample")
  end
  if type(extra) == "function" then hooks[2] = extra end
  if type(extra) == "table" then for _, h in ipairs(extra) do hooks[#hooks + 1] = h end end
  return hooks
end

--- One rollout step with a progress bar: groups, metrics (slime's rollout/ and perf/
--- keys), the flat sample list.
function Job:rollout_step(rollout_id)
  local opt, ro = self.opt, self.rollout
  self.times = {}
  -- the step in flight: a stop before it has trained puts the data back where it began
  self.step_state = { id = rollout_id, data_state = self.data and self.data:state() }
  self:step_start(rollout_id)
  if opt.progress then
    self.bar = rl.progress.new { label = "rollout", unit = "samples",
                                 total = opt.rollout_batch_size * opt.n_samples_per_prompt }
  end
  local groups, extra = self:timed("rollout", ro.generate_rollout, ro, rollout_id)
  if self.bar then self.bar:finish(); self.bar = nil end
  local samples = {}
  for _, g in ipairs(groups) do for _, s in ipairs(g) do samples[#samples + 1] = s end end
  self.last_groups, self.last_samples = groups, samples
  self.step_metrics = self:rollout_metrics(rollout_id, samples, ro.last_rollout_time, extra)
  return groups, samples
end

-- The options of rl.rollout.metrics the flags give.
function Job:metric_options()
  local opt = self.opt
  -- perf/tokens_per_gpu_per_sec divides by the rollout's devices: its GPUs, the CPU counting as one
  local dev = tostring(self.placement and self.placement.engines or "cpu")
  local gpus = dev:match("^cpu") and 1 or (opt.rollout_num_gpus or opt.num_engines)
  return { reward_key = opt.reward_key, estimator = opt.advantage_estimator, log_reward_category = opt.log_reward_category,
           rollout_num_gpus = gpus, log_passrate = opt.log_passrate,
           n_samples_per_prompt = opt.n_samples_per_prompt }
end

-- A step's rollout/ and perf/ metrics (slime's log_rollout_data), unless the recipe's
-- --custom-rollout-log-function-path returns true: then only `extra` (the rollout's
-- counters) and rollout/step, the rest being the hook's to log.
function Job:rollout_metrics(rollout_id, samples, seconds, extra)
  local hook = self.hooks and self.hooks.custom_rollout_log_function_path
  if hook and hook(rollout_id, self.opt, samples, extra or {}, seconds) then
    local m = {}
    for k, v in pairs(extra or {}) do m[k] = v end
    m["rollout/step"] = rollout_id
    return m
  end
  return rl.rollout.metrics.rollout_metrics(rollout_id, samples, seconds, extra, self:metric_options())
end

--- Step 2: the groups → the trainer's batch (rl.rollout.train_data.convert) with the
--- flags' meaning: --advantage-estimator, --reward-key, --global-batch-size (trimmed to a
--- multiple of it unless --disable-rollout-trim-samples; one optimiser step per rollout
--- with --use-dynamic-global-batch-size), --disable-rewards-normalization,
--- --disable-grpo-std-normalization, and slime's hooks --custom-reward-post-process-path
--- and --custom-convert-samples-to-train-data-path. opts: normalize_group (the recipe's
--- normalisation of one group). The conversion's metrics join the step's.
function Job:train_data(groups, opts)
  opts = opts or {}
  local opt, hooks = self.opt, self.hooks or {}
  local td = rl.rollout.train_data
  local samples = rl.rollout.metrics.flatten(groups)
  if self.opd then   -- --use-opd: the teacher's log-prob of every sampled token
    self:timed("opd_teacher", self.opd.score, self.opd, samples)
  end
  -- slime's dynamic global batch size: every sample, trimmed to a multiple of the ranks, is
  -- one optimiser step (the trainer was made without a global batch size)
  local gbs = opt.use_dynamic_global_batch_size and self.world_size or opt.global_batch_size
  if opt.disable_rollout_trim_samples then gbs = nil end
  local batch, m
  if hooks.custom_convert_samples_to_train_data_path then
    batch, m = td.from_hook(hooks.custom_convert_samples_to_train_data_path(opt, samples), samples,
      "--custom-convert-samples-to-train-data-path")
  else
    -- --custom-reward-post-process-path: (raw, rewards) in place of the normalisation
    local post = hooks.custom_reward_post_process_path
    local est = post and function(ss) local raw, r = post(opt, ss); return r, raw end or opt.advantage_estimator
    batch, m = td.convert(groups, {
      estimator = est, normalize_group = opts.normalize_group, reward_key = opt.reward_key,
      global_batch_size = gbs, normalize = not opt.disable_rewards_normalization,
      std = not opt.disable_grpo_std_normalization,
    })
    if opt.use_dynamic_global_batch_size and batch.size ~= opt.global_batch_size then
      log.info("dynamic global batch size: %s -> %d (%d rank(s), one optimiser step)", tostring(opt.global_batch_size),
        batch.size, self.world_size)
    end
  end
  if self.step_metrics then   -- the conversion's counts (the rollout's own figures stay)
    for k, v in pairs(m or {}) do if self.step_metrics[k] == nil then self.step_metrics[k] = v end end
  end
  return batch, m
end

-- A step begins: the health monitor's and the fault drills' step (their events and
-- drills are the step's).
function Job:step_start(rollout_id)
  if self.health then self.health:step_start(rollout_id) end
  if self.faults then self.faults:step_start(rollout_id) end
end

--- A rollout generated in the background (rl.recipe.async) becomes the step's, as
--- rollout_step's would: r = {groups, extra, seconds (how long it ran, beside the
--- training), waited (how long the step waited for it: perf/rollout_wait_time, part of
--- perf/total_step_time), data_state (the data before it drew its prompts)}.
function Job:take_rollout(rollout_id, r)
  self.step_state = { id = rollout_id, data_state = r.data_state }
  self:step_start(rollout_id)
  local samples = {}
  for _, g in ipairs(r.groups) do for _, s in ipairs(g) do samples[#samples + 1] = s end end
  self.times = { rollout_wait = r.waited or 0 }
  self.last_groups, self.last_samples = r.groups, samples
  self.step_metrics = self:rollout_metrics(rollout_id, samples, r.seconds, r.extra)
  self.step_metrics["perf/rollout_time"] = r.seconds
  return r.groups, samples
end

--- A rollout started ahead of its step (rl.recipe.async) drew its prompts from the data
--- in `data_state`: a checkpoint written before that step trains resumes from there, so
--- its prompts are drawn again, none lost and none trained twice. data_state may be a
--- function(trained) -> state (continuous generation: the data with every untrained
--- group put back; trained: whether the step in flight has trained); stop, a function
--- that stops the generation in the background (a stopped or failed run calls it first).
--- nil: no rollout runs ahead any more.
function Job:rollout_ahead(data_state, stop)
  self.ahead = data_state ~= nil and { data_state = data_state, stop = stop } or nil
end

-- The data as a checkpoint keeps them: where the rollout ahead began, if one runs.
function Job:data_state()
  local a = self.ahead
  if a and type(a.data_state) == "function" then return a.data_state(self.step_state and self.step_state.trained) end
  return a and a.data_state or self.data:state()
end

-- A stopped or failed run: the generation in the background stops, and the data go back
-- to where the step in flight began (when it did not train) or the rollout ahead did.
function Job:put_back_data()
  local a, st = self.ahead, self.step_state
  if a and a.stop then a.stop() end
  if not self.data then return end
  if st and not st.trained and st.data_state then
    self.data:load_state(st.data_state)
  elseif a and a.data_state then
    self.data:load_state(self:data_state())
  end
  self.ahead = nil
end

--- Step 3: trains on the batch (with a micro-batch bar; data parallel: each rank on a
--- length-balanced share). The trainer checks batch.advantage_estimator against its
--- loss. Returns the train metrics (also in the step's metrics).
function Job:train(batch)
  local tr = self.trainer
  self.last_batch = batch
  if self.opt.debug_rollout_only then   -- slime's: rollouts only, never a train step
    if self.step_state then self.step_state.trained = true; self.last_completed = self.step_state.id end
    return {}
  end
  if (batch.size or 0) == 0 and self.is_main then self:fail(self:empty_batch_failure()) end
  -- --offload-rollout: the engines release their memory while the trainer trains
  if self.groups and self.is_main then self:timed("offload", engines.offload, self) end
  local mine, theirs = batch, {}
  if self.world_size > 1 then   -- data parallel: each rank trains on a length-balanced share
    local parts, msgs = rl.rollout.train_data.split(batch, self.world_size, { balance = self.opt.balance_data }), { false }
    for r = 2, self.world_size do
      theirs[r], parts[r].samples = parts[r].samples, nil   -- the sample objects (traces) stay on rank 0
      msgs[r] = { batch = parts[r] }
    end
    self:timed("scatter", rl.dist.scatter_object, msgs)
    mine = parts[1]
  end
  local m, err = self:timed("train", tr.train, tr, mine, { progress = self.opt.progress and "train" })
  if not m then error("train step failed: " .. tostring(err), 0) end
  if self.step_state then
    self.step_state.trained = true   -- from here the step counts as done (a stop saves it)
    self.last_completed = self.step_state.id
  end
  if self.world_size > 1 then   -- the other ranks' per-sample stats into their samples' traces
    local got = rl.dist.gather_object(nil)
    for r = 2, self.world_size do
      if theirs[r] then rl.trainer.trace_samples(theirs[r], got[r].stats) end
    end
    -- replicas (not shards) must hold the same weights after every step, to the bit
    local mine = (not tr:is_sharded() or tr:lora()) and tr:replica_digest() or ""
    if mine ~= "" then
      local differ = {}
      for r = 2, self.world_size do
        if got[r].digest ~= mine then differ[#differ + 1] = ("rank %d"):format(r - 1) end
      end
      m["train/replica_weights_equal"] = #differ == 0 and 1 or 0
      if #differ > 0 then
        log.warn("after trainer step %d the weights of %s differ from rank 0's (digest %s): the replicas diverged",
          tr:step(), table.concat(differ, ", "), mine)
      end
    end
  end
  for k, v in pairs(m) do self.step_metrics[k] = v end
  return m
end

--- Step 4: hands the trainer's weights to the engines (none with
--- --load-debug-rollout-data); the step's metrics get rollout/weight_version.
function Job:sync()
  if not self.engines or self.opt.debug_rollout_only then return end
  local tr = self.trainer
  if self.offloaded then self:timed("onload", engines.onload_weights, self) end
  local remote
  local r, serr = self:with_trainer_ranks("sync", function()
    return self:timed("sync", function()
      local lr, lerr
      if self.health then   -- --use-fault-tolerance: engine by engine, the dead restarted first
        local drills = self.faults and function() self.faults:sync_start() end
        lr, lerr = self.health:sync_weights(tr, { after_probes = drills })
      elseif self.policy_group and self.policy_group.external and self.opt.remote_weights_dir then
        -- --rollout-external on other machines: files where they read them (a shared file system)
        lr, lerr = tr:sync(self.engines, { method = "disk", tmp_dir = self.opt.remote_weights_dir })
      else
        lr, lerr = tr:sync(self.engines)
      end
      -- engines on other hosts (--rollout-num-gpus-per-node): one c10d broadcast to them all (or files, or HTTP)
      if lr and self.hosts then remote = self.hosts:sync(tr, lr.weight_version) end
      return lr, lerr
    end)
  end)
  if self.offloaded then self:timed("onload", engines.onload_kv, self) end
  if not r then error("weight sync failed: " .. tostring(serr), 0) end
  self.step_metrics["rollout/weight_version"] = tonumber(r.weight_version) or tr:step()
  -- vLLM's completions carry no weight version: the rollout reports the synced one
  if self.rollout and self.rollout.backend == "vllm" then self.rollout.weight_version = tostring(r.weight_version) end
  if self.opt.check_weight_update_equal then   -- slime's flag: every engine answers with the trainer's weights
    self.step_metrics["rollout/weight_sync_logprob_abs_diff"] =
      require("rl.recipe.sync_check").run(self, self.opt.check_weight_update_tolerance)
  end
  local how = table.concat(r.methods or {}, ", ")
  if remote and #remote.urls > 0 then
    how = how .. (how ~= "" and ", " or "") .. (remote.methods[1] or "distributed") .. " to other hosts"
  end
  if how ~= self.sync_methods then  -- said once, and again when it changes
    self.sync_methods = how
    log.info("weight sync to %d engine(s): %s (%.3f s)", #self.engines + (remote and #remote.urls or 0), how,
      r.seconds or 0)
  end
  if remote then   -- every engine's own answer: the version it serves now
    r.remote = remote
    self.step_metrics["rollout/engines/remote_synced"] = #remote.urls
    self.step_metrics["perf/update_weights_remote_time"] = remote.seconds
    local agree = true
    for _, v in ipairs(remote.versions) do agree = agree and tostring(v) == tostring(r.weight_version) end
    for _, v in ipairs(r.versions or {}) do agree = agree and tostring(v) == tostring(r.weight_version) end
    self.step_metrics["rollout/engines/versions_agree"] = agree and 1 or 0
    if not agree then
      log.warn("after the weight sync the engines serve different versions: local %s, other hosts %s (want %s)",
        table.concat(r.versions or {}, ","), table.concat(remote.versions, ","), tostring(r.weight_version))
    end
  end
  return r
end

--- Data parallel with a sharded trainer (--train-backend fsdp): every rank takes part in
--- rank 0's weight syncs and checkpoints (each gathers layers with it). Rank 0 tells the
--- others (`kind`: "sync"; "save" or "logprobs" with the call's arguments, which they
--- make too) and runs fn while they follow; otherwise fn alone. Returns fn's results.
function Job:with_trainer_ranks(kind, fn, args)
  if self.world_size <= 1 or not self.trainer:is_sharded() then return fn() end
  local msgs = { false }
  for r = 2, self.world_size do msgs[r] = { [kind] = args or true } end
  rl.dist.scatter_object(msgs)
  if kind ~= "sync" then return fn() end    -- save, logprobs: a collective every rank calls
  return self.trainer:lead(fn)
end

--- A data-parallel rank > 0: trains on the share rank 0 scatters each step (the
--- trainer all-reduces the gradients), until rank 0 finishes. A sharded trainer also
--- joins rank 0's weight syncs and checkpoints.
function Job:train_worker()
  local tr = self.trainer
  while true do
    local msg = rl.dist.scatter_object(nil)
    if msg.stop then break end
    if msg.sync then
      assert(tr:follow())
    elseif msg.logprobs then
      tr:logprobs(msg.logprobs)
    elseif msg.save then
      local r, err = tr:save(msg.save.dir, msg.save.opts)
      if not r then log.warn(("rank %d: checkpoint: %s"):format(self.rank, tostring(err))) end
    else
      local m, stats = tr:train(msg.batch)
      if not m then error(("train step failed on rank %d: %s"):format(self.rank, tostring(stats)), 0) end
      -- rank 0 puts the stats in its samples' traces and compares the replicas' weights
      rl.dist.gather_object { stats = stats, digest = (not tr:is_sharded() or tr:lora()) and tr:replica_digest() or "" }
      self.step_metrics = m
    end
  end
  if self.node then self.node:stop() end   -- this host's engines (--rollout-num-gpus-per-node)
  log.info(("rank %d: done after trainer step %d"):format(self.rank, tr:step()))
end

-- The console line: reward, accuracy, length, KL, and the step time split.
local function console_line(m, step_key)
  if step_key ~= "rollout/step" then return require("rl.metrics").format_line(m, step_key) end
  local function f(k, fmt) return type(m[k]) == "number" and (fmt):format(m[k]) or "-" end
  -- with a critic (--use-critic): its loss beside the policy's clip fraction
  local critic = type(m["train/value_loss"]) == "number" and (" | value_loss %.4f"):format(m["train/value_loss"]) or ""
  return ("rollout %d | reward %s | acc %s | resp_len %s | kl %s | clipfrac %s%s | %s s (rollout %s + train %s + sync %s)")
    :format(m["rollout/step"], f("rollout/raw_reward", "%.3f"), f("rollout/acc", "%.3f"),
      f("rollout/response_len/mean", "%.0f"), f("train/kl_loss", "%.4f"), f("train/pg_clipfrac", "%.3f"), critic,
      f("perf/total_step_time", "%.1f"), f(TIMES.rollout, "%.1f"), f(TIMES.train, "%.1f"), f(TIMES.sync, "%.2f"))
end
M.console_line = console_line

--- Logs the step's metrics (rollout, train, perf times, reload versions) to the sinks.
function Job:log_step()
  local m = self.step_metrics
  local total = 0
  for name, s in pairs(self.times or {}) do
    m[TIMES[name] or ("perf/" .. name .. "_time")] = s
    if name ~= "eval" and name ~= "save" then total = total + s end
  end
  m["perf/total_step_time"] = total
  if self.step_state then self.step_state.logged = true end
  if m["rollout/acc"] == nil then m["rollout/acc"] = m["rollout/raw_reward"] end
  for k, v in pairs(require("rl.reload").metrics()) do m[k] = v end
  local note = ""
  if self.health then
    for k, v in pairs(self.health:metrics()) do m[k] = v end
    note = self.health:step_note()
  end
  if self.hosts then   -- engines per host on the step line
    local serving = 0
    for _, n in pairs(self.hosts:per_host()) do serving = serving + n end
    m["rollout/engines/remote_serving"] = serving
    note = note .. self.hosts:step_note(self.hosts.addr, #(self.engines or {}))
  end
  self.metrics.console_format = function(mm, key) return console_line(mm, key) .. note end
  self.metrics:log(m, "rollout/step")
  self.last = m
  self.steps_done = (self.steps_done or 0) + 1
end

--- Evaluates when due (before the first step and every --eval-interval steps, and at
--- the end); logs eval/ metrics.
function Job:maybe_eval(rollout_id, final)
  local every = self.opt.eval_interval
  if not every or #self.eval_datasets == 0 then return end
  if not self.engines then   -- --load-debug-rollout-data replays without engines: nothing to evaluate
    if not self.eval_skip_logged then log.info("eval skipped: --load-debug-rollout-data replays without engines") end
    self.eval_skip_logged = true
    return
  end
  if not final and rollout_id % every ~= 0 then return end
  if final and self.last_eval == rollout_id then return end
  -- stopped by SIGTERM: save and exit promptly; by Ctrl-C: evaluate while the stop
  -- grace lasts (the stop cuts it short at the end of the grace, then saves)
  if final and self.stopping and self.stop_signal == "SIGTERM" then return end
  local t0 = rl.now()
  local results, m = self:timed("eval", self.rollout.eval, self.rollout, rollout_id, self.eval_datasets)
  self.last_eval_results = results   -- {name = {rewards, samples, ...}}
  m["perf/eval_time"] = rl.now() - t0
  local hook = self.hooks and self.hooks.custom_eval_rollout_log_function_path
  if hook and hook(rollout_id, self.opt, results, m) then   -- the hook logged it (slime's: true skips ours)
    m = { ["eval/step"] = rollout_id, ["perf/eval_time"] = m["perf/eval_time"] }
  end
  self.metrics:log(m, "eval/step")
  self.last_eval, self.last_eval_metrics = rollout_id, m
  self.eval_curve = self.eval_curve or {}
  self.eval_curve[#self.eval_curve + 1] = m
  return m
end

-- Writes the checkpoint of step `rollout_id` (the trainer and the data as they are
-- now); true, or nil and a message naming what failed and the checkpoint that stays.
function Job:save_checkpoint(rollout_id)
  local opt = self.opt
  local sopts = { extra = { next_rollout = rollout_id + 1, data = self:data_state() } }
  local r, err = self:with_trainer_ranks("save", function() return self.trainer:save(opt.save, sopts) end,
    { dir = opt.save, opts = sopts })
  if not r then
    self.save_failures = (self.save_failures or 0) + 1
    return nil, ("the checkpoint of step %d was not written: %s (%s)"):format(rollout_id,
      tostring(err):gsub("^rl%.trainer%.Trainer:save: ", ""), self.last_checkpoint
        and ("the last good one, " .. self.last_checkpoint .. ", is intact")
        or ("what " .. opt.save .. " held before is intact"))
  end
  log.info(("checkpoint %s (%.1f s)"):format(r.path, r.seconds))
  self.last_saved, self.last_checkpoint = rollout_id, r.path
  return true
end

--- Saves a checkpoint when due (every --save-interval steps, at the end, on Ctrl-C).
--- A save that fails (a full disk) leaves the last good checkpoint as it was; with
--- --on-save-failure stop (the default) the run then stops cleanly with status 1,
--- with continue it trains on and tries again at the next save.
function Job:maybe_save(rollout_id, force)
  local opt = self.opt
  if not opt.save then return end
  if not force and not (opt.save_interval and (rollout_id + 1) % opt.save_interval == 0) then return end
  if self.last_saved == rollout_id then return end
  local ok, err = self:timed("save", self.save_checkpoint, self, rollout_id)
  if ok then return end
  if opt.on_save_failure == "continue" and not force then
    log.error(err .. "; training goes on (--on-save-failure continue), the next save tries again")
    return
  end
  log.error(err)
  self:finish(false)
  error({ exit_code = 1, message = err .. (force and "" or " (--on-save-failure stop)") }, 0)
end

--- Pauses the loop at its next step boundary (from `rlhost attach`:
--- `rl.recipe.current:pause()`); engines and router keep serving.
function Job:pause()
  self.paused = true
  log.info("pause requested: the loop waits at the next step boundary")
  return true
end

function Job:resume()
  self.paused = false
  return true
end

--- Waits while paused (Ctrl-C still stops).
function Job:wait_while_paused()
  if not self.paused then return end
  log.info("paused between steps: rl.recipe.current:resume() to go on")
  self:timed("paused", function()
    while self.paused and not self.stopping do
      rl.watchdog.progress("paused")   -- waiting by request is no hang
      rl.sleep(0.2)
    end
  end)
  log.info("resumed")
end

--- A fault drill (also from `rlhost attach`: rl.recipe.current:inject_fault("kill", 2), or
--- inject_fault("kill", 1, "ref") for engine 1 of group 'ref'): SIGKILL ("kill") or SIGSTOP
--- ("stop") to engine i of a group (default the policy's) now. Needs --use-fault-tolerance.
function Job:inject_fault(action, i, group)
  if not self.faults then return nil, "inject_fault: the job runs without --use-fault-tolerance" end
  return self.faults:inject(action, i, group)
end

--- Ctrl-C or SIGTERM: the step in flight has --stop-grace seconds to finish (then the
--- checkpoint, the dumps, exit 130 / 143); past the grace, or at a second signal, the
--- work in flight is aborted and the last completed step saved (docs/operations.md,
--- "Stopping").
function Job:on_interrupt()
  local core = require "rl._core"
  local grace = self.opt.stop_grace or 10
  if self.is_main then core.interrupt.set_stop_grace(grace) end
  self.main_task = task.current()
  rl.on_interrupt(function(signal)
    local what = signal == "SIGTERM" and "SIGTERM" or "Ctrl-C"
    if not self.is_main then   -- a training rank: rank 0 decides when to stop
      log.info(("rank %d: %s: rank 0 finishes its step and stops every rank"):format(self.rank, what))
      return true
    end
    if self.stopping then
      self:abort_now(what .. " again")
      return true
    end
    self.stopping, self.stop_signal = true, signal
    local st = core.interrupt.stop_state()   -- the clock started when the signal arrived
    local left = st and math.max(st.stop_in, 0) or grace
    if st and st.stop_in <= 0 then
      -- Busy code held the loop until the host stopped it at the end of the grace:
      -- the signal reaches Lua only now, with nothing left of the grace.
      log.warn(("%s arrived while busy code held the loop"):format(what))
      self:abort_now(("the %g s stop grace is over"):format(grace))
      return true
    end
    log.warn(("%s: stopping after this step (checkpoint and dumps are written); a step still running in %.0f s "
      .. "(--stop-grace) is aborted and the last completed one saved; again to abort now"):format(what, left))
    self.stop_timer = task.after(left, function() self:abort_now(("the %g s stop grace is over"):format(grace)) end)
    self.stop_timer.quiet = true
    return true
  end)
end

--- Aborts the work in flight now (the stop grace is over, or a second signal): busy
--- guarded code is interrupted by the host, the main task is cancelled at its wait —
--- unless it trains, saves or waits on other ranks, which finish first — and
--- Job:shutdown saves the last completed step and exits.
function Job:abort_now(why)
  if self.aborting or self.shutting_down then return end
  self.aborting = why
  require("rl._core").interrupt.abort_now()
  if self.stop_timer and self.stop_timer ~= task.current() then self.stop_timer:cancel() end
  log.warn(("%s: aborting the %s in flight"):format(why, self.phase or "step"))
  -- Between phases (the recipe's own code) the next phase begins with the shutdown.
  local main = self.main_task
  if self.phase and not UNINTERRUPTIBLE[self.phase] and main and not main:done() and main ~= task.current() then
    main:cancel("stopping")
  end
end

--- The end of a stopped run (in the main task; never returns): the step in flight is
--- done when it trained (its metrics are logged and it is saved), else its samples are
--- dropped and the data go back to where it began; the checkpoint of the last
--- completed step, the summary, every child stopped; exit 130 (Ctrl-C) or 143.
--- `phase`, `when`: where the stop caught the main task ("in" the rollout, "after" the
--- train, "before" the sync).
function Job:shutdown(phase, when)
  if self.shutting_down then return end
  self.shutting_down = true
  if self.stop_timer and self.stop_timer ~= task.current() then self.stop_timer:cancel() end
  if self.bar then self.bar:finish(); self.bar = nil end
  if not self.stopping then
    -- The host stopped busy guarded code at the end of the grace before the signal
    -- reached Lua (the loop was held by it): say so now; the handler, when it runs
    -- later, finds the run stopping already.
    local sst = require("rl._core").interrupt.stop_state()
    self.stopping, self.stop_signal = true, sst and sst.code == 130 and "SIGINT" or "SIGTERM"
  end
  if not self.aborting then
    self.aborting = ("the %g s stop grace is over"):format(self.opt.stop_grace or 10)
    log.warn(("%s: aborting the %s in flight"):format(self.aborting, phase or "step"))
  end
  if self.rollout then self.rollout:cancel_pending("stopping") end
  local st = self.step_state
  self:put_back_data()   -- the prompts not trained are drawn again after a resume
  if st and st.trained and not st.logged then
    self:log_step()
  elseif st and not st.trained and st.data_state then
    log.info(("step %d did not train (stopped %s %s): its samples are dropped, the data are back where it began")
      :format(st.id, when or "in", phase or "the step"))
  end
  if self.opt.save and self.last_completed and self.last_saved ~= self.last_completed then
    local ok, err = self:save_checkpoint(self.last_completed)
    if not ok then log.error(err) end
  elseif self.opt.save and not self.last_completed then
    log.info("no step completed in this run: the checkpoint directory is unchanged")
  end
  local code = self.stop_signal == "SIGTERM" and 143 or 130
  self:finish(self.last_completed or false)
  rl.exit(code)
end

--- --rollout-function sleep: engines and router stay up and idle (profiling, load
--- tests) until Ctrl-C (rl.rollout.sleep, logging once an hour or every interval_s).
function Job:sleep(interval_s)
  rl.watchdog.stop()   -- idle by design
  local urls = {}
  for i, e in ipairs(self.engines or {}) do urls[i] = e.url end
  rl.rollout.sleep { router_url = self.router and self.router.url, workers = urls, interval = interval_s,
                     stop = function() return self.stopping end }
  self:finish(false)
end

--- Stops engines and router, closes the sinks and prints where everything went.
function Job:finish(last_rollout)
  if self.finished then return end
  self.finished = true
  if self.stop_timer and self.stop_timer ~= task.current() then self.stop_timer:cancel() end
  rl.on_interrupt(nil)
  if self.world_size > 1 and self.is_main then   -- the training ranks stop too
    local stop = {}
    for r = 1, self.world_size do stop[r] = { stop = true } end
    rl.dist.scatter_object(stop)
  end
  local opt, lines = self.opt, {}
  local function add(k, v) if v then lines[#lines + 1] = ("  %-18s %s"):format(k, v) end end
  local m, e = self.last or {}, self.last_eval_metrics or {}
  add("steps", ("%d rollout steps in %.0f s%s"):format(self.steps_done or 0, rl.now() - self.started,
    self.stopping and (" (stopped by " .. (self.stop_signal == "SIGTERM" and "SIGTERM" or "Ctrl-C") .. ")") or ""))
  if self.aborting then add("aborted", self.aborting .. (self.last_completed and (": step " .. self.last_completed
    .. " was the last completed") or ": no step completed")) end
  if self.failure then add("failed", self.failure) end
  if self.save_failures then add("save failures", tostring(self.save_failures)) end
  if m["rollout/raw_reward"] then add("last reward", ("%.3f"):format(m["rollout/raw_reward"])) end
  for k, v in pairs(e) do
    if k:match("^eval/[^/%-]+$") and k ~= "eval/step" then add(k, ("%.3f (after step %d)"):format(v, self.last_eval)) end
  end
  add("model", self.model_dir)
  add("checkpoint", self.last_checkpoint)
  add("debug dumps", opt.save_debug_rollout_data)
  add("metrics", self.metrics.jsonl_path)
  add("tensorboard", self.metrics.tensorboard_dir)
  add("prometheus", self.metrics_server and (self.metrics_server:url() .. "/metrics"))
  log.info("done:\n" .. table.concat(lines, "\n"))
  if not self.stopping then require("rl._core").interrupt.set_stop_grace(0) end   -- a later -i REPL's Ctrl-C
  self.metrics:close()
  if self.metrics_server then self.metrics_server:stop() end
  if self.router_prometheus then self.router_prometheus:stop() end
  rl.watchdog.stop()
  if self.health then self.health:stop() end
  if self.hosts then self.hosts:stop() end
  if self.groups then engines.stop(self) else
    if self.router then self.router:stop() end
    for _, eng in ipairs(self.engines or {}) do eng:stop() end
  end
  if self.stopping and last_rollout ~= false then rl.exit(self.stop_signal == "SIGTERM" and 143 or 130) end
end

--- The failure of a step with nothing to train on (every sample failed or was left out).
function Job:empty_batch_failure()
  local ro = self.rollout
  local b = ro and ro.last_budget or budget.new { rollout_batch_size = 1, n_samples_per_prompt = 1 }
  local id = self.step_state and self.step_state.id or "?"
  return b:failure(id, ("no sample to train on: %d of the %d finished samples failed, the rest had no reward"):format(
    b.failed, b.finished), "check the reward function (its last error is above)")
end

--- A step failed (a failure budget, a recipe hook, nothing to train on): writes what
--- there is — the step's samples as a dump (`<dump>.failed.pt`), a metrics record, the
--- checkpoint of the last completed step — stops the engines and ends the run with
--- status 1 and one message naming the failing component and its last error.
function Job:fail(err)
  if self.shutting_down then error(err, 0) end
  self.shutting_down = true
  local f = err
  if not budget.is_failure(f) then
    local id = self.step_state and self.step_state.id or "?"
    f = { message = ("rollout step %s failed: %s"):format(tostring(id), tostring(err)) }
  end
  if self.bar then self.bar:finish(); self.bar = nil end
  local ro, written = self.rollout, {}
  if ro then ro:cancel_pending("rollout failed") end
  local st = self.step_state
  if st and ro and ro.save_debug_rollout_data and f.groups then
    local flat = {}
    for _, g in ipairs(f.groups) do for _, smp in ipairs(g) do flat[#flat + 1] = smp end end
    local path = rl.dump.path(ro.save_debug_rollout_data, st.id):gsub("%.pt$", "") .. ".failed.pt"
    local ok, dpath, derr = pcall(rl.dump.save, path, st.id, flat)
    if ok and dpath then written[#written + 1] = "dump " .. dpath
    else log.error("the failed step's dump: " .. tostring(ok and derr or dpath)) end
  end
  if st and self.metrics then
    local m = { ["rollout/failed_step"] = st.id, ["rollout/failed_samples"] = f.failed, ["rollout/finished_samples"] = f.finished }
    for outcome, c in pairs(ro and ro.counters.reward or {}) do m["rollout/reward/" .. outcome] = c end
    pcall(function() self.metrics:log(m, "rollout/failed_step") end)
    if self.metrics.jsonl_path then written[#written + 1] = "metrics " .. self.metrics.jsonl_path end
  end
  self:put_back_data()
  if self.opt.save and self.last_completed and self.last_saved ~= self.last_completed then
    local ok, serr = self:save_checkpoint(self.last_completed)
    if ok then written[#written + 1] = "checkpoint " .. self.last_checkpoint .. " (the last completed step)"
    else log.error(serr) end
  end
  local msg = f.message
  if #written > 0 then msg = msg .. "\n  written: " .. table.concat(written, ", ") end
  self.failure = msg:match("^[^\n]*")
  self:finish(false)
  error({ exit_code = 1, message = msg }, 0)
end

return M
