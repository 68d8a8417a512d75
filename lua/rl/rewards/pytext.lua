--- rl.rewards.pytext: the Python string semantics slime's graders rely on, over
--- UTF-8 text — code points rather than bytes, Unicode whitespace and decimal
--- digits (full-width, Arabic-Indic, Devanagari, ...), and what Python's
--- float() accepts (underscores between digits, inf, nan).
--
--   pytext.chars(s)        array of the code points' UTF-8 strings
--   pytext.len(s)          number of code points
--   pytext.digit(ch)       0..9 for a Unicode decimal digit, else nil
--   pytext.isdigit(ch)     Python's ch.isdigit() (decimal digits, and "²", "①", ...)
--   pytext.isspace(ch), pytext.isalpha(ch)
--   pytext.strip(s)        str.strip(): Unicode whitespace off both ends
--   pytext.lower(s)        str.lower() (ASCII, Latin-1, Greek, Cyrillic, full-width)
--   pytext.float(s)        float(s) as a number, or nil where Python raises ValueError
--   pytext.strip_commas(s) removes "d,ddd" separators as slime does (its \d is Unicode)
local M = {}

local byte, char, sub = string.byte, string.char, string.sub
local floor = math.floor

local function decode(s, i)
  local c = byte(s, i)
  if c < 0x80 then return c, 1 end
  if c >= 0xF0 then
    return ((c % 8) * 262144) + ((byte(s, i + 1) or 128) % 64) * 4096 + ((byte(s, i + 2) or 128) % 64) * 64 +
      (byte(s, i + 3) or 128) % 64, 4
  elseif c >= 0xE0 then
    return ((c % 16) * 4096) + ((byte(s, i + 1) or 128) % 64) * 64 + (byte(s, i + 2) or 128) % 64, 3
  elseif c >= 0xC0 then
    return ((c % 32) * 64) + (byte(s, i + 1) or 128) % 64, 2
  end
  return c, 1  -- a stray continuation byte stands for itself
end
M.decode = decode

--- Bytes taken by the UTF-8 character starting at byte i.
function M.width(s, i)
  local _, w = decode(s, i)
  return w
end

local function encode(cp)
  if cp < 0x80 then return char(cp) end
  if cp < 0x800 then return char(0xC0 + floor(cp / 64), 0x80 + cp % 64) end
  if cp < 0x10000 then
    return char(0xE0 + floor(cp / 4096), 0x80 + floor(cp / 64) % 64, 0x80 + cp % 64)
  end
  return char(0xF0 + floor(cp / 262144), 0x80 + floor(cp / 4096) % 64, 0x80 + floor(cp / 64) % 64, 0x80 + cp % 64)
end
M.encode = encode

function M.chars(s)
  local out, i, n = {}, 1, #s
  if not s:find("[\128-\255]") then
    for j = 1, n do out[j] = sub(s, j, j) end
    return out
  end
  while i <= n do
    local _, w = decode(s, i)
    out[#out + 1] = sub(s, i, i + w - 1)
    i = i + w
  end
  return out
end

function M.len(s)
  if not s:find("[\128-\255]") then return #s end
  local _, cont = s:gsub("[\128-\191]", "")
  return #s - cont
end

-- Code points of the digit zero of every Unicode 14 decimal-digit run (Python 3.11's str.isdecimal).
local ZEROS = { 0x30, 0x660, 0x6f0, 0x7c0, 0x966, 0x9e6, 0xa66, 0xae6, 0xb66, 0xbe6, 0xc66, 0xce6, 0xd66, 0xde6, 0xe50,
  0xed0, 0xf20, 0x1040, 0x1090, 0x17e0, 0x1810, 0x1946, 0x19d0, 0x1a80, 0x1a90, 0x1b50, 0x1bb0, 0x1c40, 0x1c50, 0xa620,
  0xa8d0, 0xa900, 0xa9d0, 0xa9f0, 0xaa50, 0xabf0, 0xff10, 0x104a0, 0x10d30, 0x11066, 0x110f0, 0x11136, 0x111d0, 0x112f0,
  0x11450, 0x114d0, 0x11650, 0x116c0, 0x11730, 0x118e0, 0x11950, 0x11c50, 0x11d50, 0x11da0, 0x16a60, 0x16ac0, 0x16b50,
  0x1d7ce, 0x1d7d8, 0x1d7e2, 0x1d7ec, 0x1d7f6, 0x1e140, 0x1e2f0, 0x1e950, 0x1fbf0 }

local function cp_digit(cp)
  if cp >= 48 and cp <= 57 then return cp - 48 end
  if cp < 0x660 then return nil end
  for _, z in ipairs(ZEROS) do
    if cp >= z and cp <= z + 9 then return cp - z end
    if z > cp then return nil end
  end
  return nil
end

function M.digit(ch)
  if ch == nil or ch == "" then return nil end
  return cp_digit((decode(ch, 1)))
end

-- Python 3.11's str.isdigit beyond the decimal digits (Unicode 14, Numeric_Type=Digit):
-- superscripts, subscripts, circled and parenthesised digits, ... as code-point ranges.
local DIGIT_ONLY = { { 0xB2, 0xB3 }, { 0xB9, 0xB9 }, { 0x1369, 0x1371 }, { 0x19DA, 0x19DA }, { 0x2070, 0x2070 },
  { 0x2074, 0x2079 }, { 0x2080, 0x2089 }, { 0x2460, 0x2468 }, { 0x2474, 0x247C }, { 0x2488, 0x2490 },
  { 0x24EA, 0x24EA }, { 0x24F5, 0x24FD }, { 0x24FF, 0x24FF }, { 0x2776, 0x277E }, { 0x2780, 0x2788 },
  { 0x278A, 0x2792 }, { 0x10A40, 0x10A43 }, { 0x10E60, 0x10E68 }, { 0x11052, 0x1105A }, { 0x1F100, 0x1F10A } }

--- True when Python's ch.isdigit() is (one character): a decimal digit, or a digit that
--- is not decimal ("²", "①", ...).
function M.isdigit(ch)
  if ch == nil or ch == "" then return false end
  local cp = decode(ch, 1)
  if cp_digit(cp) then return true end
  for _, r in ipairs(DIGIT_ONLY) do
    if cp < r[1] then return false end
    if cp <= r[2] then return true end
  end
  return false
end

local SPACE = { [9] = true, [10] = true, [11] = true, [12] = true, [13] = true, [0x1c] = true, [0x1d] = true,
  [0x1e] = true, [0x1f] = true, [0x20] = true, [0x85] = true, [0xa0] = true, [0x1680] = true, [0x2028] = true,
  [0x2029] = true, [0x202f] = true, [0x205f] = true, [0x3000] = true }
local function cp_space(cp) return SPACE[cp] or (cp >= 0x2000 and cp <= 0x200a) end

function M.isspace(ch)
  if ch == nil or ch == "" then return false end
  return cp_space((decode(ch, 1))) and true or false
end

-- Letters: ASCII, and the alphabetic blocks answers use (Latin, Greek, Cyrillic, Hebrew, Arabic, CJK, Hangul,
-- full-width Latin, letterlike symbols such as ℝ).
local function cp_alpha(cp)
  if cp < 0x80 then return (cp >= 65 and cp <= 90) or (cp >= 97 and cp <= 122) end
  if cp == 0xaa or cp == 0xb5 or cp == 0xba then return true end
  if cp >= 0xc0 and cp <= 0x24f then return cp ~= 0xd7 and cp ~= 0xf7 end
  if cp >= 0x370 and cp <= 0x3ff then return cp ~= 0x375 and cp ~= 0x37e and cp ~= 0x384 and cp ~= 0x385 and cp ~= 0x387 end
  if cp >= 0x400 and cp <= 0x52f then return not (cp >= 0x482 and cp <= 0x489) end
  if cp >= 0x5d0 and cp <= 0x5ea then return true end
  if cp >= 0x620 and cp <= 0x64a then return true end
  if cp == 0x2102 or cp == 0x2107 or (cp >= 0x210a and cp <= 0x2113) or cp == 0x2115 or (cp >= 0x2119 and cp <= 0x211d)
    or cp == 0x2124 or cp == 0x2126 or cp == 0x2128 or (cp >= 0x212a and cp <= 0x212d) or (cp >= 0x212f and cp <= 0x2139) then
    return true
  end
  if (cp >= 0x3041 and cp <= 0x30ff) or (cp >= 0x4e00 and cp <= 0x9fff) or (cp >= 0xac00 and cp <= 0xd7a3) then return true end
  if (cp >= 0xff21 and cp <= 0xff3a) or (cp >= 0xff41 and cp <= 0xff5a) then return true end
  return false
end

function M.isalpha(ch)
  if ch == nil or ch == "" then return false end
  return cp_alpha((decode(ch, 1)))
end

function M.strip(s)
  local cs = M.chars(s)
  local i, j = 1, #cs
  while i <= j and M.isspace(cs[i]) do i = i + 1 end
  while j >= i and M.isspace(cs[j]) do j = j - 1 end
  if i == 1 and j == #cs then return s end
  return table.concat(cs, "", i, j)
end

local function lower_cp(cp)
  if (cp >= 65 and cp <= 90) then return cp + 32 end
  if cp < 0xc0 then return cp end
  if cp <= 0xde and cp ~= 0xd7 then return cp + 32 end
  if cp >= 0x391 and cp <= 0x3ab and cp ~= 0x3a2 then return cp + 32 end
  if cp >= 0x410 and cp <= 0x42f then return cp + 32 end
  if cp >= 0x400 and cp <= 0x40f then return cp + 80 end
  if cp >= 0xff21 and cp <= 0xff3a then return cp + 32 end
  return cp
end

function M.lower(s)
  if not s:find("[\128-\255]") then return s:lower() end
  local out = {}
  for _, ch in ipairs(M.chars(s)) do
    local cp = decode(ch, 1)
    local l = lower_cp(cp)
    out[#out + 1] = l == cp and ch or encode(l)
  end
  return table.concat(out)
end

-- Python float(): whitespace (Unicode) around, Unicode digits read as ASCII, '_' only between digits.
local function ascii_number_text(s)
  local out = {}
  for _, ch in ipairs(M.chars(s)) do
    if #ch == 1 then
      out[#out + 1] = ch
    else
      local cp = decode(ch, 1)
      local d = cp_digit(cp)
      if d then out[#out + 1] = char(48 + d)
      elseif cp_space(cp) then out[#out + 1] = " "
      else return nil end
    end
  end
  return table.concat(out)
end
M.ascii_number_text = ascii_number_text

local function digits_ok(d)  -- "1_000" yes; "_1", "1_", "1__0" no
  return d:find("^%d[%d_]*$") ~= nil and not d:find("__", 1, true) and d:sub(-1) ~= "_"
end

function M.float(s)
  if type(s) ~= "string" then return nil end
  local t = ascii_number_text(s)
  if not t then return nil end
  t = t:match("^[ \t\n\v\f\r]*(.-)[ \t\n\v\f\r]*$")
  local sign, body = t:match("^([+-]?)(.*)$")
  local low = body:lower()
  if low == "inf" or low == "infinity" then return sign == "-" and -math.huge or math.huge end
  if low == "nan" then return 0 / 0 end
  local mant, exp = body:match("^([^eE]*)[eE]([+-]?[%d_]+)$")
  if not mant then mant = body end
  if exp and not digits_ok((exp:gsub("^[+-]", ""))) then return nil end
  local int, frac = mant:match("^([%d_]*)%.([%d_]*)$")
  if not int then int, frac = mant, nil end
  if int == "" and (frac == nil or frac == "") then return nil end
  if int ~= "" and not digits_ok(int) then return nil end
  if frac and frac ~= "" and not digits_ok(frac) then return nil end
  local v = tonumber((sign .. mant .. (exp and ("e" .. exp) or "")):gsub("_", ""), 10)
  return v
end

-- re.sub(r"(\d)(,)(\d\d\d)($|\D)", r"\1\3\4") repeated until nothing changes.
function M.strip_commas(s)
  if not s:find(",", 1, true) then return s end
  local cs = M.chars(s)
  while true do
    local out, i, n, changed = {}, 1, #cs, false
    while i <= n do
      local d = M.digit
      if i + 4 <= n and d(cs[i]) and cs[i + 1] == "," and d(cs[i + 2]) and d(cs[i + 3]) and d(cs[i + 4])
        and (i + 5 > n or not d(cs[i + 5])) then
        out[#out + 1] = cs[i]; out[#out + 1] = cs[i + 2]; out[#out + 1] = cs[i + 3]; out[#out + 1] = cs[i + 4]
        if i + 5 <= n then out[#out + 1] = cs[i + 5] end
        i = i + 6
        changed = true
      else
        out[#out + 1] = cs[i]
        i = i + 1
      end
    end
    if not changed then return table.concat(out) end
    cs = out
  end
end

return M
