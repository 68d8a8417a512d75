---@meta
-- LuaLS type stubs for rl.process (lua/rl/process.lua). See docs/lua-api.md ("rl.process").

---@class rl.process
rl.process = {}

---@class rl.process.Process
---@field pid integer
---@field argv string[]
---@field log string|nil
---@field code integer|nil the exit code once it has exited (128 + signal when killed)
local Process = {}

--- True while it runs.
---@return boolean
function Process:running() end
--- Waits (other tasks run): the exit code, or nil, "timeout".
---@param timeout? number seconds
---@return integer|nil code, string|nil err
function Process:wait(timeout) end
--- Sends a signal (default SIGTERM); false when it is gone.
---@param signal? integer
---@return boolean
function Process:kill(signal) end
--- SIGTERM, SIGKILL after `grace` seconds (5); the exit code.
---@param grace? number
---@return integer|nil
function Process:stop(grace) end

--- Starts argv[1] (looked up in PATH) with the rest as arguments; opts.log
--- appends stdout+stderr to a file.
---@param argv string[]
---@param opts? {log?: string}
---@return rl.process.Process|nil proc, string|nil err
function rl.process.spawn(argv, opts) end

--- Runs to completion: exit code and combined output, or nil, err.
---@param argv string[]
---@param opts? {timeout?: number}
---@return integer|nil code, string output_or_err
function rl.process.run(argv, opts) end

--- The path of `name` in PATH, or nil.
---@param name string
---@return string|nil
function rl.process.which(name) end

--- This rlhost binary's path.
---@return string
function rl.process.self() end

--- This process's id.
---@return integer
function rl.process.pid() end

--- Pins this whole process (every thread, and those started later) to a CPU list ("0-3,6");
--- returns the list as applied.
---@param list string
---@return string
function rl.process.set_cpus(list) end

--- The CPUs this process may run on ("0-3,6").
---@return string
function rl.process.cpus() end

--- The CPUs before set_cpus first pinned this process (nil: never pinned); a process engine
--- started without its own cpus gets them back.
---@return string|nil
function rl.process.unpinned_cpus() end

--- `s` as one shell word: unchanged when plainly safe, else single-quoted.
---@param s string
---@return string
function rl.process.quote(s) end

--- Waits in the task (other tasks run) until child `pid` (spawned by rlhost) is reaped:
--- its exit code, or nil after `timeout` seconds.
---@param pid integer
---@param timeout? number
---@return integer|nil
function rl.process.wait_pid(pid, timeout) end

--- SIGTERM to child `pid`'s process group, SIGKILL after `grace` seconds; reaped. The exit code.
---@param pid integer
---@param grace number
---@return integer
function rl.process.stop_pid(pid, grace) end

--- A signal to child `pid`'s process group; false when it is gone.
---@param pid integer
---@param signal integer
---@return boolean
function rl.process.signal_pid(pid, signal) end
