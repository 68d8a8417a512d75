--- rl.tinker.keys: the server's API key, kept in an owner-only file (the SDK sends it as
--- X-API-Key; it must look like tml-...), and the check of a key a client sent.
local bit = require "bit"

local M = {}

-- Whether `given` equals `expected`, in a time that depends on the length of `expected`
-- alone: every byte is looked at, and none decides early where the strings differ
-- (runtime/base/admin_token.cpp's same_secret, for Lua strings).
local function same_secret(given, expected)
  local n, m = #expected, #given
  local diff = bit.bxor(n, m)
  for i = 1, n do
    diff = bit.bor(diff, bit.bxor(expected:byte(i), given:byte(i <= m and i or 1) or 0))
  end
  return n > 0 and diff == 0
end

--- Whether `given` (what a client sent, or nil) is one of `keys` (a list). Every key is
--- compared in full, so which one matched, and how much of it, does not show in timing.
function M.matches(given, keys)
  if type(given) ~= "string" then return false end
  local found = false
  for i = 1, #keys do
    if same_secret(given, keys[i]) then found = true end
  end
  return found
end

local pool, used = "", 0   -- /dev/urandom's bytes, read 4 KiB at a time (ids are made per request)

--- `n` random bytes from /dev/urandom as 2n hex digits (math.random repeats its sequence
--- from one process to the next: ids made with it would too).
function M.random_hex(n)
  if #pool - used < n then
    local f = io.open("/dev/urandom", "rb")
    if not f then error("rl.tinker.keys: cannot read /dev/urandom", 0) end
    pool, used = f:read(math.max(4096, n)) or "", 0
    f:close()
    if #pool < n then error("rl.tinker.keys: short read from /dev/urandom", 0) end
  end
  local bytes = pool:sub(used + 1, used + n)
  used = used + n
  return (bytes:gsub(".", function(c) return ("%02x"):format(c:byte()) end))
end

--- The key in `path` (its first line), or a fresh tml- key written there (mode 0600,
--- its directory 0700) when the file does not exist.
function M.load_or_create(path)
  local f = io.open(path, "r")
  if f then
    local key = (f:read("*l") or ""):gsub("%s+$", "")
    f:close()
    if key:sub(1, 4) ~= "tml-" or #key < 12 then
      error(("rl.tinker: %s holds no tml- key (the SDK only sends keys of the form tml-<8 or more characters>; "
        .. "delete the file for a fresh one)"):format(path), 0)
    end
    return key
  end
  local dir = path:match("^(.*)/[^/]+$")
  if dir then
    os.execute("mkdir -p '" .. dir:gsub("'", "'\\''") .. "'")
    os.execute("chmod 700 '" .. dir:gsub("'", "'\\''") .. "'")
  end
  local key = "tml-" .. M.random_hex(24)
  local ffi = require("ffi")
  pcall(ffi.cdef, "unsigned int umask(unsigned int mask);")
  local prev = ffi.C.umask(tonumber("077", 8))   -- the file is created owner-only
  local out, err = io.open(path, "w")
  ffi.C.umask(prev)
  if not out then error("rl.tinker: cannot write the API key file " .. path .. ": " .. tostring(err), 0) end
  out:write(key, "\n")
  out:close()
  return key
end

return M
