--- rl.task: tasks (coroutines) scheduled on the host's one event loop.
--
-- Every asynchronous runtime operation (timer, HTTP request, attach chunk, ...)
-- is an "op" with a numeric id. The C++ side delivers the op's events to
-- `dispatch` below (through the host's one protected call); the task waiting on
-- that op is resumed with the event's values. Lua never runs on another thread.
local core = require "rl._core"
local loop = core.loop
local interrupt = core.interrupt

local M = {}

local unpack, pack = unpack, function(...) return { n = select("#", ...), ... } end
local co_create, co_resume, co_yield, co_status, co_running =
  coroutine.create, coroutine.resume, coroutine.yield, coroutine.status, coroutine.running

---@class rl.Cancelled
local Cancelled = {}
Cancelled.__index = Cancelled
Cancelled.__tostring = function(c) return c.reason end
M.Cancelled = Cancelled
-- Guarded code interrupted by the host (a deadline, the run's stop) unwinds with a
-- Cancelled error too: {reason = "time limit" | "stopping", traceback, interrupted = true}.
interrupt.set_error_metatable(Cancelled)

--- True when `err` is the error a cancelled task unwinds with.
function M.is_cancelled(err) return getmetatable(err) == Cancelled end

local Task = {}
Task.__index = Task
M.Task = Task

local ops = {}          -- op id -> { task = Task|nil, queue = {events...}, waiting = bool }
local ready = {}        -- FIFO of { task, values } to resume at the next tick
local ready_head, ready_tail = 1, 0
local current = nil     -- the task running now
local next_id = 1
local unobserved = {}   -- failed tasks nobody has waited for (reported at exit)
local on_task_done = {} -- task -> callback(task), for the host
local live = {}         -- tasks not finished yet (rl.watchdog's report lists them)

local function resume_later(t, vals)
  ready_tail = ready_tail + 1
  ready[ready_tail] = { t, vals }
  loop.tick()
end

local function finish(t, ok, res)
  live[t] = nil
  if ok then
    t.status = "done"
    t.values = { n = res.n - 1, unpack(res, 2, res.n) }
  else
    local err = res[2]
    t.error = err
    if M.is_cancelled(err) then
      t.status = "cancelled"
    else
      t.status = "failed"
      t.traceback = debug.traceback(t.co, tostring(err))
      if #t.waiters == 0 and not t.quiet and not (M._on_unwaited_failure and M._on_unwaited_failure(t, err)) then
        unobserved[t] = true
        core.log.write("debug", nil, 0, ("task %d (%s) failed: %s"):format(t.id, t.name, t.traceback))
      end
    end
  end
  for _, w in ipairs(t.waiters) do resume_later(w, { n = 0 }) end
  t.waiters = {}
  local cb = on_task_done[t]
  if cb then
    on_task_done[t] = nil
    cb(t)
  end
end

local function step(t, vals)
  if t.status ~= "pending" and t.status ~= "running" then return end
  t.status = "running"
  t.started = true
  local prev = current
  current = t
  -- A guarded task (run_limited, limit): the host interrupts it past its deadline
  -- while it runs, whatever it runs (bindings/interrupt.hpp).
  local d = t.deadline
  if d then interrupt.enter(d ~= math.huge and d or nil, t.label or t.name, t.guard_co or t.co, t.guard_depth) end
  local res = pack(co_resume(t.co, unpack(vals, 1, vals.n)))
  if d or t.deadline then   -- (t.deadline: a limit() it entered and waits in)
    local why = interrupt.leave()
    if why then
      t.interrupted = why
      if t.on_interrupted then pcall(t.on_interrupted, why, not res[1] and res[2] or nil) end   -- before anything else runs
    end
    local pd = prev and prev.deadline
    if pd then interrupt.enter(pd ~= math.huge and pd or nil, prev.label or prev.name, prev.guard_co or prev.co,
                               prev.guard_depth) end
  end
  current = prev
  if co_status(t.co) == "dead" then finish(t, res[1], res) end
end

local function drain_ready()
  while ready_head <= ready_tail do
    local item = ready[ready_head]
    ready[ready_head] = nil
    ready_head = ready_head + 1
    local t = item[1]
    local was = t.interrupted
    step(t, item[2])
    if t.interrupted and not was then
      -- It held the loop until the host interrupted it: signals that came meanwhile
      -- (SIGUSR1's report, SIGTERM) are handled now, and the loop turns (I/O, attach)
      -- before the next ready task, which may be busy too.
      interrupt.service()
      if ready_head <= ready_tail then
        loop.tick()
        return
      end
    end
  end
  ready_head, ready_tail = 1, 0
end

-- Receives every op event from C++; op 0 is a bare tick.
local function dispatch(op, ...)
  if op ~= 0 then
    local e = ops[op]
    if e then
      e.queue[#e.queue + 1] = pack(...)
      if e.waiting then
        e.waiting = false
        step(e.task, { n = 0 })
      end
    end
  end
  drain_ready()
end
loop.set_dispatcher(dispatch)

--- The current task; raises (naming `fname`, at the caller's caller) outside a
--- task or inside a plain coroutine. For modules whose functions must yield.
local function need_task(fname)
  local t = current
  if not t then
    error(fname .. ": not inside a task (run it in rl.spawn(fn), a recipe, or the REPL)", 3)
  end
  if co_running() ~= t.co then
    error(fname .. ": called from a plain coroutine, not an rl task; rl.spawn it instead", 3)
  end
  return t
end

-- Yields until resumed by the scheduler; raises if the task was cancelled meanwhile.
local function suspend(t)
  co_yield()
  if t.cancel_reason then
    local c = setmetatable({ reason = t.cancel_reason }, Cancelled)
    t.cancel_reason = nil
    error(c, 0)
  end
end

M.need_task = need_task

--- Registers interest in op `op` for the current task (call before op_next).
function M.op_open(op)
  ops[op] = { task = current, queue = {}, waiting = false }
end

--- Next event of `op` as its values; yields the current task until one arrives.
function M.op_next(op, fname)
  local t = need_task(fname or "rl.task.op_next")
  local e = ops[op]
  if not e then error("op " .. tostring(op) .. " is not open", 2) end
  while #e.queue == 0 do
    e.waiting = true
    t.waiting_op, t.waiting_on, t.waiting_since = op, fname, loop.now()
    local ok, err = pcall(suspend, t)
    t.waiting_op, t.waiting_on, t.waiting_since = nil, nil, nil
    e.waiting = false
    if not ok then
      M.op_close(op)
      error(err, 0)
    end
  end
  local ev = table.remove(e.queue, 1)
  return unpack(ev, 1, ev.n)
end

--- Forgets `op`, cancelling its C++ side if it is still running.
function M.op_close(op)
  if ops[op] then
    ops[op] = nil
    loop.cancel(op)
  end
end

--- Runs an op to its single event: op_open, op_next, op_close.
function M.await_op(op, fname)
  M.op_open(op)
  return (function(...) M.op_close(op); return ... end)(M.op_next(op, fname))
end

--- Runs an op of a native job (an engine's, a trainer's, a process group's) whose event is
--- ("done", json_text) or ("error", why): → the decoded value (raw = true: the text), or
--- nil and why (a reply that is not JSON included).
function M.await_json(op, fname, raw)
  local kind, payload = M.await_op(op, fname)
  if kind ~= "done" then return nil, payload end
  if raw then return payload end
  local v, err = require("rl.json").decode(payload)
  if err then return nil, (fname or "native job") .. ": bad JSON in the reply: " .. tostring(err) end
  return v
end

---@return rl.Task|nil the task running now
function M.current() return current end

local root_context = {}
--- The running task's context table (task-local values; a child task sees its
--- parent's values at spawn time and its own writes only). Outside tasks: one
--- process-wide table.
function M.context() return current and current.context or root_context end

--- Starts `fn(...)` as a new task at the next loop iteration.
---@return rl.Task
local function snapshot(ctx)
  local out = {}
  if ctx then
    for k, v in pairs(ctx) do
      -- A value whose metatable has __snapshot (rl.trace's span stack, a
      -- mutable array) is copied for the child rather than shared.
      local mt = type(v) == "table" and getmetatable(v)
      out[k] = mt and mt.__snapshot and mt.__snapshot(v) or v
    end
  end
  return out
end

function M.spawn(fn, ...)
  if type(fn) ~= "function" then
    error("rl.spawn: bad argument #1 'fn' (function expected, got " .. type(fn) .. ")", 2)
  end
  local t = setmetatable({
    id = next_id, name = "task", status = "pending", waiters = {},
    co = co_create(fn),
    -- Task-local values, inherited like Python's contextvars: a snapshot (shallow
    -- copy) of the spawning task's (rl.trace keeps its span stack here).
    context = snapshot(current and current.context),
  }, Task)
  next_id = next_id + 1
  live[t] = true
  resume_later(t, pack(...))
  return t
end

--- Same as spawn, with a name shown in logs and errors.
function M.spawn_named(name, fn, ...)
  local t = M.spawn(fn, ...)
  t.name = tostring(name)
  return t
end

function Task:__tostring() return ("rl.Task(%d, %s, %s)"):format(self.id, self.name, self.status) end

function Task:done() return self.status == "done" or self.status == "failed" or self.status == "cancelled" end

--- Waits for the task; returns its values, or raises its error.
function Task:wait()
  if not self:done() then
    local me = need_task("rl.Task:wait")
    if me == self then error("rl.Task:wait: a task cannot wait for itself", 2) end
    self.waiters[#self.waiters + 1] = me
    me.waiting_on, me.waiting_since = ("task %d '%s'"):format(self.id, self.name), loop.now()
    local ok, err = pcall(function() while not self:done() do suspend(me) end end)
    me.waiting_on, me.waiting_since = nil, nil
    if not ok then error(err, 0) end
  end
  unobserved[self] = nil
  if self.status == "done" then return unpack(self.values, 1, self.values.n) end
  error(self.error, 0)
end

--- Cancels the task: it unwinds with a Cancelled error at its current wait.
function Task:cancel(reason)
  if self:done() then return false end
  reason = reason or "cancelled"
  local c = setmetatable({ reason = reason }, Cancelled)
  if self == current then error(c, 2) end
  if not self.started then  -- never ran: it just ends
    finish(self, false, { n = 2, false, c })
    return true
  end
  self.cancel_reason = reason
  resume_later(self, { n = 0 })
  return true
end

--- Waits for every task; returns their first values in order. If some failed,
--- raises the first failure after all have finished.
function M.wait_all(tasks)
  if type(tasks) ~= "table" then
    error("rl.wait_all: bad argument #1 'tasks' (table expected, got " .. type(tasks) .. ")", 2)
  end
  local results, first_err = {}, nil
  for i, t in ipairs(tasks) do
    local ok, v = pcall(t.wait, t)
    if ok then results[i] = v elseif first_err == nil then first_err = v end
  end
  if first_err ~= nil then error(first_err, 0) end
  return results
end

--- Suspends the current task for `s` seconds.
function M.sleep(s)
  if type(s) ~= "number" or not (s >= 0) then
    error("rl.sleep: bad argument #1 'seconds' (non-negative number expected, got " .. tostring(s) .. ")", 2)
  end
  M.await_op(loop.timer(s), "rl.sleep")
end

--- Lets other ready tasks run, then continues.
function M.yield() M.sleep(0) end

--- Runs fn(...) once after `s` seconds, as a task (cancel it to stop it).
function M.after(s, fn, ...)
  local args = pack(...)
  return M.spawn_named("after", function() M.sleep(s); return fn(unpack(args, 1, args.n)) end)
end

--- Runs fn() every `s` seconds until it returns false or the task is cancelled.
function M.every(s, fn)
  return M.spawn_named("every", function()
    while true do
      M.sleep(s)
      if fn() == false then return end
    end
  end)
end

-- Time limits that hold whatever the code runs ---------------------------------

local plain_deadline   -- limit()'s deadline outside tasks (plain scripts, tests)

local describers = setmetatable({}, { __mode = "k" })

--- Makes where(fn) ask `describer()` first (a wrapper that calls another function
--- names that one: rl.reload's). Returns fn.
function M.describe_as(fn, describer)
  describers[fn] = describer
  return fn
end

--- Where a function was defined ("recipes/rewards/x.lua:12"), for messages.
function M.where(fn)
  local d = describers[fn]
  if d then
    local ok, s = pcall(d)
    if ok and s then return s end
  end
  local ok, info = pcall(debug.getinfo, fn, "S")
  if not ok or type(info) ~= "table" then return "?" end
  if info.what == "C" then return "a C function" end
  return ("%s:%d"):format(info.short_src, info.linedefined or 0)
end

--- Runs fn(...) in the current task (or outside tasks) with a limit on busy code:
--- past `seconds` (nil: no limit of its own) the host interrupts it at its next
--- instruction, interpreted or JIT-compiled, with a Cancelled error {reason =
--- "time limit", traceback}; when the run stops (the stop grace is over) with
--- reason "stopping". Waiting is not cut short here (run_limited does that).
--- Nested limits keep the earlier deadline. Returns fn's results; raises its errors.
local plain_co, plain_depth

function M.limit(seconds, fn, ...)
  local t = current
  local outer, ocov, odepth
  if t then outer, ocov, odepth = t.deadline, t.guard_co, t.guard_depth
  else outer, ocov, odepth = plain_deadline, plain_co, plain_depth end
  local d = seconds and (loop.now() + seconds) or math.huge
  if outer and outer < d then d = outer end
  local co, depth = interrupt.enter(d ~= math.huge and d or nil, M.where(fn))
  -- the task's scheduler enters the same guard when it resumes the task
  if t then t.deadline, t.guard_co, t.guard_depth = d, co, depth
  else plain_deadline, plain_co, plain_depth = d, co, depth end
  local res = pack(pcall(fn, ...))
  interrupt.leave()
  if t then t.deadline, t.guard_co, t.guard_depth = outer, ocov, odepth
  else plain_deadline, plain_co, plain_depth = outer, ocov, odepth end
  if outer then interrupt.enter(outer ~= math.huge and outer or nil, nil, ocov or (t and t.co), odepth) end
  if not res[1] then error(res[2], 0) end
  return unpack(res, 2, res.n)
end

--- A user hook (a dynamic filter, a normalisation, a sample hook) under limit():
--- `what` names it in the error when it runs past `seconds` ("<what> (<file:line>)
--- ran for N s, its time limit, and was interrupted", with the traceback where).
function M.call_hook(what, seconds, fn, ...)
  local res = pack(pcall(M.limit, seconds, fn, ...))
  if res[1] then return unpack(res, 2, res.n) end
  local e = res[2]
  if M.is_cancelled(e) and e.reason == "time limit" and e.interrupted then
    error(("%s (%s) ran for %g s, its time limit, and was interrupted\n%s"):format(what, M.where(fn), seconds,
      e.traceback or ""), 0)
  end
  error(e, 0)
end

-- The message handler of guarded calls: Cancelled errors keep their identity (with
-- the traceback where they hit); others become message + traceback.
local function guarded_error(e)
  if M.is_cancelled(e) then
    if not e.traceback then e.traceback = debug.traceback("", 2):gsub("^\n", "") end
    return e
  end
  -- the traceback down to the guarded function; the scheduler's frames below it are noise
  local tb = debug.traceback(tostring(e), 2):gsub("\n%s*%[C%]: in function 'xpcall'.*$", "")
  return { message = tb, raw = e }
end
M._guarded_error = guarded_error

--- Runs fn(...) in a task of its own, stopped after `seconds` whatever it runs:
--- waiting (cancelled at its wait) or busy in Lua (interrupted by the host). Returns
--- true, results... or false, err, outcome, raw: "error" (err: message and traceback,
--- raw: the error value) or "timeout" (err: a Cancelled with the traceback where it
--- stopped; err.interrupted when it was busy, not waiting). When the run stops
--- meanwhile (its stop grace is over), the Cancelled error is raised instead.
--- Outside tasks only busy code is bounded (nothing can wait there). `name` may be a
--- table {name, on_interrupted = fn(reason, err)}: fn is called the moment the host
--- interrupts the busy code (err: the interruption, with its traceback), before any
--- other task runs.
function M.run_limited(name, seconds, fn, ...)
  local on_interrupted
  if type(name) == "table" then name, on_interrupted = name.name, name.on_interrupted end
  local args = pack(...)
  local res, timer
  local function call() res = pack(xpcall(function() return fn(unpack(args, 1, args.n)) end, guarded_error)) end
  if not current then
    local ok, err = pcall(M.limit, seconds, call)
    if not ok then res = { n = 2, false, err } end
  else
    -- The limit counts from when the task first runs, not from now: a reward queued
    -- behind busy ones has not used its time.
    local t = M.spawn_named(name, function()
      local me = current
      me.deadline = loop.now() + seconds
      interrupt.enter(me.deadline, me.label, me.co)
      -- The timer only fires while the loop is free, so the code is waiting, not busy: it
      -- is resumed to unwind with no deadline left (on a loaded machine the resume comes
      -- after the deadline, and the host would take the unwinding for busy code).
      timer = M.after(seconds, function() me.deadline = math.huge; me:cancel("time limit") end)
      call()
      timer:cancel()
    end)
    t.deadline, t.label = math.huge, name .. " (" .. M.where(fn) .. ")"   -- guarded from the start
    t.on_interrupted = on_interrupted
    local ok, err = pcall(t.wait, t)
    if timer then timer:cancel() end
    if not ok and t:done() and M.is_cancelled(err) and err.reason == "time limit" then
      res = { n = 2, false, err }   -- ended by its limit (interrupted again past its own pcall)
    elseif not ok then
      t:cancel(M.is_cancelled(err) and err.reason or "cancelled")   -- we were cancelled: so is it
      error(err, 0)
    end
  end
  if res[1] then return true, unpack(res, 2, res.n) end
  local err = res[2]
  if M.is_cancelled(err) then
    if err.reason == "time limit" then return false, err, "timeout" end
    error(err, 0)   -- the run stops, or the caller's task was cancelled
  end
  if type(err) == "table" and err.message then return false, err.message, "error", err.raw end
  return false, tostring(err), "error", err   -- "error in error handling" and the like
end

-- Queues and semaphores ------------------------------------------------------

---@class rl.Queue
local Queue = {}
Queue.__index = Queue
M.Queue = Queue

--- A FIFO between tasks: push never waits; pop waits (inside a task) while the
--- queue is empty. Any number of tasks may wait; each push wakes the oldest.
function M.queue() return setmetatable({ items = {}, head = 1, tail = 0, waiters = {} }, Queue) end

function Queue:push(v)
  self.tail = self.tail + 1
  self.items[self.tail] = v
  local w = table.remove(self.waiters, 1)
  if w then resume_later(w, { n = 0 }) end
end

function Queue:size() return self.tail - self.head + 1 end

local function drop_waiter(list, t)
  for i = #list, 1, -1 do if list[i] == t then table.remove(list, i) end end
end

--- The oldest item; waits for one while the queue is empty (cancellable).
function Queue:pop()
  while self.head > self.tail do
    local me = need_task("rl.task.Queue:pop")
    self.waiters[#self.waiters + 1] = me
    local ok, err = pcall(suspend, me)
    drop_waiter(self.waiters, me)
    if not ok then error(err, 0) end
  end
  local v = self.items[self.head]
  self.items[self.head] = nil
  self.head = self.head + 1
  return v
end

---@class rl.Semaphore
local Semaphore = {}
Semaphore.__index = Semaphore
M.Semaphore = Semaphore

--- At most n holders at once (slime's asyncio.Semaphore around engine calls).
function M.semaphore(n)
  if type(n) ~= "number" or n < 1 then
    error("rl.task.semaphore: bad argument #1 'n' (positive number expected, got " .. tostring(n) .. ")", 2)
  end
  return setmetatable({ free = n, size = n, waiters = {} }, Semaphore)
end

--- Takes a slot, waiting (inside a task) until one is free.
function Semaphore:acquire()
  while self.free <= 0 do
    local me = need_task("rl.task.Semaphore:acquire")
    self.waiters[#self.waiters + 1] = me
    local ok, err = pcall(suspend, me)
    drop_waiter(self.waiters, me)
    if not ok then
      -- A wake-up meant for us must not be lost: pass it on.
      if self.free > 0 then
        local w = table.remove(self.waiters, 1)
        if w then resume_later(w, { n = 0 }) end
      end
      error(err, 0)
    end
  end
  self.free = self.free - 1
end

function Semaphore:release()
  self.free = self.free + 1
  local w = table.remove(self.waiters, 1)
  if w then resume_later(w, { n = 0 }) end
end

--- Runs fn(...) holding a slot; the slot is released on errors too.
function Semaphore:with(fn, ...)
  self:acquire()
  local res = pack(pcall(fn, ...))
  self:release()
  if not res[1] then error(res[2], 0) end
  return unpack(res, 2, res.n)
end

-- Host hooks (used by lua/rl/_host.lua) -------------------------------------

-- M._on_unwaited_failure(task, err) -> bool: set by the host; called when a task
-- nobody waits for fails; returning true marks the failure as handled (rl.exit).
M._on_unwaited_failure = nil

-- The tasks of a set (keys), by id.
local function by_id(set)
  local list = {}
  for t in pairs(set) do list[#list + 1] = t end
  table.sort(list, function(a, b) return a.id < b.id end)
  return list
end

-- The tasks not finished yet (waiting_on / waiting_since: what each waits for).
--- The tasks alive now (running or waiting), by id (rl.watchdog's report).
function M.live() return by_id(live) end

function M._on_done(t, cb) on_task_done[t] = cb end
function M._unobserved() return by_id(unobserved) end

return M
