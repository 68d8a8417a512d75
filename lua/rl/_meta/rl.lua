---@meta
-- LuaLS type stubs for the public `rl` API (never loaded at run time).
-- Point your editor at lua/ (workspace.library) to get completion and checks.
-- rl.http and the REPL live in _meta/http.lua and _meta/repl.lua.

---@class rl
---@field version string the rlhost version, e.g. "0.1.0"
---@field argv string[] the recipe's command-line arguments (those after the recipe file)
---@field script string|nil the recipe's path as given on the command line (nil for -e and the REPL)
---@field log rl.log
---@field json rl.json
---@field args rl.args
---@field tokenizer rl.tokenizer
---@field metrics rl.metrics
---@field mathgen rl.mathgen
---@field gzip rl.gzip
---@field process rl.process
---@field profile rl.profile
---@field timeline rl.timeline
---@field dist rl.dist
---@field weight_sync rl.weight_sync
---@field tinker_wire rl.tinker_wire
---@field tinker rl.tinker
---@field watchdog rl.watchdog
---@field agent rl.agent
rl = {}

-- ---- tasks and time --------------------------------------------------------------------

--- Starts `fn(...)` as a new task (a coroutine on the host's event loop). It starts
--- at the next loop iteration; tasks run in the order they were spawned.
---@param fn fun(...): ...
---@param ... any arguments passed to fn
---@return rl.Task
function rl.spawn(fn, ...) end

--- Waits for every task; returns their first values in order. When some fail, the
--- others still run to the end, then the first failure is raised.
---@param tasks rl.Task[]
---@return any[]
function rl.wait_all(tasks) end

--- Suspends the current task for `seconds` (other tasks keep running).
--- Must be called inside a task (a recipe's main chunk is one).
---@param seconds number non-negative
function rl.sleep(seconds) end

--- Runs `fn(...)` once after `seconds`, as a task; cancel the task to stop it.
---@param seconds number
---@param fn fun(...): ...
---@param ... any
---@return rl.Task
function rl.after(seconds, fn, ...) end

--- Runs `fn()` every `seconds` until it returns false or the task is cancelled.
---@param seconds number
---@param fn fun(): boolean|nil
---@return rl.Task
function rl.every(seconds, fn) end

--- Monotonic time in seconds (for durations).
---@return number
function rl.now() end

--- Wall-clock time in seconds since the Unix epoch (for timestamps).
---@return number
function rl.time() end

--- Ends the process with `code` (default 0) once the current task unwinds.
---@param code? integer 0-255
function rl.exit(code) end

--- Ctrl-C or SIGTERM calls fn(signal) once ("SIGINT" or "SIGTERM") instead of
--- cancelling the main task (a graceful stop at the recipe's next step boundary); a
--- second signal cancels as usual, unless fn returned true (it then gets the next
--- signal too; one arriving while fn runs reaches it after). rl.exit(code) inside fn
--- ends the run. nil removes it.
---@param fn fun(signal: "SIGINT"|"SIGTERM"): boolean|nil|nil
---@return fun(signal: string)|nil previous
function rl.on_interrupt(fn) end

--- The task running now, or nil outside tasks.
---@return rl.Task|nil
function rl.current_task() end

-- ---- rl.Task ---------------------------------------------------------------------------

---@alias rl.TaskStatus "pending"|"running"|"done"|"failed"|"cancelled"

---@class rl.Task
---@field id integer unique, increasing
---@field name string "task", "main", "after", "every", or a name given by the host
---@field status rl.TaskStatus
---@field error any the error value when status is "failed" or "cancelled"
---@field traceback string|nil the traceback when status is "failed"
local Task = {}

--- Waits for the task and returns its values, or raises its error.
---@return ...
function Task:wait() end

--- Cancels the task: it unwinds with a cancellation error at its current wait.
--- Returns false when it had already finished.
---@param reason? string default "cancelled"
---@return boolean
function Task:cancel(reason) end

--- True once the task finished (done, failed or cancelled).
---@return boolean
function Task:done() end

-- ---- rl.task queues and semaphores ----------------------------------------------------

---@class rl.task
rl.task = {}

-- ---- rl.task time limits that hold whatever the code runs (docs/operations.md) ----

--- Runs fn(...) in a task of its own, stopped after `seconds` whatever it runs: waiting
--- (cancelled at its wait) or busy in Lua, interpreted or JIT-compiled (interrupted by
--- the host at its next instruction or line). true, results... or false, err, outcome,
--- raw: "error" (err: message and traceback; raw: the error value) or "timeout" (err: a
--- cancellation {reason = "time limit", traceback, interrupted = true when it was busy}).
--- When the run stops meanwhile (its stop grace is over) the cancellation is raised.
---@param name string the task's name
---@param seconds number
---@param fn function
---@return boolean ok
---@return any ...
function rl.task.run_limited(name, seconds, fn, ...) end

--- Runs fn(...) in the current task with a limit on busy code: past `seconds` (nil: no
--- limit of its own; only a stopping run interrupts it) the host raises a cancellation
--- {reason = "time limit"} in it. Waits are not cut short. Returns fn's results.
---@param seconds number|nil
---@param fn function
---@return any ...
function rl.task.limit(seconds, fn, ...) end

--- limit() for a user hook: an interruption becomes "<what> (<file:line>) ran for N s,
--- its time limit, and was interrupted" with the traceback where it stopped.
---@param what string e.g. "the dynamic filter"
---@param seconds number
---@param fn function
---@return any ...
function rl.task.call_hook(what, seconds, fn, ...) end

--- Where a function was defined: "recipes/rewards/x.lua:12".
---@param fn function
---@return string
function rl.task.where(fn) end

---@class rl.Queue
local Queue = {}
--- A FIFO between tasks.
---@return rl.Queue
function rl.task.queue() end
---@param v any
function Queue:push(v) end
--- The oldest item; waits (inside a task) while the queue is empty.
---@return any
function Queue:pop() end
---@return integer
function Queue:size() end

---@class rl.Semaphore
---@field free integer
local Semaphore = {}
--- At most n holders at once.
---@param n integer
---@return rl.Semaphore
function rl.task.semaphore(n) end

--- The tasks alive now (running or waiting), by id (the hang report lists them).
---@return rl.Task[]
function rl.task.live() end
function Semaphore:acquire() end
function Semaphore:release() end
--- Runs fn(...) holding a slot (released on errors too).
---@return ...
function Semaphore:with(fn, ...) end

-- ---- rl.log ----------------------------------------------------------------------------

---@alias rl.LogLevel "trace"|"debug"|"info"|"warn"|"warning"|"error"|"critical"|"off"

--- Log records with the caller's file:line. Arguments after `fmt` go through
--- string.format; a bad format never raises (the record says what went wrong).
---@class rl.log
rl.log = {}

---@param fmt any
---@param ... any
function rl.log.trace(fmt, ...) end
---@param fmt any
---@param ... any
function rl.log.debug(fmt, ...) end
---@param fmt any
---@param ... any
function rl.log.info(fmt, ...) end
---@param fmt any
---@param ... any
function rl.log.warn(fmt, ...) end
---@param fmt any
---@param ... any
function rl.log.error(fmt, ...) end

--- Returns the current level name; sets it first when `new_level` is given.
--- An unknown name raises.
---@param new_level? rl.LogLevel
---@return string
function rl.log.level(new_level) end

-- ---- rl.json ---------------------------------------------------------------------------

---@class rl.json.EncodeOptions
---@field indent? integer spaces per level (pretty-prints; default compact)
---@field sort_keys? boolean sort object keys (default false)

---@class rl.json
---@field null lightuserdata JSON null (decode gives it; encode writes it as null)
rl.json = {}

--- Encodes a value. Tables with keys 1..n (or marked with rl.json.array) are
--- arrays; other tables are objects with string keys. Raises, naming the path
--- (`$.a[2]`), on functions, NaN/infinity, invalid UTF-8, cycles, bad keys and
--- tables nested deeper than 128 levels (RLHOST_JSON_MAX_DEPTH).
---@param value any
---@param opts? rl.json.EncodeOptions
---@return string
function rl.json.encode(value, opts) end

--- Decodes JSON text. Returns nil and a message with line and column on bad input,
--- or naming the field nested deeper than 128 levels (RLHOST_JSON_MAX_DEPTH).
--- Arrays come back marked (rl.json.is_array) so `[]` encodes as `[]` again.
--- opts.unique_keys: a key twice in one object is an error naming it and where.
---@param text string
---@param opts? {unique_keys?: boolean}
---@return any|nil value
---@return string|nil err
function rl.json.decode(text, opts) end

--- `s` as valid UTF-8: each invalid sequence becomes U+FFFD (Python's errors="replace");
--- `s` itself when it is valid. For text that quotes model output before it is encoded.
---@param s string
---@return string
function rl.json.valid_utf8(s) end

--- Marks `t` (or a new table) as a JSON array and returns it.
---@generic T: table
---@param t? T
---@return T
function rl.json.array(t) end

--- True when `t` was decoded from, or marked as, a JSON array.
---@param t any
---@return boolean
function rl.json.is_array(t) end
--- Builds deferred table contents (rl.trace's events) before a raw walk; encode does it first.
function rl.json.materialize() end
---@param fn fun() called by materialize
function rl.json.on_materialize(fn) end

-- ---- rl.args ---------------------------------------------------------------------------

---@alias rl.args.Type "string"|"int"|"integer"|"number"|"float"|"bool"|"boolean"|"list"

---@class rl.args.Option
---@field name string snake_case; users write it as --kebab-case
---@field type? rl.args.Type default: inferred from `default`, else "string"
---@field of? "string"|"int"|"number" item type of a list (default "string")
---@field default? any
---@field help? string
---@field choices? any[] allowed values (of a list: allowed items)
---@field required? boolean
---@field positional? boolean a positional argument instead of a flag
---@field metavar? string placeholder shown in the help

---@class rl.args.Spec
---@field description? string shown under the usage line
---@field prog? string name shown in usage (default rl.script)
---@field epilog? string shown at the end of the help
---@field [integer] rl.args.Option

---@class rl.args.UsageError
---@field usage true
---@field message string

--- Command-line options. Call it: `local opt = rl.args{ {name = "lr", type = "number", default = 1e-6} }`.
--- A bad command line exits with status 2 and a message; --help prints the usage and exits 0.
---@class rl.args
---@overload fun(spec: rl.args.Spec, argv?: string[]): table<string, any>
rl.args = {}

--- Like calling rl.args, but returns nil, message, kind ("usage" or "help") instead
--- of exiting. A bad declaration still raises.
---@param spec rl.args.Spec
---@param argv? string[] default rl.argv
---@return table<string, any>|nil options
---@return string|nil message
---@return "usage"|"help"|nil kind
function rl.args.parse(spec, argv) end

--- The help text --help prints.
---@param spec rl.args.Spec
---@return string
function rl.args.help(spec) end

--- Raises a usage error (exit status 2) for a recipe's own checks of its options.
---@param message string
function rl.args.usage_error(message) end

--- True when `err` is a usage error raised by rl.args.
---@param err any
---@return boolean
function rl.args.is_usage_error(err) end

return rl
