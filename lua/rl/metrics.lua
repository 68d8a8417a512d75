--- rl.metrics: where a run's metrics go (slime's logging_utils), and the small
--- helpers that compute them (statistics, prefixes, timers).
--
--   local opt = rl.args(rl.metrics.add_options{ description = "GRPO", ... })
--   rl.metrics.configure(opt)                     -- --use-tensorboard, --metrics-dir, ...
--   rl.metrics.log({ ["rollout/step"] = 3, ["rollout/raw_reward"] = 0.42 }, "rollout/step")
--   --> [info] [recipe.lua:57] rollout 3 | reward 0.42
--
-- Sinks (docs/observability.md): a one-line console summary per call, a JSONL file
-- (the whole dict plus `time`) and TensorBoard event files written natively (every
-- numeric key but the step key, as a scalar at that step). W&B: `wandb sync` the
-- TensorBoard directory. Live: rl.metrics.serve{port} exposes the last value of
-- every logged numeric key as a Prometheus gauge (lua/rl/_prometheus.lua).
local rl = require "rl"
local core = require "rl._core"
local json = require "rl.json"
local log = require "rl.log"
local prom = require "rl._prometheus"

local cm = core.metrics
local floor, huge = math.floor, math.huge

local M = {}

local function argerror(fname, n, name, expected, got, level)
  error(("rl.metrics.%s: bad argument #%d '%s' (%s expected, got %s)"):format(fname, n, name, expected, got), level or 3)
end

local function is_finite(v) return v == v and v ~= huge and v ~= -huge end

-- ---- statistics ------------------------------------------------------------------------

--- {mean, median, max, min} of a non-empty array of numbers, as numpy computes them
--- (median of an even count: the mean of the two middle values; any NaN makes all NaN).
function M.statistics(values)
  if type(values) ~= "table" then argerror("statistics", 1, "values", "array of numbers", type(values)) end
  local n = #values
  if n == 0 then argerror("statistics", 1, "values", "non-empty array of numbers", "an empty table") end
  local sorted, sum, nan = {}, 0, false
  for i = 1, n do
    local v = values[i]
    if type(v) ~= "number" then argerror("statistics", 1, "values", "array of numbers", type(v) .. " at [" .. i .. "]") end
    if v ~= v then nan = true end
    sorted[i], sum = v, sum + v
  end
  if nan then
    local x = 0 / 0
    return { mean = x, median = x, max = x, min = x }
  end
  table.sort(sorted)
  local median
  if n % 2 == 1 then median = sorted[(n + 1) / 2] else median = (sorted[n / 2] + sorted[n / 2 + 1]) / 2 end
  return { mean = sum / n, median = median, max = sorted[n], min = sorted[1] }
end

--- A new table with `prefix .. k` for every key k of t (slime's dict_add_prefix:
--- the prefix carries its own slash, e.g. "rollout/").
function M.add_prefix(t, prefix)
  if type(t) ~= "table" then argerror("add_prefix", 1, "t", "table", type(t)) end
  if type(prefix) ~= "string" then argerror("add_prefix", 2, "prefix", "string", type(prefix)) end
  local out = {}
  for k, v in pairs(t) do out[prefix .. tostring(k)] = v end
  return out
end

-- ---- timers (slime's Timer) ----------------------------------------------------------------

local timer_total, timer_started = {}, {}
local timer = {}

local function check_name(fname, name)
  if type(name) ~= "string" or name == "" then argerror("timer." .. fname, 1, "name", "non-empty string", type(name), 4) end
end

--- Starts timing `name`; raises when it is already running.
function timer.start(name)
  check_name("start", name)
  if timer_started[name] then error("rl.metrics.timer.start: timer '" .. name .. "' is already running", 2) end
  timer_started[name] = rl.now()
end

--- Stops `name`, adds the interval to its total and returns the interval (seconds).
function timer.stop(name)
  check_name("stop", name)
  local t0 = timer_started[name]
  if not t0 then error("rl.metrics.timer.stop: timer '" .. name .. "' is not running", 2) end
  timer_started[name] = nil
  local dt = rl.now() - t0
  timer_total[name] = (timer_total[name] or 0) + dt
  return dt
end

--- Accumulated seconds of `name` (0 when never timed; a running interval is not included).
function timer.get(name)
  check_name("get", name)
  return timer_total[name] or 0
end

--- {["perf/<name>_time"] = seconds} for every timer with a total.
function timer.metrics()
  local out = {}
  for name, s in pairs(timer_total) do out["perf/" .. name .. "_time"] = s end
  return out
end

--- Forgets the total of `name`, or of every timer (running ones keep running).
function timer.reset(name)
  if name == nil then timer_total = {} else check_name("reset", name); timer_total[name] = nil end
end

local function pack(...) return { n = select("#", ...), ... } end

-- timer(name, fn, ...): runs fn(...), adds its duration to `name`, returns its results.
-- Tasks may time the same name at once (each call measures its own interval). An
-- error propagates untouched and its time is not counted.
setmetatable(timer, {
  __call = function(_, name, fn, ...)
    check_name("timer", name)
    if type(fn) ~= "function" then argerror("timer", 2, "fn", "function", type(fn)) end
    local t0 = rl.now()
    local r = pack(fn(...))
    timer_total[name] = (timer_total[name] or 0) + (rl.now() - t0)
    return unpack(r, 1, r.n)
  end,
})
M.timer = timer

-- ---- console line ------------------------------------------------------------------------

local function fmt_number(v)
  if v ~= v then return "nan" end
  if v == huge then return "inf" elseif v == -huge then return "-inf" end
  local a = math.abs(v)
  if v == floor(v) and a < 1e15 then return ("%d"):format(v) end
  if a >= 100 then return ("%.0f"):format(v) end
  return ("%.3g"):format(v)
end

local function fmt_seconds(v)
  if not is_finite(v) then return fmt_number(v) .. " s" end
  return (math.abs(v) >= 100 and "%.0f s" or "%.1f s"):format(v)
end

-- Label and candidate keys (the first present wins), in line order.
local FIELDS = {
  { "reward", { "rollout/raw_reward", "rollout/rewards" } },
  { "acc", { "rollout/acc", "rollout/accuracy" } },
  { "resp_len", { "rollout/response_len/mean", "rollout/response_lengths" } },
  { "truncated", { "rollout/truncated_ratio", "rollout/truncated" } },
  { "loss", { "train/loss" } },
  { "pg_loss", { "train/pg_loss" } },
  { "kl", { "train/kl_loss", "train/kl" } },
  { "entropy", { "train/entropy_loss" } },
  { "grad_norm", { "train/grad_norm" } },
  { "value_loss", { "train/value_loss" } },   -- PPO with a critic
}
-- The duration shown bare at the end of each kind's line; others are labelled.
local TIMES = { rollout = "perf/rollout_time", train = "perf/step_time", eval = "perf/eval_time" }
local OTHER_TIMES = { "perf/rollout_time", "perf/step_time", "perf/eval_time" }
local FALLBACK_KEYS = 6

local function eval_fields(metrics, parts)
  local names = {}
  for k, v in pairs(metrics) do
    local name = type(k) == "string" and type(v) == "number" and k:match("^eval/([^/]+)$")
    if name and name ~= "step" and not name:find("-", 1, true) then names[#names + 1] = name end
  end
  table.sort(names)
  for _, name in ipairs(names) do
    local s = name .. " " .. fmt_number(metrics["eval/" .. name])
    -- the largest pass@k logged for this dataset
    local best_k
    for k, v in pairs(metrics) do
      local kk = type(k) == "string" and type(v) == "number" and k:match("^eval/(.+)%-pass@(%d+)$")
      if kk == name then
        local kn = tonumber(k:match("%-pass@(%d+)$"))
        if not best_k or kn > best_k then best_k = kn end
      end
    end
    if best_k then
      s = s .. (" pass@%d %s"):format(best_k, fmt_number(metrics[("eval/%s-pass@%d"):format(name, best_k)]))
    end
    parts[#parts + 1] = s
  end
end

--- The default console line for one log call: `<kind> <step> | label value | ... | 12.3 s`,
--- with the few well-known keys that are present (a recipe's `console_format` may
--- build on it).
function M.format_line(metrics, step_key)
  if type(metrics) ~= "table" then argerror("format_line", 1, "metrics", "table", type(metrics)) end
  step_key = step_key or "step"
  local kind = tostring(step_key):gsub("/step$", "")
  local step = metrics[step_key]
  local parts = { kind .. (step ~= nil and (" " .. (type(step) == "number" and fmt_number(step) or tostring(step))) or "") }
  local head = #parts
  for _, f in ipairs(FIELDS) do
    for _, key in ipairs(f[2]) do
      local v = metrics[key]
      if type(v) == "number" then
        parts[#parts + 1] = f[1] .. " " .. fmt_number(v)
        break
      end
    end
  end
  eval_fields(metrics, parts)
  local bare = TIMES[kind]
  for _, key in ipairs(OTHER_TIMES) do
    local v = metrics[key]
    if key ~= bare and type(v) == "number" then
      parts[#parts + 1] = key:match("^perf/(.*)$") .. " " .. fmt_seconds(v)
    end
  end
  if #parts == head then
    -- nothing we know: show a few numeric keys, so a custom step key still says something
    local keys = {}
    for k, v in pairs(metrics) do
      if k ~= step_key and type(k) == "string" and type(v) == "number" then keys[#keys + 1] = k end
    end
    table.sort(keys)
    for i = 1, math.min(#keys, FALLBACK_KEYS) do parts[#parts + 1] = keys[i] .. " " .. fmt_number(metrics[keys[i]]) end
    if #keys > FALLBACK_KEYS then parts[#parts + 1] = ("+%d more"):format(#keys - FALLBACK_KEYS) end
  end
  if bare and type(metrics[bare]) == "number" then parts[#parts + 1] = fmt_seconds(metrics[bare]) end
  return table.concat(parts, " | ")
end

-- ---- JSONL values --------------------------------------------------------------------------

local MAX_DEPTH = 16

-- A JSON-safe copy: non-finite numbers → null, functions/userdata → their text,
-- non-string keys → their text, tables deeper than MAX_DEPTH (or cycles) → "<...>".
local function json_safe(v, depth)
  local t = type(v)
  if t == "number" then return is_finite(v) and v or json.null end
  if t == "string" or t == "boolean" or v == json.null then return v end
  if t ~= "table" then return tostring(v) end
  if depth > MAX_DEPTH then return "<...>" end
  local out = json.is_array(v) and json.array() or {}
  for k, x in pairs(v) do
    local kk = (type(k) == "number" and k >= 1 and k == floor(k)) and k or tostring(k)
    out[kk] = json_safe(x, depth + 1)
  end
  return out
end

-- ---- loggers -------------------------------------------------------------------------------

local Logger = {}
Logger.__index = Logger

local STEP_KEYS = { "rollout/step", "train/step", "eval/step" }

local function recipe_name()
  local s = rl.script
  local base = type(s) == "string" and s:match("([^/]+)$") or nil
  base = base and base:gsub("%.lua$", "") or ""
  return base ~= "" and base or "rlhost"
end

--- The TensorBoard directory for these options: `tensorboard_dir`, else
--- $TENSORBOARD_DIR, else tensorboard_log/<tb_project_name | recipe>/<tb_experiment_name | %Y%m%d_%H%M%S>.
function M.tensorboard_dir(opts)
  opts = opts or {}
  if opts.tensorboard_dir and opts.tensorboard_dir ~= "" then return opts.tensorboard_dir end
  local env = os.getenv("TENSORBOARD_DIR")
  if env and env ~= "" then return env end
  return "tensorboard_log/" .. (opts.tb_project_name or recipe_name()) .. "/" ..
      (opts.tb_experiment_name or os.date("%Y%m%d_%H%M%S"))
end

local OPTION_TYPES = {
  use_tensorboard = "boolean", tensorboard_dir = "string", tb_project_name = "string",
  tb_experiment_name = "string", metrics_dir = "string", jsonl = "string",
  metrics_console = "boolean", console_format = "function",
}

--- A logger with its own sinks (see docs/lua-api.md#rlmetrics for the options),
--- or nil, err when a file or directory cannot be created. Keys it does not know
--- are ignored, so a recipe's whole rl.args result can be passed.
function M.logger(opts)
  opts = opts or {}
  if type(opts) ~= "table" then argerror("logger", 1, "opts", "table", type(opts)) end
  for k, ty in pairs(OPTION_TYPES) do
    local v = opts[k]
    if v ~= nil and type(v) ~= ty then
      error(("rl.metrics.logger: bad option '%s' (%s expected, got %s)"):format(k, ty, type(v)), 2)
    end
  end
  local console = opts.console
  if console == nil then console = opts.metrics_console end
  if console == nil then console = true end
  if type(console) ~= "boolean" and type(console) ~= "function" then
    error("rl.metrics.logger: bad option 'console' (boolean or function expected, got " .. type(console) .. ")", 2)
  end
  local self = setmetatable({ console = console, console_format = opts.console_format }, Logger)
  local use_tb = opts.use_tensorboard
  if use_tb == nil then use_tb = opts.tensorboard_dir ~= nil end
  if use_tb then
    self.tensorboard_dir = M.tensorboard_dir(opts)
    local w, err = cm.tensorboard_open(self.tensorboard_dir)
    if not w then return nil, err end
    self._tb, self.tensorboard_file = w, w:path()
  end
  local path = opts.jsonl or (opts.metrics_dir and (opts.metrics_dir:gsub("/+$", "") .. "/metrics.jsonl"))
  if path then
    local j, err = cm.jsonl_open(path)
    if not j then self:close(); return nil, err end
    self._jsonl, self.jsonl_path = j, path
  end
  return self
end

local function sink_failed(what, err)
  log.error("rl.metrics: %s: %s", what, tostring(err))
end

-- `level`: the stack level of the user's call (for error messages and the console line's file:line).
function Logger:_log(metrics, step_key, level)
  if type(metrics) ~= "table" then
    error("rl.metrics.log: bad argument #1 'metrics' (table expected, got " .. type(metrics) .. ")", level)
  end
  if step_key == nil then
    for _, k in ipairs(STEP_KEYS) do
      if metrics[k] ~= nil then step_key = k; break end
    end
    if not step_key then
      error("rl.metrics.log: no step key given and none of rollout/step, train/step, eval/step in metrics", level)
    end
  elseif type(step_key) ~= "string" then
    error("rl.metrics.log: bad argument #2 'step_key' (string expected, got " .. type(step_key) .. ")", level)
  end
  local step = metrics[step_key]
  if type(step) ~= "number" or step ~= floor(step) or not is_finite(step) then
    error(("rl.metrics.log: metrics[%q] must be the integer step, got %s"):format(step_key, tostring(step)), level)
  end
  local now = rl.time()
  prom.update(metrics, now)

  if self._tb then
    local scalars, n = {}, 0
    for k, v in pairs(metrics) do
      if k ~= step_key and type(k) == "string" and type(v) == "number" then
        if is_finite(v) then
          scalars[k], n = v, n + 1
        else
          log.debug("rl.metrics: %s = %s at %s %d is not finite; not written to TensorBoard", k, tostring(v), step_key, step)
        end
      end
    end
    if n > 0 then
      local ok, err = self._tb:add_scalars(step, scalars, now)
      if not ok then sink_failed("TensorBoard", err) end
    end
  end

  if self._jsonl then
    local rec = json_safe(metrics, 1)
    if rec.time == nil then rec.time = now end
    local ok, text = pcall(json.encode, rec, { sort_keys = true })
    if ok then
      local wrote, err = self._jsonl:write(text)
      if not wrote then sink_failed("JSONL", err) end
    else
      sink_failed("JSONL", text)
    end
  end

  if self.console then
    local line
    if self.console_format then line = self.console_format(metrics, step_key, step)
    else line = M.format_line(metrics, step_key) end
    if line then
      if type(self.console) == "function" then
        self.console(tostring(line))
      elseif core.log.enabled("info") then
        local info = debug.getinfo(level, "Sl")
        core.log.write("info", info and info.short_src or nil, info and info.currentline or 0, tostring(line))
      end
    end
  end
end

--- Logs one dict at its step: `metrics[step_key]` is the step (rollout/step,
--- train/step, eval/step; inferred from those when nil).
function Logger:log(metrics, step_key) self:_log(metrics, step_key, 3) end

--- Flushes the TensorBoard file (log already does; for symmetry with close).
function Logger:flush()
  if self._tb then
    local ok, err = self._tb:flush()
    if not ok then sink_failed("TensorBoard", err) end
  end
end

--- Closes the files; idempotent. Later log calls reach the console only.
function Logger:close()
  if self._tb then
    local ok, err = self._tb:close()
    if not ok then sink_failed("TensorBoard", err) end
    self._tb = nil
  end
  if self._jsonl then self._jsonl:close(); self._jsonl = nil end
end

-- ---- the module's logger ------------------------------------------------------------------

local current

--- Replaces the module's logger (closing the old one) with M.logger(opts);
--- returns it, or nil, err (the old one is closed either way).
function M.configure(opts)
  if current then current:close(); current = nil end
  local lg, err = M.logger(opts)
  if not lg then return nil, err end
  current = lg
  return lg
end

--- The module's logger (a console-only one until configure is called).
function M.get()
  if not current then current = assert(M.logger {}) end
  return current
end

--- Logs through the module's logger (slime's logging_utils.log(args, metrics, step_key)).
function M.log(metrics, step_key) M.get():_log(metrics, step_key, 3) end

--- Closes the module's logger's files.
function M.close()
  if current then current:close(); current = nil end
end

-- ---- Prometheus ------------------------------------------------------------------------

--- The Prometheus exposition text of the last value logged under every numeric
--- key (any logger), as rl.metrics.serve answers GET /metrics.
function M.prometheus_text() return prom.text() end

--- Serves GET /metrics (Prometheus text, version 0.0.4) and GET /health from a
--- server of its own (rlhost's event-driven HTTP server on its own thread: slow or
--- hostile clients cost a socket, never the job's loop; request bodies over 64 KiB are
--- refused unread, connections capped): opts.host ("127.0.0.1"), opts.port (0: a free
--- port), opts.allow_remote. Every later rl.metrics log call updates the text it
--- serves. Returns the server (`:url()`, `:port()`, `:stop()`) or nil, err (port busy).
function M.serve(opts)
  opts = opts or {}
  if type(opts) ~= "table" then argerror("serve", 1, "opts", "table", type(opts)) end
  for k in pairs(opts) do
    if k ~= "host" and k ~= "port" and k ~= "allow_remote" then
      error(("rl.metrics.serve: unknown option '%s' (expected host, port, allow_remote)"):format(tostring(k)), 2)
    end
  end
  local s, err = require("rl._core").metrics.text_serve { host = opts.host or "127.0.0.1", port = opts.port or 0,
    allow_remote = opts.allow_remote, not_found_hint = "try GET /metrics" }
  if not s then return nil, "rl.metrics.serve: " .. tostring(err) end
  local function push() s:set("/metrics", "text/plain; version=0.0.4; charset=utf-8", prom.text()) end
  push()
  s:set("/health", "text/plain; charset=utf-8", "ok")
  prom.on_change(push)
  local srv = { _s = s, _push = push }
  function srv:url() return self._s:url() end
  function srv:port() return self._s:port() end
  function srv:stop()
    prom.off_change(self._push)
    self._s:stop()
  end
  return srv
end

-- ---- options --------------------------------------------------------------------------------

--- Appends slime's metric flags to an rl.args spec (skipping names it already
--- declares) and returns the spec: --use-tensorboard, --tb-project-name,
--- --tb-experiment-name, --tensorboard-dir, --metrics-dir, --[no-]metrics-console.
function M.add_options(spec)
  if type(spec) ~= "table" then argerror("add_options", 1, "spec", "table", type(spec)) end
  local have = {}
  for _, o in ipairs(spec) do if type(o) == "table" and o.name then have[o.name] = true end end
  local options = {
    { name = "use_tensorboard", type = "bool", default = false, help = "write TensorBoard event files" },
    { name = "tb_project_name", type = "string", help = "TensorBoard project: tensorboard_log/<this>/... (default: the recipe name)" },
    { name = "tb_experiment_name", type = "string", help = "TensorBoard experiment: .../<this> (default: the start time)" },
    { name = "tensorboard_dir", type = "string", help = "TensorBoard directory (overrides $TENSORBOARD_DIR and the names above)" },
    { name = "metrics_dir", type = "string", help = "append every logged dict to <this>/metrics.jsonl" },
    { name = "metrics_console", type = "bool", default = true, help = "one summary line per logged step" },
  }
  for _, o in ipairs(options) do
    if not have[o.name] then spec[#spec + 1] = o end
  end
  return spec
end

return M
