--- rl: the rlhost standard library. `rl` is also a global in every recipe.
--
-- Submodules load on first use (rl.http, rl.json, rl.args, rl.torch, ...), so a
-- recipe that never touches LibTorch never pays for loading it.
local core = require "rl._core"
local task = require "rl.task"

local rl = {
  version = core.version,
  -- tasks and time
  spawn = task.spawn,
  wait_all = task.wait_all,
  sleep = task.sleep,
  after = task.after,
  every = task.every,
  now = core.loop.now,     -- monotonic seconds
  time = core.loop.time,   -- wall-clock seconds since the epoch
  argv = {},               -- the recipe's command-line arguments (set by the host)
  script = nil,            -- the recipe's path (set by the host)
}

--- Loop and boundary counters: {iterations, timers, fds, ops, live_objects}.
rl._core_stats = core.loop.stats

--- The task running now (nil outside tasks).
function rl.current_task() return task.current() end

local Exit = {}
Exit.__tostring = function(e) return "rl.exit(" .. tostring(e.code) .. ")" end

--- Ends the process with `code` (default 0) once the current task unwinds.
function rl.exit(code)
  code = code or 0
  if type(code) ~= "number" or code ~= math.floor(code) or code < 0 or code > 255 then
    error("rl.exit: bad argument #1 'code' (integer 0-255 expected, got " .. tostring(code) .. ")", 2)
  end
  error(setmetatable({ code = code }, Exit), 0)
end
rl._Exit = Exit

--- Ctrl-C (or SIGTERM) calls fn(signal) once — signal is "SIGINT" or "SIGTERM" —
--- instead of cancelling the main task, so a recipe can stop at its next step
--- boundary after saving; a second signal cancels as usual, unless fn returned true
--- (then it gets the next signal too; one arriving while fn runs reaches it after);
--- rl.exit(code) inside fn ends the run.
--- fn = nil removes the handler. Returns the previous handler.
function rl.on_interrupt(fn)
  if fn ~= nil and type(fn) ~= "function" then
    error("rl.on_interrupt: bad argument #1 'fn' (function or nil expected, got " .. type(fn) .. ")", 2)
  end
  return require("rl._host").set_interrupt_handler(fn)
end

local lazy = {
  log = "rl.log", json = "rl.json", http = "rl.http", args = "rl.args",
  inspect = "rl.inspect", task = "rl.task", torch = "rl.torch", model = "rl.model",
  tokenizer = "rl.tokenizer", engine = "rl.engine", rewards = "rl.rewards",
  data = "rl.data", sample = "rl.sample", pyrandom = "rl.pyrandom", trace = "rl.trace", mathgen = "rl.mathgen",
  router = "rl.router", rollout = "rl.rollout", agent = "rl.agent", metrics = "rl.metrics", dump = "rl.dump", trainer = "rl.trainer",
  reload = "rl.reload", progress = "rl.progress", recipe = "rl.recipe",
  gzip = "rl.gzip", process = "rl.process", profile = "rl.profile", dist = "rl.dist", timeline = "rl.timeline",
  watchdog = "rl.watchdog", device = "rl.device", weight_sync = "rl.weight_sync", tinker_wire = "rl.tinker_wire",
  tinker = "rl.tinker",
}

return require("rl._lazy")(rl, lazy)
