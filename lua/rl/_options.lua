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

-- ---- a component's command line and a child's argv, from the same declaration ---------
-- Entry fields for these: flag = false (not on the command line: Lua-side), child = true
-- (still handed to a child process, by a flag its command line has built in: log_level),
-- cli_default (the command line's default where it differs from the Lua API's), cli (rl.args
-- fields replacing the option's on the command line: {name = "worker", type = "list", ...}),
-- invert = "<name>" (a bool whose flag is its negation: enable_prefix_cache is
-- --disable-prefix-cache). Required options are on the command line whatever `flag` says.

local function on_cli(o) return o.flag ~= false or o.required end

--- Appends the declaration's command-line flags (then `extra`, the command's own) to an
--- rl.args spec; returns it.
function M.cli_spec(decl, spec, extra)
  for _, o in ipairs(decl) do
    if on_cli(o) then
      local over = o.cli or { default = o.cli_default }
      if o.invert then over = { name = o.invert, default = not o.default } end
      spec[#spec + 1] = M.flag(o, over)
    end
  end
  for _, o in ipairs(extra or {}) do spec[#spec + 1] = M.flag(o) end
  return spec
end

--- The Lua option table from a command line parsed with cli_spec's spec.
function M.from_cli(decl, opt)
  local out = {}
  for _, o in ipairs(decl) do
    if o.invert then out[o.name] = not opt[o.invert]
    elseif o.cli then out[o.name] = opt[o.cli.name]
    elseif on_cli(o) then out[o.name] = opt[o.name] end
  end
  return out
end

--- A child process's flags for the options `opts` gives (flag options and child ones; a
--- list as one flag per item): "--name=value", "--name" / "--no-name" for bools.
function M.argv(decl, opts)
  local out = {}
  for _, o in ipairs(decl) do
    local v = opts[o.name]
    if v ~= nil and (o.flag ~= false or o.child) then
      local name = (o.cli and o.cli.name or o.name):gsub("_", "-")
      if o.invert then
        out[#out + 1] = (v and "--no-" or "--") .. o.invert:gsub("_", "-")
      elseif o.type == "bool" then
        out[#out + 1] = (v and "--" or "--no-") .. name
      elseif type(v) == "table" then
        for _, x in ipairs(v) do out[#out + 1] = ("--%s=%s"):format(name, tostring(x)) end
      else
        out[#out + 1] = ("--%s=%s"):format(name, tostring(v))
      end
    end
  end
  return out
end

return M
