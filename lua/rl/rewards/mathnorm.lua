--- rl.rewards.mathnorm: the normalisation slime's sympy grader applies to an
--- answer before comparing (`grade_answer_sympy`), and the small tests it uses.
--
--   mathnorm.normalize(s) — in order: an enclosing \text{...} unwrapped; "\%", "\$",
--     "$", "%" dropped; " or " / " and " → " , "; million/billion/trillion →
--     *10^6/^9/^12; the unit words degree, cm, centimeter, meter, mile, second,
--     minute, hour, day, week, month, year, foot, feet, inch, yard (with "es"/"s",
--     blanks and "^N" after them) removed wherever they occur ("Monday" → "Mon");
--     "^\circ" removed; one pair of outer braces dropped; ",\!" dropped; a number
--     Python's float() reads (full-width or Arabic-Indic digits, "1_000", "1e3")
--     within 1e-7 of an integer becomes that integer; LaTeX becomes text
--     (rl.rewards.latex_text, then √→sqrt, π→pi, ∞→inf, ∪→U, ·/×→*); "- " → "-";
--     "7 3/4" → "7+3/4"; blanks and braces removed; lower case; "1,000" → "1000".
--   mathnorm.split_tuple(s)  elements of "(a,b)" / "[a,b)" ..., else { s }
--   mathnorm.is_frac(s)      "a/b" with integer a and b (slime's _is_frac)
--   mathnorm.str_is_int(s)   s (after "d,ddd" separators) reads as a float within 1e-7 of an integer
local pytext = require "rl.rewards.pytext"
local hendrycks = require "rl.rewards.hendrycks"
local latex_text = require "rl.rewards.latex_text"

local M = {}

local replace = hendrycks.replace
local sub, floor = string.sub, math.floor

local UNITS = { "degree", "cm", "centimeter", "meter", "mile", "second", "minute", "hour", "day", "week", "month",
  "year", "foot", "feet", "inch", "yard" }

-- re.sub(unit + r"(es)?(s)? *(\^[0-9]+)?", "", s)
local function drop_unit(s, unit)
  if not s:find(unit, 1, true) then return s end
  local out, i = {}, 1
  while true do
    local a, b = s:find(unit, i, true)
    if not a then break end
    out[#out + 1] = sub(s, i, a - 1)
    local j = b + 1
    if sub(s, j, j + 1) == "es" then j = j + 2 end
    if sub(s, j, j) == "s" then j = j + 1 end
    while sub(s, j, j) == " " do j = j + 1 end
    local e = s:match("^%^%d+", j)
    if e then j = j + #e end
    i = j
  end
  out[#out + 1] = sub(s, i)
  return table.concat(out)
end

-- Python's round() to an integer, printed as str(int(...)).
local function int_text(x)
  local r = (x == floor(x)) and x or floor(x + 0.5)
  if r == 0 then return "0" end
  return string.format("%.0f", r)
end

local function near_int(x)
  return x == x and x ~= math.huge and x ~= -math.huge and math.abs(x - ((x == floor(x)) and x or floor(x + 0.5))) <= 1e-7
end

function M.str_is_int(s)
  local x = pytext.float(pytext.strip_commas(s))
  return x ~= nil and near_int(x)
end

local function str_to_int(s)
  local x = pytext.float((s:gsub(",", "")))
  local t = x >= 0 and floor(x) or -floor(-x)
  if t == 0 then return "0" end
  return string.format("%.0f", t)
end

local function parse_latex(s)
  s = replace(replace(s, "\\tfrac", "\\frac"), "\\dfrac", "\\frac")
  s = replace(s, "\\frac", " \\frac")
  local text = latex_text.convert(s)
  if not text then return nil end
  for _, pair in ipairs { { "√", "sqrt" }, { "π", "pi" }, { "∞", "inf" }, { "∪", "U" }, { "·", "*" }, { "×", "*" } } do
    text = replace(text, pair[1], pair[2])
  end
  return pytext.strip(text)
end

function M.normalize(s)
  if s == nil then return nil end
  s = tostring(s)
  s = hendrycks.text_inner(s) or s
  s = replace(replace(s, "\\%", "%"), "\\$", "$")
  s = replace(replace(s, "$", ""), "%", "")
  s = replace(replace(s, " or ", " , "), " and ", " , ")
  s = replace(replace(replace(s, "million", "*10^6"), "billion", "*10^9"), "trillion", "*10^12")
  for _, unit in ipairs(UNITS) do s = drop_unit(s, unit) end
  s = s:gsub("%^ *\\circ", "")
  if #s > 0 and sub(s, 1, 1) == "{" and sub(s, -1) == "}" then s = sub(s, 2, -2) end
  s = s:gsub(",\\! *", "")
  local x = pytext.float(s)
  if x and near_int(x) then s = int_text(x) end
  if s:find("\\", 1, true) then s = parse_latex(s) or s end
  s = s:gsub("%- *", "-")
  s = s:gsub("(%d) +(%d)", "%1+%2")
  s = s:gsub("[ {}]", "")
  s = pytext.lower(s)
  if M.str_is_int(s) then s = str_to_int(s) end
  return s
end

local TUPLE = { ["("] = true, [")"] = true, ["["] = true, ["]"] = true }

function M.split_tuple(s)
  s = pytext.strip_commas(s)
  if s == "" then return {} end
  local first, last = sub(s, 1, 1), sub(s, -1)
  if pytext.len(s) > 2 and TUPLE[first] and TUPLE[last] and not sub(s, 2, -2):find("[%(%)%[%]]") then
    local out = {}
    for _, e in ipairs(hendrycks.split(sub(s, 2, -2), ",")) do out[#out + 1] = pytext.strip(e) end
    return out
  end
  return { s }
end

-- Each non-ASCII character as one byte, so that Lua patterns count characters.
local function skeleton(s)
  return (s:gsub("[\192-\255][\128-\191]*", "\1"))
end

function M.is_frac(s)
  local k = skeleton(s)
  local pat = "^%-?%d+[^\n]?/0*[1-9]%d*[^\n]?$"
  return k:find(pat) ~= nil or (sub(k, -1) == "\n" and sub(k, 1, -2):find(pat) ~= nil)
end

-- First and last characters (code points) of s, as strings.
function M.first_char(s)
  if s == "" then return "" end
  local _, w = pytext.decode(s, 1)
  return sub(s, 1, w)
end
function M.last_char(s)
  local k = #s
  while k > 1 and s:byte(k) >= 128 and s:byte(k) < 192 do k = k - 1 end
  return sub(s, k)
end

return M
