--- rl.pyrandom: Python's `random` module's Mersenne Twister, bit for bit, so that
--- data shuffled by a seed comes out in the order slime (Python) would give.
--
--   local r = rl.pyrandom.new(42 + epoch)    -- random.seed(42 + epoch)
--   r:shuffle(list)                          -- random.shuffle(list)
--   r:random()                               -- random.random()
--   r:randbelow(n)                           -- random._randbelow(n)
--
-- Seeds are non-negative integers below 2^53 (Python seeds an int by its
-- absolute value's 32-bit words, least significant first).
local bit = require "bit"
local band, bor, bxor, lshift, rshift, tobit = bit.band, bit.bor, bit.bxor, bit.lshift, bit.rshift, bit.tobit

local M = {}
local R = {}
R.__index = R

local N, MM = 624, 397

-- Unsigned 32-bit value of a bit-op result.
local function u32(x) return x % 4294967296 end

-- (a * b) mod 2^32 for 32-bit a, b, exact in doubles by splitting b.
local function mul32(a, b)
  local lo = (a * (b % 65536)) % 4294967296
  local hi = (a * math.floor(b / 65536)) % 65536
  return (lo + hi * 65536) % 4294967296
end

local function init_genrand(mt, s)
  mt[0] = u32(s)
  for i = 1, N - 1 do
    local prev = mt[i - 1]
    mt[i] = u32(mul32(1812433253, u32(bxor(tobit(prev), rshift(tobit(prev), 30)))) + i)
  end
end

local function init_by_array(mt, key)
  init_genrand(mt, 19650218)
  local i, j = 1, 0
  local k = math.max(N, #key)
  for _ = 1, k do
    local prev = mt[i - 1]
    local x = u32(bxor(tobit(prev), rshift(tobit(prev), 30)))
    mt[i] = u32(u32(bxor(tobit(mt[i]), tobit(mul32(x, 1664525)))) + key[j + 1] + j)
    i, j = i + 1, j + 1
    if i >= N then mt[0] = mt[N - 1]; i = 1 end
    if j >= #key then j = 0 end
  end
  for _ = 1, N - 1 do
    local prev = mt[i - 1]
    local x = u32(bxor(tobit(prev), rshift(tobit(prev), 30)))
    mt[i] = u32(u32(bxor(tobit(mt[i]), tobit(mul32(x, 1566083941)))) - i)
    i = i + 1
    if i >= N then mt[0] = mt[N - 1]; i = 1 end
  end
  mt[0] = 2147483648  -- 0x80000000: a non-zero initial array
end

function M.new(seed)
  if type(seed) ~= "number" or seed ~= math.floor(seed) or math.abs(seed) >= 2 ^ 53 then
    error("rl.pyrandom.new: bad argument #1 'seed' (integer expected, |seed| < 2^53, got " .. tostring(seed) .. ")", 2)
  end
  seed = math.abs(seed)
  local key = {}
  repeat
    key[#key + 1] = seed % 4294967296
    seed = math.floor(seed / 4294967296)
  until seed == 0
  local self = setmetatable({ mt = {}, mti = N }, R)
  init_by_array(self.mt, key)
  return self
end

local UPPER, LOWER, MATRIX_A = 0x80000000, 0x7fffffff, 0x9908b0df

function R:genrand_uint32()
  local mt = self.mt
  if self.mti >= N then
    for kk = 0, N - 1 do
      local y = bor(band(tobit(mt[kk]), UPPER), band(tobit(mt[(kk + 1) % N]), LOWER))
      local v = bxor(tobit(mt[(kk + MM) % N]), rshift(y, 1))
      if band(y, 1) ~= 0 then v = bxor(v, tobit(MATRIX_A)) end
      mt[kk] = u32(v)
    end
    self.mti = 0
  end
  local y = tobit(mt[self.mti])
  self.mti = self.mti + 1
  y = bxor(y, rshift(y, 11))
  y = bxor(y, band(lshift(y, 7), tobit(0x9d2c5680)))
  y = bxor(y, band(lshift(y, 15), tobit(0xefc60000)))
  y = bxor(y, rshift(y, 18))
  return u32(y)
end

--- random.random(): 53-bit float in [0, 1).
function R:random()
  local a = math.floor(self:genrand_uint32() / 32)   -- >> 5
  local b = math.floor(self:genrand_uint32() / 64)   -- >> 6
  return (a * 67108864 + b) / 9007199254740992
end

--- random.getrandbits(k) for 1 <= k <= 32.
function R:getrandbits(k)
  return math.floor(self:genrand_uint32() / 2 ^ (32 - k))
end

--- random._randbelow(n): uniform in [0, n), n < 2^32.
function R:randbelow(n)
  local k = 0
  while 2 ^ k <= n do k = k + 1 end  -- n.bit_length()
  local r = self:getrandbits(k)
  while r >= n do r = self:getrandbits(k) end
  return r
end

--- random.shuffle(list), in place.
function R:shuffle(x)
  for i = #x - 1, 1, -1 do
    local j = self:randbelow(i + 1)
    x[i + 1], x[j + 1] = x[j + 1], x[i + 1]
  end
  return x
end

return M
