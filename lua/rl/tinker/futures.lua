--- rl.tinker.futures: the Tinker API's request futures. A call that does work answers
--- at once with {request_id}; the work runs in a task of its own and the client long-polls
--- /api/v1/retrieve_future for the result.
---
---   local store = futures.new { poll = 20 }
---   local id = store:submit(function() return { body = {...} } end, { lane = model_id, seq = 3, key = idem })
---   local entry = store:wait(id)     -- the entry once done, or when `poll` seconds passed
---
--- Work on one lane (a training model) runs one call at a time, in the order of the
--- clients' seq_id (the SDK numbers each model's calls 1, 2, ...; HTTP may deliver them
--- out of order), so forward_backward / optim_step on a model apply as the client issued
--- them (the first is 1, then each call's seq_id + 1; the SDK sends a forward_backward's
--- chunks at once, the first one last). A seq_id that never comes holds its lane for at
--- most `gap_wait` seconds.
--- Idempotency keys (the SDK's X-Idempotency-Key on retries) map to the first request.
--- Finished results are kept `keep` seconds: they wait in a queue in the order they
--- finished, so forgetting the old ones costs each submit only the entries it drops.
--- A result is {body = table (JSON) | string, content_type = ...} or {error = msg, category = "user" | "server"}.
local task = require "rl.task"

local M = {}
local Store = {}
Store.__index = Store

local function loop_now() return require("rl._core").loop.now() end

--- opts: poll (seconds a wait holds, 20), keep (seconds a finished result is kept, 900),
--- gap_wait (10), prefix of the ids ("req"), first_seq (1), clock (→ seconds; default the
--- event loop's monotonic clock).
function M.new(opts)
  opts = opts or {}
  return setmetatable({
    _entries = {}, _keys = {}, _lanes = {}, _next = 0,
    _done = {}, _done_head = 1, _done_tail = 0,   -- finished entries, oldest first
    _poll = opts.poll or 20, _keep = opts.keep or 900, _gap_wait = opts.gap_wait or 10,
    _prefix = opts.prefix or "req", _first_seq = opts.first_seq or 1, _clock = opts.clock or loop_now,
  }, Store)
end

-- A lane's state: the next seq_id it runs, and the calls waiting for their turn.
local function lane_of(self, name)
  local l = self._lanes[name]
  if not l then
    l = { next = self._first_seq, waiting = {}, busy = false }
    self._lanes[name] = l
  end
  return l
end

local function finish(self, entry, result)
  entry.result = result
  entry.done_at = self._clock()
  entry.state = "done"
  self._done_tail = self._done_tail + 1
  self._done[self._done_tail] = entry
  for q in pairs(entry.waiters) do q:push(true) end
end

local function run(self, entry, fn)
  entry.state = "running"
  entry.started_at = self._clock()
  local ok, res = xpcall(fn, function(e)
    if task.is_cancelled(e) then return e end
    return { error = tostring(e), trace = debug.traceback(tostring(e), 2) }
  end)
  if ok then
    finish(self, entry, res)
  elseif type(res) == "table" and res.error then
    -- a user error is raised as a table {user = msg}; anything else is the server's
    local e = res.error
    local msg = e:gsub("^[^:]*:%d+: ", "")
    if msg:match("^user: ") then
      finish(self, entry, { error = msg:sub(7), category = "user" })
    else
      require("rl.log").warn("tinker: %s failed: %s", entry.what, res.trace)
      finish(self, entry, { error = msg, category = "server" })
    end
  else
    finish(self, entry, { error = "cancelled", category = "server" })
  end
end

-- Runs the lane's waiting calls in seq order, one at a time.
local function pump(self, lane)
  if lane.busy then return end
  lane.busy = true
  task.spawn_named("tinker lane", function()
    while true do
      local pick, pick_i
      for i, w in ipairs(lane.waiting) do
        if w.seq == nil or lane.next == nil or w.seq <= lane.next then pick, pick_i = w, i break end
      end
      if not pick and #lane.waiting > 0 then
        -- the next seq_id has not come: wait a while for it, then take the lowest waiting
        local oldest = math.huge
        for _, w in ipairs(lane.waiting) do oldest = math.min(oldest, w.arrived) end
        if self._clock() - oldest >= self._gap_wait then
          for i, w in ipairs(lane.waiting) do
            if not pick or w.seq < pick.seq then pick, pick_i = w, i end
          end
        else
          task.sleep(0.01)
        end
      end
      if pick then
        table.remove(lane.waiting, pick_i)
        if pick.seq then lane.next = pick.seq + 1 end
        run(self, pick.entry, pick.fn)
      elseif #lane.waiting == 0 then
        break
      end
    end
    lane.busy = false
  end)
end

--- Queues fn (run in a task; returns a result table, or raises "user: msg" for the
--- client's mistakes) → request_id. opts: lane (calls on a lane run one at a time, in seq
--- order), seq, key (idempotency: the same key gives the first request's id), what (for logs).
function Store:submit(fn, opts)
  opts = opts or {}
  if opts.key and self._keys[opts.key] and self._entries[self._keys[opts.key]] then return self._keys[opts.key] end
  self._next = self._next + 1
  -- random bytes, not math.random: a retry after a restart must not name another request
  local id = ("%s-%d-%s"):format(self._prefix, self._next, require("rl.tinker.keys").random_hex(4))
  local entry = { id = id, state = "queued", created = self._clock(), what = opts.what or "request", waiters = {}, key = opts.key }
  self._entries[id] = entry
  if opts.key then self._keys[opts.key] = id end
  if opts.lane then
    local lane = lane_of(self, opts.lane)
    table.insert(lane.waiting, { entry = entry, fn = fn, seq = opts.seq, arrived = self._clock() })
    pump(self, lane)
  else
    task.spawn_named("tinker " .. entry.what, run, self, entry, fn)
  end
  self:_expire()
  return id
end

--- The entry of a request id (nil when unknown or expired).
function Store:get(id) return self._entries[id] end

--- Waits up to `poll` seconds (or `timeout`) for the request to finish; → the entry (its
--- state "done" when finished), or nil for an unknown id.
function Store:wait(id, timeout)
  local e = self._entries[id]
  if not e then return nil end
  if e.state == "done" then return e end
  local q = task.queue()
  e.waiters[q] = true
  local timer = task.after(timeout or self._poll, function() q:push(false) end)
  local ok, err = pcall(q.pop, q)
  timer:cancel()
  e.waiters[q] = nil
  if not ok then error(err, 0) end
  return e
end

--- Counts by state (for /metrics and tests).
function Store:counts()
  local c = { queued = 0, running = 0, done = 0 }
  for _, e in pairs(self._entries) do c[e.state] = c[e.state] + 1 end
  return c
end

-- Finished results are kept `keep` seconds (clients retrieve them once, maybe twice),
-- their idempotency keys as long. The queue holds them in the order they finished, so
-- only its head can be due: each call looks at the entries it drops, and one more.
function Store:_expire()
  local t, done = self._clock(), self._done
  local head = self._done_head
  while head <= self._done_tail and t - done[head].done_at > self._keep do
    local e = done[head]
    done[head] = nil
    head = head + 1
    self._entries[e.id] = nil
    if e.key and self._keys[e.key] == e.id then self._keys[e.key] = nil end
  end
  self._done_head = head
end

return M
