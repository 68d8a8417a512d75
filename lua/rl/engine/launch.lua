--- rl.engine.launch: an engine spawned but not yet serving. rl.engine.launch returns one
--- for every backend; rl.engine.start is launch + :wait_ready(). Several launched
--- engines come up together (rl.engine.wait_all): rl.recipe.engines spawns every engine
--- of a job, then waits for them all, each under its own ready_timeout.
--
--   local a = assert(rl.engine.launch{ model = dir, mode = "process" })
--   local b = assert(rl.engine.launch{ model = dir, mode = "process" })
--   local ok, i, err = rl.engine.wait_all{ a, b }   -- a.engine, b.engine; or which failed
--
-- A backend makes one with M.new(engine, check, interval): `engine` is the engine object
-- (its :stop() kills what was spawned), `check()` returns true once it serves, nil and
-- why once it cannot (exited, ready_timeout passed), false meanwhile; `interval`: seconds
-- between checks.
local task = require "rl.task"
local now = require("rl._core").loop.now

local M = {}

local Launch = {}
Launch.__index = Launch

--- A launch that is ready now (thread-mode engines start in the call).
function M.ready(engine)
  local t = now()
  engine.spawned_at, engine.ready_at = t, t
  return setmetatable({ engine = engine, state = "ready", spawned_at = t, ready_at = t }, Launch)
end

function M.new(engine, check, interval)
  local t = now()
  engine.spawned_at = t
  return setmetatable({ engine = engine, state = "starting", spawned_at = t, _check = check,
                        _interval = interval or 0.05, _next = t }, Launch)
end

--- One look without waiting: "ready", "failed" (self.err says why) or "starting".
--- Checks no more often than the backend's interval.
function Launch:poll()
  if self.state ~= "starting" or now() < self._next then return self.state end
  local ok, err = self._check()
  if ok then
    self.state, self.ready_at = "ready", now()
    self.engine.ready_at = self.ready_at
  elseif ok == nil then
    self.state, self.err = "failed", err
  else
    self._next = now() + self._interval
  end
  return self.state
end

--- Yields until the engine serves: the engine, or nil and why (its log's tail).
function Launch:wait_ready()
  while self:poll() == "starting" do task.sleep(0.05) end
  if self.state == "ready" then return self.engine end
  return nil, self.err
end

--- Stops what was spawned, serving or not. Idempotent.
function Launch:stop()
  self.engine:stop()
  if self.state == "starting" then self.state, self.err = "failed", "stopped before it served" end
end

--- Yields until every launch serves, or one fails: true, or false, the index of the
--- first to fail and why. Each keeps its own ready_timeout (its check gives up).
function M.wait_all(launches)
  while true do
    local starting = false
    for i, l in ipairs(launches) do
      local s = l:poll()
      if s == "failed" then return false, i, l.err end
      starting = starting or s == "starting"
    end
    if not starting then return true end
    task.sleep(0.05)
  end
end

return M
