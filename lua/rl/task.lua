--- rl.task: tasks (coroutines) scheduled on the host's one event loop.
--
-- Every asynchronous runtime operation (timer, HTTP request, attach chunk, ...)
-- is an "op" with a numeric id. The C++ side delivers the op's events to
-- `dispatch` below (through the host's one protected call); the task waiting on
-- that op is resumed with the event's values. Lua never runs on another thread.
local core = require "rl._core"
local loop = core.loop

local M = {}

local unpack, pack = unpack, function(...) return { n = select("#", ...), ... } end
local co_create, co_resume, co_yield, co_status, co_running =
  coroutine.create, coroutine.resume, coroutine.yield, coroutine.status, coroutine.running

---@class rl.Cancelled
local Cancelled = {}
Cancelled.__index = Cancelled
Cancelled.__tostring = function(c) return c.reason end
M.Cancelled = Cancelled

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
  local res = pack(co_resume(t.co, unpack(vals, 1, vals.n)))
  current = prev
  if co_status(t.co) == "dead" then finish(t, res[1], res) end
end

local function drain_ready()
  while ready_head <= ready_tail do
    local item = ready[ready_head]
    ready[ready_head] = nil
    ready_head = ready_head + 1
    step(item[1], item[2])
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
