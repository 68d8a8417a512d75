---@meta
-- LuaLS type stubs for rl.metrics (never loaded at run time). See docs/observability.md.

---@class rl.metrics
---@field timer rl.metrics.Timer
rl.metrics = {}

---@class rl.metrics.Stats
---@field mean number
---@field median number
---@field max number
---@field min number

--- {mean, median, max, min} with numpy's semantics (even count: median is the mean
--- of the two middle values; any NaN makes all four NaN). Raises for an empty array.
---@param values number[]
---@return rl.metrics.Stats
function rl.metrics.statistics(values) end

--- A new table with `prefix .. k` for each key (prefix carries its slash: "rollout/").
---@param t table
---@param prefix string
---@return table
function rl.metrics.add_prefix(t, prefix) end

---@class rl.metrics.LoggerOpts
---@field use_tensorboard? boolean write TensorBoard event files (default: true when tensorboard_dir is given)
---@field tensorboard_dir? string overrides $TENSORBOARD_DIR and the two names below
---@field tb_project_name? string tensorboard_log/<this>/... (default: the recipe's file name)
---@field tb_experiment_name? string .../<this> (default: os.date("%Y%m%d_%H%M%S"))
---@field metrics_dir? string append to <this>/metrics.jsonl
---@field jsonl? string append to this file instead
---@field console? boolean|fun(line: string) one summary line per log call via rl.log.info (default true), or a function that receives the line
---@field metrics_console? boolean the --metrics-console flag (used when `console` is nil)
---@field console_format? fun(metrics: table, step_key: string, step: integer): string|nil build the line yourself (nil: no line)

---@class rl.metrics.Logger
---@field tensorboard_dir string|nil
---@field tensorboard_file string|nil the event file being written
---@field jsonl_path string|nil
local Logger = {}

--- Logs one dict at its step, `metrics[step_key]` (inferred from rollout/step,
--- train/step, eval/step when nil). TensorBoard: every finite numeric key but the
--- step key; JSONL: the whole dict plus `time` (non-finite numbers as null);
--- console: one line.
---@param metrics table<string, any>
---@param step_key? string
function Logger:log(metrics, step_key) end
function Logger:flush() end
--- Closes the files (idempotent); later calls only reach the console.
function Logger:close() end

--- A logger with its own sinks, or nil, err when a directory or file cannot be
--- created. Unknown keys are ignored (pass a whole rl.args result).
---@param opts? rl.metrics.LoggerOpts
---@return rl.metrics.Logger|nil
---@return string|nil err
function rl.metrics.logger(opts) end

--- Replaces the module's logger with rl.metrics.logger(opts).
---@param opts? rl.metrics.LoggerOpts
---@return rl.metrics.Logger|nil
---@return string|nil err
function rl.metrics.configure(opts) end

--- The module's logger (console only until configure is called).
---@return rl.metrics.Logger
function rl.metrics.get() end

--- rl.metrics.get():log(metrics, step_key) — slime's logging_utils.log.
---@param metrics table<string, any>
---@param step_key? string
function rl.metrics.log(metrics, step_key) end

--- Closes the module's logger's files.
function rl.metrics.close() end

--- The default console line: "rollout 3 | reward 0.42 | resp_len 118 | 12.3 s".
---@param metrics table<string, any>
---@param step_key? string
---@return string
function rl.metrics.format_line(metrics, step_key) end

--- The TensorBoard directory these options resolve to.
---@param opts? rl.metrics.LoggerOpts
---@return string
function rl.metrics.tensorboard_dir(opts) end

--- Appends --use-tensorboard, --tb-project-name, --tb-experiment-name,
--- --tensorboard-dir, --metrics-dir, --[no-]metrics-console to an rl.args spec.
---@param spec rl.args.Spec
---@return rl.args.Spec
function rl.metrics.add_options(spec) end

--- slime's Timer: `rl.metrics.timer(name, fn, ...)` runs fn and adds its duration
--- to `name`; start/stop do the same by hand; metrics() gives perf/<name>_time.
---@class rl.metrics.Timer
---@overload fun(name: string, fn: fun(...): ..., ...): ...
local Timer = {}
---@param name string
function Timer.start(name) end
--- Stops `name`; returns this interval in seconds.
---@param name string
---@return number
function Timer.stop(name) end
--- Accumulated seconds of `name`.
---@param name string
---@return number
function Timer.get(name) end
--- {["perf/<name>_time"] = seconds} for every timer.
---@return table<string, number>
function Timer.metrics() end
--- Forgets one total, or all.
---@param name? string
function Timer.reset(name) end

--- The Prometheus exposition text of the last value logged under every
--- numeric key (`train/loss` -> `rlhost_train_loss`), as serve() answers.
---@return string
function rl.metrics.prometheus_text() end

--- Serves GET /metrics (Prometheus text 0.0.4) on 127.0.0.1 (port 0: a free one);
--- every later log call updates the gauges.
---@param opts? {host?: string, port?: integer, allow_remote?: boolean}
---@return rl.http.Server|nil server, string|nil err
function rl.metrics.serve(opts) end
