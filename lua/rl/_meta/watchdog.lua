---@meta
-- LuaLS type stubs for rl.watchdog (lua/rl/watchdog.lua). See docs/fault_tolerance.md.

---@class rl.watchdog
---@field timeout number|nil seconds without progress before a report (nil/0: off)
---@field dir string|nil where report files go
rl.watchdog = {}

--- Notes that something made progress ("sample", "request", "train", ...).
---@param what? string
function rl.watchdog.progress(what) end

--- The hang report as text (inside a task it also asks the engines for their counts).
---@param reason? string
---@return string
function rl.watchdog.text(reason) end

--- Logs the report (and writes dir/hang_report_<time>.txt when dir is set); returns
--- the text and the file's path. Outside a task it runs in a new one.
---@param opts? {reason?: string}
---@return string|nil text, string|nil path
function rl.watchdog.report(opts) end

--- Starts the watchdog task: a report after `timeout` s without progress (once per stall).
---@param opts {timeout?: number, dir?: string, job?: table}
function rl.watchdog.start(opts) end

--- Stops the watchdog task.
function rl.watchdog.stop() end
