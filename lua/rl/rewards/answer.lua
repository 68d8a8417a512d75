--- rl.rewards.answer: pulling the final answer out of a model's response.
--
--   answer.last_boxed(s)    content of the last \boxed{...} (or \fbox{...}), braces balanced
--   answer.after_hashes(s)  the text after the last "####" (GSM8K's answer line)
--   answer.last_number(s)   the last number in s ("1,234.5", "-3", ".5")
--   answer.number(s)        s read as a number (thousands separators, $, %, trailing "." dropped), or nil
local M = {}

function M.last_boxed(s)
  if type(s) ~= "string" then return nil end
  local start, name
  local i = 1
  while true do
    local a, b, which = s:find("\\(f?box)e?d?", i)
    if not a then break end
    if (which == "box" and s:sub(a, a + 5) == "\\boxed") or (which == "fbox" and s:sub(a, a + 4) == "\\fbox") then
      start, name = a, which
    end
    i = b + 1
  end
  if not start then return nil end
  local open = s:find("{", start, true)
  if not open then return nil end
  -- Only whitespace may sit between \boxed and its brace.
  if not s:sub(start + (name == "box" and 6 or 5), open - 1):match("^%s*$") then return nil end
  local depth = 0
  for j = open, #s do
    local c = s:sub(j, j)
    if c == "{" then
      depth = depth + 1
    elseif c == "}" then
      depth = depth - 1
      if depth == 0 then return s:sub(open + 1, j - 1) end
    end
  end
  return nil  -- unbalanced: no answer
end

function M.after_hashes(s)
  if type(s) ~= "string" then return nil end
  local last
  for rest in s:gmatch("####([^\n]*)") do last = rest end
  if not last then return nil end
  last = last:match("^%s*(.-)%s*$")
  return last ~= "" and last or nil
end

function M.last_number(s)
  if type(s) ~= "string" then return nil end
  local best, best_a, best_b
  -- 1,234.56 | -3 | 1234. | .5 ; the match ending last wins, the longer on a tie.
  for _, pat in ipairs { "%-?%d[%d,]*%.?%d*", "%-?%.%d+" } do
    local i = 1
    while true do
      local a, b = s:find(pat, i)
      if not a then break end
      if not best_b or b > best_b or (b == best_b and a < best_a) then best, best_a, best_b = s:sub(a, b), a, b end
      i = b + 1
    end
  end
  if best then best = best:gsub("[,.]+$", "") end
  return best
end

function M.number(s)
  if type(s) == "number" then return s end
  if type(s) ~= "string" then return nil end
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
