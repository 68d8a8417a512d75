--- rl.rewards.math: boxed-answer math grading — 1 when the last \boxed{} of the
--- response matches the label, else 0 (no box: 0).
--
-- A match is equality after the normalisation of Hendrycks' MATH grader (what
-- slime's `math` reward applies first: \dfrac/\tfrac → \frac, no \left/\right,
-- degrees, \$, trailing \text{ units}, \%, "x = " prefixes, \sqrt3 → \sqrt{3},
-- \frac12 → \frac{1}{2}, a/b → \frac{a}{b}, 0.5 → \frac{1}{2}, no spaces), or
-- numeric equality of the two (integers, decimals, thousands separators,
-- fractions). Symbolic equivalence (sympy) is not attempted.
local answer = require "rl.rewards.answer"

local M = {}

local function plain_replace(s, from, to)
  local out, i = {}, 1
  while true do
    local a, b = s:find(from, i, true)
    if not a then break end
    out[#out + 1] = s:sub(i, a - 1)
    out[#out + 1] = to
    i = b + 1
  end
  out[#out + 1] = s:sub(i)
  return table.concat(out)
end

-- \frac12 -> \frac{1}{2}, \frac1{2} -> \frac{1}{2}
local function fix_fracs(s)
  local parts = {}
  for part in (s .. "\\frac"):gmatch("(.-)\\frac") do parts[#parts + 1] = part end
  local out = parts[1]
  for i = 2, #parts do
    local p = parts[i]
    out = out .. "\\frac"
    if p:sub(1, 1) == "{" or #p < 2 then
      out = out .. p
    else
      local a, b = p:sub(1, 1), p:sub(2, 2)
      if b ~= "{" then
        out = out .. "{" .. a .. "}{" .. b .. "}" .. p:sub(3)
      else
        out = out .. "{" .. a .. "}" .. p:sub(2)
      end
    end
  end
  return out
end

local function fix_a_slash_b(s)
  local a, b = s:match("^(%-?%d+)/(%d+)$")
  if a then return "\\frac{" .. a .. "}{" .. b .. "}" end
  return s
end

local function fix_sqrt(s)
  return (s:gsub("\\sqrt(%w)", "\\sqrt{%1}"))
end

--- Hendrycks' normalisation of an answer string.
function M.normalize(s)
  s = tostring(s)
  s = s:gsub("\n", "")
  s = plain_replace(s, "\\!", "")
  s = plain_replace(s, "\\\\", "\\")
  s = plain_replace(plain_replace(s, "tfrac", "frac"), "dfrac", "frac")
  s = plain_replace(plain_replace(s, "\\left", ""), "\\right", "")
  s = plain_replace(plain_replace(s, "^{\\circ}", ""), "^\\circ", "")
  s = plain_replace(s, "\\$", "")
  local units = s:find("\\text{ ", 1, true)
  if units then s = s:sub(1, units - 1) end
  s = plain_replace(plain_replace(s, "\\%", ""), "%", "")
  s = plain_replace(plain_replace(s, " .", " 0."), "{.", "{0.")
  if s == "" then return s end
  if s:sub(1, 1) == "." then s = "0" .. s end
  local lhs, rhs = s:match("^([^=]*)=([^=]*)$")
  if lhs and #lhs <= 2 then s = rhs end
  s = fix_sqrt(s)
  s = s:gsub(" ", "")
  s = fix_fracs(s)
  if s == "0.5" then s = "\\frac{1}{2}" end
  return fix_a_slash_b(s)
end

--- True when `given` and `truth` are the same answer.
function M.equal(given, truth)
  if given == nil or truth == nil then return false end
  local a, b = M.normalize(given), M.normalize(truth)
  if a == b then return true end
  local x, y = answer.number(a), answer.number(b)
  return x ~= nil and y ~= nil and math.abs(x - y) <= 1e-9
end

--- 1 or 0, and {pred, target}. The label may itself hold a \boxed{} answer.
function M.score(response, label)
  if label == nil or label == "" then return 0, { pred = nil, target = nil } end
  local truth = tostring(label)
  if truth:find("\\boxed", 1, true) then truth = answer.last_boxed(truth) or truth end
  local given = answer.last_boxed(response or "")
  return M.equal(given, truth) and 1 or 0, { pred = given, target = truth }
end

return M
