--- rl.agent.env: environments for rl.agent — the tool-calling environment and
--- hot-reloadable environment modules (the interface is in docs/agentic.md:
--- env:reset(sample) -> observation; env:step(action) -> observation, reward|nil, done).
--
--   local env = rl.agent.env.tool_env { tools = reg, max_calls_per_turn = 1 }
--   local env2 = rl.agent.env.watch("envs.guess_number")     -- reloads between steps
local json = require "rl.json"
local toolcall = require "rl.agent.toolcall"

local M = {}

-- Adds one call's outcome to the turn record (the metrics read it).
local function record(turn, name, outcome)
  if not turn then return end
  turn.tool_calls = (turn.tool_calls or 0) + 1
  if outcome ~= "ok" then turn.tool_errors = (turn.tool_errors or 0) + 1 end
  turn.tools = turn.tools or json.array()
  turn.tools[#turn.tools + 1] = { name = name, outcome = outcome }
end
M.record_call = record

--- Runs the parsed calls and problems of a turn with `registry`: the tool messages
--- (one per call or problem, in order) for the observation. A call beyond
--- max_calls_per_turn is answered with an error (outcome too_many_calls).
function M.run_calls(registry, text, turn, sample, max_calls)
  local calls, problems = toolcall.parse(text)
  local msgs = {}
  local clean = json.valid_utf8   -- what quotes the model's text must stay valid UTF-8 (JSON)
  for _, p in ipairs(problems) do
    msgs[#msgs + 1] = { role = "tool", content = "error: " .. clean(p) }
    record(turn, "(malformed)", "malformed")
  end
  for i, c in ipairs(calls) do
    local content, outcome
    if max_calls and i > max_calls then
      content, outcome = ("error: at most %d tool call%s per turn; call %d (%s) was not run"):format(max_calls,
        max_calls == 1 and "" or "s", i, c.name), "too_many_calls"
    else
      content, outcome = registry:call(c, { sample = sample, turn = turn }, sample)
      if outcome ~= "ok" then content = "error: " .. content end
    end
    local name = clean(c.name)
    msgs[#msgs + 1] = { role = "tool", content = clean(tostring(content)), name = name }
    record(turn, name, outcome)
  end
  return msgs, #calls + #problems
end

--- The tool-calling environment: each turn's <tool_call>s run on `tools` (an
--- rl.agent.tools registry) and their results come back as tool messages; a turn
--- without any tool call ends the trajectory. opts: tools, max_calls_per_turn (1),
--- reward (fn(sample, action) -> reward|nil, called when the trajectory ends; nil:
--- the rollout's reward scores the sample).
function M.tool_env(opts)
  if type(opts) ~= "table" or type(opts.tools) ~= "table" or type(opts.tools.call) ~= "function" then
    error("rl.agent.tool_env: bad argument 'opts.tools' (an rl.agent.tools.registry expected)", 2)
  end
  local max_calls = opts.max_calls_per_turn or 1
  local env = { tools = opts.tools }
  function env.step(_, action)
    local msgs, n = M.run_calls(opts.tools, action.text, action.record, action.sample, max_calls)
    if n == 0 then
      return nil, opts.reward and opts.reward(action.sample, action) or nil, true
    end
    return msgs, nil, false
  end
  return env
end

--- A hot-reloadable environment: module `name` (on package.path, as rl.reload.watch)
--- is an environment table (reset/step methods, per-trajectory state in `self`).
--- Each call takes the method from the current version, so an edit takes effect at
--- the next rl.reload.check() (a step boundary) even for running trajectories; a
--- broken edit keeps the previous version. env.watch is the rl.reload watch.
function M.watch(name)
  local w = require("rl.reload").watch(name)
  local mt = { __index = function(_, k)
    local mod = w.module
    return type(mod) == "table" and mod[k] or nil
  end }
  local env = { watch = w }
  function env.new(sample)
    local inst = setmetatable({}, mt)
    local init = type(w.module) == "table" and w.module.new
    if init then
      local st = init(sample)
      if type(st) == "table" then for k, v in pairs(st) do inst[k] = v end end
    end
    return inst
  end
  env.version = function() return w.hash end
  return env
end

return M
