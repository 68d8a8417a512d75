---@meta
-- LuaLS type stubs for rl.reload and rl.progress (never loaded at run time). See docs/lua-api.md.

---@class rl.reload
rl.reload = {}

---@class rl.reload.Watch
---@field name string the module name
---@field path string its file
---@field module any the current version's value
---@field hash string FNV-1a 64 of the current version's text (16 hex digits)
---@field version integer 1, then +1 per successful reload
---@field errors integer failed reloads
---@field inline boolean|nil a recipe's own parts (rl.reload.inline)
local Watch = {}

--- Watches module `name` (found on package.path like require, or a file when `name`
--- is a path ending in .lua) and loads it now;
--- raises when it cannot be found or loaded.
---@param name string
---@return rl.reload.Watch
function rl.reload.watch(name) end

--- Makes the functions a recipe defines in its own file reloadable: `parts` is the table
--- they are fields of, defined above this call (definitions only: a reload runs the file
--- again from the top and stops at this call). The watch is named after the file
--- ("grpo_gsm8k"); its hash covers the file down to the call, so edits below it are no
--- new version. A file that no longer makes the call is not run (error, previous version stays).
---@param parts table
---@param name? string default: the file's name without .lua
---@return rl.reload.Watch
function rl.reload.inline(parts, name) end

--- The parts table of a file that calls rl.reload.inline, read as a reload reads it
--- (from the top, stopping at the call): for tests of a recipe's functions.
---@param path string
---@return table|nil parts
---@return string|nil err
function rl.reload.inline_parts(path) end

--- The file a reload is running up to its rl.reload.inline call, else nil
--- (rl.recipe.setup raises then: the call was not reached).
---@return string|nil
function rl.reload.loading() end

--- A function calling the current version's `field`.
---@param field string
---@return function
function Watch:fn(field) end

--- Reloads when the file changed: true (new version), false (unchanged), or nil, err
--- (load error, logged with file:line; the previous version stays).
---@return boolean|nil
---@return string|nil err
function Watch:check() end

--- Checks every watch; the names that changed.
---@return string[]
function rl.reload.check() end

---@return rl.reload.Watch[]
function rl.reload.list() end

--- reload/<name>/version and reload/<name>/hash (first 12 hex digits as an integer).
---@return table<string, number>
function rl.reload.metrics() end

--- {["module.<name>"] = hash} for a trace event.
---@return table<string, string>
function rl.reload.trace_attrs() end

--- FNV-1a 64 of s as 16 hex digits.
---@param s string
---@return string
function rl.reload.hash(s) end

---@class rl.progress
rl.progress = {}

---@class rl.progress.Opts
---@field label? string
---@field total? number nil: unknown (counts up)
---@field unit? string "it"
---@field width? integer 24
---@field interval? number seconds between plain lines (10)
---@field mode? "tty"|"lines"|"off" default: tty when stderr is a terminal; RLHOST_PROGRESS=0/1
---@field out? fun(line: string) receive lines instead of stderr

---@class rl.progress.Bar
---@field done number
---@field total number|nil
local Bar = {}

---@param opts? rl.progress.Opts
---@return rl.progress.Bar
function rl.progress.new(opts) end

---@param n? number default 1
---@param extra? {tokens?: number}
function Bar:add(n, extra) end

---@param done number
---@param total? number
function Bar:set(done, total) end

function Bar:finish() end

---@return string
function Bar:render() end
