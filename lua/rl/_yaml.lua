--- rl._yaml: the YAML a configuration file needs (block mappings and sequences, flow
--- [..] and {..}, quoted and plain scalars, comments), parsed into Lua tables.
--- Anchors, tags, multi-line strings and several documents are refused by name.
--- parse(text, name) returns the value, or nil and "name:LINE: what" on bad input.
---
--- Linear in the input: every scan is a string.find over character classes or plain
--- strings that moves forward (no backtracking pattern such as "(.-)%s*$", quadratic on
--- a long run of spaces, and no Lua loop over single bytes, slow without the JIT);
--- nesting is bounded (MAX_DEPTH) so a deep document is an error naming its line, not a
--- stack overflow; a key used twice in a mapping, block or flow, is an error; messages
--- quote at most a few dozen bytes.
local M = {}

M.MAX_DEPTH = 128
local EXCERPT = 60

local byte, sub, find = string.byte, string.sub, string.find
local SPACE, TAB, CR = 32, 9, 13

-- s shortened for a message: at most EXCERPT bytes, control bytes as \xNN.
local function excerpt(s)
  s = tostring(s)
  local cut = #s > EXCERPT
  if cut then s = sub(s, 1, EXCERPT - 3) end
  s = s:gsub("[%z\1-\31\127]", function(c) return ("\\x%02X"):format(byte(c)) end)
  return cut and (s .. "...") or s
end
M.excerpt = excerpt

local function is_space(b) return b == SPACE or b == TAB or b == CR end

-- s[i..j] (default: all of it) without surrounding blanks. "[^ ][ ]*$" finds the last
-- non-blank in linear time: each start is tried once, its run of blanks scanned once.
local function trim(s, i, j)
  if i or j then s = sub(s, i or 1, j or #s) end
  local a = find(s, "[^ \t\r]")
  if not a then return "" end
  return sub(s, a, (find(s, "[^ \t\r][ \t\r]*$", a)))
end

-- s from i on without its leading blanks (the lines are stored without trailing ones).
local function ltrim(s, i) return sub(s, find(s, "[^ \t\r]", i) or #s + 1) end

local function fail(where, msg) error({ yaml = true, msg = where .. ": " .. msg }, 0) end

-- Where a quoted scalar starting at s[i] (a ' or ") ends: the index of its closing quote.
local function quote_end(s, i)
  local j = i + 1
  if byte(s, i) == 39 then
    while true do
      local k = find(s, "'", j, true)
      if not k then return nil end
      if byte(s, k + 1) ~= 39 then return k end
      j = k + 2   -- '' inside '...' is one quote
    end
  end
  while true do
    local k = find(s, '["\\]', j)
    if not k then return nil end
    if byte(s, k) == 34 then return k end
    local e = find(s, "[^\\]", k) or #s + 1   -- past a run of backslashes: pairs escape each other,
    j = (e - k) % 2 == 1 and e + 1 or e        -- an odd one escapes the byte after the run
  end
end

-- A quote opens a quoted scalar only where a scalar can start (not inside a word: don't).
local function opens_quote(s, i)
  if i == 1 then return true end
  local p = byte(s, i - 1)
  return is_space(p) or p == 91 or p == 123 or p == 44   -- [ { ,
end

-- The line without its comment: '#' at the start or after a blank, outside quotes.
local function strip_comment(s)
  local i = 1
  while true do
    local k = find(s, "[\"'#]", i)
    if not k then return s end
    local c = byte(s, k)
    if c == 35 then   -- #
      if k == 1 or is_space(byte(s, k - 1)) then return sub(s, 1, k - 1) end
      i = k + 1
    elseif opens_quote(s, k) then
      local e = quote_end(s, k)
      if not e then return s end   -- unterminated: the scalar reader reports it
      i = e + 1
    else
      i = k + 1
    end
  end
end

local unescape = { n = "\n", t = "\t", r = "\r", ['"'] = '"', ["\\"] = "\\", ["/"] = "/", ["0"] = "\0" }

-- A whole scalar (already trimmed, maybe a flow collection).
local scalar

-- A flow collection ([a, b] or {k: v}) starting at s[i]; returns the value and the next index.
local function flow(s, i, where, depth)
  if depth > M.MAX_DEPTH then fail(where, ("nested deeper than %d levels"):format(M.MAX_DEPTH)) end
  local open = sub(s, i, i)
  local close = open == "[" and "]" or "}"
  local out, n, seen = {}, 0, {}
  i = i + 1
  while true do
    i = find(s, "%S", i) or #s + 1
    local c = sub(s, i, i)
    if c == close then return out, i + 1 end
    if c == "" then fail(where, "'" .. open .. "' is not closed") end
    local key
    if open == "{" then
      local kq = byte(s, i)
      local kend
      if kq == 34 or kq == 39 then
        local e = quote_end(s, i)
        if not e then fail(where, "unterminated " .. sub(s, i, i) .. "-quoted key") end
        key, kend = scalar(sub(s, i, e), where, depth), e + 1
        kend = find(s, "%S", kend) or #s + 1
        if sub(s, kend, kend) ~= ":" then fail(where, "expected ':' after the key " .. excerpt(key) .. " in {...}") end
      else
        kend = find(s, "[:,{}%[%]]", i)
        if not kend or sub(s, kend, kend) ~= ":" then fail(where, "expected 'key: value' in {...}") end
        key = trim(s, i, kend - 1)
        if key == "" then fail(where, "expected 'key: value' in {...} (empty key)") end
      end
      if seen[key] then fail(where, "key '" .. excerpt(key) .. "' appears twice in {...}") end
      seen[key] = true
      i = kend + 1
      i = find(s, "%S", i) or #s + 1
    end
    local v
    c = sub(s, i, i)
    if c == "[" or c == "{" then
      v, i = flow(s, i, where, depth + 1)
    else
      local j = i
      if (c == '"' or c == "'") then
        j = quote_end(s, i)
        if not j then fail(where, "unterminated " .. c .. "-quoted string") end
        j = j + 1
      end
      local e = find(s, "[,%]}]", j) or #s + 1
      v, i = scalar(sub(s, i, e - 1), where, depth), e
    end
    if key then out[key] = v else n = n + 1; out[n] = v end
    i = find(s, "%S", i) or #s + 1
    c = sub(s, i, i)
    if c == "" then fail(where, "'" .. open .. "' is not closed") end
    if c == "," then i = i + 1 elseif c ~= close then fail(where, "expected ',' or '" .. close .. "'") end
  end
end

local NULLS = { [""] = true, ["~"] = true, null = true, Null = true, NULL = true }
local TRUES = { ["true"] = true, True = true, TRUE = true }
local FALSES = { ["false"] = true, False = true, FALSE = true }

function scalar(s, where, depth)
  s = trim(s)
  local c = sub(s, 1, 1)
  if c == "[" or c == "{" then
    local v, i = flow(s, 1, where, (depth or 0) + 1)
    if find(s, "%S", i) then fail(where, "text after the closing bracket") end
    return v
  end
  if c == '"' or c == "'" then
    local e = quote_end(s, 1)
    if not e then fail(where, "unterminated " .. c .. "-quoted string") end
    if e ~= #s then fail(where, "text after the closing quote") end
    local body = sub(s, 2, e - 1)
    if c == "'" then return (body:gsub("''", "'")) end
    return (body:gsub("\\(.)", function(x) return unescape[x] or x end))
  end
  if c == "&" or c == "*" or c == "!" then fail(where, "anchors, aliases and tags are not supported") end
  if c == "|" or c == ">" then fail(where, "block strings (| and >) are not supported; quote the value") end
  if NULLS[s] then return nil end
  if TRUES[s] then return true end
  if FALSES[s] then return false end
  if find(s, "^[-+]?[%d.]") then
    local n = tonumber(s)
    if n then return n end
  end
  return s
end

-- A mapping line "key: rest" (key plain or quoted): key and rest, or nil when the line
-- is not one. The key of a plain line ends at the first ':' followed by a blank or the
-- line's end.
local function key_of(text)
  local c = byte(text, 1)
  if c == 34 or c == 39 then   -- a quoted key
    local e = quote_end(text, 1)
    if not e then return nil end
    local k = find(text, "%S", e + 1)
    if not k or byte(text, k) ~= 58 then return nil end
    local key = sub(text, 2, e - 1)
    if c == 39 then key = key:gsub("''", "'") end
    return key, trim(text, k + 1)
  end
  if not c or c == 35 or c == 91 or c == 123 or c == 44 or is_space(c) then return nil end   -- # [ { , blank
  if c == 45 and (#text == 1 or is_space(byte(text, 2))) then return nil end   -- "- item"
  local k = find(text, ":[ \t\r]") or (byte(text, #text) == 58 and #text)   -- a ':' then a blank or the end
  if not k then return nil end
  local key = trim(text, 1, k - 1)
  if key == "" then return nil end
  return key, ltrim(text, k + 1)
end

local function is_item(text)
  return byte(text, 1) == 45 and (#text == 1 or is_space(byte(text, 2)))   -- "-" then blank or end
end

function M.parse(text, name)
  name = name or "<yaml>"
  if type(text) ~= "string" then return nil, name .. ": not text" end
  local lines, ln, first = {}, 0, true
  local pos0 = 1
  if sub(text, 1, 3) == "\239\187\191" then pos0 = 4 end   -- a UTF-8 byte order mark
  local len = #text
  while pos0 <= len + 1 do
    local e = find(text, "\n", pos0, true)
    local raw = sub(text, pos0, (e or len + 1) - 1)
    pos0 = (e or len + 1) + 1
    ln = ln + 1
    if byte(raw, #raw) == CR then raw = sub(raw, 1, #raw - 1) end
    local s = strip_comment(raw)
    local lead = find(s, "[^ ]") or #s + 1
    if byte(s, lead) == TAB then
      return nil, ("%s:%d: a tab in the indentation (YAML indents with spaces)"):format(name, ln)
    end
    local body = trim(s, lead)
    if body ~= "" then
      if sub(body, 1, 3) == "---" and (#body == 3 or is_space(byte(body, 4))) and lead == 1 then
        if not first then return nil, ("%s:%d: only one document is supported"):format(name, ln) end
        if #body > 3 then return nil, ("%s:%d: put the document's content on the lines after '---'"):format(name, ln) end
      elseif body == "..." and lead == 1 then
        -- document end marker: ignored
      else
        first = false
        lines[#lines + 1] = { indent = lead - 1, text = body, ln = ln }
      end
    end
    if not e then break end
  end
  local pos = 1
  local function where(l) return ("%s:%d"):format(name, (l or lines[pos] or { ln = ln }).ln) end

  local block
  local function seq(ind, depth)
    local out = {}
    while lines[pos] and lines[pos].indent == ind and is_item(lines[pos].text) do
      local l = lines[pos]
      local rest = ltrim(l.text, 2)
      if rest == "" then
        pos = pos + 1
        if lines[pos] and lines[pos].indent > ind then out[#out + 1] = block(lines[pos].indent, depth + 1)
        else out[#out + 1] = nil end
      elseif key_of(rest) or is_item(rest) then   -- "- key: v" / "- - x": a collection starting on the dash's line
        l.indent = ind + (#l.text - #rest)
        l.text = rest
        out[#out + 1] = block(l.indent, depth + 1)
      else
        out[#out + 1] = scalar(rest, where(l), depth)
        pos = pos + 1
      end
    end
    return out
  end

  local function map(ind, depth)
    local out = {}
    while lines[pos] and lines[pos].indent == ind do
      local l = lines[pos]
      local k, rest = key_of(l.text)
      if not k then fail(where(l), "expected 'key: value' (got '" .. excerpt(l.text) .. "')") end
      if out[k] ~= nil then fail(where(l), "key '" .. excerpt(k) .. "' appears twice") end
      pos = pos + 1
      local nxt = lines[pos]
      if rest ~= "" then
        out[k] = scalar(rest, where(l), depth)
      elseif nxt and nxt.indent > ind then
        out[k] = block(nxt.indent, depth + 1)
      elseif nxt and nxt.indent == ind and is_item(nxt.text) then
        out[k] = seq(ind, depth + 1)   -- a sequence may sit at its key's indentation
      end
      if out[k] == nil then out[k] = M.null end   -- a key with no value still counts as given (duplicates)
    end
    for key, v in pairs(out) do if v == M.null then out[key] = nil end end
    return out
  end

  function block(ind, depth)
    if depth > M.MAX_DEPTH then fail(where(), ("nested deeper than %d levels"):format(M.MAX_DEPTH)) end
    local l = lines[pos]
    if is_item(l.text) then return seq(ind, depth) end
    if key_of(l.text) then return map(ind, depth) end
    pos = pos + 1
    return scalar(l.text, where(l), depth)
  end

  if #lines == 0 then return nil, name .. ": the file is empty" end
  local ok, v = pcall(block, lines[1].indent, 1)
  if not ok then
    if type(v) == "table" and v.yaml then return nil, v.msg end
    error(v, 0)
  end
  if lines[pos] then
    return nil, ("%s: '%s' does not fit here (check its indentation: %d spaces)")
      :format(where(), excerpt(lines[pos].text), lines[pos].indent)
  end
  return v
end

M.null = setmetatable({}, { __tostring = function() return "yaml null" end })

return M
