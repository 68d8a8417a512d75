--- rl.args: a recipe's command-line options.
--
--   local opt = rl.args{
--     description = "GRPO on GSM8K",
--     {name = "rollout_batch_size", type = "int", default = 32, help = "prompts per rollout step"},
--     {name = "use_kl_loss", type = "bool", default = false},
--     {name = "eval_datasets", type = "list", of = "string", default = {}},
--     {name = "model_path", type = "string", required = true},
--     {name = "dump", positional = true, type = "string", help = "dump file to view"},
--   }
--   print(opt.rollout_batch_size)           -- keys are the snake_case names
--
-- Users write kebab-case flags (snake_case is accepted too):
--   --rollout-batch-size 16   --rollout-batch-size=16
--   --use-kl-loss   --no-use-kl-loss   --use-kl-loss=false
--   --eval-datasets a b c     --eval-datasets=a,b,c     (--eval-datasets= is the empty list)
--   --                        ends the flags; what follows is positional
--   -h, --help                prints the usage and exits 0
--   --log-level LEVEL         built in: sets rl.log.level
--
-- A bad command line is a usage error: the host prints the message and exits 2.
-- A bad declaration (unknown type, duplicate name, default of the wrong type) is
-- the recipe author's mistake: an ordinary error pointing at the rl.args call.
local rl = require "rl"
local json = require "rl.json"

local M = {}

-- ---- types -----------------------------------------------------------------------------

local TRUE = { ["true"] = true, ["1"] = true, yes = true, on = true, y = true }
local FALSE = { ["false"] = true, ["0"] = true, no = true, off = true, n = true }

local function is_int(v)
  return type(v) == "number" and v == math.floor(v) and v >= -2 ^ 53 and v <= 2 ^ 53
end

-- Per scalar type: how it reads from text, how a declared value is checked, its
-- wording in messages and its placeholder in the help.
local SCALARS = {
  string = {
    expect = "a string", plural = "strings", metavar = "STR",
    read = function(s) return s end,
    check = function(v) return type(v) == "string" end,
  },
  int = {
    expect = "an integer", plural = "integers", metavar = "INT",
    read = function(s)
      if not (s:match("^[+-]?%d+$") or s:match("^[+-]?%d+[eE]%+?%d+$")) then return nil end
      local n = tonumber(s)
      if is_int(n) then return n end
    end,
    check = is_int,
  },
  number = {
    expect = "a number", plural = "numbers", metavar = "NUM",
    read = function(s)
      local n = tonumber(s)
      if n and n == n then return n end
    end,
    check = function(v) return type(v) == "number" and v == v end,
  },
  bool = {
    expect = "a boolean (true or false)", plural = "booleans", metavar = "BOOL",
    read = function(s)
      local l = s:lower()
      if TRUE[l] then return true elseif FALSE[l] then return false end
    end,
    check = function(v) return type(v) == "boolean" end,
  },
}

local TYPE_ALIASES = { integer = "int", float = "number", boolean = "bool", str = "string" }
local TYPE_NAMES = "string, int, number, bool or list"
local OPTION_FIELDS = {
  name = true, type = true, of = true, default = true, help = true, choices = true,
  required = true, positional = true, metavar = true,
  -- a flag accepted for compatibility whose value rlhost does not use: the reason (and what
  -- to use instead), which the program logs when the flag is given (rl.args.not_applicable)
  not_applicable = true,
}
local SPEC_FIELDS = { description = true, prog = true, epilog = true }
local RESERVED = { help = true, log_level = true, h = true }
local LOG_LEVELS = { "trace", "debug", "info", "warn", "error", "critical", "off" }
local LOG_LEVEL_SET = { warning = true }
for _, l in ipairs(LOG_LEVELS) do LOG_LEVEL_SET[l] = true end

-- ---- formatting ------------------------------------------------------------------------

local function fmt_number(n)
  if n ~= n then return "nan" end
  if n == math.huge then return "inf" elseif n == -math.huge then return "-inf" end
  if is_int(n) then return ("%d"):format(n) end
  for _, p in ipairs { "%.14g", "%.15g", "%.16g" } do
    local s = p:format(n)
    if tonumber(s) == n then return s end
  end
  return ("%.17g"):format(n)
end

local function fmt_value(v)
  if type(v) == "number" then return fmt_number(v) end
  if type(v) == "string" then return v == "" and '""' or v end
  if type(v) == "table" then
    if #v == 0 then return "[]" end
    local parts = {}
    for i, x in ipairs(v) do parts[i] = fmt_value(x) end
    return table.concat(parts, ",")
  end
  return tostring(v)
end

local function fmt_choices(choices)
  local parts = {}
  for i, c in ipairs(choices) do parts[i] = fmt_value(c) end
  return table.concat(parts, ", ")
end

local function kebab(s) return (s:gsub("_", "-")) end

-- ---- suggestions -----------------------------------------------------------------------

-- Optimal string alignment distance (Levenshtein plus adjacent transpositions).
local function distance(a, b)
  local la, lb = #a, #b
  local d = {}
  for i = 0, la do d[i] = { [0] = i } end
  for j = 0, lb do d[0][j] = j end
  for i = 1, la do
    local ai = a:byte(i)
    for j = 1, lb do
      local bj = b:byte(j)
      local cost = ai == bj and 0 or 1
      local v = math.min(d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost)
      if i > 1 and j > 1 and ai == b:byte(j - 1) and a:byte(i - 1) == bj then
        v = math.min(v, d[i - 2][j - 2] + 1)
      end
      d[i][j] = v
    end
  end
  return d[la][lb]
end

-- The candidate closest to `word`, when it is close enough to be a likely typo,
-- else the only candidate that starts with `word`.
local function closest(word, candidates)
  local best, best_d = nil, math.huge
  for _, c in ipairs(candidates) do
    local dd = distance(word, c)
    if dd < best_d then best, best_d = c, dd end
  end
  if best and best_d <= math.max(1, math.floor(#word / 3)) then return best end
  local prefixed
  for _, c in ipairs(candidates) do
    if #word >= 2 and c:sub(1, #word) == word then
      if prefixed then return nil end
      prefixed = c
    end
  end
  return prefixed
end
--- The candidate closest to `word` when it looks like a typo of it (or the only one it
--- starts), else nil: what "did you mean" hints name.
M.closest = closest

-- ---- declarations ----------------------------------------------------------------------

local function check_value(o, v, what)
  local t = o.type == "list" and o.of or o.type
  if not SCALARS[t].check(v) then
    return ("%s %s is not %s"):format(what, fmt_value(v), SCALARS[t].expect)
  end
  if o.choices then
    for _, c in ipairs(o.choices) do if c == v then return nil end end
    return ("%s %s is not one of the choices (%s)"):format(what, fmt_value(v), fmt_choices(o.choices))
  end
end

-- Validates one option declaration; returns the normalised option or nil, err.
local function compile_option(d, index)
  if type(d) ~= "table" then
    return nil, ("option #%d: expected a table like {name = \"x\", type = \"int\"}, got %s"):format(index, type(d))
  end
  local name = d.name
  if type(name) ~= "string" or not name:match("^[%a][%w_%-]*$") then
    return nil, ("option #%d: 'name' must be a snake_case name like \"rollout_batch_size\", got %s")
      :format(index, type(name) == "string" and ("'" .. name .. "'") or tostring(name))
  end
  local key = name:gsub("%-", "_")
  local where = "option '" .. key .. "'"
  for k in pairs(d) do
    if not OPTION_FIELDS[k] then
      return nil, ("%s: unknown field '%s' (fields: name, type, of, default, help, choices, required, positional, metavar, not_applicable)")
        :format(where, tostring(k))
    end
  end
  if RESERVED[key] then return nil, where .. ": the name is reserved for a built-in option" end

  local ty = d.type
  if ty == nil then
    local dt = type(d.default)
    ty = dt == "number" and "number" or dt == "boolean" and "bool" or dt == "table" and "list" or "string"
  end
  if type(ty) ~= "string" then return nil, ("%s: 'type' must be a string (%s)"):format(where, TYPE_NAMES) end
  ty = TYPE_ALIASES[ty] or ty
  if not (SCALARS[ty] or ty == "list") then
    return nil, ("%s: unknown type '%s' (expected %s)"):format(where, ty, TYPE_NAMES)
  end
  local of = d.of
  if ty == "list" then
    of = of or "string"
    of = type(of) == "string" and (TYPE_ALIASES[of] or of) or of
    if not (of == "string" or of == "int" or of == "number") then
      return nil, ("%s: unknown list item type '%s' (expected string, int or number)"):format(where, tostring(of))
    end
  elseif of ~= nil then
    return nil, ("%s: 'of' only applies to type \"list\""):format(where)
  end

  local o = {
    key = key, flag = "--" .. kebab(key), type = ty, of = of, help = d.help,
    required = d.required and true or false, positional = d.positional and true or false,
  }
  if d.help ~= nil and type(d.help) ~= "string" then return nil, where .. ": 'help' must be a string" end
  if d.metavar ~= nil and type(d.metavar) ~= "string" then return nil, where .. ": 'metavar' must be a string" end
  if o.positional and ty == "bool" then
    return nil, where .. ": a positional argument cannot be a bool"
  end
  if d.choices ~= nil then
    if type(d.choices) ~= "table" or #d.choices == 0 then
      return nil, where .. ": 'choices' must be a non-empty list"
    end
    if ty == "bool" then return nil, where .. ": 'choices' do not apply to a bool" end
    o.choices = {}
    for i, c in ipairs(d.choices) do
      local t = ty == "list" and of or ty
      if not SCALARS[t].check(c) then
        return nil, ("%s: choices[%d] %s is not %s"):format(where, i, fmt_value(c), SCALARS[t].expect)
      end
      o.choices[i] = c
    end
  end
  if d.default ~= nil then
    if o.required then
      return nil, where .. ": has both required = true and a default; drop one"
    end
    if ty == "list" then
      if type(d.default) ~= "table" then
        return nil, ("%s: default %s is not a list"):format(where, fmt_value(d.default))
      end
      for i, v in ipairs(d.default) do
        local err = check_value(o, v, ("default[%d]"):format(i))
        if err then return nil, where .. ": " .. err end
      end
    else
      local err = check_value(o, d.default, "default")
      if err then return nil, where .. ": " .. err end
    end
    o.default = d.default
  end
  if o.positional then
    o.metavar = d.metavar or key:upper()
    o.display = o.metavar
  else
    local t = ty == "list" and of or ty
    if d.metavar then
      o.metavar = d.metavar
    elseif o.choices then
      local parts = {}
      for i, ch in ipairs(o.choices) do parts[i] = fmt_value(ch) end
      o.metavar = "{" .. table.concat(parts, ",") .. "}"
    else
      o.metavar = SCALARS[t].metavar
    end
    o.display = o.flag
  end
  return o
end

-- Validates a whole spec; returns the compiled form or nil, err.
local function compile(spec)
  if type(spec) ~= "table" then
    return nil, "rl.args: expected a table of option declarations, got " .. type(spec)
  end
  for k, v in pairs(spec) do
    if type(k) ~= "number" then
      if k == "passthrough" then
        if type(v) ~= "table" then return nil, "rl.args: 'passthrough' must be a table {prefix = key}" end
        for pk, pv in pairs(v) do
          if type(pk) ~= "string" or type(pv) ~= "string" then
            return nil, "rl.args: 'passthrough' maps flag prefixes to option keys (strings), e.g. {vllm = 'vllm_args'}"
          end
        end
      elseif not SPEC_FIELDS[k] then
        return nil, ("rl.args: unknown field '%s' (fields: description, prog, epilog, passthrough, and the options as a list)")
          :format(tostring(k))
      elseif type(v) ~= "string" then return nil, ("rl.args: '%s' must be a string"):format(k) end
    end
  end
  local c = { options = {}, positionals = {}, by_flag = {}, spec = spec }
  local seen = {}
  for i = 1, #spec do
    local o, err = compile_option(spec[i], i)
    if not o then return nil, "rl.args: " .. err end
    if seen[o.key] then return nil, ("rl.args: option '%s' is declared twice"):format(o.key) end
    seen[o.key] = true
    if o.positional then
      local last = c.positionals[#c.positionals]
      if last and last.type == "list" then
        return nil, ("rl.args: option '%s': a positional list ('%s') must be the last positional")
          :format(o.key, last.key)
      end
      c.positionals[#c.positionals + 1] = o
    else
      c.options[#c.options + 1] = o
      c.by_flag[kebab(o.key)] = o
    end
  end
  -- the usage line reads "usage: rlhost <prog>": a prog written with its "rlhost " keeps one
  c.prog = (tostring(spec.prog or rl.script or "recipe.lua"):gsub("^rlhost%s+", ""))
  return c
end

-- ---- help ------------------------------------------------------------------------------

local function type_words(o)
  if o.type == "list" then return "list of " .. o.of end
  return o.type
end

local function describe(o)
  local notes = { type_words(o) }
  if o.choices then notes[#notes + 1] = "one of: " .. fmt_choices(o.choices) end
  if o.required then
    notes[#notes + 1] = "required"
  elseif o.default ~= nil then
    notes[#notes + 1] = "default: " .. fmt_value(o.default)
  elseif o.type == "list" then
    notes[#notes + 1] = "default: []"
  elseif o.positional then
    notes[#notes + 1] = "optional"
  end
  local text = "[" .. table.concat(notes, ", ") .. "]"
  if o.help and o.help ~= "" then text = o.help .. " " .. text end
  return text
end

local COLUMN = 30

local function row(lines, left, text)
  left = "  " .. left
  if #left + 2 > COLUMN then
    lines[#lines + 1] = left
    lines[#lines + 1] = (" "):rep(COLUMN) .. text
  else
    lines[#lines + 1] = left .. (" "):rep(COLUMN - #left) .. text
  end
end

local function usage_line(c)
  local parts = { "usage: rlhost " .. c.prog .. " [options]" }
  for _, p in ipairs(c.positionals) do
    local s = p.type == "list" and (p.metavar .. "...") or p.metavar
    parts[#parts + 1] = p.required and s or ("[" .. s .. "]")
  end
  return table.concat(parts, " ")
end

local function help_text(c)
  local lines = { usage_line(c) }
  if c.spec.description then
    lines[#lines + 1] = ""
    lines[#lines + 1] = c.spec.description
  end
  if #c.positionals > 0 then
    lines[#lines + 1] = ""
    lines[#lines + 1] = "arguments:"
    for _, p in ipairs(c.positionals) do
      row(lines, p.type == "list" and (p.metavar .. "...") or p.metavar, describe(p))
    end
  end
  if #c.options > 0 then
    lines[#lines + 1] = ""
    lines[#lines + 1] = "options:"
    for _, o in ipairs(c.options) do
      local left
      if o.type == "bool" then
        left = "--[no-]" .. o.flag:sub(3)
      elseif o.type == "list" then
        left = o.flag .. " " .. o.metavar .. "..."
      else
        left = o.flag .. " " .. o.metavar
      end
      row(lines, left, describe(o))
    end
  end
  local prefixes = {}
  for pfx in pairs(c.spec.passthrough or {}) do prefixes[#prefixes + 1] = pfx end
  table.sort(prefixes)
  for _, pfx in ipairs(prefixes) do
    row(lines, ("--%s-<flag> [V]"):format(kebab(pfx)), ("passed through as --<flag> [V] (%s)"):format(c.spec.passthrough[pfx]))
  end
  lines[#lines + 1] = ""
  lines[#lines + 1] = "built-in options:"
  row(lines, "--log-level LEVEL", ("log level: %s [now: %s]"):format(table.concat(LOG_LEVELS, "|"), rl.log.level()))
  row(lines, "-h, --help", "show this help and exit")
  lines[#lines + 1] = ""
  lines[#lines + 1] = "Flags may also be written in snake_case (--a_b). Lists take the values up to the"
  lines[#lines + 1] = "next flag (--x a b) or a comma-separated value (--x=a,b); '--' ends the flags."
  if c.spec.epilog then
    lines[#lines + 1] = ""
    lines[#lines + 1] = c.spec.epilog
  end
  return table.concat(lines, "\n") .. "\n"
end

-- ---- parsing ---------------------------------------------------------------------------

local function is_number_text(s) return tonumber(s) ~= nil end

-- A word that ends a list's values: a flag (--x, -x), but not "-" or "-5".
local function ends_list(s)
  return s:sub(1, 1) == "-" and s ~= "-" and not is_number_text(s)
end

local function read_value(o, text)
  local t = o.type == "list" and o.of or o.type
  local v = SCALARS[t].read(text)
  if v == nil then
    if o.type == "list" then
      return nil, ("%s: expected a list of %s, got '%s'"):format(o.display, SCALARS[t].plural, text)
    end
    return nil, ("%s: expected %s, got '%s'"):format(o.display, SCALARS[t].expect, text)
  end
  if o.choices then
    for _, ch in ipairs(o.choices) do if ch == v then return v end end
    local strs = {}
    for i, ch in ipairs(o.choices) do strs[i] = fmt_value(ch) end
    local hint = closest(text, strs)
    return nil, ("%s: invalid choice '%s' (choose from %s)%s"):format(o.display, text, fmt_choices(o.choices),
      hint and ("; did you mean '" .. hint .. "'?") or "")
  end
  return v
end

local function split_commas(s)
  local out = {}
  if s == "" then return out end
  for item in (s .. ","):gmatch("([^,]*),") do out[#out + 1] = item end
  return out
end

local function flag_candidates(c)
  local names = { "help", "log-level" }
  for _, o in ipairs(c.options) do
    names[#names + 1] = kebab(o.key)
    if o.type == "bool" then names[#names + 1] = "no-" .. kebab(o.key) end
  end
  return names
end

local function unknown_option(c, arg, name)
  local hint = closest(kebab(name), flag_candidates(c))
  if hint then return ("unknown option '%s'; did you mean '--%s'?"):format(arg, hint) end
  return ("unknown option '%s'"):format(arg)
end

-- Reading one flag: st = {values, given, log_level} (what the command line set so far);
-- each reader returns the index of the last argv entry it used, or nil and the error.

-- --<prefix>-<flag> [V] of a pass-through prefix: values[key][flag] = V (true when no value follows).
local function read_passthrough(argv, i, st, key, flag, inline)
  local v = inline
  if v == nil then
    local nxt = argv[i + 1]
    if nxt ~= nil and not (nxt:sub(1, 2) == "--" and #nxt > 2) then v, i = nxt, i + 1 else v = true end
  end
  st.values[key] = st.values[key] or {}
  st.values[key][(flag:gsub("-", "_"))] = v
  return i
end

-- The built-in --log-level LEVEL.
local function read_log_level(argv, i, st, inline)
  local v = inline
  if v == nil then
    v = argv[i + 1]
    if v == nil or v:sub(1, 2) == "--" then
      return nil, "--log-level: missing value; expected one of " .. table.concat(LOG_LEVELS, ", ")
    end
    i = i + 1
  end
  if not LOG_LEVEL_SET[v:lower()] then
    return nil, ("--log-level: expected one of %s, got '%s'"):format(table.concat(LOG_LEVELS, ", "), v)
  end
  st.log_level = v:lower()
  return i
end

local function read_bool(o, a, argv, i, st, inline, negated)
  if negated then
    if inline ~= nil then return nil, ("'%s' takes no value"):format(a) end
    st.values[o.key] = false
  elseif inline ~= nil then
    local v = SCALARS.bool.read(inline)
    if v == nil then return nil, ("%s: expected %s, got '%s'"):format(o.flag, SCALARS.bool.expect, inline) end
    st.values[o.key] = v
  else
    local nxt = argv[i + 1]
    if nxt and (nxt:lower() == "true" or nxt:lower() == "false") then
      return nil, ("%s takes no separate value; write %s=%s"):format(o.flag, o.flag, nxt)
    end
    st.values[o.key] = true
  end
  st.given[o.key] = true
  return i
end

-- A list: --x a b c (up to the next flag) or --x=a,b,c; repeated flags append.
local function read_list(o, argv, i, n, st, inline)
  local items
  if inline ~= nil then
    items = split_commas(inline)
  else
    items = {}
    while i + 1 <= n and not ends_list(argv[i + 1]) do
      items[#items + 1] = argv[i + 1]
      i = i + 1
    end
    if #items == 0 then
      return nil, ("%s: missing value; expected one or more %s (or %s= for an empty list)")
        :format(o.flag, SCALARS[o.of].plural, o.flag)
    end
  end
  local list = st.given[o.key] and st.values[o.key] or json.array()
  for _, text in ipairs(items) do
    local v, err = read_value(o, text)
    if v == nil then return nil, err end
    list[#list + 1] = v
  end
  st.values[o.key], st.given[o.key] = list, true
  return i
end

local function read_scalar(o, argv, i, st, inline)
  local text = inline
  if text == nil then
    text = argv[i + 1]
    if text == nil or text:sub(1, 2) == "--" then
      return nil, ("%s: missing value; expected %s"):format(o.flag, SCALARS[o.type].expect)
    end
    i = i + 1
  end
  local v, err = read_value(o, text)
  if v == nil then return nil, err end
  st.values[o.key], st.given[o.key] = v, true
  return i
end

-- argv[i], a "--..." argument: finds its option (--no-X for bools, pass-through
-- prefixes, --log-level) and reads its value.
local function read_flag(c, argv, i, n, st)
  local a = argv[i]
  local name, inline = a:sub(3):match("^([^=]*)=(.*)$")
  name = name or a:sub(3)
  local norm = kebab(name)
  local o, negated = c.by_flag[norm], false
  if not o and norm:sub(1, 3) == "no-" then
    local base = c.by_flag[norm:sub(4)]
    if base and base.type == "bool" then
      o, negated = base, true
    elseif base then
      return nil, ("'%s': only bool options have a --no- form; %s takes %s")
        :format(a, base.flag, base.type == "list" and "a list" or SCALARS[base.type].expect)
    end
  end
  if not o then
    for pfx, key in pairs(c.spec.passthrough or {}) do
      local head = kebab(pfx) .. "-"
      if norm:sub(1, #head) == head and #norm > #head then
        return read_passthrough(argv, i, st, key, norm:sub(#head + 1), inline)
      end
    end
    if norm == "log-level" then return read_log_level(argv, i, st, inline) end
    return nil, unknown_option(c, a, name)
  end
  if o.type == "bool" then return read_bool(o, a, argv, i, st, inline, negated) end
  if o.type == "list" then return read_list(o, argv, i, n, st, inline) end
  return read_scalar(o, argv, i, st, inline)
end

-- The positional arguments, in declaration order (a list takes the rest).
local function read_positionals(c, argv, positionals, where, st)
  local k = 1
  for _, p in ipairs(c.positionals) do
    if p.type == "list" then
      local list = json.array()
      while k <= #positionals do
        local v, err = read_value(p, positionals[k])
        if v == nil then return nil, err end
        list[#list + 1] = v
        k = k + 1
      end
      if #list > 0 then st.values[p.key], st.given[p.key] = list, true end
    elseif k <= #positionals then
      local v, err = read_value(p, positionals[k])
      if v == nil then return nil, err end
      st.values[p.key], st.given[p.key] = v, true
      k = k + 1
    end
  end
  if k <= #positionals then
    local extra = positionals[k]
    local msg = ("unexpected argument '%s'"):format(extra)
    local before = argv[where[k] - 1]
    local o = before and before:sub(1, 2) == "--" and c.by_flag[kebab(before:sub(3))]
    if o and o.type == "bool" and SCALARS.bool.read(extra) ~= nil then
      msg = msg .. ("; %s takes no separate value, write %s=%s"):format(o.flag, o.flag, extra)
    end
    return nil, msg
  end
  return true
end

-- Required options and arguments not given: the error, else nil.
local function missing_required(c, given)
  local missing_opts, missing_args = {}, {}
  for _, o in ipairs(c.options) do
    if o.required and not given[o.key] then missing_opts[#missing_opts + 1] = o.flag end
  end
  for _, p in ipairs(c.positionals) do
    if p.required and not given[p.key] then missing_args[#missing_args + 1] = p.metavar end
  end
  if #missing_opts > 0 then
    return ("missing required option%s %s"):format(#missing_opts > 1 and "s" or "", table.concat(missing_opts, ", "))
  elseif #missing_args > 0 then
    return ("missing required argument%s %s"):format(#missing_args > 1 and "s" or "", table.concat(missing_args, ", "))
  end
end

-- Defaults for what was not given (a copy of a list's; false for a bool without one).
local function fill_defaults(c, values, given)
  for _, key in pairs(c.spec.passthrough or {}) do values[key] = values[key] or {} end
  local all = {}
  for _, o in ipairs(c.options) do all[#all + 1] = o end
  for _, p in ipairs(c.positionals) do all[#all + 1] = p end
  for _, o in ipairs(all) do
    if not given[o.key] then
      if o.type == "list" then
        local copy = json.array()
        for j, v in ipairs(o.default or {}) do copy[j] = v end
        values[o.key] = copy
      elseif o.default ~= nil then
        values[o.key] = o.default
      elseif o.type == "bool" then
        values[o.key] = false
      end
    end
  end
end

-- Parses argv against the compiled spec. Returns values, log_level | nil, err, kind.
local function parse_argv(c, argv)
  local n = argv.n or #argv
  for i = 1, n do
    local a = argv[i]
    if type(a) ~= "string" then
      return nil, ("argument #%d is a %s, not a string"):format(i, type(a)), "usage"
    end
    if a == "--" then break end
    if a == "-h" or a == "--help" then return nil, help_text(c), "help" end
  end
  local st = { values = {}, given = {} }
  local positionals, where = {}, {}  -- where: argv index of each positional
  local i = 1
  while i <= n do
    local a = argv[i]
    if a == "--" then
      for j = i + 1, n do
        positionals[#positionals + 1] = argv[j]
        where[#positionals] = j
      end
      break
    elseif a:sub(1, 2) == "--" then
      local last, err = read_flag(c, argv, i, n, st)
      if not last then return nil, err, "usage" end
      i = last
    elseif a:sub(1, 1) == "-" and a ~= "-" and not is_number_text(a) then
      return nil, unknown_option(c, a, a:sub(2)), "usage"
    else
      positionals[#positionals + 1] = a
      where[#positionals] = i
    end
    i = i + 1
  end
  local okp, perr = read_positionals(c, argv, positionals, where, st)
  if not okp then return nil, perr, "usage" end
  local missing = missing_required(c, st.given)
  if missing then return nil, missing, "usage" end
  fill_defaults(c, st.values, st.given)
  return st.values, st.log_level
end

-- ---- public ----------------------------------------------------------------------------

local Usage = {}
Usage.__tostring = function(e) return e.message end
M.UsageError = Usage

local function hint_line(prog)
  return ("\nTry 'rlhost %s --help' for the options."):format(prog)
end

--- Raises a usage error (the host prints `message` and exits with status 2):
--- for a recipe's own checks of its options.
function M.usage_error(message)
  local prog = rl.script or "recipe"
  error(setmetatable({ usage = true, message = prog .. ": " .. tostring(message) .. hint_line(prog) }, Usage), 0)
end

--- True when `err` is a usage error raised by rl.args.
function M.is_usage_error(err) return getmetatable(err) == Usage end

--- For commands whose flags are a library call's options (`rlhost engine` → rl.engine.start):
--- the misuse `err` the call raised ("<fname>: bad argument 'opts.block_size' (...)") as a
--- usage error naming the flag ("--block-size (...)"), never a traceback.
function M.option_error(err, fname)
  local msg = tostring(err):gsub("^[^\n]-:%d+: ", ""):gsub("^" .. fname:gsub("%p", "%%%0") .. ": ", "")
  msg = msg:gsub("^[%w_%.]+: bad argument", "bad argument")   -- the binding's own name
  msg = msg:gsub("^bad argument 'opts' %((.*)%)$", "%1"):gsub("^%w+: ", "")
  msg = msg:gsub("^bad argument 'opts%.([%w_]+)' ", function(k) return "--" .. k:gsub("_", "-") .. " " end)
  M.usage_error(msg)
end

--- Parses `argv` (default rl.argv) without raising on a bad command line.
--- Returns the options table, or nil, message, kind where kind is "usage" (a bad
--- command line) or "help" (--help was given; message is the help text).
--- A bad declaration still raises.
function M.parse(spec, argv)
  local c, err = compile(spec)
  if not c then error(err, 2) end
  if argv ~= nil and type(argv) ~= "table" then
    error("rl.args.parse: bad argument #2 'argv' (table expected, got " .. type(argv) .. ")", 2)
  end
  local values, level_or_err, kind = parse_argv(c, argv or rl.argv or {})
  if not values then return nil, level_or_err, kind end
  if level_or_err then rl.log.level(level_or_err) end
  return values
end

--- The help text of a spec, as --help prints it.
function M.help(spec)
  local c, err = compile(spec)
  if not c then error(err, 2) end
  local text = help_text(c)
  return text
end

-- rl.args(spec [, argv]): parse or exit (help: status 0; usage error: status 2).
local function call(_, spec, argv)
  local c, err = compile(spec)
  if not c then error(err, 2) end
  if argv ~= nil and type(argv) ~= "table" then
    error("rl.args: bad argument #2 'argv' (table expected, got " .. type(argv) .. ")", 2)
  end
  local values, level_or_err, kind = parse_argv(c, argv or rl.argv or {})
  if not values then
    if kind == "help" then
      io.write(level_or_err)
      io.flush()
      rl.exit(0)
    end
    error(setmetatable({ usage = true, message = c.prog .. ": " .. level_or_err .. hint_line(c.prog) }, Usage), 0)
  end
  if level_or_err then rl.log.level(level_or_err) end
  return values
end

return setmetatable(M, { __call = call })
