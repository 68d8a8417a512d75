-- Private: what the C++ host (bindings/host.cpp) calls to run a recipe's main
-- task, read its outcome and handle Ctrl-C. Not part of the public API.
local core = require "rl._core"
local task = require "rl.task"
local rl = require "rl"

local M = {}

local main          -- the main task
local foreground    -- the task Ctrl-C cancels (main, or a REPL chunk)
local exit_code     -- set by rl.exit(code) in a task nobody waits for

-- rl.exit(code) in a task that nobody waits for (not main: its error reaches no
-- one) still ends the process: remember the code and stop the loop.
task._on_unwaited_failure = function(_, err)
  if getmetatable(err) ~= rl._Exit then return false end
  if exit_code == nil then exit_code = err.code end
  core.loop.stop()
  return true
end

--- Runs each function of `fns` in order inside one task (the -e chunks, then
--- the recipe with `...` = its arguments). Stops the loop when it ends.
function M.run_main(fns, args)
  main = task.spawn_named("main", function()
    for _, fn in ipairs(fns) do fn(unpack(args, 1, args.n or #args)) end
  end)
  main.quiet = true  -- its failure is reported by the host, not as unobserved
  foreground = main
  task._on_done(main, function() core.loop.stop() end)
  return main
end

-- Exit status and message for a finished task: 0 ok, 1 Lua error, 2 usage
-- error (rl.args), 130 interrupted, or rl.exit(code).
function M.outcome(t)
  if t.status == "done" then return 0, nil end
  local err = t.error
  if getmetatable(err) == rl._Exit then return err.code, nil end
  if type(err) == "table" and err.usage then return 2, tostring(err.message) end
  if task.is_cancelled(err) then
    return err.reason == "interrupted" and 130 or 1, tostring(err.reason)
  end
  return 1, t.traceback or tostring(err)
end

function M.main_outcome()
  if exit_code ~= nil then return exit_code, nil end
  if not main then return 0, nil end
  if not main:done() then return 1, "main task did not finish" end
  return M.outcome(main)
end

function M.set_foreground(t) foreground = t end

--- Ctrl-C: cancels the foreground task. Returns false when there is none.
function M.interrupt()
  if foreground and not foreground:done() then
    foreground:cancel("interrupted")
    return true
  end
  return false
end

--- Logs tasks that failed and were never waited for.
function M.report_unobserved()
  for _, t in ipairs(task._unobserved()) do
    core.log.write("error", nil, 0, ("task %d (%s) failed and was never waited for: %s")
      :format(t.id, t.name, t.traceback or tostring(t.error)))
  end
end

return M
