--- The job rl.recipe.setup returns: what a recipe's loop calls between the steps of
--- the algorithm — timers, progress, the step's metrics line, eval and checkpoint
--- schedules, graceful Ctrl-C and the final summary.
local rl = require "rl"
local log = require "rl.log"
local trace = require "rl.trace"
local engines = require "rl.recipe.engines"

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

function Job:timed(name, fn, ...)
  self.times = self.times or {}
  local t0 = rl.now()
  self.phase, self.phase_since = name, t0   -- for rl.watchdog's report
  local r = pack(fn(...))
  self.phase = nil
  self.times[name] = (self.times[name] or 0) + (rl.now() - t0)
  return unpack(r, 1, r.n)
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
  if self.health then self.health:step_start(rollout_id) end
  if self.faults then self.faults:step_start(rollout_id) end
  if opt.progress then
    self.bar = rl.progress.new { label = "rollout", unit = "samples",
                                 total = opt.rollout_batch_size * opt.n_samples_per_prompt }
  end
  local groups, extra = self:timed("rollout", ro.generate_rollout, ro, rollout_id)
  if self.bar then self.bar:finish(); self.bar = nil end
  local samples = {}
  for _, g in ipairs(groups) do for _, s in ipairs(g) do samples[#samples + 1] = s end end
  self.last_groups, self.last_samples = groups, samples
  self.step_metrics = rl.rollout.metrics.rollout_metrics(rollout_id, samples, ro.last_rollout_time, extra)
  return groups, samples
end

--- A rollout generated in the background (rl.recipe.async) becomes the step's, as
--- rollout_step's would: r = {groups, extra, seconds (how long it ran, beside the
--- training), waited (how long the step waited for it: perf/rollout_wait_time, part of
--- perf/total_step_time)}.
function Job:take_rollout(rollout_id, r)
  local samples = {}
  for _, g in ipairs(r.groups) do for _, s in ipairs(g) do samples[#samples + 1] = s end end
  self.times = { rollout_wait = r.waited or 0 }
  self.last_groups, self.last_samples = r.groups, samples
  self.step_metrics = rl.rollout.metrics.rollout_metrics(rollout_id, samples, r.seconds, r.extra)
  self.step_metrics["perf/rollout_time"] = r.seconds
  return r.groups, samples
end

--- Step 3: trains on the batch (with a micro-batch bar; data parallel: each rank on a
--- length-balanced share). The trainer checks batch.advantage_estimator against its
--- loss. Returns the train metrics (also in the step's metrics).
function Job:train(batch)
  local tr = self.trainer
  self.last_batch = batch
  -- --offload-rollout: the engines release their memory while the trainer trains
  if self.groups and self.is_main then self:timed("offload", engines.offload, self) end
  local mine, theirs = batch, {}
  if self.world_size > 1 then   -- data parallel: each rank trains on a length-balanced share
    local parts, msgs = rl.rollout.train_data.split(batch, self.world_size), { false }
    for r = 2, self.world_size do
      theirs[r], parts[r].samples = parts[r].samples, nil   -- the sample objects (traces) stay on rank 0
      msgs[r] = { batch = parts[r] }
    end
    self:timed("scatter", rl.dist.scatter_object, msgs)
    mine = parts[1]
  end
  local m, err = self:timed("train", tr.train, tr, mine, { progress = self.opt.progress and "train" })
  if not m then error("train step failed: " .. tostring(err), 0) end
  if self.world_size > 1 then   -- the other ranks' per-sample stats into their samples' traces
    local stats = rl.dist.gather_object(nil)
    for r = 2, self.world_size do
      if theirs[r] then rl.trainer.trace_samples(theirs[r], stats[r]) end
    end
  end
  for k, v in pairs(m) do self.step_metrics[k] = v end
  return m
end

--- Step 4: hands the trainer's weights to the engines (none with
--- --load-debug-rollout-data); the step's metrics get rollout/weight_version.
function Job:sync()
  if not self.engines then return end
  local tr = self.trainer
  if self.offloaded then self:timed("onload", engines.onload_weights, self) end
  local r, serr
  if self.health then   -- --use-fault-tolerance: engine by engine, the dead restarted first
    local drills = self.faults and function() self.faults:sync_start() end
    r, serr = self:timed("sync", self.health.sync_weights, self.health, tr, { after_probes = drills })
  else
    r, serr = self:timed("sync", tr.sync, tr, self.engines)
  end
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
  if how ~= self.sync_methods then  -- said once, and again when it changes
    self.sync_methods = how
    log.info("weight sync to %d engine(s): %s (%.3f s)", #self.engines, how, r.seconds or 0)
  end
  return r
end

--- A data-parallel rank > 0: trains on the share rank 0 scatters each step (the
--- trainer all-reduces the gradients), until rank 0 finishes.
function Job:train_worker()
  local tr = self.trainer
  while true do
    local msg = rl.dist.scatter_object(nil)
    if msg.stop then break end
    local m, stats = tr:train(msg.batch)
    if not m then error(("train step failed on rank %d: %s"):format(self.rank, tostring(stats)), 0) end
    rl.dist.gather_object(stats)   -- rank 0 puts them in its samples' traces
    self.step_metrics = m
  end
  log.info(("rank %d: done after trainer step %d"):format(self.rank, tr:step()))
end

-- The console line: reward, accuracy, length, KL, and the step time split.
local function console_line(m, step_key)
  if step_key ~= "rollout/step" then return require("rl.metrics").format_line(m, step_key) end
  local function f(k, fmt) return type(m[k]) == "number" and (fmt):format(m[k]) or "-" end
  return ("rollout %d | reward %s | acc %s | resp_len %s | kl %s | clipfrac %s | %s s (rollout %s + train %s + sync %s)")
    :format(m["rollout/step"], f("rollout/raw_reward", "%.3f"), f("rollout/acc", "%.3f"),
      f("rollout/response_len/mean", "%.0f"), f("train/kl_loss", "%.4f"), f("train/pg_clipfrac", "%.3f"),
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
  if m["rollout/acc"] == nil then m["rollout/acc"] = m["rollout/raw_reward"] end
  for k, v in pairs(require("rl.reload").metrics()) do m[k] = v end
  local note = ""
  if self.health then
    for k, v in pairs(self.health:metrics()) do m[k] = v end
    note = self.health:step_note()
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
  if final and self.stopping then return end   -- stopped by a signal: save and exit promptly
  local t0 = rl.now()
  local results, m = self.rollout:eval(rollout_id, self.eval_datasets)
  self.last_eval_results = results   -- {name = {rewards, samples, ...}}
  m["perf/eval_time"] = rl.now() - t0
  self.metrics:log(m, "eval/step")
  self.last_eval, self.last_eval_metrics = rollout_id, m
  self.eval_curve = self.eval_curve or {}
  self.eval_curve[#self.eval_curve + 1] = m
  return m
end

--- Saves a checkpoint when due (every --save-interval steps, at the end, on Ctrl-C).
function Job:maybe_save(rollout_id, force)
  local opt = self.opt
  if not opt.save then return end
  if not force and not (opt.save_interval and (rollout_id + 1) % opt.save_interval == 0) then return end
  if self.last_saved == rollout_id then return end
  local r, err = self:timed("save", self.trainer.save, self.trainer, opt.save,
    { extra = { next_rollout = rollout_id + 1, data = self.data:state() } })
  if not r then error("checkpoint failed: " .. tostring(err), 0) end
  log.info(("checkpoint %s (%.1f s)"):format(r.path, r.seconds))
  self.last_saved, self.last_checkpoint = rollout_id, r.path
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
  while self.paused and not self.stopping do
    rl.watchdog.progress("paused")   -- waiting by request is no hang
    rl.sleep(0.2)
  end
  log.info("resumed")
end

--- A fault drill (also from `rlhost attach`: rl.recipe.current:inject_fault("kill", 2), or
--- inject_fault("kill", 1, "ref") for engine 1 of group 'ref'): SIGKILL ("kill") or SIGSTOP
--- ("stop") to engine i of a group (default the policy's) now. Needs --use-fault-tolerance.
function Job:inject_fault(action, i, group)
  if not self.faults then return nil, "inject_fault: the job runs without --use-fault-tolerance" end
  return self.faults:inject(action, i, group)
end

--- Ctrl-C or SIGTERM stops at the next step boundary, after saving; a second one cancels.
function Job:on_interrupt()
  rl.on_interrupt(function(signal)
    local what = signal == "SIGTERM" and "SIGTERM" or "Ctrl-C"
    if not self.is_main then   -- a training rank: rank 0 decides when to stop
      log.info(("rank %d: %s: rank 0 finishes its step and stops every rank"):format(self.rank, what))
      return
    end
    self.stopping, self.stop_signal = true, signal
    log.warn(what .. ": stopping after this step (checkpoint and dumps are written); again to abort now")
  end)
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
  self.metrics:close()
  if self.metrics_server then self.metrics_server:stop() end
  rl.watchdog.stop()
  if self.health then self.health:stop() end
  if self.groups then engines.stop(self) else
    if self.router then self.router:stop() end
    for _, eng in ipairs(self.engines or {}) do eng:stop() end
  end
  if self.stopping and last_rollout ~= false then rl.exit(self.stop_signal == "SIGTERM" and 143 or 130) end
end

return M
