--- rl.tinker.expiry: checkpoints with a time to live (the RestClient's
--- set_checkpoint_ttl_from_tinker_path, copy_weights' ttl_seconds). A checkpoint's expiry
--- is kept in its metadata on disk (rl.tinker.checkpoints.meta), so it outlasts the
--- server, and in an index here, read from disk when the sweep first runs. The sweep,
--- every `every` seconds, deletes the checkpoints that are due (their files go, as
--- delete_checkpoint's do); a listing or lookup that meets one due before then deletes it
--- at once, so an expired checkpoint is never listed or loaded.
---
---   local expiry = require("rl.tinker.expiry").new { dir = checkpoint_dir, on_delete = forget }
---   expiry:note(c)             -- c from checkpoints.scan (or {dir, run, id, path, expires_at})
---   expiry:expired(cdir)       -- true (and deleted now) when it is past its time
---   expiry:filter(list)        -- a scan's list less the expired ones (deleted now)
---   expiry:start() / expiry:stop()
local checkpoints = require "rl.tinker.checkpoints"
local log = require "rl.log"

local M = {}
local Expiry = {}
Expiry.__index = Expiry

--- opts: dir (the checkpoint directory), on_delete(cdir) (after a checkpoint's files went:
--- the sampler engine forgets it), every (seconds between sweeps, 1), clock (→ seconds
--- since the epoch; os.time).
function M.new(opts)
  return setmetatable({ dir = opts.dir, due = {}, on_delete = opts.on_delete or function() end,
                        every = opts.every or 1, clock = opts.clock or os.time }, Expiry)
end

--- Notes checkpoint `c`'s expiry ({dir, run, id, path, expires_at}; none: it never expires).
function Expiry:note(c)
  if c.expires_at then
    self.due[c.dir] = { run = c.run, id = c.id, path = c.path, at = c.expires_at }
  else
    self.due[c.dir] = nil
  end
end

--- Forgets checkpoint directory `cdir` (deleted by its owner).
function Expiry:forget(cdir) self.due[cdir] = nil end

local function delete(self, cdir, e)
  self.due[cdir] = nil
  local dir, why, msg = checkpoints.delete(self.dir, e.run, e.id)
  if dir then
    log.info("tinker: checkpoint %s expired at %s: deleted", e.path, checkpoints.iso_time(e.at))
    self.on_delete(cdir)
  elseif why ~= "missing" then   -- tried again when a listing meets it
    log.warn("tinker: deleting expired checkpoint %s failed: %s", e.path, tostring(msg))
  end
end

--- Whether the checkpoint in directory `cdir` is past its expiry; when it is, it is
--- deleted now. Before the first sweep has read the index, its metadata is asked.
function Expiry:expired(cdir)
  local e = self.due[cdir]
  if not e and not self.loaded then
    local run, kind, name = cdir:sub(#self.dir + 2):match("^([^/]+)/([^/]+)/([^/]+)$")
    local at = run and checkpoints.meta(cdir).expires_at
    if at then e = { run = run, id = kind .. "/" .. name, path = ("tinker://%s/%s/%s"):format(run, kind, name), at = at } end
  end
  if not e or e.at > self.clock() then return false end
  delete(self, cdir, e)
  return true
end

--- A list from checkpoints.scan less its expired checkpoints, which are deleted now; the
--- others' expiries are noted.
function Expiry:filter(list)
  local now, out = self.clock(), {}
  for _, c in ipairs(list) do
    self:note(c)
    if c.expires_at and c.expires_at <= now then
      delete(self, c.dir, self.due[c.dir])
    else
      out[#out + 1] = c
    end
  end
  return out
end

--- Deletes every checkpoint that is due. → how many were.
function Expiry:sweep()
  if not self.loaded then
    local list, err = checkpoints.scan(self.dir)
    if not list then error("reading checkpoint expiries: " .. tostring(err), 0) end
    self:filter(list)
    self.loaded = true
  end
  local now, due = self.clock(), {}
  for cdir, e in pairs(self.due) do
    if e.at <= now then due[#due + 1] = cdir end
  end
  for _, cdir in ipairs(due) do delete(self, cdir, self.due[cdir]) end
  return #due
end

--- Sweeps every `every` seconds until stop(): a checkpoint goes at most that long after
--- its expiry even when nobody asks for it.
function Expiry:start()
  if self.sweeper then return end
  self.sweeper = require("rl.task").every(self.every, function()
    local ok, err = pcall(self.sweep, self)
    if not ok then log.warn("tinker: expiring checkpoints failed: %s", tostring(err)) end
  end)
end

function Expiry:stop()
  if self.sweeper then
    self.sweeper:cancel()
    self.sweeper = nil
  end
end

return M
