--- Private: the Lua half of the REPL, shared by the local prompt (`rlhost -i`,
--- bare `rlhost`) and `rlhost attach`. Not part of the public API.
--
-- A chunk is compiled as `return <chunk>` first, so expressions print their
-- values, then as a statement list. Each chunk runs as a task named "repl":
-- it may rl.sleep, wait for HTTP, spawn tasks, and Ctrl-C (or an attach
-- client's interrupt) cancels it like any task. Globals are the process's
-- globals (_G), so a chunk reads and changes the running recipe's state.
local task = require "rl.task"
local inspect = require "rl.inspect"
local rl = require "rl"

local M = {}

-- Captured print output per chunk is capped: an attached chunk that prints in
-- a loop must not grow the reply without bound.
local MAX_OUTPUT = 8 * 1024 * 1024

local function at_eof(err)
  return type(err) == "string" and err:sub(-7) == "'<eof>'"
end

--- Compiles `code`. Returns the function, or nil, the syntax error and whether
--- the code is merely unfinished (an unclosed block, string or call).
function M.compile(code, chunkname)
  chunkname = chunkname or "=stdin"
  local fn, expr_err = loadstring("return " .. code, chunkname)
  if fn then
    -- An expression: run it as an argument list rather than a tail call, so
    -- `error("x")` keeps its "stdin:1:" position and the traceback its frames.
    -- The newline keeps a trailing `-- comment` from swallowing the ")".
    return loadstring("return (function(...) return ... end)(" .. code .. "\n)", chunkname) or fn
  end
  local stmt_err
  fn, stmt_err = loadstring(code, chunkname)
  if fn then return fn end
  return nil, stmt_err, at_eof(stmt_err) or at_eof(expr_err)
end

--- True when more lines could complete `code` (the prompt continues with ">>").
function M.is_incomplete(code)
  local fn, _, incomplete = M.compile(code)
  return not fn and incomplete == true
end

-- A print that collects its output while the chunk runs and behaves like the
-- real print afterwards (functions a chunk defines keep it as their print).
local function capturing_print(cap)
  return function(...)
    if not cap.open then return _G.print(...) end
    local n = select("#", ...)
    local parts = {}
    for i = 1, n do parts[i] = tostring((select(i, ...))) end
    local line = table.concat(parts, "\t") .. "\n"
    if cap.size + #line > MAX_OUTPUT then
      if not cap.truncated then
        cap.truncated = true
        cap.buf[#cap.buf + 1] = "... (output truncated)\n"
      end
      return
    end
    cap.size = cap.size + #line
    cap.buf[#cap.buf + 1] = line
  end
end

--- Compiles `code` and starts it as a task. opts: chunkname ("=stdin"),
--- capture (collect print output for the reply). Returns the task and its
--- capture state, or nil, error, incomplete.
function M.spawn(code, opts)
  opts = opts or {}
  local fn, err, incomplete = M.compile(code, opts.chunkname)
  if not fn then return nil, err, incomplete end
  local cap = { buf = {}, size = 0, open = true }
  if opts.capture then
    -- Reads and writes of globals go to _G; only `print` is the chunk's own.
    local env = setmetatable({ print = capturing_print(cap) }, { __index = _G, __newindex = _G })
    setfenv(fn, env)
  end
  local t = task.spawn_named("repl", fn)
  t.quiet = true  -- the REPL reports its failure; it is never "unobserved"
  return t, cap
end

-- Scheduler and REPL frames say nothing about the user's code.
local function trim_traceback(tb)
  local out = {}
  for line in tb:gmatch("[^\n]+") do
    if not (line:find("rl/task.lua", 1, true) or line:find("rl/repl.lua", 1, true)
        or line:find("rl/_host.lua", 1, true) or line:find("[C]: in function 'xpcall'", 1, true)
        or line:find("[C]: in function 'pcall'", 1, true) or line:find("[C]: in ?", 1, true)) then
      out[#out + 1] = line
    end
  end
  if #out == 0 then return "" end
  return "\nstack traceback:\n" .. table.concat(out, "\n")
end

--- The error of a failed task as text: message, then its trimmed traceback.
function M.format_error(t)
  local err = t.error
  local msg
  if type(err) == "string" then
    msg = err
  else
    local mt = getmetatable(err)
    msg = (type(mt) == "table" and mt.__tostring) and tostring(err) or inspect.format(err)
  end
  local tb = t.traceback or ""
  local at = tb:find("\nstack traceback:\n", 1, true)
  if not at then return msg end
  return msg .. trim_traceback(tb:sub(at + #"\nstack traceback:\n"))
end

--- The reply for a finished chunk task: {ok, values = {strings}, output, error}.
--- Second result: the exit code when the chunk called rl.exit(code).
function M.result(t, cap)
  cap.open = false
  local output = table.concat(cap.buf)
  if t.status == "done" then
    local values = {}
    for i = 1, t.values.n do values[i] = inspect.format(t.values[i]) end
    return { ok = true, values = values, output = output }
  end
  local err = t.error
  if getmetatable(err) == rl._Exit then
    return { ok = true, values = {}, output = output }, err.code
  end
  if task.is_cancelled(err) then
    return { ok = false, error = tostring(err.reason), output = output }
  end
  return { ok = false, error = M.format_error(t), output = output }
end

return M
