--- rl.tinker.tokens: the short-lived tokens the SDK trades its API key for when the
--- server turns on JWT auth (client/config's pjwt_auth_enabled; POST /api/v1/auth/token),
--- then sends as X-API-Key. They are JWTs in form, so the SDK reads its identity from
--- their claims (RestClient.whoami: sub, org_id, email) and their lifetime (iat, exp: it
--- trades again at half of it), but they are not signed: the server keeps the ones it
--- issued, in memory, and takes a token only when it is one of them, whole and unexpired.
--- The third part is 32 random bytes, compared in full (rl.tinker.keys.matches); the
--- claims part, which names the token, is the lookup key. A restart forgets them: the
--- SDK's next call hears 401 invalid_token and trades its key again.
---
---   local tokens = require("rl.tinker.tokens").new { lifetime = 3600 }
---   local jwt = tokens:issue()         -- {"jwt": ...} of /api/v1/auth/token
---   tokens:valid(jwt)                  -- true | false
local keys = require "rl.tinker.keys"
local json = require "rl.json"
local bit = require "bit"

local M = {}
local Tokens = {}
Tokens.__index = Tokens

M.USER = "tml:user:local"   -- the one key holder: who whoami names
M.ORG = "local"
local KEPT = 65536          -- live tokens at most; the oldest go first beyond that

local B64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"

--- base64url without padding (RFC 7515's encoding of a JWT's parts).
function M.b64url(s)
  local out = {}
  for i = 1, #s, 3 do
    local a, b, c = s:byte(i, i + 2)
    local n = bit.bor(bit.lshift(a, 16), bit.lshift(b or 0, 8), c or 0)
    local chars = 2 + (b and 1 or 0) + (c and 1 or 0)
    for j = 1, chars do
      local v = bit.band(bit.rshift(n, 6 * (4 - j)), 63)
      out[#out + 1] = B64:sub(v + 1, v + 1)
    end
  end
  return table.concat(out)
end

local function random_bytes(n)
  local f = io.open("/dev/urandom", "rb")
  if not f then error("rl.tinker.tokens: cannot read /dev/urandom", 0) end
  local s = f:read(n)
  f:close()
  return s
end

--- opts: lifetime (seconds a token lives, 3600), clock (→ seconds since the epoch; os.time).
function M.new(opts)
  opts = opts or {}
  return setmetatable({ live = {}, order = {}, head = 1, tail = 0, lifetime = opts.lifetime or 3600,
                        clock = opts.clock or os.time }, Tokens)
end

-- Drops the expired tokens at the head of the queue (issued in order, so they expire in
-- order), and the oldest beyond KEPT.
function Tokens:_expire()
  local now = self.clock()
  while self.head <= self.tail do
    local claims = self.order[self.head]
    local t = self.live[claims]
    if t and t.exp > now and self.tail - self.head < KEPT then break end
    self.live[claims], self.order[self.head] = nil, nil
    self.head = self.head + 1
  end
end

--- A new token for the key holder. → the JWT (a string).
function Tokens:issue()
  self:_expire()
  local now = self.clock()
  local header = M.b64url(json.encode({ typ = "JWT", alg = "none" }))
  local claims = M.b64url(json.encode({ iss = "rlhost", sub = M.USER, org_id = M.ORG, iat = now,
                                        exp = now + self.lifetime, jti = M.b64url(random_bytes(12)) }))
  local secret = M.b64url(random_bytes(32))
  self.live[claims] = { secret = secret, exp = now + self.lifetime }
  self.tail = self.tail + 1
  self.order[self.tail] = claims
  return header .. "." .. claims .. "." .. secret
end

--- Whether `jwt` (what a client sent) is a token issued here that has not expired.
function Tokens:valid(jwt)
  if type(jwt) ~= "string" then return false end
  local claims, secret = jwt:match("^[%w%-_]+%.([%w%-_]+)%.([%w%-_]+)$")
  local t = claims and self.live[claims]
  if not t or t.exp <= self.clock() then return false end
  return keys.matches(secret, { t.secret })
end

return M
