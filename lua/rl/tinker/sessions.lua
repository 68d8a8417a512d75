--- rl.tinker.sessions: the Tinker API's client sessions. A session owns the training
--- clients and samplers its client made. It ends when the client finishes it
--- (sessions/<id>/finish), or when the client stops sending session_heartbeat (the SDK
--- sends one every 10 s while it lives): after `timeout` seconds without one, or any
--- other call naming the session, it expires. Either way `on_end(session, why)`
--- releases what it owned.
---
---   local sessions = require("rl.tinker.sessions").new { timeout = 60, on_end = release }
---   local s = sessions:create(body)        -- {id, models = {}, samplers = {}, ...}
---   sessions:get(id)                       -- the live session (a heartbeat), or nil, state, why
---   sessions:peek(id)                      -- the same, not a heartbeat
---   sessions:start()                       -- expires silent sessions every timeout/4 s
local task = require "rl.task"

local M = {}
local Sessions = {}
Sessions.__index = Sessions

local ENDED_KEPT = 4096   -- how many ended sessions are remembered (to say why one is gone)

local function loop_now() return require("rl._core").loop.now() end

local function new_id()
  -- random across processes too: a training run is named by its session, and its
  -- checkpoints stay on disk for the next server, which must not reuse the name
  return "session-" .. require("rl.tinker.keys").random_hex(8)
end

--- opts: timeout (seconds without a heartbeat before a session expires; 0 or nil:
--- never), on_end(session, why) (releases what it owned), clock (→ seconds; default
--- the event loop's monotonic clock).
function M.new(opts)
  opts = opts or {}
  local timeout = opts.timeout or 0
  if type(timeout) ~= "number" or timeout < 0 or timeout ~= timeout then
    error("rl.tinker: session_timeout must be a number of seconds >= 0 (0: sessions never expire), got "
      .. tostring(timeout), 3)
  end
  return setmetatable({ live = {}, ended = {}, ended_order = {}, ended_next = 1, timeout = timeout,
                        on_end = opts.on_end or function() end, clock = opts.clock or loop_now }, Sessions)
end

--- A new session from create_session's body.
function Sessions:create(body)
  local t = self.clock()
  local s = { id = new_id(), created = t, seen = t, created_unix = os.time(), tags = body.tags,
              user_metadata = body.user_metadata, sdk_version = body.sdk_version, models = {}, samplers = {} }
  self.live[s.id] = s
  return s
end

--- The live session `id`, marked as heard from now; or nil and why there is none
--- ("ended": finished or expired, with the reason; "unknown").
function Sessions:get(id)
  local s = self.live[id]
  if s then s.seen = self.clock() end
  return self:peek(id)
end

--- The same as get, without counting as a sign of life (a RestClient asking about it).
function Sessions:peek(id)
  local s = self.live[id]
  if s then return s end
  local why = self.ended[id]
  if why then return nil, "ended", why end
  return nil, "unknown"
end

--- The ids of the live sessions, oldest first.
function Sessions:list()
  local list = {}
  for _, s in pairs(self.live) do list[#list + 1] = s end
  table.sort(list, function(a, b) return a.created < b.created end)
  local ids = {}
  for i, s in ipairs(list) do ids[i] = s.id end
  return ids
end

local function remember(self, id, why)
  local slot = self.ended_next
  local old = self.ended_order[slot]
  if old then self.ended[old] = nil end
  self.ended_order[slot] = id
  self.ended[id] = why
  self.ended_next = slot % ENDED_KEPT + 1
end

--- Ends session `id` (its client finished it, or it expired): on_end releases what it
--- owned. → true, or false when it is not live (ended before, or never was).
function Sessions:finish(id, why)
  local s = self.live[id]
  if not s then return false end
  self.live[id] = nil
  remember(self, id, why)
  self.on_end(s, why)
  return true
end

--- Expires every session not heard from for `timeout` seconds. → how many.
function Sessions:sweep()
  if self.timeout <= 0 then return 0 end
  local t, due = self.clock(), {}
  for id, s in pairs(self.live) do
    if t - s.seen > self.timeout then due[#due + 1] = id end
  end
  for _, id in ipairs(due) do
    local s = self.live[id]
    self:finish(id, ("expired: no heartbeat for %.1f s (session timeout %g s)"):format(t - s.seen, self.timeout))
  end
  return #due
end

--- Sweeps every timeout/4 seconds (at most 5 s apart) until stop(): a silent session
--- ends between `timeout` and `timeout` + that interval after it was last heard from.
function Sessions:start()
  if self.timeout <= 0 or self.sweeper then return end
  local every = math.min(math.max(self.timeout / 4, 0.05), 5)
  self.sweeper = task.every(every, function()
    local ok, err = pcall(self.sweep, self)
    if not ok then require("rl.log").warn("tinker: expiring sessions failed: %s", tostring(err)) end
  end)
end

function Sessions:stop()
  if self.sweeper then
    self.sweeper:cancel()
    self.sweeper = nil
  end
end

return M
