--- rl.log: log records from recipes, with the recipe's file:line in each.
--
--   rl.log.info("step %d: reward %.3f", step, r)   -- string.format arguments
--   rl.log.level("debug")                          -- change the level at run time
local core = require "rl._core"
local write, enabled = core.log.write, core.log.enabled

local M = {}

local function emit(level, fmt, ...)
  if not enabled(level) then return end
  local info = debug.getinfo(3, "Sl")
  local msg
  if select("#", ...) > 0 then
    local ok, s = pcall(string.format, fmt, ...)
    msg = ok and s or (tostring(fmt) .. " (bad format: " .. tostring(s) .. ")")
  else
    msg = tostring(fmt)
  end
  local src = info and info.short_src or nil
  write(level, src, info and info.currentline or 0, msg)
end

for _, level in ipairs { "trace", "debug", "info", "warn", "error" } do
  M[level] = function(fmt, ...) emit(level, fmt, ...) end
end

--- Returns the current level; sets it first when `new_level` is given.
function M.level(new_level) return core.log.level(new_level) end

return M
