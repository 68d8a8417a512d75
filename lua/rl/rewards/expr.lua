--- rl.rewards.expr: "equal under sympy" for slime's math graders — whether
--- (truth) - (given), read as sympy reads Python text, simplifies to 0.
--
--   expr.zero(text) -> true when text (e.g. "(2sqrt(2))-(sqrt(8))") is identically 0
--
-- Reading follows sympy's parse_expr with implicit multiplication/application:
-- Python number literals (1_000, 1e3 and 2.5 are floats, 0x1a/0b101/0o17 integers,
-- "007" is 00·7), names split into one-letter symbols ("xy" = x·y, "x2" = 2x)
-- except pi, sqrt and ln; juxtaposition multiplies; "5!" is a factorial; ** is a
-- power, right-associative and above unary minus. Integers and ratios of them
-- are exact ("1/3" is a rational, so (1/3)-(0.333333333333333) is not 0).
--
-- Deciding zero: exact rational arithmetic where the expression is rational;
-- where a float literal takes part, its double arithmetic must give exactly 0
-- (sympy's 53-bit Floats, 0.1+0.2-0.3 is not 0; a literal with more than 15
-- significant digits is never within a double of another value); otherwise (sqrt, pi, symbols)
-- the difference is evaluated at three points (symbols at chosen values, π
-- moved at the later ones) and must vanish to 1e-9 relative.
-- Anything else sympy would fail on (an unknown name, a comparison, a stray
-- character, a complex or infinite value) is not 0.
local pytext = require "rl.rewards.pytext"

local M = {}

local floor, abs, huge = math.floor, math.abs, math.huge
local TWO53 = 2 ^ 53

-- ---- tokens (Python's tokenizer on the text) ---------------------------------------------

local function number_token(s, i)
  local hex = s:match("^0[xX]_?%x[%x_]*", i) or s:match("^0[bB]_?[01][01_]*", i) or s:match("^0[oO]_?[0-7][0-7_]*", i)
  local function digits(at) return s:match("^%d[%d_]*", at) end
  -- Pointfloat / Expfloat first, as Python's regex alternation does.
  local int = digits(i)
  local frac, p = nil, i
  if int then p = i + #int end
  if s:sub(p, p) == "." and (int or s:sub(p + 1, p + 1):find("%d")) then
    frac = digits(p + 1) or ""
    local stop = p + 1 + #frac
    local e = s:match("^[eE][-+]?%d[%d_]*", stop)
    local text = s:sub(i, stop - 1) .. (e or "")
    return text, "float"
  end
  if int then
    local e = s:match("^[eE][-+]?%d[%d_]*", p)
    if e then return int .. e, "float" end
  end
  if hex then return hex, "int" end
  if int then
    -- Decnumber: 0(_?0)* or [1-9](_?[0-9])*
    local z = s:match("^0[0_]*", i)
    if z then z = z:gsub("_+$", ""); return z, "int" end
    return int:gsub("_+$", ""), "int"
  end
  return nil
end

local function tokenize(s)
  local toks, i, n = {}, 1, #s
  while i <= n do
    local c = s:sub(i, i)
    local text, kind = number_token(s, i)
    if text then
      toks[#toks + 1] = { kind, text }
      i = i + #text
    elseif c:find("[%a_]") or (c:byte() >= 192 and pytext.isalpha(s:sub(i, i + pytext.width(s, i) - 1))) then
      -- A Python identifier: ASCII word characters and Unicode letters.
      local j = i
      while j <= #s do
        local w = pytext.width(s, j)
        local ch = s:sub(j, j + w - 1)
        if not (ch:find("^[%w_]$") or (w > 1 and pytext.isalpha(ch))) then break end
        j = j + w
      end
      toks[#toks + 1] = { "name", s:sub(i, j - 1) }
      i = j
    elseif s:sub(i, i + 1) == "**" then
      toks[#toks + 1] = { "op", "**" }; i = i + 2
    elseif c:find("[%+%-%*/%(%)!]") then
      toks[#toks + 1] = { "op", c }; i = i + 1
    else
      return nil
    end
  end
  return toks
end

-- sympy's split_symbols and implicit multiplication/application, on the token list.
local FUNCS = { sqrt = true, ln = true }
local CONSTS = { pi = true }
local UNSUPPORTED = { oo = true, zoo = true, nan = true, re = true, im = true, li = true, ff = true, rf = true,
  ["if"] = true, ["in"] = true, ["is"] = true, ["or"] = true, ["as"] = true, id = true, all = true }

local function expand(toks)
  local out = {}
  for _, t in ipairs(toks) do
    if t[1] == "name" then
      local name = t[2]
      if UNSUPPORTED[name] then return nil end
      if FUNCS[name] or CONSTS[name] or name:find("_", 1, true) then
        out[#out + 1] = t
      else
        -- One symbol per letter; a run of digits is one number ("a10" = 10a).
        local j = 1
        while j <= #name do
          local run = name:match("^%d+", j)
          if run then
            if run:find("^0%d") then return nil end   -- sympy cannot read "x02"
            out[#out + 1] = { "int", run }
            j = j + #run
          else
            local w = pytext.width(name, j)
            out[#out + 1] = { "name", name:sub(j, j + w - 1) }
            j = j + w
          end
        end
      end
    else
      out[#out + 1] = t
    end
  end
  -- Insert "*" between juxtaposed operands.
  local res = {}
  for k, t in ipairs(out) do
    local prev = res[#res]
    if prev and k > 1 then
      local ends = prev[1] == "int" or prev[1] == "float" or (prev[1] == "name" and not FUNCS[prev[2]]) or
        (prev[1] == "op" and (prev[2] == ")" or prev[2] == "!"))
      local starts = t[1] == "int" or t[1] == "float" or t[1] == "name" or (t[1] == "op" and t[2] == "(")
      if ends and starts then res[#res + 1] = { "op", "*" } end
    end
    res[#res + 1] = t
  end
  return res
end

-- ---- values: exact rationals where possible, doubles with flags otherwise ----------------

local function gcd(a, b)
  a, b = abs(a), abs(b)
  while b ~= 0 do a, b = b, a % b end
  return a
end

-- A value: { v = double, p = num, q = den (exact rational when p is set), flt = float taint, irr = irrational }
local function rat(p, q)
  if abs(p) == huge or abs(q) == huge or p ~= p or q ~= q then return { v = p / q, flt = true } end
  if q < 0 then p, q = -p, -q end
  local g = gcd(p, q)
  if g > 1 then p, q = p / g, q / g end
  -- Past 2^53 the ratio is a double, compared exactly (sympy's integers are exact).
  if abs(p) > TWO53 or q > TWO53 then return { v = p / q, flt = true } end
  return { v = p / q, p = p, q = q }
end

local function combine(a, b, v)
  return { v = v, flt = a.flt or b.flt, irr = a.irr or b.irr, hp = a.hp or b.hp }
end

local OPS = {}
function OPS.add(a, b)
  if a.p and b.p then return rat(a.p * b.q + b.p * a.q, a.q * b.q) end
  return combine(a, b, a.v + b.v)
end
function OPS.sub(a, b)
  if a.p and b.p then return rat(a.p * b.q - b.p * a.q, a.q * b.q) end
  return combine(a, b, a.v - b.v)
end
function OPS.mul(a, b)
  if a.p and b.p then return rat(a.p * b.p, a.q * b.q) end
  return combine(a, b, a.v * b.v)
end
function OPS.div(a, b)
  if a.p and b.p then
    if b.p == 0 then error("division by zero", 0) end
    return rat(a.p * b.q, a.q * b.p)
  end
  return combine(a, b, a.v / b.v)
end

local function exact_root(x, n)  -- integer n-th root of x >= 0, or nil
  local r = floor(x ^ (1 / n) + 0.5)
  for c = r - 1, r + 1 do if c >= 0 and c ^ n == x then return c end end
  return nil
end

function OPS.pow(a, b)
  if a.p and b.p and b.q == 1 and abs(b.p) <= 4096 then
    local e = b.p
    if a.p == 0 and e < 0 then error("zoo", 0) end
    local p, q = a.p ^ abs(e), a.q ^ abs(e)
    if e < 0 then p, q = q, p end
    return rat(p, q)
  end
  if a.p and b.p and b.q == 1 then   -- a huge integer power: exact for 0 and ±1, else a double compared exactly
    if a.p == 0 and b.p < 0 then error("zoo", 0) end
    if a.q == 1 and (a.p == 0 or a.p == 1) then return rat(a.p, 1) end
    if a.q == 1 and a.p == -1 then return rat(b.p % 2 == 0 and 1 or -1, 1) end
    return { v = a.v ^ b.v, flt = true }
  end
  if a.p and b.p and a.p >= 0 and b.q <= 16 then
    local rp, rq = exact_root(a.p, b.q), exact_root(a.q, b.q)
    if rp and rq then return OPS.pow(rat(rp, rq), rat(b.p, 1)) end
  end
  local r = combine(a, b, a.v ^ b.v)
  if a.p and b.p then r.irr = true end
  -- sympy keeps x**2.0 apart from x**2: a symbolic base to a float power only cancels its like.
  if a.irr and b.flt and not b.p then r.v = r.v * 1.0009765625 end
  return r
end

local function factorial(a)
  if not (a.p and a.q == 1 and a.p >= 0 and a.p <= 170) then error("factorial", 0) end
  local f = 1
  for k = 2, a.p do f = f * k end
  return rat(f, 1)
end

-- ---- parser: Python precedence (+ -, * /, unary, **, postfix !) --------------------------

local parse_sum

local function symbol_value(name, point)
  local h = 0
  for k = 1, #name do h = (h * 31 + name:byte(k)) % 97 end
  local base = ({ 1.375, 2.625, 0.8125 })[point]
  return base + 0.0625 * (h % 13)
end

local function parse_atom(st)
  local t = st.toks[st.i]
  if not t then error("unexpected end", 0) end
  st.i = st.i + 1
  if t[1] == "int" then
    local text, v = t[2]:gsub("_", ""), nil
    if text:find("^0[bB]") then v = tonumber(text:sub(3), 2)
    elseif text:find("^0[oO]") then v = tonumber(text:sub(3), 8)
    elseif text:find("^0[xX]") then v = tonumber(text:sub(3), 16)
    else v = tonumber(text) end
    return rat(v, 1)
  elseif t[1] == "float" then
    local text = t[2]:gsub("_", "")
    -- sympy gives a literal with more than 15 significant digits more precision than a double.
    local digits = text:gsub("[eE].*$", ""):gsub("%.", ""):gsub("^0+", ""):gsub("0+$", "")
    return { v = tonumber(text), flt = true, hp = #digits > 15 }
  elseif t[1] == "name" then
    local name = t[2]
    if name == "pi" then return { v = st.point == 1 and math.pi or 2.9 + 0.1 * st.point, irr = true } end
    if FUNCS[name] then
      local nt = st.toks[st.i]
      if not (nt and nt[1] == "op" and nt[2] == "(") then error("function without call", 0) end
      st.i = st.i + 1
      local arg = parse_sum(st)
      local close = st.toks[st.i]
      if not (close and close[2] == ")") then error("missing )", 0) end
      st.i = st.i + 1
      if name == "sqrt" then return OPS.pow(arg, rat(1, 2)) end
      if arg.p and arg.p == arg.q then return rat(0, 1) end
      return { v = math.log(arg.v), flt = arg.flt, irr = true }
    end
    return { v = symbol_value(name, st.point), irr = true }
  elseif t[1] == "op" and t[2] == "(" then
    local v = parse_sum(st)
    local close = st.toks[st.i]
    if not (close and close[2] == ")") then error("missing )", 0) end
    st.i = st.i + 1
    return v
  end
  error("unexpected token " .. tostring(t[2]), 0)
end

local function parse_postfix(st)
  local v = parse_atom(st)
  while st.toks[st.i] and st.toks[st.i][2] == "!" do
    st.i = st.i + 1
    v = factorial(v)
  end
  return v
end

local parse_unary
local function parse_power(st)
  local base = parse_postfix(st)
  local t = st.toks[st.i]
  if t and t[2] == "**" then
    st.i = st.i + 1
    return OPS.pow(base, parse_unary(st))
  end
  return base
end

function parse_unary(st)
  local t = st.toks[st.i]
  if t and t[1] == "op" and (t[2] == "-" or t[2] == "+") then
    st.i = st.i + 1
    local v = parse_unary(st)
    if t[2] == "-" then return OPS.mul(rat(-1, 1), v) end
    return v
  end
  return parse_power(st)
end

-- A left-associative level: operands from `operand`, joined by the operators in `ops` (op -> OPS fn).
local function binary_level(operand, ops)
  return function(st)
    local v = operand(st)
    while true do
      local t = st.toks[st.i]
      local fn = t and t[1] == "op" and ops[t[2]]
      if not fn then return v end
      st.i = st.i + 1
      local r = operand(st)
      st.last = { v, r }
      v = fn(v, r)
    end
  end
end

local parse_product = binary_level(parse_unary, { ["*"] = OPS.mul, ["/"] = OPS.div })
parse_sum = binary_level(parse_product, { ["+"] = OPS.add, ["-"] = OPS.sub })

local function finite(x) return x == x and x ~= huge and x ~= -huge end

function M.zero(text)
  local toks = tokenize(text)
  if not toks then return false end
  toks = expand(toks)
  if not toks or #toks == 0 then return false end
  for point = 1, 3 do
    local st = { toks = toks, i = 1, point = point }
    local ok, v = pcall(parse_sum, st)
    if not ok or st.i <= #toks or not finite(v.v) then return false end
    if v.p then return v.p == 0 end
    if v.flt then
      if v.v ~= 0 or v.hp then return false end
    else
      local scale = 1
      if st.last then scale = math.max(1, abs(st.last[1].v), abs(st.last[2].v)) end
      if abs(v.v) > 1e-9 * scale then return false end
    end
    if not v.irr then return true end
  end
  return true
end

return M
