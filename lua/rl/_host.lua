-- Private: what the C++ host (bindings/host.cpp) calls to run a recipe's main
-- task, read its outcome and handle Ctrl-C. Not part of the public API.
local core = require "rl._core"
local task = require "rl.task"
local rl = require "rl"

local M = {}

local main          -- the main task
local foreground    -- the task Ctrl-C cancels (main, or a REPL chunk)
local exit_code     -- set by rl.exit(code) in a task nobody waits for

-- Ends the run with `code` (the first request wins) by stopping the loop.
local function request_exit(code)
  if exit_code == nil then exit_code = code end
  core.loop.stop()
end

-- rl.exit(code) in a task that nobody waits for (not main: its error reaches no
-- one) still ends the process.
task._on_unwaited_failure = function(_, err)
  if getmetatable(err) ~= rl._Exit then return false end
  request_exit(err.code)
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
-- error (rl.args), 130 interrupted (Ctrl-C), 143 terminated (SIGTERM), or rl.exit(code).
function M.outcome(t)
  if t.status == "done" then return 0, nil end
  local err = t.error
  if getmetatable(err) == rl._Exit then return err.code, nil, true end
  if type(err) == "table" and err.usage then return 2, tostring(err.message) end
  -- an error that says how the run ends (rl.recipe's failed step: status 1 and one message)
  if type(err) == "table" and type(err.exit_code) == "number" and err.message then
    return err.exit_code, tostring(err.message)
  end
  if task.is_cancelled(err) then
    local code = err.reason == "interrupted" and 130 or err.reason == "terminated" and 143 or 1
    return code, tostring(err.reason)
  end
  return 1, t.traceback or tostring(err)
end

-- Third result: true when the process should end now (rl.exit), even with -i.
function M.main_outcome()
  if exit_code ~= nil then return exit_code, nil, true end
  if not main then return 0, nil end
  if not main:done() then return 1, "main task did not finish" end
  return M.outcome(main)
end

function M.set_foreground(t) foreground = t end

local interrupt_handler   -- rl.on_interrupt's: the first Ctrl-C calls it instead of cancelling

function M.set_interrupt_handler(fn)
  local prev = interrupt_handler
  interrupt_handler = fn
  M.graceful_interrupt = fn ~= nil   -- read by the C++ SIGINT hook (bindings/host_session.cpp)
  return prev
end

--- SIGUSR1: the hang report (rl.watchdog) to the log (and its file, when configured).
function M.report()
  local ok, err = pcall(function() require("rl.watchdog").report { reason = "SIGUSR1" } end)
  if not ok then require("rl.log").error("rl.watchdog report failed: " .. tostring(err)) end
end

--- Ctrl-C or SIGTERM (`signal`: "SIGINT" or "SIGTERM"): calls the handler set by
--- rl.on_interrupt with the signal's name (a graceful stop) — once, unless it returns
--- true to get the next signal too — else cancels the foreground task. SIGTERM with
--- nothing running (an idle REPL) ends the process with 143. Returns false when there
--- is nothing to do.
local in_handler, queued   -- a signal that arrives while the handler runs waits for it

function M.interrupt(signal)
  signal = signal or "SIGINT"
  if in_handler then
    queued = signal
    return true
  end
  if interrupt_handler then
    local fn = interrupt_handler
    -- A second Ctrl-C cancels unless the handler asks for it (returns true). While it
    -- runs, graceful_interrupt stays set: a signal arriving now is left to the loop
    -- (the C++ hook would otherwise raise it inside the handler, and the stop be lost).
    interrupt_handler, in_handler = nil, true
    local ok, keep = pcall(fn, signal)
    in_handler = false
    if not ok and getmetatable(keep) == rl._Exit then
      request_exit(keep.code)   -- rl.exit(code) in the handler ends the run
      return true
    elseif not ok then
      require("rl.log").error("rl.on_interrupt handler failed: " .. tostring(keep))
    end
    if interrupt_handler == nil then M.set_interrupt_handler(ok and keep == true and fn or nil) end
    if queued then
      local again = queued
      queued = nil
      return M.interrupt(again)
    end
    return true
  end
  if foreground and not foreground:done() then
    foreground:cancel(signal == "SIGTERM" and "terminated" or "interrupted")
    return true
  end
  if signal == "SIGTERM" then
    request_exit(143)
    return true
  end
  return false
end

--- The code passed to rl.exit by a task nobody waited for (or a REPL chunk), or nil.
function M.exit_requested() return exit_code end

-- REPL and attach ------------------------------------------------------------
-- Chunks typed at the local REPL (client 0) and sent by `rlhost attach`
-- (clients 1, 2, ...) arrive as events of one op (bindings/core_control.cpp).
-- The "control" task reads them and runs each chunk as a task of its own, so
-- attached code only ever runs between the steps of other tasks.

local repl          -- rl.repl, loaded with the control task
local control       -- the control task
local chunks = {}   -- client -> { [task] = true }: chunks still running

local function respond(request, reply)
  if request ~= 0 then core.control.respond(request, reply) end
end

local function cancel_chunks(client, reason)
  local n = 0
  for t in pairs(chunks[client] or {}) do
    if t:cancel(reason) then n = n + 1 end
  end
  return n
end

local function run_chunk(request, client, code)
  local local_repl = client == 0
  local t, cap, incomplete = repl.spawn(code, {
    chunkname = local_repl and "=stdin" or "=attach",
    capture = not local_repl,  -- attached output goes back over the socket
  })
  if not t then return respond(request, { ok = false, error = cap, incomplete = incomplete }) end
  chunks[client] = chunks[client] or {}
  chunks[client][t] = true
  if local_repl then foreground = t end
  task._on_done(t, function()
    if chunks[client] then chunks[client][t] = nil end
    if foreground == t then foreground = nil end
    local reply, code_ = repl.result(t, cap)
    respond(request, reply)
    if code_ ~= nil then request_exit(code_) end  -- rl.exit(code) typed at a prompt
  end)
end

local function handle(request, client, op, code)
  if op == "eval" then
    run_chunk(request, client, code)
  elseif op == "complete?" then
    respond(request, { ok = true, incomplete = repl.is_incomplete(code) })
  elseif op == "interrupt" then
    local n = cancel_chunks(client, "interrupted")
    respond(request, { ok = true, values = { tostring(n) } })
  elseif op == "disconnect" then
    -- The client is gone: what it left running stops (like a hung-up shell);
    -- tasks its chunks rl.spawn'ed keep running.
    cancel_chunks(client, "client disconnected")
    chunks[client] = nil
  else
    respond(request, { ok = false, error = "unknown op " .. tostring(op) })
  end
end

--- Starts the control task that runs REPL and attach chunks.
function M.start_control()
  if control then return end
  repl = require "rl.repl"
  local op = core.control.open()
  control = task.spawn_named("control", function()
    task.op_open(op)
    core.control.ready()
    while true do
      local request, client, kind, code = task.op_next(op, "control")
      local ok, err = xpcall(handle, debug.traceback, request, client, kind, code)
      if not ok then
        core.log.write("error", nil, 0, "control: " .. tostring(err))
        pcall(respond, request, { ok = false, error = "internal error: " .. tostring(err) })
      end
    end
  end)
  control.quiet = true
end

--- True when `code` is the beginning of a chunk (the REPL asks for more lines).
function M.repl_incomplete(code) return require("rl.repl").is_incomplete(code) end

--- Logs tasks that failed and were never waited for.
function M.report_unobserved()
  for _, t in ipairs(task._unobserved()) do
    core.log.write("error", nil, 0, ("task %d (%s) failed and was never waited for: %s")
      :format(t.id, t.name, t.traceback or tostring(t.error)))
  end
end

return M
