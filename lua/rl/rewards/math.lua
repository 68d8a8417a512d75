--- rl.rewards.math: slime's `math` reward (its grade_answer_verl) — 1 when the
--- last \boxed{} of the response is the label's answer, else 0.
--
--   math.score(response, label)   -> 1|0, { pred, target }
--   math.equal(given, truth)      mathd or sympy match (what deepscaler uses too)
--   math.grade_mathd(given, truth), math.grade_sympy(given, truth)
--
-- The answer is the last "\boxed{...}" (answer.slime_boxed: \fbox and "\boxed {"
-- do not count); no box is 0. A label holding "\boxed" is reduced to its box. An
-- empty, nil, false or 0 label scores 0 (Python's falsy ground truth).
--
-- Two answers match when
--   * their Hendrycks normalisations are equal (rl.rewards.hendrycks), or
--   * their sympy-grader normalisations (rl.rewards.mathnorm) are equal, or,
--     element by element for tuples and intervals (same brackets, same count):
--     two integer fractions a/b must be written the same (2/4 is not 1/2); an
--     integer never matches a non-integer ("\frac{4}{1}" is not 4, 0x1a is not
--     26); otherwise the difference must simplify to 0 (rl.rewards.expr), tried
--     only with at most 2 distinct letters and no "^{", "^(" or large exponents.
local answer = require "rl.rewards.answer"
local hendrycks = require "rl.rewards.hendrycks"
local mathnorm = require "rl.rewards.mathnorm"
local expr = require "rl.rewards.expr"
local pytext = require "rl.rewards.pytext"

local M = {}

--- Hendrycks' normalisation (kept under its old name).
M.normalize = hendrycks.normalize

-- label text -> its two normalisations: a group's samples share one label (bounded cache).
local label_cache, cached = {}, 0
local function truth_forms(truth)
  if truth == nil then return {} end
  local hit = label_cache[truth]
  if hit then return hit end
  hit = { hendrycks.normalize(truth), mathnorm.normalize(truth) }
  if cached >= 4096 then label_cache, cached = {}, 0 end
  label_cache[truth], cached = hit, cached + 1
  return hit
end

function M.grade_mathd(given, truth)
  return truth_forms(truth)[1] == hendrycks.normalize(given)
end

local function unknown_letters(s)
  s = hendrycks.replace(hendrycks.replace(s, "sqrt", ""), "frac", "")
  local seen, n = {}, 0
  for _, ch in ipairs(pytext.chars(s)) do
    if not seen[ch] and pytext.isalpha(ch) then seen[ch] = true; n = n + 1 end
  end
  return n
end

local function allow_eval(s)
  if unknown_letters(s) > 2 then return false end
  if s:find("^{", 1, true) or s:find("^(", 1, true) then return false end
  return not (s:find("%^%d+%^") or s:find("%^%d%d+"))
end

local function equal_under_sympy(truth, given)
  local diff = "(" .. truth .. ")-(" .. given .. ")"
  if not allow_eval(diff) then return false end
  return expr.zero((diff:gsub("%^", "**")))
end

local function canonical_int(s) return s == "0" or s:find("^%-?[1-9]%d*$") ~= nil end

function M.grade_sympy(given, truth)
  local t, g = truth_forms(truth)[2], mathnorm.normalize(given)
  if t == nil or g == nil then return false end
  if t == g then return true end
  if g == "" then return false end
  local te, ge = mathnorm.split_tuple(t), mathnorm.split_tuple(g)
  if #te > 1 and (mathnorm.first_char(t) ~= mathnorm.first_char(g) or mathnorm.last_char(t) ~= mathnorm.last_char(g)) then
    return false
  end
  if #te ~= #ge then return false end
  for k = 1, #te do
    local a, b = te[k], ge[k]
    local same
    if mathnorm.is_frac(a) and mathnorm.is_frac(b) then
      same = a == b
    elseif mathnorm.str_is_int(a) ~= mathnorm.str_is_int(b) then
      same = false
    elseif canonical_int(a) and canonical_int(b) then
      same = a == b   -- exact integers written canonically: equal values, equal texts
    else
      same = equal_under_sympy(a, b)
    end
    if not same then return false end
  end
  return #te > 0
end

--- True when `given` and `truth` are the same answer (mathd or sympy match).
function M.equal(given, truth)
  if given == nil or truth == nil then return false end
  given, truth = tostring(given), tostring(truth)
  return M.grade_mathd(given, truth) or M.grade_sympy(given, truth)
end

--- The label as slime reads it: nil for a falsy label, the box of a boxed one.
function M.target(label)
  if label == nil or label == "" or label == false or label == 0 then return nil end
  local truth = tostring(label)
  if truth:find("\\boxed", 1, true) then return answer.slime_boxed(truth) end
  return truth
end

--- 1 or 0, and {pred, target}.
function M.score(response, label)
  local truth = M.target(label)
  if truth == nil then return 0, { pred = nil, target = nil } end
  local given = answer.slime_boxed(response or "")
  if given == nil then return 0, { pred = nil, target = truth } end
  return M.equal(given, truth) and 1 or 0, { pred = given, target = truth }
end

return M
