--- rl.reload: modules a recipe marked reloadable, re-read from disk between steps.
--
--   local rewards = rl.reload.watch("rewards.gsm8k_reward")   -- loads it now
--   local reward = rewards:fn("reward")       -- always calls the current version's reward
--   ...
--   rl.reload.check()      -- at a step boundary: reload what changed on disk
--
-- A recipe's own functions reload too: define them as fields of a table above
-- `local edits = rl.reload.inline(parts)`; `edits:fn("filter")` calls the current version.
--
-- A module whose file changed (size, mtime or content) is loaded again; the new
-- version replaces the old one only when it loads without error. A syntax or load
-- error is logged with file:line and the previous version keeps running. Each
-- version's content hash (FNV-1a 64, hex) is `w.hash`; rl.reload.metrics() and
-- rl.reload.trace_attrs() put the hashes into the step's metrics and each sample's
-- trace, so a change is visible in the data.
local ffi = require "ffi"
local log = require "rl.log"

local M = {}
local Watch = {}
Watch.__index = Watch

local watched = {}   -- in watch order
local by_name = {}

local FNV_OFFSET = 14695981039346656037ULL
local FNV_PRIME = 1099511628211ULL

--- FNV-1a 64 of a string, as 16 hex digits.
function M.hash(s)
  local h = ffi.new("uint64_t", FNV_OFFSET)
  local p = ffi.cast("const uint8_t*", s)
  for i = 0, #s - 1 do
    h = bit.bxor(h, p[i]) * FNV_PRIME
  end
  return bit.tohex(h, 16)
end

local read = require("rl._fs").read_file

-- Runs the file's text as module `name`; returns the module value or nil, err. Source
-- text only: LuaJIT does not verify bytecode, and a damaged chunk crashes the process.
local function load_text(name, path, text)
  local chunk, err = require("rl._fs").load_source(text, path)
  if not chunk then return nil, err end
  local ok, mod = xpcall(chunk, debug.traceback, name, path)
  if not ok then return nil, mod end
  if mod == nil then mod = true end
  return mod
end

--- Watches module `name` (found on package.path, like require; or a file, when `name`
--- is a path ending in .lua, watched under that path): loads it now and
--- returns the watch. A module that cannot be found or loaded now raises (the
--- recipe cannot start without it). Watching the same name twice returns the same watch.
function M.watch(name)
  if type(name) ~= "string" or name == "" then
    error("rl.reload.watch: bad argument #1 'name' (module name expected, e.g. \"rewards.my_reward\")", 2)
  end
  if by_name[name] then return by_name[name] end
  local path, err
  if name:match("%.lua$") then   -- a file: watched under its path
    path = name
    local f, oerr = io.open(path, "rb")
    if f then f:close() else err = "\n\t" .. tostring(oerr) end
    if err then path = nil end
  else
    path, err = package.searchpath(name, package.path)
  end
  if not path then
    error(("rl.reload.watch: module '%s' not found:%s\nhint: reloadable modules are Lua files on package.path, "
      .. "e.g. next to the recipe, or a path ending in .lua"):format(name, err), 2)
  end
  local text = assert(read(path))
  local mod, lerr = load_text(name, path, text)
  if not mod then error(("rl.reload.watch: %s: %s"):format(name, lerr), 2) end
  if not name:match("%.lua$") then package.loaded[name] = mod end
  -- label: the name in metrics and traces (a file's: its base name without .lua)
  local w = setmetatable({ name = name, label = name:match("([^/]+)%.lua$") or name, path = path, module = mod,
                           hash = M.hash(text), version = 1,
                           _text = text, errors = 0 }, Watch)
  watched[#watched + 1] = w
  by_name[name] = w
  return w
end

--- A function that calls the current version's `field` (so a reload takes effect
--- without re-wiring the recipe).
function Watch:fn(field)
  local task = require "rl.task"
  local function current() return type(self.module) == "table" and self.module[field] end
  return task.describe_as(function(...)
    local f = current()
    if type(f) ~= "function" then
      error(("rl.reload: module '%s' (version %d, %s) has no function '%s'"):format(self.name, self.version, self.hash,
        field), 2)
    end
    return f(...)
  end, function() local f = current(); return type(f) == "function" and task.where(f) or nil end)
end

-- ---- a recipe's own parts (rl.reload.inline) ----------------------------------------------

local loading        -- the file running again up to its rl.reload.inline call
local REACHED = {}   -- metatable of the value that stops that run at the call
local CALL = "rl.reload.inline("

-- Lines 1..line of text.
local function head(text, line)
  local pos = 1
  for _ = 1, line do
    local nl = text:find("\n", pos, true)
    if not nl then return text end
    pos = nl + 1
  end
  return text:sub(1, pos - 1)
end

-- Runs a file's text up to its rl.reload.inline call; → the parts table and the text
-- above the call (what the version hash covers), or nil, err.
-- Whether some line calls rl.reload.inline outside a -- comment.
local function calls_inline(text)
  for line in text:gmatch("[^\n]+") do
    local at, comment = line:find(CALL, 1, true), line:find("--", 1, true)
    if at and (not comment or at < comment) then return true end
  end
  return false
end

local function load_inline(name, path, text)
  if not calls_inline(text) then
    return nil, path .. " does not call " .. CALL .. "...): not run (what follows the parts would start the "
      .. "recipe again)"
  end
  local chunk, err = loadstring(text, "@" .. path)
  if not chunk then return nil, err end
  local outer = loading
  loading = path
  local ok, r = xpcall(chunk, function(e)
    if getmetatable(e) == REACHED then return e end
    return debug.traceback(e, 2)
  end, name, path)
  loading = outer
  if ok then return nil, path .. " ran to its end without reaching " .. CALL .. "...)" end
  if getmetatable(r) ~= REACHED then return nil, r end
  return r.parts, nil, head(text, r.line)
end

--- The path of the file a reload is running up to its rl.reload.inline call, else nil
--- (rl.recipe.setup refuses to start a job then).
function M.loading() return loading end

--- The parts table of a file that calls rl.reload.inline, read as a reload does:
--- the file runs from the top and stops at the call (tests of a recipe's functions).
--- → parts, or nil, err.
function M.inline_parts(path)
  local text, err = read(path)
  if not text then return nil, err end
  local parts, lerr = load_inline(path:match("([^/]+)%.lua$") or path, path, text)
  return parts, lerr
end

--- Makes the functions a recipe defines in its own file reloadable: `parts` is the
--- table they are fields of, defined above this call in the same file (definitions
--- only: a reload runs the file again from the top and stops at this call). Returns
--- the watch (named after the file: "grpo_gsm8k"); `w:fn("filter")` always calls the
--- current version. The version hash covers the file down to this call, so an edit
--- below it (the loop) is no new version; that part runs as it started.
function M.inline(parts, name)
  local info = debug.getinfo(2, "Sl")
  if type(parts) ~= "table" then
    error("rl.reload.inline: bad argument #1 'parts' (table of the recipe's functions expected, got "
      .. type(parts) .. ")", 2)
  end
  if loading then error(setmetatable({ parts = parts, line = info.currentline }, REACHED), 0) end
  if info.source:sub(1, 1) ~= "@" then
    error("rl.reload.inline: called from " .. info.short_src .. ", not from a file (hint: call it in a recipe file, "
      .. "below the functions it makes reloadable)", 2)
  end
  local path = info.source:sub(2)
  name = name or path:match("([^/]+)%.lua$") or path
  if by_name[name] then return by_name[name] end
  local text = assert(read(path))
  local w = setmetatable({ name = name, path = path, module = parts, hash = M.hash(head(text, info.currentline)),
                           version = 1, _text = text, errors = 0, inline = true }, Watch)
  watched[#watched + 1] = w
  by_name[name] = w
  return w
end

--- Re-reads the file; when its content changed, loads the new version. Returns
--- true when a new version took effect, false when nothing changed, or nil, err
--- when the new version failed to load (logged; the previous version stays).
function Watch:check()
  local text, rerr = read(self.path)
  if not text then
    local msg = ("rl.reload: %s: cannot read %s (%s); keeping version %d"):format(self.name, self.path, rerr, self.version)
    if self._last_error ~= msg then log.error(msg) end
    self._last_error = msg
    return nil, msg
  end
  if text == self._text then return false end
  local mod, err, hashed
  if self.inline then
    mod, err, hashed = load_inline(self.name, self.path, text)
  else
    mod, err = load_text(self.name, self.path, text)
    hashed = text
  end
  local h = mod and M.hash(hashed)
  if mod and h == self.hash then   -- an inline watch's file changed below the call only
    self._text, self._last_error = text, nil
    return false
  end
  if not mod then
    self._text = text   -- do not report the same broken text again
    self.errors = self.errors + 1
    local msg = ("rl.reload: %s failed to load, keeping version %d (%s):\n%s"):format(self.name, self.version,
      self.hash, tostring(err))
    log.error(msg)
    self._last_error = msg
    return nil, msg
  end
  self._text, self._last_error = text, nil
  self.module, self.hash, self.version = mod, h, self.version + 1
  if not self.inline and not self.name:match("%.lua$") then package.loaded[self.name] = mod end
  log.info(("rl.reload: %s reloaded: version %d (%s)"):format(self.name, self.version, h))
  return true
end

--- Checks every watched module (at a step boundary). Returns the list of names
--- that changed.
function M.check()
  local changed = {}
  for _, w in ipairs(watched) do
    if w:check() then changed[#changed + 1] = w.name end
  end
  return changed
end

--- The watches, in watch order.
function M.list()
  local out = {}
  for i, w in ipairs(watched) do out[i] = w end
  return out
end

--- Metrics of the watched modules: reload/<name>/version and reload/<name>/hash
--- (the hash's first 12 hex digits as an integer, exact in a double).
function M.metrics()
  local m = {}
  for _, w in ipairs(watched) do
    local label = w.label or w.name
    m["reload/" .. label .. "/version"] = w.version
    m["reload/" .. label .. "/hash"] = tonumber(w.hash:sub(1, 12), 16)
  end
  return m
end

--- Trace attrs naming each watched module's version: {["module.<name>"] = "<hash>"}.
function M.trace_attrs()
  local a = {}
  for _, w in ipairs(watched) do a["module." .. (w.label or w.name)] = w.hash end
  return a
end

--- Forgets every watch (tests).
function M._reset()
  watched, by_name = {}, {}
end

function Watch:__tostring()
  return ("rl.reload.watch(%s, version %d, %s)"):format(self.name, self.version, self.hash)
end

return M
