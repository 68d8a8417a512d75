---@meta
-- LuaLS type stubs for rl.inspect, the pretty-printer the REPL and
-- `rlhost attach` show results with (never loaded at run time).
-- The REPL itself is a program, not an API: see docs/attach.md.

---@class rl.InspectOptions
---@field depth? integer levels of nested tables shown before `{...}` (default 3)
---@field max_items? integer entries shown per table before `... (N more)` (default 50)
---@field width? integer columns a table may take on one line before it breaks into lines (default 80)
---@field raw? boolean ignore `__tostring` metamethods and show the table's contents (default false)

--- Readable text for any Lua value: sorted keys, quoted strings with escapes,
--- `<cycle>` where a table contains itself, `json.null` for rl.json.null, short
--- tables on one line, long arrays wrapped several items per line.
---
---     rl.inspect.format({b = 2, a = {1, 2, 3}})          --> {a = {1, 2, 3}, b = 2}
---     rl.inspect.format(t, {depth = 1, max_items = 10})
---     rl.inspect(t)                                       -- same as rl.inspect.format(t)
---@class rl.inspect
---@overload fun(v: any, opts?: rl.InspectOptions): string
rl.inspect = {}

--- Formats `v` as text (see rl.inspect). Raises on unknown or mistyped options.
---@param v any
---@param opts? rl.InspectOptions
---@return string
function rl.inspect.format(v, opts) end
