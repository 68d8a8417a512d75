--- rl.agent.calc: the calculator tool's arithmetic — a recursive-descent parser and
--- evaluator over numbers, + - * / // % ^ (and **), unary signs and parentheses.
--- Model text is never handed to `load`: anything outside that grammar is an error
--- naming the position.
--
--   rl.agent.calc.eval("3*(4+2)^2")      --> 108
--   rl.agent.calc.eval("1/0")            --> nil, "division by zero"
--   rl.agent.calc.format(7.5)            --> "7.5"; 12.0 --> "12"
--
-- Grammar (precedence low to high): expr = term {(+|-) term}; term = unary
-- {(*|/|//|%) unary}; unary = (+|-) unary | power; power = atom [(^|**) unary]
-- (right-associative, binds tighter than a leading minus: -2^2 = -4);
-- atom = number | ( expr ). Numbers: 12, 3.5, .5, 1e3, with "," thousands separators
-- allowed (1,000).
local M = { MAX_LENGTH = 1000, MAX_DEPTH = 100 }

local P = {}
P.__index = P

local function fail(self, msg) error({ calc = ("%s at position %d"):format(msg, self.i) }, 0) end

function P:skip()
  local _, e = self.s:find("^%s*", self.i)
  self.i = e + 1
end

function P:peek(tok)
  self:skip()
  return self.s:sub(self.i, self.i + #tok - 1) == tok
end

function P:accept(tok)
  if self:peek(tok) then self.i = self.i + #tok; return true end
  return false
end

function P:number()
  self:skip()
  local s = self.s
  local m = s:match("^%d[%d,]*%.?%d*[eE][%+%-]?%d+", self.i) or s:match("^%d[%d,]*%.?%d*", self.i)
    or s:match("^%.%d+[eE][%+%-]?%d+", self.i) or s:match("^%.%d+", self.i)
  if not m then
    local c = s:sub(self.i, self.i)
    fail(self, c == "" and "unexpected end of expression" or ("unexpected '%s'"):format(c))
  end
  if m:find(",", 1, true) then
    local int = m:match("^[%d,]+")
    local good = int:match("^%d%d?%d?,") ~= nil and not int:find(",$")
    for part in int:gmatch(",(%d*)") do good = good and #part == 3 end
    if not good then fail(self, "bad thousands separator in '" .. m .. "'") end
  end
  self.i = self.i + #m
  return tonumber((m:gsub(",", "")))
end

function P:atom(depth)
  if depth > M.MAX_DEPTH then fail(self, "expression nested too deeply") end
  if self:accept("(") then
    local v = self:expr(depth + 1)
    if not self:accept(")") then fail(self, "missing ')'") end
    return v
  end
  return self:number()
end

function P:power(depth)
  local base = self:atom(depth)
  if self:accept("**") or self:accept("^") then
    local e = self:unary(depth + 1)
    return base ^ e
  end
  return base
end

function P:unary(depth)
  if depth > M.MAX_DEPTH then fail(self, "expression nested too deeply") end
  if self:accept("-") then return -self:unary(depth + 1) end
  if self:accept("+") then return self:unary(depth + 1) end
  return self:power(depth)
end

function P:term(depth)
  local v = self:unary(depth)
  while true do
    if self:accept("//") then
      local r = self:unary(depth)
      if r == 0 then fail(self, "division by zero") end
      v = math.floor(v / r)
    elseif self:accept("/") then
      local r = self:unary(depth)
      if r == 0 then fail(self, "division by zero") end
      v = v / r
    elseif self:accept("*") then
      v = v * self:unary(depth)
    elseif self:accept("%") then
      local r = self:unary(depth)
      if r == 0 then fail(self, "modulo by zero") end
      v = v % r
    else
      return v
    end
  end
end

function P:expr(depth)
  local v = self:term(depth)
  while true do
    if self:accept("+") then v = v + self:term(depth)
    elseif self:accept("-") then v = v - self:term(depth)
    else return v end
  end
end

--- The value of an arithmetic expression, or nil, error.
function M.eval(s)
  if type(s) ~= "string" then return nil, "expression must be a string, got " .. type(s) end
  if #s > M.MAX_LENGTH then return nil, ("expression longer than %d characters"):format(M.MAX_LENGTH) end
  local p = setmetatable({ s = s, i = 1 }, P)
  local ok, v = pcall(function()
    local r = p:expr(0)
    p:skip()
    if p.i <= #s then fail(p, ("unexpected '%s'"):format(s:sub(p.i, p.i))) end
    return r
  end)
  if not ok then
    if type(v) == "table" and v.calc then return nil, v.calc end
    return nil, tostring(v)
  end
  if v ~= v or v == math.huge or v == -math.huge then return nil, "result is not a finite number" end
  return v
end

--- A number as the calculator prints it: integers without a fraction, others with up to
--- 12 significant digits.
function M.format(v)
  if v == math.floor(v) and math.abs(v) < 2 ^ 53 then return ("%d"):format(v) end
  local s = ("%.12g"):format(v)
  return s
end

return M
