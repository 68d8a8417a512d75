--- rl.recipe.async: a rollout that runs while the trainer trains — one-step-off, slime's
--- train_async.py. The rollout of step k+1 starts as soon as step k's batch is taken and
--- is generated while step k trains; the weight sync waits for it, so each sample is
--- sampled under one version, exactly one update behind the policy that trains on it
--- (staleness 1; verl's staleness_threshold = 1, AReaL's max_head_offpolicyness = 1,
--- prime-rl's max_off_policy_steps = 1). The engines' log-probs of every token are the
--- behaviour policy's bit for bit: --use-tis corrects for the lag with them.
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
local rl = require "rl"
local task = require "rl.task"

local M = {}
local Ahead = {}
Ahead.__index = Ahead

--- A one-step-off driver over a job (rl.recipe.setup's).
function M.one_step_off(job)
  return setmetatable({ job = job, versions = {}, syncs = 0, engine_idle = 0 }, Ahead)
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
  local groups, samples = self.job:take_rollout(rollout_id, r)
  local m = self.job.step_metrics
  for k, v in pairs(self:staleness(samples)) do m[k] = v end
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
function Ahead:synced(version)
  self.syncs = self.syncs + 1
  if version ~= nil then self.versions[tostring(version)] = self.syncs end
end

-- Versions between each trained token's sampling and the policy that trains on it.
function Ahead:staleness(samples)
  local lo, hi, sum, n, per = math.huge, -math.huge, 0, 0, {}
  for _, s in ipairs(samples) do
    for _, v in ipairs(s:token_weight_versions()) do
      if v then
        if self.versions[v] == nil then self.versions[v] = 0 end  -- the engines' first version
        local st = self.syncs - self.versions[v]
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

return M
