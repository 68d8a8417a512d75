--- rl.rewards.answer: pulling the final answer out of a model's response.
--
--   answer.last_boxed(s)    content of the last \boxed{...} (or \fbox{...}), braces balanced
--   answer.slime_boxed(s)   the last \boxed{...} exactly as slime's math graders extract it
--   answer.after_hashes(s)  the text after the last "####" (GSM8K's answer line)
--   answer.last_number(s)   the last number in s ("1,234.5", "-3", ".5")
--   answer.number(s)        s read as a number (thousands separators, $, %, trailing "." dropped), or nil
local M = {}

local find, sub, byte = string.find, string.sub, string.byte

-- Start of the last plain occurrence of `needle` in s, or nil.
local function last_plain(s, needle)
  local at, i = nil, 1
  while true do
    local a = find(s, needle, i, true)
    if not a then return at end
    at, i = a, a + 1
  end
end

-- Counting braces from `from` on, the index where the count first drops back to 0, or nil.
local function closing_brace(s, from)
  local depth = 0
  for j = from, #s do
    local c = byte(s, j)
    if c == 123 then
      depth = depth + 1
    elseif c == 125 then
      depth = depth - 1
      if depth == 0 then return j end
    end
  end
  return nil
end

function M.last_boxed(s)
  if type(s) ~= "string" then return nil end
  local b, f = last_plain(s, "\\boxed"), last_plain(s, "\\fbox")
  local start, len
  if b and (not f or b > f) then start, len = b, 6 elseif f then start, len = f, 5 else return nil end
  local open = find(s, "{", start + len, true)
  if not open then return nil end
  -- Only whitespace may sit between \boxed and its brace.
  if open > start + len and not find(sub(s, start + len, open - 1), "^%s*$") then return nil end
  local close = closing_brace(s, open)
  return close and sub(s, open + 1, close - 1)  -- unbalanced: no answer
end

--- slime's extract_answer: nil unless s contains "\boxed"; then the last "\boxed"
--- up to the brace that closes its first "{" (braces counted from "\boxed" on),
--- and only when that is exactly "\boxed{...}" (no blank before the brace).
function M.slime_boxed(s)
  if type(s) ~= "string" then return nil end
  local at = last_plain(s, "\\boxed")
  if not at then return nil end
  local close = closing_brace(s, at)
  if not close or sub(s, at, at + 6) ~= "\\boxed{" then return nil end
  return sub(s, at + 7, close - 1)
end

function M.after_hashes(s)
  if type(s) ~= "string" then return nil end
  local at = last_plain(s, "####")
  if not at then return nil end
  local stop = find(s, "\n", at + 4, true)
  local rest = sub(s, at + 4, stop and stop - 1 or #s)
  rest = rest:match("^%s*(.-)%s*$")
  return rest ~= "" and rest or nil
end

-- A number's characters: digits, ',', '.', '-'.
local function is_digit(c) return c and c >= 48 and c <= 57 end

function M.last_number(s)
  if type(s) ~= "string" then return nil end
  -- Scan back to the last digit, then to the start of its number.
  local j = #s
  while j > 0 and not is_digit(byte(s, j)) do j = j - 1 end
  if j == 0 then return nil end
  local i = j
  while i > 1 do
    local c = byte(s, i - 1)
    if is_digit(c) or ((c == 44 or c == 46) and is_digit(byte(s, i - 2))) then
      i = i - 1
    elseif c == 46 then  -- ".5"
      i = i - 1
      break
    else
      break
    end
  end
  if i > 1 and byte(s, i - 1) == 45 then i = i - 1 end  -- "-"
  return (sub(s, i, j):gsub("[,.]+$", ""))
end

function M.number(s)
  if type(s) == "number" then return s end
  if type(s) ~= "string" then return nil end
  local fast = tonumber(s)
  if fast and fast == fast and fast ~= math.huge and fast ~= -math.huge and not find(s, "[xXnN]") then return fast end
  local t = s:match("^%s*(.-)%s*$")
  t = t:gsub("^%$", ""):gsub("%%$", ""):gsub("%.$", ""):gsub("^\\%$", "")
  t = t:gsub("\\!", ""):gsub("{,}", ",")
  if t:match("^%-?%d[%d,]*%.?%d*$") then
    -- Thousands separators only in groups of three.
    local int = t:match("^%-?([%d,]+)")
    if int:find(",") then
      local first = true
      for group in (int .. ","):gmatch("([^,]*),") do
        if first then
          if not group:match("^%d%d?%d?$") then return nil end
          first = false
        elseif not group:match("^%d%d%d$") then
          return nil
        end
      end
    end
    t = t:gsub(",", "")
  end
  local frac_n, frac_d = t:match("^\\[dt]?frac{(%-?%d+)}{(%d+)}$")
  if not frac_n then frac_n, frac_d = t:match("^(%-?%d+)/(%d+)$") end
  if frac_n then
    local d = tonumber(frac_d)
    if d == 0 then return nil end
    return tonumber(frac_n) / d
  end
  return tonumber(t)
end

return M
