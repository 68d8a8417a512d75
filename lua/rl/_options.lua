-- Private: the one validator of option tables. A component declares its options once, as
-- a list in rl.args' format ({name, type = "string" | "int" | "number" | "bool" | "table"
-- (none: any value), default, choices, help, required} plus min / max / above (> it)); from that list come its Lua API's
-- checks (here), its command-line flags (rl.args) and whatever else it derives (a child's
-- argv, docs). Every misuse raises in docs/conventions.md's form:
--   "<fname>: bad argument 'opts.<field>' (<expected>, got <actual>)"
--   "<fname>: bad argument 'opts.<field>' (unknown option; did you mean '<name>'?)"
local M = {}

local EXPECT = { string = "string", int = "integer", number = "number", bool = "boolean", table = "table",
                 list = "table", ["function"] = "function" }

local function is_int(v) return type(v) == "number" and v == math.floor(v) and v == v end

local function show(v)
  if type(v) == "string" then return "'" .. v .. "'" end
  if type(v) == "number" or type(v) == "boolean" then return tostring(v) end
  return type(v)
end

--- The declaration as a name -> entry map (cached on the list).
function M.index(decl)
  local by = rawget(decl, "_by_name")
  if by then return by end
  by = {}
  for _, o in ipairs(decl) do by[o.name] = o end
  rawset(decl, "_by_name", by)
  return by
end

--- The option names of a declaration, sorted.
function M.names(decl)
  local out = {}
  for _, o in ipairs(decl) do out[#out + 1] = o.name end
  table.sort(out)
  return out
end

-- What is wrong with value v for entry o (nil when it is fine).
local function problem(o, v)
  local t = o.type
  if t == nil then return nil end   -- anything goes (checked by whoever takes it)
  local want = EXPECT[t] or t
  if t == "int" then
    if not is_int(v) then return ("integer expected, got %s"):format(show(v)) end
  elseif t == "number" then
    if type(v) ~= "number" or v ~= v then return ("number expected, got %s"):format(show(v)) end
  elseif type(v) ~= want then
    return ("%s expected, got %s"):format(want, show(v))
  end
  if o.choices then
    for _, c in ipairs(o.choices) do if c == v then return nil end end
    local cs = {}
    for i, c in ipairs(o.choices) do cs[i] = "'" .. tostring(c) .. "'" end
    return ("%s expected, got %s"):format(table.concat(cs, ", "), show(v))
  end
  local kind = t == "int" and "integer" or "number"
  if o.above and not (v > o.above) then return ("%s > %s expected, got %s"):format(kind, tostring(o.above), show(v)) end
  if o.min and o.max and (v < o.min or v > o.max) then
    return ("%s %s-%s expected, got %s"):format(kind, tostring(o.min), tostring(o.max), show(v))
  end
  if o.min and v < o.min then return ("%s >= %s expected, got %s"):format(kind, tostring(o.min), show(v)) end
  if o.max and v > o.max then return ("%s <= %s expected, got %s"):format(kind, tostring(o.max), show(v)) end
end

--- Raises unless every key of `opts` is declared and every value fits its entry (type,
--- choices, min, max), and every required option is there. `prefix`: how a field is
--- named ("opts." by default); `hint`: appended to an unknown option's message; `level`:
--- error level (default 3: the caller of the function that called check). → opts.
function M.check(fname, decl, opts, args)
  args = args or {}
  local prefix, level = args.prefix or "opts.", args.level or 3
  if type(opts) ~= "table" then
    error(("%s: bad argument #1 'opts' (table expected, got %s)"):format(fname, type(opts)), level)
  end
  local by = M.index(decl)
  for k, v in pairs(opts) do
    local o = by[k]
    if not o then
      local close = type(k) == "string" and require("rl.args").closest(k, M.names(decl))
      error(("%s: bad argument '%s%s' (unknown option%s%s)"):format(fname, prefix, tostring(k), args.hint or "",
        close and ("; did you mean '" .. close .. "'?") or ""), level)
    end
    local why = problem(o, v)
    if why then error(("%s: bad argument '%s%s' (%s)"):format(fname, prefix, k, why), level) end
  end
  for _, o in ipairs(decl) do
    if o.required and opts[o.name] == nil then
      error(("%s: bad argument '%s%s' (%s expected, got nil)"):format(fname, prefix, o.name,
        EXPECT[o.type or "string"] or o.type), level)
    end
  end
  return opts
end

--- A copy of opts with every declared default filled in (entries in `only`, a set of
--- names, when given).
function M.with_defaults(decl, opts, only)
  local out = {}
  for k, v in pairs(opts) do out[k] = v end
  for _, o in ipairs(decl) do
    if out[o.name] == nil and o.default ~= nil and (not only or only[o.name]) then out[o.name] = o.default end
  end
  return out
end

local ARGS_FIELDS = { name = true, type = true, of = true, default = true, help = true, choices = true,
                      required = true, positional = true, metavar = true }

--- The rl.args entry of a declared option (its fields rl.args knows; `over` replaces some).
function M.flag(o, over)
  local f = {}
  for k, v in pairs(o) do if ARGS_FIELDS[k] then f[k] = v end end
  for k, v in pairs(over or {}) do f[k] = v end
  return f
end

return M
