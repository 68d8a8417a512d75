--- rl.rollout.filters: dynamic sampling filters (slime's filter_hub) and their
--- calling convention. A filter is function(rollout, group) returning
--- {keep = bool, reason = string|nil, keep_when_insufficient = bool} — or a bare
--- boolean (slime's legacy form). Dropped groups count as
--- rollout/dynamic_filter/drop_<reason>.
local rewards = require "rl.rewards"

local M = {}

-- Rewards of a group that were scored (nil = skipped or failed: not data).
local function scored(rollout, group)
  local out = {}
  for _, s in ipairs(group) do
    local ok, v = pcall(rewards.value, s, rollout and rollout.reward_key or nil)
    if ok and v ~= nil then out[#out + 1] = v end
  end
  return out
end
M.scored = scored

local function round1(x)
  local r = math.floor(x * 10 + 0.5) / 10
  if r == math.floor(r) then return ("%.1f"):format(r) end
  return tostring(r)
end
M._round1 = round1

--- slime's check_reward_nonzero_std: keep a group whose rewards vary (unbiased
--- std > 1e-6); reason "zero_std_<reward rounded to 0.1>". Unlike slime (a
--- one-sample group has NaN std and is dropped as such), groups with fewer than
--- two scored rewards drop with reason "insufficient_rewards".
function M.nonzero_std(rollout, group)
  local rs = scored(rollout, group)
  if #rs < 2 then return { keep = false, reason = "insufficient_rewards" } end
  local mean = 0
  for _, r in ipairs(rs) do mean = mean + r end
  mean = mean / #rs
  local ss = 0
  for _, r in ipairs(rs) do ss = ss + (r - mean) ^ 2 end
  local std = math.sqrt(ss / (#rs - 1))
  if std > 1e-6 then return { keep = true } end
  return { keep = false, reason = "zero_std_" .. round1(rs[1]) }
end

--- The same, kept anyway when too few groups remain to fill the batch.
function M.nonzero_std_with_fallback(rollout, group)
  local out = M.nonzero_std(rollout, group)
  out.keep_when_insufficient = true
  return out
end

local BUILTIN = {
  nonzero_std = M.nonzero_std, check_reward_nonzero_std = M.nonzero_std,
  nonzero_std_with_fallback = M.nonzero_std_with_fallback,
  check_reward_nonzero_std_with_fallback = M.nonzero_std_with_fallback,
}

--- A built-in filter by name.
function M.get(name)
  local f = BUILTIN[name]
  if not f then
    local names = {}
    for k in pairs(BUILTIN) do names[#names + 1] = k end
    table.sort(names)
    error(("rl.rollout.filters: unknown filter '%s' (built-in: %s, or pass a function)"):format(
      tostring(name), table.concat(names, ", ")), 2)
  end
  return f
end

--- Runs filter (nil: keep everything) on a group; normalises its answer.
function M.call(filter, rollout, group)
  if not filter then return { keep = true } end
  local out = require("rl.task").call_hook("the dynamic filter", rollout and rollout.hook_timeout or 30, filter,
    rollout, group)
  if type(out) == "boolean" then return { keep = out } end
  if type(out) ~= "table" or type(out.keep) ~= "boolean" then
    error("rl.rollout: dynamic filter returned " .. type(out) ..
      " (expected a boolean or {keep = bool, reason = string, keep_when_insufficient = bool})", 0)
  end
  return out
end

--- slime's should_drop_dynamic_filter_output: drop unless kept, or kept because
--- too few groups remain (keep_when_insufficient and remaining <= target).
function M.should_drop(out, remaining, target)
  if out.keep then return false end
  if out.keep_when_insufficient and remaining <= target then return false end
  return true
end

return M
