--- rl.json: JSON encode/decode.
--
--   local s = rl.json.encode({a = 1, b = rl.json.array{}}, {indent = 2, sort_keys = true})
--   local v, err = rl.json.decode(s)      -- nil, "rl.json.decode: ... at line 1, column 5" on bad input
--   rl.json.decode(s, {unique_keys = true})  -- a key twice in one object is an error (config files)
--
-- JSON null is `rl.json.null`; decoded arrays carry a metatable so `[]` stays an
-- array when encoded again (mark your own with rl.json.array(t)). Both ways refuse
-- nesting deeper than 128 levels (RLHOST_JSON_MAX_DEPTH; docs/http.md "JSON input").
local core = require "rl._core"

local M = {
  decode = core.json.decode,
  null = core.json.null,
  -- `s` as valid UTF-8: each invalid sequence becomes U+FFFD (as Python's errors="replace");
  -- for text that quotes model output (which can end mid-character) before it is encoded
  valid_utf8 = core.json.valid_utf8,
}

-- Deferred contents: rl.trace keeps a running sample's events outside Lua
-- tables until they are read. Readers that walk tables raw (encode here,
-- rl.sample's copies, rl.inspect) call materialize() first so they see them.
local materializers = {}
function M.on_materialize(fn) materializers[#materializers + 1] = fn end
function M.materialize()
  for i = 1, #materializers do materializers[i]() end
end

local encode = core.json.encode
function M.encode(value, opts)
  M.materialize()
  return encode(value, opts)
end

--- Marks `t` (or a new table) as a JSON array.
function M.array(t) return setmetatable(t or {}, core.json.array_mt) end

--- True when `t` was decoded from, or marked as, a JSON array.
function M.is_array(t) return type(t) == "table" and getmetatable(t) == core.json.array_mt end

return M
