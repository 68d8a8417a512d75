--- rl.rewards.deepscaler: slime's `deepscaler` reward — 1 when the final
--- \boxed{} after the model's thinking is the label's answer, else 0.
--
--   deepscaler.score(response, label) -> 1|0, { pred, target }
--
-- The solution is the text after the last "</think>", or (without one) after the
-- first "###Response" up to the next; a response with neither scores 0. Its
-- answer is the last "\boxed{...}" (as rl.rewards.math). An empty label scores 0;
-- a label with "\boxed" or "\fbox" is reduced to its \boxed{} (none: 0). The
-- match is rl.rewards.math's (Hendrycks or sympy). Unlike `math`, a label of 0
-- is graded.
local answer = require "rl.rewards.answer"
local mathr = require "rl.rewards.math"
local hendrycks = require "rl.rewards.hendrycks"

local M = {}

--- The part of the response graded, or nil.
function M.solution(response)
  response = response or ""
  if response:find("</think>", 1, true) then
    local parts = hendrycks.split(response, "</think>")
    return parts[#parts]
  elseif response:find("###Response", 1, true) then
    return hendrycks.split(response, "###Response")[2]
  end
  return nil
end

function M.score(response, label)
  local solution = M.solution(response)
  if not solution then return 0, { pred = nil, target = nil } end
  local given = answer.slime_boxed(solution)
  if given == nil or label == nil or label == "" then return 0, { pred = given, target = nil } end
  local truth = tostring(label)
  if truth:find("\\boxed", 1, true) or truth:find("\\fbox", 1, true) then truth = answer.slime_boxed(truth) end
  if truth == nil then return 0, { pred = given, target = nil } end
  return mathr.equal(given, truth) and 1 or 0, { pred = given, target = truth }
end

return M
