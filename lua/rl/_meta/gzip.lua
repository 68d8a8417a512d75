---@meta
-- LuaLS type stubs for rl.gzip (lua/rl/gzip.lua). See docs/lua-api.md ("rl.gzip").

---@class rl.gzip
rl.gzip = {}

--- The inflated bytes of a gzip (members joined) or zlib stream, or nil, err
--- (corrupt, truncated, larger than `max_bytes`, default 1 GiB).
---@param bytes string
---@param max_bytes? number
---@return string|nil out, string|nil err
function rl.gzip.decompress(bytes, max_bytes) end

--- One gzip member at `level` (-1..9; -1 = zlib's default).
---@param bytes string
---@param level? integer
---@return string
function rl.gzip.compress(bytes, level) end

--- True when `bytes` starts with gzip's magic bytes.
---@param bytes string
---@return boolean
function rl.gzip.is_gzip(bytes) end

--- A file's contents, inflated when it is gzip; nil, err naming the file.
---@param path string
---@param max_bytes? number
---@return string|nil out, string|nil err
function rl.gzip.read_file(path, max_bytes) end
