--- rl.rewards.dapo: slime's `dapo` reward (DAPO's Minerva-style check) — the
--- last "Answer: ..." line of the response's final 300 characters, normalised,
--- against the label read as an integer.
--
--   dapo.score(response, label) -> { score = 1.0 | -1.0, acc = bool, pred = string }
--   dapo.normalize(s)            the Minerva normalisation of a final answer
--
-- Use it with reward_key "score" (slime: --reward-key score). The answer is the
-- text after the last case-insensitive "Answer:" (blanks around the colon, up to
-- the line end); none gives pred "[INVALID]". The label is normalised, then read
-- as float and truncated to an integer ("72.0" → "72"); a label that is not a
-- number raises (dapo's labels are integers).
--
-- Normalisation, in order: the text after the last "="; "an ", "a ", ".$"→"$",
-- "\$", "\ ", " " removed (so every blank), mbox→text, "\text{and}"→","; the unit
-- and filler words (square, ways, integers, dollars, mph, inches, hours, km,
-- units, \ldots, sue, points, feet, minutes, digits, cents, degrees, cm, gm,
-- pounds, meters, meals, edges, students, childrentickets, multiples, \text{s},
-- ^\circ, \;, ",\!", "{,}", '"', \dots, ...) removed; "$x$" keeps x; \text{x},
-- \textbf{x}, \overline{x} → x; \boxed{x} → x; \fracab → \frac{a}{b};
-- \sqrta → \sqrt{a}; "$" removed; "1,234" → "1234" when only digits remain.
local pytext = require "rl.rewards.pytext"
local hendrycks = require "rl.rewards.hendrycks"

local M = {}

local replace, sub = hendrycks.replace, string.sub

local SUBSTITUTIONS = { { "an ", "" }, { "a ", "" }, { ".$", "$" }, { "\\$", "" }, { "\\ ", "" }, { " ", "" },
  { "mbox", "text" }, { ",\\text{and}", "," }, { "\\text{and}", "," }, { "\\text{m}", "\\text{}" } }
local REMOVED = { "square", "ways", "integers", "dollars", "mph", "inches", "hours", "km", "units", "\\ldots", "sue",
  "points", "feet", "minutes", "digits", "cents", "degrees", "cm", "gm", "pounds", "meters", "meals", "edges",
  "students", "childrentickets", "multiples", "\\text{s}", "\\text{.}", "\\text{\ns}", "\\text{}^2", "\\text{}^3",
  "\\text{\n}", "\\text{}", "\\mathrm{th}", "^\\circ", "^{\\circ}", "\\;", ",\\!", "{,}", '"', "\\dots",
  "<|im_end|>", "<|endoftext|>" }

-- re.sub(r"(\<macro>\{)(.*?)(\})", r"\2"): each macro{...} (up to its first "}", same line) → its content.
local function unwrap_lazy(s, macro)
  local open = macro .. "{"
  local out, i = {}, 1
  while true do
    local a, b = s:find(open, i, true)
    if not a then break end
    local close = s:find("[}\n]", b + 1)
    if not close or sub(s, close, close) == "\n" then
      out[#out + 1] = sub(s, i, b)
      i = b + 1
    else
      out[#out + 1] = sub(s, i, a - 1) .. sub(s, b + 1, close - 1)
      i = close + 1
    end
  end
  out[#out + 1] = sub(s, i)
  return table.concat(out)
end

-- re.sub(r"(frac)([^{])(.)", r"frac{\2}{\3}") and re.sub(r"(sqrt)([^{])", r"sqrt{\2}"), by code points.
local function brace_short(s, word, nargs)
  if not s:find(word, 1, true) then return s end
  local cs, out, i, n, w = pytext.chars(s), {}, 1, nil, #word
  n = #cs
  while i <= n do
    local hit = table.concat(cs, "", i, math.min(n, i + w - 1)) == word
    local a, b = cs[i + w], cs[i + w + 1]
    if hit and a and a ~= "{" and (nargs == 1 or (b and b ~= "\n")) then
      if nargs == 1 then
        out[#out + 1] = word .. "{" .. a .. "}"
        i = i + w + 1
      else
        out[#out + 1] = word .. "{" .. a .. "}{" .. b .. "}"
        i = i + w + 2
      end
    else
      out[#out + 1] = cs[i]
      i = i + 1
    end
  end
  return table.concat(out)
end

function M.normalize(s)
  s = tostring(s)
  local parts = hendrycks.split(s, "=")
  s = parts[#parts]
  for _, p in ipairs(SUBSTITUTIONS) do s = replace(s, p[1], p[2]) end
  for _, e in ipairs(REMOVED) do s = replace(s, e, "") end
  -- "(.*?)(\$)(.*?)(\$)(.*)" → "$\3$" on the first line holding two "$".
  local a = s:find("$", 1, true)
  if a then
    local b = s:find("$", a + 1, true)
    local nl = s:find("\n", 1, true)
    if b and (not nl or nl > b) then
      local rest_end = s:find("\n", b + 1, true)
      s = sub(s, 1, 0) .. "$" .. sub(s, a + 1, b - 1) .. "$" .. (rest_end and sub(s, rest_end) or "")
    end
  end
  s = unwrap_lazy(s, "\\text")
  s = unwrap_lazy(s, "\\textbf")
  s = unwrap_lazy(s, "\\overline")
  -- "(\\boxed\{)(.*)(\})" → "\2": from the first "\boxed{" to the last "}" of its line.
  local bx = s:find("\\boxed{", 1, true)
  if bx then
    local line_end = s:find("\n", bx, true) or (#s + 1)
    local last
    for k = line_end - 1, bx + 7, -1 do
      if sub(s, k, k) == "}" then last = k; break end
    end
    if last then s = sub(s, 1, bx - 1) .. sub(s, bx + 7, last - 1) .. sub(s, last + 1) end
  end
  s = brace_short(s, "frac", 2)
  s = brace_short(s, "sqrt", 1)
  s = replace(s, "$", "")
  local digits = replace(s, ",", "")
  if digits ~= "" then
    local all = true
    for _, ch in ipairs(pytext.chars(digits)) do
      if not pytext.isdigit(ch) then all = false; break end   -- Python's str.isdigit, as slime
    end
    if all then s = digits end
  end
  return pytext.strip(s)
end

-- re.findall(r"(?i)Answer\s*:\s*([^\n]+)", s)[-1], or nil.
local function last_answer(s)
  local cs = pytext.chars(s)
  local n, i, found = #cs, 1, nil
  while i <= n - 5 do
    if table.concat(cs, "", i, i + 5):lower() == "answer" then
      local k = i + 6
      while k <= n and pytext.isspace(cs[k]) do k = k + 1 end
      if cs[k] == ":" then
        local start = k + 1
        local j = start
        while j <= n and pytext.isspace(cs[j]) do j = j + 1 end
        -- Backtrack over blanks until a character that is not a newline follows.
        while j > start and (j > n or cs[j] == "\n") do j = j - 1 end
        if j <= n and cs[j] ~= "\n" then
          local e = j
          while e <= n and cs[e] ~= "\n" do e = e + 1 end
          found = table.concat(cs, "", j, e - 1)
          i = e
        else
          i = i + 1
        end
      else
        i = i + 1
      end
    else
      i = i + 1
    end
  end
  return found
end

function M.target(label)
  local norm = M.normalize(label)
  local x = pytext.float(norm)
  if x == nil or x ~= x or x == math.huge or x == -math.huge then
    error(("rl.rewards.dapo: label %q is not a number (dapo's answers are integers)"):format(tostring(label)), 3)
  end
  local t = x >= 0 and math.floor(x) or -math.floor(-x)
  return t == 0 and "0" or string.format("%.0f", t)
end

function M.score(response, label)
  local cs = pytext.chars(response or "")
  local tail = #cs > 300 and table.concat(cs, "", #cs - 299) or (response or "")
  local pred = M.normalize(last_answer(tail) or "[INVALID]")
  local ok = pred == M.target(label)
  return { score = ok and 1.0 or -1.0, acc = ok, pred = pred }
end

return M
