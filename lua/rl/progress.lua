--- rl.progress: progress bars for long work (rollout samples, training micro-steps).
--
--   local bar = rl.progress.new { label = "rollout", total = 128, unit = "samples" }
--   bar:add(1, { tokens = 57 })      -- one more done, 57 tokens with it
--   bar:finish()
--
-- On a terminal the bar redraws in place on stderr (at most 10 times a second):
--   rollout   96/128 [##############------]  75%  812 tok/s  9.6 samples/s  ETA 3s
-- Elsewhere (logs, CI) it writes a plain line at most every `interval` seconds (10).
-- RLHOST_PROGRESS=0 turns bars off, =1 draws them even when stderr is not a terminal.
local ffi = require "ffi"
local core = require "rl._core"

pcall(ffi.cdef, "int isatty(int fd);")

local M = {}
local Bar = {}
Bar.__index = Bar

local function mode()
  local env = os.getenv("RLHOST_PROGRESS")
  if env == "0" then return "off" end
  if env == "1" then return "tty" end
  local ok, tty = pcall(function() return ffi.C.isatty(2) == 1 end)
  return (ok and tty) and "tty" or "lines"
end

local function rate_text(v, unit)
  if v >= 1e6 then return ("%.1fM %s/s"):format(v / 1e6, unit) end
  if v >= 1e4 then return ("%.1fk %s/s"):format(v / 1e3, unit) end
  if v >= 10 then return ("%.0f %s/s"):format(v, unit) end
  return ("%.1f %s/s"):format(v, unit)
end

local function duration(s)
  if s ~= s or s == math.huge then return "?" end
  if s < 60 then return ("%ds"):format(math.floor(s + 0.5)) end
  if s < 3600 then return ("%dm%02ds"):format(math.floor(s / 60), math.floor(s % 60)) end
  return ("%dh%02dm"):format(math.floor(s / 3600), math.floor(s % 3600 / 60))
end

--- A bar. opts: label, total (nil = unknown), unit ("it"), width (24),
--- interval (seconds between plain lines, 10), out (a function receiving each
--- rendered line instead of stderr — tests), mode ("tty", "lines", "off").
function M.new(opts)
  opts = opts or {}
  if type(opts) ~= "table" then error("rl.progress.new: bad argument #1 'opts' (table expected)", 2) end
  if opts.total ~= nil and (type(opts.total) ~= "number" or opts.total < 0) then
    error("rl.progress.new: bad option 'total' (number >= 0 or nil expected)", 2)
  end
  local now = core.loop.now()
  local m = opts.mode or mode()
  return setmetatable({
    label = opts.label or "", total = opts.total, unit = opts.unit or "it", width = opts.width or 24,
    interval = opts.interval or 10, out = opts.out, mode = m,
    -- plain lines start after one interval: short work prints no progress at all
    done = 0, tokens = 0, t0 = now, last_draw = m == "lines" and now or -math.huge, finished = false,
  }, Bar)
end

--- The bar's text now.
function Bar:render()
  local elapsed = math.max(core.loop.now() - self.t0, 1e-9)
  local parts = { ("%-8s"):format(self.label) }
  if self.total and self.total > 0 then
    local frac = math.min(self.done / self.total, 1)
    local fill = math.floor(frac * self.width + 0.5)
    parts[#parts + 1] = ("%d/%d [%s%s] %3d%%"):format(self.done, self.total, ("#"):rep(fill),
      ("-"):rep(self.width - fill), math.floor(frac * 100))
  else
    parts[#parts + 1] = ("%d %s"):format(self.done, self.unit)
  end
  if self.tokens > 0 then parts[#parts + 1] = rate_text(self.tokens / elapsed, "tok") end
  parts[#parts + 1] = rate_text(self.done / elapsed, self.unit)
  if self.finished then
    parts[#parts + 1] = "in " .. duration(elapsed)
  elseif self.total and self.done > 0 and self.done < self.total then
    parts[#parts + 1] = "ETA " .. duration((self.total - self.done) * elapsed / self.done)
  elseif self.total and self.total > 0 and self.done >= self.total then
    parts[#parts + 1] = "ETA ?"   -- past the total (over-sampling): no estimate, never a negative one
  end
  return table.concat(parts, "  ")
end

function Bar:_emit(final)
  if self.mode == "off" then return end
  local now = core.loop.now()
  local every = self.mode == "tty" and 0.1 or self.interval
  if not final and now - self.last_draw < every then return end
  self.last_draw = now
  local line = self:render()
  if self.out then return self.out(line) end
  if self.mode == "tty" then
    io.stderr:write("\r\27[K", line, final and "\n" or "")
  else
    io.stderr:write(line, "\n")
  end
  io.stderr:flush()
end

--- Adds n (1) done items, with extra counters ({tokens = k}); redraws when due.
function Bar:add(n, extra)
  self.done = self.done + (n or 1)
  if extra and extra.tokens then self.tokens = self.tokens + extra.tokens end
  self:_emit(false)
end

--- Sets the done count (and the total, when it changed).
function Bar:set(done, total)
  self.done = done
  if total then self.total = total end
  self:_emit(false)
end

--- Draws the final state and ends the line. Idempotent.
function Bar:finish()
  if self.finished then return end
  self.finished = true
  -- A plain-lines bar that finished within its interval says nothing more: the
  -- caller's summary line follows.
  if self.mode == "tty" or self.out then self:_emit(true) end
end

return M
