--- rl._yaml: the YAML a configuration file needs (block mappings and sequences, flow
--- [..] and {..}, quoted and plain scalars, comments), parsed into Lua tables.
--- Anchors, tags, multi-line strings and several documents are refused by name.
--- parse(text, name) returns the value, or nil and "name:LINE: what" on bad input.
local M = {}

local function strip_comment(s)
  local q
  for i = 1, #s do
    local c = s:sub(i, i)
    if q then
      if c == q then q = nil end
    elseif c == "'" or c == '"' then
      q = c
    elseif c == "#" and (i == 1 or s:sub(i - 1, i - 1):match("%s")) then
      return s:sub(1, i - 1)
    end
  end
  return s
end

local function fail(where, msg) error({ yaml = true, msg = where .. ": " .. msg }, 0) end

local scalar

-- A flow collection ([a, b] or {k: v}) starting at s[i]; returns the value and the next index.
local function flow(s, i, where)
  local open = s:sub(i, i)
  local close = open == "[" and "]" or "}"
  local out, n = {}, 0
  i = i + 1
  while true do
    i = s:find("%S", i) or #s + 1
    local c = s:sub(i, i)
    if c == close then return out, i + 1 end
    if c == "" then fail(where, "'" .. open .. "' is not closed") end
    local key
    if open == "{" then
      local k, j = s:match("^%s*([^:,{}%[%]]-)%s*:%s*()", i)
      if not k or k == "" then fail(where, "expected 'key: value' in {...}") end
      key, i = k:gsub("^[\"'](.*)[\"']$", "%1"), j
    end
    local v
    c = s:sub(i, i)
    if c == "[" or c == "{" then
      v, i = flow(s, i, where)
    else
      local j = i
      local q = (c == '"' or c == "'") and c
      if q then j = (s:find(q, i + 1, true) or fail(where, "unterminated " .. q .. "-quoted string")) + 1 end
      local e = s:find("[,%]}]", j) or #s + 1
      v, i = scalar(s:sub(i, e - 1), where), e
    end
    if key then out[key] = v else n = n + 1; out[n] = v end
    i = s:find("%S", i) or #s + 1
    c = s:sub(i, i)
    if c == "" then fail(where, "'" .. open .. "' is not closed") end
    if c == "," then i = i + 1 elseif c ~= close then fail(where, "expected ',' or '" .. close .. "'") end
  end
end

function scalar(s, where)
  s = s:match("^%s*(.-)%s*$")
  local c = s:sub(1, 1)
  if c == "[" or c == "{" then
    local v, i = flow(s, 1, where)
    if s:find("%S", i) then fail(where, "text after the closing bracket") end
    return v
  end
  if c == '"' then
    local body = s:match('^"(.*)"$') or fail(where, 'unterminated "-quoted string')
    return (body:gsub('\\(.)', { n = "\n", t = "\t", ['"'] = '"', ["\\"] = "\\" }))
  end
  if c == "'" then
    local body = s:match("^'(.*)'$") or fail(where, "unterminated '-quoted string")
    return (body:gsub("''", "'"))
  end
  if c == "&" or c == "*" or c == "!" then fail(where, "anchors, aliases and tags are not supported") end
  if c == "|" or c == ">" then fail(where, "block strings (| and >) are not supported; quote the value") end
  if s == "" or s == "~" or s == "null" or s == "Null" or s == "NULL" then return nil end
  if s == "true" or s == "True" or s == "TRUE" then return true end
  if s == "false" or s == "False" or s == "FALSE" then return false end
  local n = tonumber(s)
  if n and s:match("^[-+]?[%d.]") then return n end
  return s
end

-- A mapping line "key: rest" (key plain or quoted); nil when the line is not one.
local function key_of(text)
  local k, rest = text:match('^"([^"]*)"%s*:%s*(.*)$')
  if not k then k, rest = text:match("^'([^']*)'%s*:%s*(.*)$") end
  if not k then k, rest = text:match("^([^%s#'\"%[{,][^:]-)%s*:%s+(.*)$") end
  if not k then k = text:match("^([^%s#'\"%[{,][^:]-)%s*:$"); rest = k and "" end
  return k, rest
end

function M.parse(text, name)
  name = name or "<yaml>"
  local lines = {}
  local ln = 0
  for raw in (text .. "\n"):gmatch("([^\n]*)\n") do
    ln = ln + 1
    local s = strip_comment(raw:gsub("\r$", ""))
    if s:find("\t", 1, true) and s:match("^%s*"):find("\t", 1, true) then
      return nil, ("%s:%d: a tab in the indentation (YAML indents with spaces)"):format(name, ln)
    end
    if s:match("^%-%-%-") and #lines > 0 then return nil, ("%s:%d: only one document is supported"):format(name, ln) end
    if s:match("%S") and not s:match("^%-%-%-%s*$") and not s:match("^%.%.%.%s*$") then
      lines[#lines + 1] = { indent = #s:match("^ *"), text = s:match("^%s*(.-)%s*$"), ln = ln }
    end
  end
  local pos = 1
  local function where(l) return ("%s:%d"):format(name, (l or lines[pos] or { ln = ln }).ln) end

  local block
  local function seq(ind)
    local out = {}
    while lines[pos] and lines[pos].indent == ind and lines[pos].text:match("^%-%f[%s%z]") do
      local l = lines[pos]
      local rest = l.text:match("^%-%s*(.*)$")
      if rest == "" then
        pos = pos + 1
        if lines[pos] and lines[pos].indent > ind then out[#out + 1] = block(lines[pos].indent) else out[#out + 1] = nil end
      elseif key_of(rest) then   -- "- key: v": a mapping whose first line shares the dash's
        l.indent = ind + (#l.text - #rest)
        l.text = rest
        out[#out + 1] = block(l.indent)
      else
        out[#out + 1] = scalar(rest, where(l))
        pos = pos + 1
      end
    end
    return out
  end

  local function map(ind)
    local out = {}
    while lines[pos] and lines[pos].indent == ind do
      local l = lines[pos]
      local k, rest = key_of(l.text)
      if not k then fail(where(l), "expected 'key: value' (got '" .. l.text .. "')") end
      if out[k] ~= nil then fail(where(l), "key '" .. k .. "' appears twice") end
      pos = pos + 1
      local nxt = lines[pos]
      if rest ~= "" then
        out[k] = scalar(rest, where(l))
      elseif nxt and nxt.indent > ind then
        out[k] = block(nxt.indent)
      elseif nxt and nxt.indent == ind and nxt.text:match("^%-%f[%s%z]") then
        out[k] = seq(ind)   -- a sequence may sit at its key's indentation
      end
    end
    return out
  end

  function block(ind)
    local l = lines[pos]
    if l.text:match("^%-%f[%s%z]") then return seq(ind) end
    if key_of(l.text) then return map(ind) end
    pos = pos + 1
    return scalar(l.text, where(l))
  end

  if #lines == 0 then return nil, name .. ": the file is empty" end
  local ok, v = pcall(block, lines[1].indent)
  if not ok then
    if type(v) == "table" and v.yaml then return nil, v.msg end
    error(v, 0)
  end
  if lines[pos] then
    return nil, ("%s: '%s' does not fit here (check its indentation: %d spaces)")
      :format(where(), lines[pos].text, lines[pos].indent)
  end
  return v
end

return M
