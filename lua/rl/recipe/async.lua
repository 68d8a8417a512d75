--- rl.recipe.async: rollouts that run while the trainer trains.
---
--- one_step_off (slime's train_async.py): the rollout of step k+1 starts as soon as step
--- k's batch is taken and is generated while step k trains; the weight sync waits for it,
--- so each sample is sampled under one version, exactly one update behind the policy that
--- trains on it (staleness 1; verl's staleness_threshold = 1, AReaL's
--- max_head_offpolicyness = 1, prime-rl's max_off_policy_steps = 1).
---
--- fully_async (slime's fully_async example, AReaL, PipelineRL): the engines generate
--- continuously (rl.rollout.stream); a step takes its groups as soon as enough are done;
--- the weight sync swaps the engines' weights between two decode steps while sequences
--- stay resident, so a sample may span versions (its tokens carry theirs). At most
--- rollout_batch_size × (K + 1) groups are held; a group over K versions old is dropped,
--- kept or waited for (--staleness-policy).
---
--- The engines' log-probs of every token are the behaviour policy's bit for bit: --use-tis
--- with recomputed old log-probs is the decoupled PPO loss (AReaL), exact.
--
--   local ahead = rl.recipe.async.one_step_off(job)
--   ahead:start(first)
--   for id = first, last do
--     local groups = ahead:take(id)            -- waits for it if it is still running
--     if id < last then ahead:start(id + 1) end
--     job:train(convert(groups))
--     ahead:settle()                            -- the sync waits for the rollout in flight
--     job:sync(); ahead:synced(job.step_metrics["rollout/weight_version"])
--     job:log_step()
--   end
--
--   local stream = rl.recipe.async.fully_async(job, { max_staleness = 2, policy = "drop" })
--   stream:start(first)
--   for id = first, last do
--     job:train(convert(stream:take(id)))      -- the engines generate on meanwhile
--     job:sync(); stream:synced(job.step_metrics["rollout/weight_version"])
--     job:log_step()
--   end
--   stream:stop()
local rl = require "rl"
local task = require "rl.task"

local M = {}

-- The weight versions the engines reported, numbered by sync (the first: 0), and the
-- staleness metrics of a batch: versions between each trained token's sampling and the
-- policy that trains on it, tokens per version.
local Versions = {}
Versions.__index = Versions

local function versions() return setmetatable({ index = {}, syncs = 0 }, Versions) end

function Versions:synced(version)
  self.syncs = self.syncs + 1
  if version ~= nil then self.index[tostring(version)] = self.syncs end
end

function Versions:metrics(samples)
  local lo, hi, sum, n, per = math.huge, -math.huge, 0, 0, {}
  for _, s in ipairs(samples) do
    for _, v in ipairs(s:token_weight_versions()) do
      if v then
        if self.index[v] == nil then self.index[v] = 0 end  -- the engines' first version
        local st = self.syncs - self.index[v]
        lo, hi, sum, n = math.min(lo, st), math.max(hi, st), sum + st, n + 1
        per[v] = (per[v] or 0) + 1
      end
    end
  end
  local m = {}
  if n > 0 then m["async/staleness_min"], m["async/staleness_mean"], m["async/staleness_max"] = lo, sum / n, hi end
  for v, c in pairs(per) do m["async/tokens_version_" .. v] = c end
  return m
end

local Ahead = {}
Ahead.__index = Ahead

--- A one-step-off driver over a job (rl.recipe.setup's).
function M.one_step_off(job)
  return setmetatable({ job = job, versions = versions(), engine_idle = 0 }, Ahead)
end

--- Starts the rollout of step `rollout_id` in the background, under the engines' current
--- weights. One at a time.
function Ahead:start(rollout_id)
  if self.pending then error("rl.recipe.async: the rollout of step " .. self.pending.id .. " is still pending", 2) end
  local ro, now = self.job.rollout, rl.now()
  if self.idle_since then self.engine_idle = self.engine_idle + (now - self.idle_since) end
  local p = { id = rollout_id, started = now, data_state = self.job.data and self.job.data:state() }
  self.job:rollout_ahead(p.data_state)
  p.task = task.spawn_named("rollout " .. rollout_id, function()
    local groups, extra = ro:generate_rollout(rollout_id)
    p.finished = rl.now()
    self.idle_since = p.finished
    return { groups = groups, extra = extra, seconds = ro.last_rollout_time or (p.finished - p.started),
             data_state = p.data_state }
  end)
  p.task.quiet = true
  self.pending = p
end

-- Waits for the pending rollout under the job's timer rollout_wait (the time the trainer
-- side waited: perf/rollout_wait_time); its error, if it failed, is the step's.
function Ahead:settle()
  local p = self.pending
  if p and not p.result then
    p.result = self.job:timed("rollout_wait", function() return p.task:wait() end)
  end
  return p
end

--- The groups of step `rollout_id` (the job takes them as rollout_step's), and the
--- step's async metrics: staleness min/mean/max, tokens per version, engine idle.
function Ahead:take(rollout_id)
  local t0 = rl.now()
  local p = self:settle()
  if not p or p.id ~= rollout_id then
    error(("rl.recipe.async: no rollout of step %s was started"):format(tostring(rollout_id)), 2)
  end
  self.pending = nil
  local r = p.result
  r.waited = rl.now() - t0
  self.job:rollout_ahead(nil)   -- it is this step's now (its data state goes with the step)
  local groups, samples = self.job:take_rollout(rollout_id, r)
  local m = self.job.step_metrics
  for k, v in pairs(self.versions:metrics(samples)) do m[k] = v end
  m["async/engine_idle_time"], self.engine_idle = self.engine_idle, 0
  return groups, samples
end

--- Cancels the rollout in flight (a stop between steps); its prompts are not trained.
function Ahead:cancel()
  local p = self.pending
  self.pending = nil
  if p and not p.task:done() then p.task:cancel("stopping") end
end

--- After job:sync(): the engines' new version (what their samples will report).
function Ahead:synced(version) self.versions:synced(version) end

-- ---- fully asynchronous ------------------------------------------------------------------

local Full = {}
Full.__index = Full

--- A fully asynchronous driver over a job: opts.max_staleness (K, in weight versions),
--- opts.policy (drop | keep | wait, rl.rollout.stream's); a step takes the job's
--- rollout_batch_size groups, and at most that many × (K + 1) are held.
function M.fully_async(job, opts)
  opts = opts or {}
  local n = job.opt.rollout_batch_size
  local stream = require("rl.rollout.stream").new(job.rollout, { capacity = n * ((opts.max_staleness or 0) + 1),
    max_staleness = opts.max_staleness, policy = opts.policy, data = job.data })
  return setmetatable({ job = job, stream = stream, n = n, versions = versions() }, Full)
end

--- Starts the engines generating for steps from `rollout_id` on (from the job's data,
--- under their current weights). The job's checkpoints keep the data with every group not
--- trained put back; a stopped or failed run stops the generation.
function Full:start(rollout_id)
  local st = self.stream
  st:start(rollout_id)
  self.last_take = rl.now()
  self.job:rollout_ahead(function(trained) return st:data_state(trained) end, function() st:stop("stopping") end)
end

--- The groups of step `rollout_id`, once enough are done (the trainer waits meanwhile:
--- perf/rollout_wait_time); the step's async metrics: staleness of its tokens, tokens per
--- version, dropped and kept over-stale groups, and since the last step's take: the
--- engines' idle time and share (no group generating), the trainer's idle share.
function Full:take(rollout_id)
  local t0 = rl.now()
  local groups, extra = self.stream:take(rollout_id, self.n)
  local t1 = rl.now()
  local period = math.max(t1 - self.last_take, 1e-9)
  self.last_take = t1
  local _, samples = self.job:take_rollout(rollout_id, { groups = groups, extra = extra, seconds = period,
                                                         waited = t1 - t0 })
  local m = self.job.step_metrics
  for k, v in pairs(self.versions:metrics(samples)) do m[k] = v end
  local idle = self.stream:idle_time()
  m["async/engine_idle_time"] = idle
  m["async/engine_idle_fraction"] = math.min(idle / period, 1)
  m["async/trainer_idle_fraction"] = math.min((t1 - t0) / period, 1)
  m["async/max_staleness"] = self.stream.max_staleness
  return groups, samples
end

--- After job:sync(): the engines' new version; the groups trained into it free their places.
--- With --use-tis, a step whose importance weights' effective sample size fell below half
--- the tokens is said once per run (the behaviour policy drifts from the proximal one).
function Full:synced(version)
  self.versions:synced(version)
  self.stream:set_version(self.versions.syncs)
  local ess = self.job.step_metrics["train/tis_ess"]
  if ess and ess < 0.5 and not self.ess_warned then
    self.ess_warned = true
    require("rl.log").warn(("train/tis_ess %.2f: the importance weights rest on a few tokens (an off-policy "
      .. "collapse starts so); a smaller --max-staleness or --staleness-policy wait keeps the samples closer to "
      .. "the policy"):format(ess))
  end
end

--- Stops the generation (the end of the run, or a stop).
function Full:stop() self.stream:stop("stopping") end

return M
