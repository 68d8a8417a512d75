--- rl.rewards.gsm8k: the GSM8K reward — 1 when the response's final answer is
--- numerically equal to the label's, else 0.
--
--   local gsm8k = require "rl.rewards.gsm8k"
--   gsm8k.score("... so she has \\boxed{18} eggs", "Janet ... #### 18")    --> 1, {pred = 18, target = 18}
--   gsm8k.score(resp, label, { extract = "hash" })                        -- only a "#### N" line counts
--
-- label: GSM8K's answer field ("<worked answer> #### 1,234") or a bare number;
-- thousands separators are dropped. extract (which part of the response is the
-- answer): "auto" (default: the last \boxed{}, else the last "#### N", else the
-- last number), "boxed", "hash", "last_number".
local answer = require "rl.rewards.answer"

local M = {}

local function first_number(raw)
  return answer.number(raw) or answer.number(raw:match("^[%s%$]*(%-?[%d,]*%.?%d+)") or "")
end
local function any_number(raw)
  return answer.number(raw) or answer.number(answer.last_number(raw) or "")
end

-- mode -> list of {extractor, reader}, tried in order.
local EXTRACT = {
  boxed = { { answer.last_boxed, any_number } },
  hash = { { answer.after_hashes, first_number } },
  last_number = { { answer.last_number, answer.number } },
}
EXTRACT.auto = { EXTRACT.boxed[1], EXTRACT.hash[1], EXTRACT.last_number[1] }
M.extract_modes = { "auto", "boxed", "hash", "last_number" }

-- label text -> its number: a group's samples share one label (bounded cache).
local target_cache, cached = {}, 0

--- The label's number, or nil, err.
function M.target(label)
  if type(label) == "number" then return label end
  local hit = target_cache[label]
  if hit then return hit end
  if type(label) ~= "string" then return nil, "label is a " .. type(label) .. ", expected GSM8K's '... #### N' or a number" end
  local text = answer.after_hashes(label) or label
  local n = answer.number(text) or answer.number(answer.last_number(text) or "")
  if not n then return nil, ("label has no number after '####': %q"):format(label:sub(-60)) end
  if cached >= 65536 then target_cache, cached = {}, 0 end
  target_cache[label], cached = n, cached + 1
  return n
end

--- The response's answer as a number (nil when there is none), and the raw text it came from.
function M.prediction(response, extract)
  local steps = EXTRACT[extract or "auto"]
  if not steps then
    error(("rl.rewards.gsm8k: unknown extract mode '%s' (use %s)"):format(tostring(extract),
      table.concat(M.extract_modes, ", ")), 3)
  end
  for _, step in ipairs(steps) do
    local raw = step[1](response or "")
    if raw then return step[2](raw), raw end
  end
  return nil, nil
end

--- 1 or 0, and {pred, pred_text, target}. A label without a number raises (bad data, not a bad response).
function M.score(response, label, opts)
  local target, err = M.target(label)
  if not target then error("rl.rewards.gsm8k: " .. err, 2) end
  local pred, raw = M.prediction(response, opts and opts.extract)
  local info = { pred = pred, pred_text = raw, target = target }
  if pred == nil then return 0, info end
  -- Integers compare exactly; decimals to 1e-6 (answers like 0.5 or 12.75).
  local ok = math.abs(pred - target) <= 1e-6
  return ok and 1 or 0, info
end

return M
