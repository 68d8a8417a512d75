--- rl.gzip: gzip in memory (zlib in C++, runtime/base/gzip.cpp).
--
--   local text, err = rl.gzip.decompress(bytes)        -- gzip (several members joined) or zlib
--   local gz = rl.gzip.compress(text, 6)
--   local s, err = rl.gzip.read_file("trace.json.gz")  -- a file, inflated when it is gzip
--
-- Corrupt or truncated input is a runtime failure (nil, err); wrong argument
-- types raise.
local core = require "rl._core"

local cg = core.gzip
local M = {}

--- The inflated bytes of a gzip or zlib stream, or nil, err. `max_bytes`
--- (default 1 GiB) bounds the output.
function M.decompress(bytes, max_bytes) return cg.decompress(bytes, max_bytes) end

--- One gzip member of `bytes` at `level` (-1..9; -1 = zlib's default, 6).
function M.compress(bytes, level) return cg.compress(bytes, level) end

--- True when `bytes` starts with gzip's magic (1f 8b).
function M.is_gzip(bytes) return cg.is_gzip(bytes) end

--- The contents of the file at `path`, inflated when it starts with gzip's
--- magic (whatever its name), or nil, err naming the file.
function M.read_file(path, max_bytes)
  if type(path) ~= "string" then
    error("rl.gzip.read_file: bad argument #1 'path' (string expected, got " .. type(path) .. ")", 2)
  end
  local f, oerr = io.open(path, "rb")
  if not f then return nil, "cannot open " .. oerr end
  local data = f:read("*a")
  f:close()
  if not data then return nil, path .. ": cannot read" end
  if not cg.is_gzip(data) then return data end
  local out, err = cg.decompress(data, max_bytes)
  if not out then return nil, path .. ": " .. err end
  return out
end

return M
