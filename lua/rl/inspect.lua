--- rl.inspect: any Lua value as readable text. The REPL prints results with it.
--
--   rl.inspect.format({b = 2, a = {1, 2, 3}})        --> {a = {1, 2, 3}, b = 2}
--   rl.inspect.format(t, {depth = 1, max_items = 10}) -- shallower, shorter
--   rl.inspect(t)                                     -- same as format(t)
--
-- Keys are sorted (numbers, then strings, then the rest), strings are quoted
-- with escapes, tables nested deeper than `depth` show as {...}, a table that
-- contains itself shows <cycle> where it recurs, rl.json.null shows as
-- json.null. Short tables stay on one line; long arrays wrap several items per
-- line. Tables whose metatable has __tostring print with it (opts.raw: don't).
local core = require "rl._core"
local json = require "rl.json"

local null = core.json.null

local M = {}

local DEFAULTS = { depth = 3, max_items = 50, width = 80, raw = false }
local INDENT = "  "

local keywords = {}
for w in ([[and break do else elseif end false for function goto if in local nil not or
           repeat return then true until while]]):gmatch("%a+") do keywords[w] = true end

local function is_identifier(k)
  return type(k) == "string" and k:match("^[%a_][%w_]*$") ~= nil and not keywords[k]
end

local escapes = { ['"'] = '\\"', ["\\"] = "\\\\", ["\n"] = "\\n", ["\r"] = "\\r", ["\t"] = "\\t" }
local function quote(s)
  -- \ddd with three digits: "\0" followed by "1" must not read as "\01".
  return '"' .. s:gsub('[%c"\\]', function(c) return escapes[c] or ("\\%03d"):format(c:byte()) end) .. '"'
end

local function number(n)
  if n ~= n then return "0/0" end
  if n == math.huge then return "math.huge" end
  if n == -math.huge then return "-math.huge" end
  if n == math.floor(n) and math.abs(n) < 2 ^ 53 then return ("%d"):format(n) end
  local s = ("%.14g"):format(n)
  if tonumber(s) ~= n then s = ("%.17g"):format(n) end  -- keep every digit that matters
  return s
end

local type_rank = { number = 1, string = 2, boolean = 3 }
local function key_less(a, b)
  local ta, tb = type(a), type(b)
  if ta ~= tb then
    local ra, rb = type_rank[ta] or 4, type_rank[tb] or 4
    if ra ~= rb then return ra < rb end
    return ta < tb
  end
  if ta == "number" or ta == "string" then return a < b end
  if ta == "boolean" then return not a and b end
  return tostring(a) < tostring(b)
end

local function function_text(f)
  local info = debug.getinfo(f, "S")
  if not info or info.what == "C" then return "<function: builtin>" end
  return ("<function %s:%d>"):format(info.short_src, info.linedefined)
end

local render

-- Fills lines of at most `width` columns with the items of a flat array.
local function wrap_items(parts, pad, width)
  local lines, line = {}, pad
  for i, p in ipairs(parts) do
    local piece = p .. (i < #parts and "," or "")
    if line ~= pad and #line + 1 + #piece > width then
      lines[#lines + 1] = line
      line = pad .. piece
    else
      line = line == pad and (pad .. piece) or (line .. " " .. piece)
    end
  end
  lines[#lines + 1] = line
  return table.concat(lines, "\n")
end

local function render_table(t, opts, depth, level, ancestors)
  if ancestors[t] then return "<cycle>" end
  local mt = getmetatable(t)
  if not opts.raw and type(mt) == "table" and rawget(mt, "__tostring") then
    local ok, s = pcall(tostring, t)
    if ok and type(s) == "string" then return s end
  end
  if next(t) == nil then return "{}" end
  if depth >= opts.depth then return "{...}" end
  ancestors[t] = true

  local n = 0
  while rawget(t, n + 1) ~= nil do n = n + 1 end
  local keys = {}
  for k in next, t do
    if not (type(k) == "number" and k >= 1 and k <= n and k % 1 == 0) then keys[#keys + 1] = k end
  end
  table.sort(keys, key_less)

  local parts, shown, max = {}, 0, opts.max_items
  for i = 1, n do
    if shown >= max then break end
    parts[#parts + 1] = render(rawget(t, i), opts, depth + 1, level + 1, ancestors)
    shown = shown + 1
  end
  for _, k in ipairs(keys) do
    if shown >= max then break end
    local key = is_identifier(k) and k or ("[" .. render(k, opts, depth + 1, level + 1, ancestors) .. "]")
    parts[#parts + 1] = key .. " = " .. render(rawget(t, k), opts, depth + 1, level + 1, ancestors)
    shown = shown + 1
  end
  local hidden = n + #keys - shown
  if hidden > 0 then parts[#parts + 1] = ("... (%d more)"):format(hidden) end
  ancestors[t] = nil

  local one_line = "{" .. table.concat(parts, ", ") .. "}"
  local multi = one_line:find("\n", 1, true) ~= nil
  if not multi and #one_line + #INDENT * level <= opts.width then return one_line end
  local pad = INDENT:rep(level + 1)
  local close = "\n" .. INDENT:rep(level) .. "}"
  if #keys == 0 and not multi then  -- a long flat array: several items per line
    return "{\n" .. wrap_items(parts, pad, opts.width) .. close
  end
  return "{\n" .. pad .. table.concat(parts, ",\n" .. pad) .. close
end

render = function(v, opts, depth, level, ancestors)
  local tv = type(v)
  if tv == "string" then return quote(v) end
  if tv == "number" then return number(v) end
  if tv == "nil" or tv == "boolean" then return tostring(v) end
  if tv == "table" then return render_table(v, opts, depth, level, ancestors) end
  if tv == "function" then return function_text(v) end
  if v == null then return "json.null" end
  if tv == "cdata" then return tostring(v) end  -- LuaJIT: 123LL, cdata<int *>: 0x...
  local mt = getmetatable(v)
  if type(mt) == "table" and rawget(mt, "__tostring") then
    local ok, s = pcall(tostring, v)
    if ok and type(s) == "string" then return s end
  end
  return "<" .. tostring(v) .. ">"  -- <userdata: 0x...>, <thread: 0x...>
end

--- Formats `v` as text. opts: depth (3) levels of nested tables shown,
--- max_items (50) entries per table, width (80) columns before a table breaks
--- into lines, raw (false) ignores __tostring metamethods.
---@param v any
---@param opts? {depth?: integer, max_items?: integer, width?: integer, raw?: boolean}
---@return string
function M.format(v, opts)
  local o = {}
  for k, d in pairs(DEFAULTS) do o[k] = d end
  if opts ~= nil then
    if type(opts) ~= "table" then
      error("rl.inspect.format: bad argument #2 'opts' (table expected, got " .. type(opts) .. ")", 2)
    end
    for k, val in pairs(opts) do
      if DEFAULTS[k] == nil then
        error("rl.inspect.format: unknown option '" .. tostring(k) .. "' (expected depth, max_items, width or raw)", 2)
      end
      if type(val) ~= type(DEFAULTS[k]) then
        error(("rl.inspect.format: option '%s' must be a %s, got %s"):format(k, type(DEFAULTS[k]), type(val)), 2)
      end
      o[k] = val
    end
  end
  json.materialize()  -- deferred trace events (rl.trace) show as tables
  return render(v, o, 0, 0, {})
end

return setmetatable(M, { __call = function(_, v, opts) return M.format(v, opts) end })
