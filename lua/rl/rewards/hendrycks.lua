--- rl.rewards.hendrycks: the answer normalisation of Hendrycks' MATH grader, as
--- slime's `grade_answer_mathd` applies it (two answers match when their
--- normalised strings are equal).
--
--   hendrycks.normalize(s)   trimmed, an enclosing \text{...} unwrapped, then:
--     newlines, "\!", "\\"→"\", tfrac/dfrac→frac, \left/\right, ^{\circ}/^\circ, "\$",
--     a right-hand "\text{ unit}" (only one allowed), "\%" are dropped; " ." → " 0.",
--     "{." → "{0.", a leading "." gets a 0; "k = 5" → "5" (left side of at most 2
--     characters); \sqrt3 → \sqrt{3}; spaces removed; \frac12 → \frac{1}{2};
--     "0.5" → \frac{1}{2}; "a/b" (canonical integers) → \frac{a}{b}.
--   A string the rules cannot take apart (two "\text{ " units, "\sqrt" or "\frac"
--   with nothing after it) is compared as trimmed, untouched further.
--   hendrycks.text_inner(s)  the X of a whole-string "\text{X}", else nil
local pytext = require "rl.rewards.pytext"

local M = {}

local sub = string.sub

local function replace(s, from, to)
  if not s:find(from, 1, true) then return s end
  local out, i = {}, 1
  while true do
    local a, b = s:find(from, i, true)
    if not a then break end
    out[#out + 1] = sub(s, i, a - 1)
    out[#out + 1] = to
    i = b + 1
  end
  out[#out + 1] = sub(s, i)
  return table.concat(out)
end
M.replace = replace

-- Python's str.split(sep) for a plain, non-empty separator.
local function split(s, sep)
  local out, i = {}, 1
  while true do
    local a, b = s:find(sep, i, true)
    if not a then break end
    out[#out + 1] = sub(s, i, a - 1)
    i = b + 1
  end
  out[#out + 1] = sub(s, i)
  return out
end
M.split = split

-- First code point of s and the rest; error (as Python's IndexError) when s is empty.
local function head(s)
  if s == "" then error("index out of range", 0) end
  local _, w = pytext.decode(s, 1)
  return sub(s, 1, w), sub(s, w + 1)
end

function M.text_inner(s)
  if sub(s, 1, 6) ~= "\\text{" then return nil end
  local stop
  if sub(s, -2) == "}\n" then stop = #s - 1 elseif sub(s, -1) == "}" then stop = #s else return nil end
  local inner = sub(s, 7, stop - 1)
  if inner == "" or inner:find("\n", 1, true) then return nil end
  return inner
end

local function fix_fracs(s)
  local parts = split(s, "\\frac")
  local out = { parts[1] }
  for k = 2, #parts do
    local p = parts[k]
    out[#out + 1] = "\\frac"
    local a, rest = head(p)
    if a == "{" then
      out[#out + 1] = p
    else
      if pytext.len(p) < 2 then return s end
      local b, post = head(rest)
      if b ~= "{" then
        out[#out + 1] = "{" .. a .. "}{" .. b .. "}" .. post
      else
        out[#out + 1] = "{" .. a .. "}" .. b .. post
      end
    end
  end
  return table.concat(out)
end

-- int(a), int(b) printed back must give the string: canonical ASCII integers only.
local function canonical_int(t)
  return t:find("^%-?[1-9]%d*$") ~= nil or t == "0"
end

local function fix_a_slash_b(s)
  local parts = split(s, "/")
  if #parts ~= 2 then return s end
  if canonical_int(parts[1]) and canonical_int(parts[2]) then
    return "\\frac{" .. parts[1] .. "}{" .. parts[2] .. "}"
  end
  return s
end

local function remove_right_units(s)
  if not s:find("\\text{ ", 1, true) then return s end
  local parts = split(s, "\\text{ ")
  if #parts ~= 2 then error("more than one unit", 0) end
  return parts[1]
end

local function fix_sqrt(s)
  if not s:find("\\sqrt", 1, true) then return s end
  local parts = split(s, "\\sqrt")
  local out = { parts[1] }
  for k = 2, #parts do
    local a, rest = head(parts[k])
    if a ~= "{" then
      out[#out + 1] = "\\sqrt{" .. a .. "}" .. rest
    else
      out[#out + 1] = "\\sqrt" .. parts[k]
    end
  end
  return table.concat(out)
end

local function strip_string(s)
  s = replace(s, "\n", "")
  s = replace(s, "\\!", "")
  s = replace(s, "\\\\", "\\")
  s = replace(replace(s, "tfrac", "frac"), "dfrac", "frac")
  s = replace(replace(s, "\\left", ""), "\\right", "")
  s = replace(replace(s, "^{\\circ}", ""), "^\\circ", "")
  s = replace(s, "\\$", "")
  s = remove_right_units(s)
  s = replace(s, "\\%", "")
  s = replace(replace(s, " .", " 0."), "{.", "{0.")
  if s == "" then return s end
  if sub(s, 1, 1) == "." then s = "0" .. s end
  local sides = split(s, "=")
  if #sides == 2 and pytext.len(sides[1]) <= 2 then s = sides[2] end
  s = fix_sqrt(s)
  s = replace(s, " ", "")
  s = fix_fracs(s)
  if s == "0.5" then s = "\\frac{1}{2}" end
  return fix_a_slash_b(s)
end

function M.normalize(s)
  if s == nil then return nil end
  s = pytext.strip(tostring(s))
  local inner = M.text_inner(s)
  if inner then s = pytext.strip(inner) end
  local ok, out = pcall(strip_string, s)
  if ok then return out end
  return s
end

return M
