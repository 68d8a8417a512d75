--- rl.rollout.budget: the failure budgets of one rollout step (docs/operations.md,
--- "Failure budgets"). A step fails — one error naming the component, its last error
--- and traceback — instead of sampling on for ever when
---   * more than max_failed_share of its samples failed (of the batch's samples while
---     fewer have finished, of those finished after): rewards that raise or time out,
---     generation, environments;
---   * max_failed_samples samples failed (0: no count limit);
---   * max_busy_timeouts rewards ran Lua code for their whole time limit (a busy loop:
---     the one event loop, every other sample and request, waited for each);
---   * over_sampling_limit × rollout_batch_size prompts were drawn and the batch is
---     still not full (the dynamic filter dropped the rest).
local sample_mod = require "rl.sample"

local M = {}
local Budget = {}
Budget.__index = Budget

M.DEFAULTS = { max_failed_share = 0.5, max_failed_samples = 0, max_busy_timeouts = 2, over_sampling_limit = 10 }

--- A step's budget: opts holds the four limits (DEFAULTS), rollout_batch_size and
--- n_samples_per_prompt.
function M.new(opts)
  return setmetatable({ opts = opts, finished = 0, failed = 0, busy = 0, by = {}, order = {} }, Budget)
end

-- The component a failed sample failed in, and its error.
local function failure_of(s)
  if s.reward_error ~= nil then return "reward", s.reward_error end
  local md = type(s.metadata) == "table" and s.metadata or {}
  local tr = type(md.trajectory) == "table" and md.trajectory or {}
  if tr.end_reason == "env_error" then return "environment", s.generate_error end
  return "generation", s.generate_error
end

--- Counts the samples of a finished group.
function Budget:add_group(group)
  for _, s in ipairs(group) do
    if type(s) == "table" and s.status ~= sample_mod.ABORTED then
      self.finished = self.finished + 1
      if s.status == sample_mod.FAILED then
        self.failed = self.failed + 1
        local comp, err = failure_of(s)
        local c = self.by[comp]
        if not c then
          c = { count = 0 }
          self.by[comp] = c
          self.order[#self.order + 1] = comp
        end
        c.count = c.count + 1
        c.last_error, c.last_sample = tostring(err), s.index
        if comp == "reward" then
          local o = s.reward_outcome == "timeout" and "timeouts" or "errors"
          c[o] = (c[o] or 0) + 1
        end
      end
    end
  end
end

--- The component with the most failures.
function Budget:worst()
  local best
  for _, comp in ipairs(self.order) do
    if not best or self.by[comp].count > self.by[best].count then best = comp end
  end
  return best
end

-- What failed, component by component: "reward: 8 failed (8 errors, 0 time-outs, 0
-- busy); generation: 1 failed".
function Budget:breakdown()
  local parts = {}
  for _, comp in ipairs(self.order) do
    local c = self.by[comp]
    if comp == "reward" and c.count == 0 then   -- only busy ones so far, their groups not back yet
      parts[#parts + 1] = ("reward: %d busy time-outs"):format(self.busy)
    elseif comp == "reward" then
      parts[#parts + 1] = ("reward: %d failed (%d errors, %d time-outs, %d busy)"):format(c.count, c.errors or 0,
        c.timeouts or 0, self.busy)
    else
      parts[#parts + 1] = ("%s: %d failed"):format(comp, c.count)
    end
  end
  return table.concat(parts, "; ")
end

--- nil while the step is within its budget; else why it is not (one line). busy: the
--- step's rewards so far that timed out running Lua code (not waiting); last_busy:
--- {sample, error} of the last of them.
function Budget:exceeded(busy, last_busy)
  local o = self.opts
  self.busy = busy or self.busy
  if last_busy and not self.by.reward then   -- busy rewards whose groups are not back yet
    self.by.reward = { count = 0, timeouts = 0, last_error = tostring(last_busy.error), last_sample = last_busy.sample }
    self.order[#self.order + 1] = "reward"
  end
  local batch = o.rollout_batch_size * o.n_samples_per_prompt
  if o.max_busy_timeouts and o.max_busy_timeouts > 0 and self.busy >= o.max_busy_timeouts then
    return ("%d rewards ran Lua code for their whole time limit (--max-busy-timeouts %d: each held every other "
      .. "sample and request meanwhile)"):format(self.busy, o.max_busy_timeouts)
  end
  if o.max_failed_samples and o.max_failed_samples > 0 and self.failed >= o.max_failed_samples then
    return ("%d samples failed (--max-failed-samples %d)"):format(self.failed, o.max_failed_samples)
  end
  local share = o.max_failed_share
  if share and share < 1 and self.failed > share * math.max(self.finished, batch) then
    return ("%d of %d finished samples failed, more than %g %% of %s (--max-failed-share %g)"):format(
      self.failed, self.finished, share * 100, self.finished > batch and "them" or ("the batch's " .. batch), share)
  end
end

--- The step's failure as an error value (rl.rollout raises it; rl.recipe's job writes
--- what it has and exits with its message). why: exceeded()'s line or another reason.
function Budget:failure(rollout_id, why, hint)
  local comp = self:worst()
  local c = comp and self.by[comp]
  local lines = { ("rollout step %s failed: %s"):format(tostring(rollout_id), why) }
  if c then
    lines[#lines + 1] = "  failing: " .. self:breakdown()
    lines[#lines + 1] = ("  last %s error (sample %s): %s"):format(comp, tostring(c.last_sample),
      (c.last_error:gsub("\n", "\n    ")))
  end
  if hint then lines[#lines + 1] = "  hint: " .. hint end
  return setmetatable({ rollout_failed = true, rollout_id = rollout_id, component = comp, message = table.concat(lines, "\n"),
                        failed = self.failed, finished = self.finished }, M.Failure)
end

M.Failure = { __tostring = function(e) return e.message end }

--- True when `err` is a step failure raised by rl.rollout.
function M.is_failure(err) return getmetatable(err) == M.Failure end

return M
