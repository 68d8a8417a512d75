--- rl.recipe.faults: fault drills (--fault-injection, or job:inject_fault from `rlhost
--- attach`). A drill kills (SIGKILL) or stops (SIGSTOP) a chosen engine of any group (the
--- policy's by default) a chosen time into a rollout step, or as that step's weight sync
--- starts. A thread-mode engine can only be stopped: its scheduler stalls for good while
--- its HTTP server still answers. rl.recipe.health finds what a drill did. See
--- docs/fault_tolerance.md, "Fault drills".
local rl = require "rl"
local log = require "rl.log"
local task = require "rl.task"
local engines = require "rl.recipe.engines"

local M = {}
local Drills = {}
Drills.__index = Drills
M.Drills = Drills

local SIGKILL, SIGSTOP = 9, 19
local ACTIONS = { kill = SIGKILL, stop = SIGSTOP }

-- How long a drill's "stop" stalls a thread-mode engine: for good.
local STALL_S = 24 * 3600

local function find_group(groups, name)
  for _, g in ipairs(groups) do if g.name == name then return g end end
end

local function group_names(groups)
  local names = {}
  for i, g in ipairs(groups) do names[i] = g.name end
  return table.concat(names, ", ")
end

-- One item ACTION:[GROUP:]ENGINE:STEP[:DELAY] → its fields, or a usage error.
local function parse_item(item, groups)
  local hint = " (expected ACTION:[GROUP:]ENGINE:STEP[:DELAY_S | :sync], e.g. kill:2:2:1.5, stop:1:3:sync or "
    .. "kill:ref:1:2 for engine 1 of group 'ref'; ACTION kill or stop)"
  local f = {}
  for part in (item .. ":"):gmatch("([^:]*):") do f[#f + 1] = part end
  local group
  if f[2] and not f[2]:match("^%d+$") then group = table.remove(f, 2) end
  local action, engine, step, delay = f[1], f[2], f[3], f[4] or ""
  local d = tonumber(delay)
  if not ACTIONS[action] or #f > 4 or not (engine or ""):match("^%d+$") or not (step or ""):match("^%d+$")
      or (delay ~= "" and delay ~= "sync" and not d) or (group and not group:match("^[%w_%-]+$")) then
    rl.args.usage_error("--fault-injection: bad item '" .. item .. "'" .. hint)
  end
  if d and not (d >= 0 and d < math.huge) then   -- NaN, negative or infinite: a drill that would never fire
    rl.args.usage_error(("--fault-injection %s: the delay must be a finite number of seconds >= 0 (got %s)")
      :format(item, delay))
  end
  engine, step = tonumber(engine), tonumber(step)
  local g
  if group then
    g = find_group(groups, group)
    if not g then
      rl.args.usage_error(("--fault-injection %s: no engine group '%s' (the job's groups: %s; more come from "
        .. "--sglang-config)"):format(item, group, group_names(groups)))
    end
  else
    g = engines.plain_group(groups)
    if not g then
      rl.args.usage_error(("--fault-injection %s: no group takes weight updates, so name one (ACTION:GROUP:ENGINE:"
        .. "STEP)"):format(item))
    end
  end
  local size = g.engines.n or #g.engines
  if engine < 1 or engine > size then
    rl.args.usage_error(("--fault-injection %s: engine %d is not one of 1..%d (%s)"):format(item, engine, size,
      group and ("the engines of group '" .. group .. "'") or "--num-engines"))
  end
  return { action = action, group = group, engine = engine, step = step, at_sync = delay == "sync",
           delay = tonumber(delay) or 1, item = item }
end

--- Parses --fault-injection: "ACTION:[GROUP:]ENGINE:STEP[:DELAY]" items, comma-separated
--- (ACTION kill | stop; GROUP an engine group's name (--sglang-config), default the
--- policy's; ENGINE 1-based within the group; STEP the rollout id; DELAY seconds into
--- that step's rollout, default 1, or "sync": as that step's weight sync starts, after
--- its probes). groups: the job's (rl.recipe.engines.plan), or a number of policy engines.
--- Returns the list or raises a usage error naming the item.
function M.parse(text, groups)
  local out = {}
  if not text or text == "" then return out end
  if type(groups) == "number" then groups = { { name = "default", engines = { n = groups }, update_weights = true } } end
  for item in text:gmatch("[^,]+") do out[#out + 1] = parse_item(item:match("^%s*(.-)%s*$"), groups) end
  return out
end

--- The drills of a job (`injections`: parse's list; none for on-demand drills only).
function M.new(job, injections)
  return setmetatable({ job = job, injections = injections or {} }, Drills)
end

--- The job's drills under --use-fault-tolerance (nil without it; --fault-injection alone
--- is a usage error).
function M.from_options(opt, job)
  if not opt.use_fault_tolerance then
    if opt.fault_injection then rl.args.usage_error("--fault-injection needs --use-fault-tolerance") end
    return nil
  end
  return M.new(job, M.parse(opt.fault_injection, engines.groups_of(job)))
end

--- Kills (SIGKILL) or stops (SIGSTOP) engine i of a group now (group: its name, default
--- the policy's). A process or vLLM engine gets the signal (its process group); a
--- thread-mode engine can only be stopped: its HTTP loop and scheduler stall
--- (rl.engine's stall). → true, or nil and why.
function Drills:inject(action, i, group)
  local sig = ACTIONS[action]
  if not sig then return nil, "inject: action must be 'kill' or 'stop' (got " .. tostring(action) .. ")" end
  local groups = engines.groups_of(self.job)
  local g = group == nil and engines.plain_group(groups) or find_group(groups, group)
  if not g then
    return nil, group and ("inject: no engine group '%s'"):format(tostring(group))
      or "inject: no group takes weight updates: name the group (inject(action, i, group))"
  end
  local eng = type(i) == "number" and g.engines[i]
  if not eng then return nil, ("inject: no engine %s in group '%s' (1..%d)"):format(tostring(i), g.name, #g.engines) end
  local label = engines.engine_label(groups, g, i)
  if eng.mode == "thread" and action == "stop" and pcall(eng.stall, eng, STALL_S) then
    log.warn("fault injection: stalling thread %s (%s)", label, tostring(eng.url))
    return true
  end
  if eng.mode == "thread" or not eng.pid then
    return nil, ("inject: %s is not a running process (--engine-mode process; a thread engine can "
      .. "only be stopped)"):format(label)
  end
  log.warn("fault injection: %s %s (pid %d)", action == "kill" and "SIGKILL to" or "SIGSTOP to", label, eng.pid)
  require("rl.process").signal_pid(eng.pid, sig)
  return true
end

local function run(self, inj)
  local ok, err = self:inject(inj.action, inj.engine, inj.group)
  if not ok then log.warn("fault injection %s not done: %s", inj.item, err) end
end

--- As rollout step `rollout_id` starts: schedules its drills (each DELAY s in).
function Drills:step_start(rollout_id)
  self.step = rollout_id
  for _, inj in ipairs(self.injections) do
    if inj.step == rollout_id and not inj.at_sync then task.after(inj.delay, run, self, inj) end
  end
end

--- As the step's weight sync starts (after its probes): the step's ":sync" drills.
function Drills:sync_start()
  for _, inj in ipairs(self.injections) do
    if inj.at_sync and inj.step == self.step then run(self, inj) end
  end
end

return M
