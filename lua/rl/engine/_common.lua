-- Private to the rl.engine backends (lua/rl/engine/init.lua, vllm.lua): what both share.
local task = require "rl.task"

local M = {}

--- The last `n` bytes of a child's log file ("" when unreadable): for start failures.
function M.log_tail(path, n)
  local s = require("rl._fs").read_file(path) or ""
  return #s > n and s:sub(-n) or s
end

--- Engine:generate's misuse checks, for every backend (errors point at its caller).
function M.check_generate(req)
  if type(req) ~= "table" then
    error("rl.engine.Engine:generate: bad argument #1 'req' (table expected, got " .. type(req) .. ")", 3)
  end
  task.need_task("rl.engine.Engine:generate")
end

return M
