--- rl.rewards: reward functions and what the rollout does with them.
--
--   local rewards = rl.rewards
--   local fn = rewards.get("gsm8k")                 -- fn(sample) -> reward; also "math", "deepscaler", "dapo"
--   local r, outcome, err = rewards.evaluate(fn, sample, { timeout = 10 })
--   rewards.normalize(samples, { estimator = "grpo" })
--
-- A reward function takes a sample (a table with at least `response` and
-- `label`) and returns a number, a table (read with `reward_key`), or nil —
-- nil means *skip*: the sample is left out of normalisation and of the loss,
-- never counted as 0.
local M = {}

local lazy = { gsm8k = "rl.rewards.gsm8k", math = "rl.rewards.math", answer = "rl.rewards.answer",
               remote = "rl.rewards.remote", deepscaler = "rl.rewards.deepscaler", dapo = "rl.rewards.dapo" }

local BUILTIN = {
  gsm8k = function(opts)
    local g = require "rl.rewards.gsm8k"
    return function(sample) return (g.score(sample.response, sample.label, opts)) end
  end,
  math = function()
    local m = require "rl.rewards.math"
    return function(sample) return (m.score(sample.response, sample.label)) end
  end,
  deepscaler = function()
    local d = require "rl.rewards.deepscaler"
    return function(sample) return (d.score(sample.response, sample.label)) end
  end,
  dapo = function()
    local d = require "rl.rewards.dapo"
    return function(sample) return d.score(sample.response, sample.label) end
  end,
  remote = function(opts)
    return require("rl.rewards.remote").new(opts)
  end,
  random = function()
    return function() return math.random(0, 1) end
  end,
}

--- The reward function called `name` (slime's --rm-type names: math, deepscaler, dapo,
--- remote, random; and gsm8k); opts go to its constructor. "boxed_<name>" first
--- replaces the response by its last \boxed{} content, "" when there is none
--- (slime's rm_type prefix, with slime's box extraction).
function M.get(name, opts)
  if type(name) ~= "string" then
    error("rl.rewards.get: bad argument #1 'name' (string expected, got " .. type(name) .. ")", 2)
  end
  local base = name:match("^boxed_(.+)$")
  local make = BUILTIN[base or name]
  if not make then
    local names = {}
    for k in pairs(BUILTIN) do names[#names + 1] = k end
    table.sort(names)
    error(("rl.rewards.get: unknown reward '%s' (built in: %s; or pass a Lua function)"):format(name,
      table.concat(names, ", ")), 2)
  end
  local fn = make(opts)
  if not base then return fn end
  local answer = require "rl.rewards.answer"
  return function(sample)
    local view = setmetatable({ response = answer.slime_boxed(sample.response or "") or "" }, { __index = sample })
    return fn(view)
  end
end

--- The reward slime's rollout picks per sample: the built-in named by the sample's
--- metadata.rm_type when it has one, else `default` (a name or a function).
--- Names are trimmed; an unknown name raises when the sample is graded.
function M.by_rm_type(default, opts)
  local fallback = type(default) == "function" and default or M.get(default, opts)
  local made = {}
  return function(sample)
    local md = type(sample.metadata) == "table" and sample.metadata or nil
    local name = md and md.rm_type
    if type(name) ~= "string" or name:match("^%s*(.-)%s*$") == "" then return fallback(sample) end
    name = name:match("^%s*(.-)%s*$")
    local fn = made[name]
    if not fn then fn = M.get(name, opts); made[name] = fn end
    return fn(sample)
  end
end

-- ---- protected evaluation ---------------------------------------------------------------

--- Calls fn(sample) protected, with a time limit (opts.timeout seconds, default 30;
--- opts.on_busy(message): called the moment the host interrupts it busy).
--- Returns reward, outcome, err, info: outcome is "ok", "skip" (nil reward), "error"
--- (err holds the message and the Lua traceback) or "timeout" (err names the limit, the
--- function's file:line and where it was stopped; info.busy when it was running Lua
--- code the whole time — holding the one event loop — rather than waiting).
---
--- The limit holds whatever the reward runs: a reward that waits (HTTP, rl.sleep) is
--- cancelled at its wait, a busy one is interrupted by the host at its next
--- instruction, interpreted or JIT-compiled (rl.task.run_limited). Only a single C
--- call that never returns (a runaway pattern match, os.execute) cannot be stopped.
local function timeout_message(fn, limit, err)
  local msg = ("reward %s timed out after %g s (%s)"):format(require("rl.task").where(fn), limit,
    err.interrupted and "running Lua code the whole time: interrupted" or "waiting: cancelled")
  return err.traceback and (msg .. "\n" .. err.traceback) or msg
end

function M.evaluate(fn, sample, opts)
  local limit = opts and opts.timeout or 30
  local task = require "rl.task"
  local on_busy = opts and opts.on_busy
  local ok, result, outcome = task.run_limited({ name = "reward", on_interrupted = on_busy and function(why, err)
    if why == "time limit" then on_busy(type(err) == "table" and timeout_message(fn, limit, err) or nil) end
  end }, limit, fn, sample)
  if not ok then
    if outcome == "timeout" then return nil, "timeout", timeout_message(fn, limit, result), { busy = result.interrupted == true } end
    return nil, "error", result
  end
  if result == nil then return nil, "skip" end
  local kind = type(result)
  if kind ~= "number" and kind ~= "table" and kind ~= "boolean" then
    return nil, "error", "reward function returned a " .. kind .. " (expected a number, a table or nil)"
  end
  if kind == "boolean" then result = result and 1 or 0 end
  return result, "ok"
end

-- ---- normalisation ----------------------------------------------------------------------

--- The scalar reward of a sample: its reward, or reward[reward_key] when it is a table.
function M.value(sample, reward_key)
  local r = sample.reward
  if type(r) == "table" then
    if not reward_key then error("rl.rewards: sample reward is a table; set reward_key to pick a field", 2) end
    r = r[reward_key]
  end
  if r ~= nil and type(r) ~= "number" then
    error(("rl.rewards: reward%s of sample %s is a %s, expected a number"):format(
      reward_key and ("." .. reward_key) or "", tostring(sample.index), type(r)), 2)
  end
  return r
end

local ESTIMATORS = { grpo = true, gspo = true, cispo = true, reinforce_plus_plus = true,
                     reinforce_plus_plus_baseline = true, ppo = true }
-- Estimators trained on the raw rewards (no group statistics): reinforce++ discounts
-- them itself, ppo's critic is the baseline (slime normalises neither).
local RAW = { reinforce_plus_plus = true, ppo = true }

local function check_estimator(est, fname)
  if type(est) == "function" or ESTIMATORS[est] then return end
  error(fname .. ": unknown estimator '" .. tostring(est) ..
    "' (grpo, gspo, cispo, reinforce_plus_plus, reinforce_plus_plus_baseline, ppo, or a function)", 3)
end

--- One group's normalised rewards, in order (the library's default per group).
---   estimator: grpo | gspo | cispo: reward − mean, / (std + eps) unless opts.std = false;
---              reinforce_plus_plus_baseline: reward − mean; reinforce_plus_plus, ppo: raw.
---   opts: std (default true), eps (1e-6).
--- std is the unbiased one, as torch.std; a group of one sample keeps reward − mean = 0.
function M.normalize_group(rewards, estimator, opts)
  estimator = estimator or "grpo"
  check_estimator(estimator, "rl.rewards.normalize_group")
  local n, out = #rewards, {}
  if RAW[estimator] then
    for i = 1, n do out[i] = rewards[i] end
    return out
  end
  local use_std = estimator ~= "reinforce_plus_plus_baseline" and not (opts and opts.std == false) and n > 1
  local eps = opts and opts.eps or 1e-6
  local sum = 0
  for i = 1, n do sum = sum + rewards[i] end
  local mean = sum / n
  local std = 0
  if use_std then
    local ss = 0
    for i = 1, n do ss = ss + (rewards[i] - mean) ^ 2 end
    std = math.sqrt(ss / (n - 1))
  end
  for i = 1, n do
    local v = rewards[i] - mean
    if use_std then v = v / (std + eps) end
    out[i] = v
  end
  return out
end

--- Group-normalised rewards: for each sample, in order, the value the loss uses
--- (nil for skipped samples). Groups are formed by `group_index`, not position.
---   estimator: a name of normalize_group's, or a function(samples, raw) -> normalized
---     [, raw'] (slime's custom reward post-process: one number per sample in each list;
---     raw', when given, replaces the raw rewards)
---   normalize_group: function(rewards, estimator) -> values, one group's (default
---     M.normalize_group with std and eps), e.g. a recipe's own normalisation
---   std (default true), eps (1e-6), reward_key, hook_timeout (seconds normalize_group
---     may run before it is interrupted, default 30).
function M.normalize(samples, opts)
  opts = opts or {}
  local est = opts.estimator or "grpo"
  check_estimator(est, "rl.rewards.normalize")
  local raw = {}
  for i, s in ipairs(samples) do raw[i] = M.value(s, opts.reward_key) end
  if type(est) == "function" then
    local norm, raw2 = est(samples, raw)
    for what, list in pairs { rewards = norm, raw_rewards = raw2 or raw } do
      if type(list) ~= "table" or #list ~= #samples then
        error(("rl.rewards.normalize: the reward post-process returned %s %s for %d samples (one number per sample)")
          :format(type(list) == "table" and #list or type(list), what, #samples), 2)
      end
      for i = 1, #samples do
        if type(list[i]) ~= "number" then
          error(("rl.rewards.normalize: the reward post-process's %s[%d] is %s (a number expected)"):format(what, i,
            type(list[i])), 2)
        end
      end
    end
    return norm, raw2 or raw
  end
  local per_group = opts.normalize_group
  if RAW[est] and not per_group then
    local out = {}
    for i = 1, #samples do out[i] = raw[i] end
    return out, raw
  end
  local groups, order = {}, {}
  for i, s in ipairs(samples) do
    if raw[i] ~= nil then
      local g = s.group_index
      if g == nil then error("rl.rewards.normalize: sample " .. i .. " has no group_index", 2) end
      if not groups[g] then groups[g] = {}; order[#order + 1] = g end
      table.insert(groups[g], i)
    end
  end
  local out = {}
  for _, g in ipairs(order) do
    local idx, rs = groups[g], {}
    for k, i in ipairs(idx) do rs[k] = raw[i] end
    local vals
    if per_group then
      vals = require("rl.task").call_hook("the normalisation", opts.hook_timeout or 30, per_group, rs, est)
    else
      vals = M.normalize_group(rs, est, opts)
    end
    if type(vals) ~= "table" then
      error(("rl.rewards.normalize: normalize_group returned %s for group %s (expected a list of %d numbers)")
        :format(type(vals), tostring(g), #rs), 2)
    end
    for k, i in ipairs(idx) do
      local v = vals[k]
      if type(v) ~= "number" then
        error(("rl.rewards.normalize: normalize_group gave %s for reward %d of group %s (expected a number; "
          .. "it returns one value per reward, in order)"):format(type(v), k, tostring(g)), 2)
      end
      out[i] = v
    end
  end
  return out, raw
end

return require("rl._lazy")(M, lazy)
