-- Helpers of the specs that write config files and expect usage errors
-- (config_spec.lua, engine_groups_spec.lua): dofile(HERE .. "/support/config_files.lua").
local rl = require "rl"

local M = {}

--- The message of the usage error fn() raises (fails the spec when it raises none or another).
function M.usage_msg(fn)
  local okk, err = pcall(fn)
  if okk then error("expected a usage error, got none", 2) end
  if not rl.args.is_usage_error(err) then error("expected a usage error, got: " .. tostring(err), 2) end
  return err.message
end

--- Writes `text` to a fresh temporary directory under `name`; returns the path.
function M.config(name, text)
  local path = tmpdir(true) .. "/" .. name
  write_file(path, text)
  return path
end

return M
