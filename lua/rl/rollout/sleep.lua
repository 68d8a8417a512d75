--- rl.rollout.sleep: slime's sleep_rollout. Keeps the engines and the router up
--- and idle (no generation) for manual load tests and profiling, logging once
--- per `interval`, until Ctrl-C, `stop()` or `duration`.
--
--   -- recipe: --rollout-function sleep
--   if opt.rollout_function == "sleep" then
--     rl.rollout.sleep { router_url = router.url, workers = engine_urls }
--   end
--
-- Returns why it ended: "interrupted" (Ctrl-C or the task was cancelled),
-- "stopped" (opts.stop() returned true) or "duration". The caller then stops its
-- engines and router as usual. Unknown option keys are ignored, so a recipe's
-- whole rl.args result may be passed.
local log = require "rl.log"
local task = require "rl.task"
local core = require "rl._core"

local TYPES = { interval = "number", duration = "number", poll = "number", stop = "function",
                router_url = "string", workers = "table", log = "function" }

local function check(opts)
  if opts == nil then return {} end
  if type(opts) ~= "table" then
    error("rl.rollout.sleep: bad argument #1 'opts' (table expected, got " .. type(opts) .. ")", 3)
  end
  for k, ty in pairs(TYPES) do
    if opts[k] ~= nil and type(opts[k]) ~= ty then
      error(("rl.rollout.sleep: bad argument 'opts.%s' (%s expected, got %s)"):format(k, ty, type(opts[k])), 3)
    end
  end
  for _, k in ipairs { "interval", "duration", "poll" } do
    if opts[k] ~= nil and not (opts[k] > 0) then
      error(("rl.rollout.sleep: bad argument 'opts.%s' (positive seconds expected, got %s)"):format(k, tostring(opts[k])), 3)
    end
  end
  return opts
end

local function say(opts, fmt, ...)
  local line = select("#", ...) > 0 and fmt:format(...) or fmt
  if opts.log then opts.log(line) else log.info("%s", line) end
end

local function hours(s)
  local h = s / 3600
  return h == math.floor(h) and ("%d"):format(h) or ("%.3g"):format(h)
end

return function(opts)
  opts = check(opts)
  local interval = opts.interval or 3600
  local poll = math.min(opts.poll or 1, interval)
  local t0 = core.loop.now()
  local where = opts.router_url and (" (router " .. opts.router_url .. ")") or ""
  say(opts, "rollout sleep: engines and router stay up and idle%s; Ctrl-C stops", where)
  if opts.workers then
    for i, w in ipairs(opts.workers) do say(opts, "  worker %d: %s", i, tostring(type(w) == "table" and (w.url or w[1]) or w)) end
  end
  local next_log = t0 + interval
  local ok, why = pcall(function()
    while true do
      local now = core.loop.now()
      if opts.duration and now - t0 >= opts.duration then return "duration" end
      if opts.stop and opts.stop() then return "stopped" end
      if now >= next_log then
        say(opts, "rollout sleep for %s hours (%.0f s)", hours(now - t0), now - t0)
        next_log = next_log + interval
      end
      local wake = math.min(next_log, opts.duration and (t0 + opts.duration) or math.huge, now + poll)
      task.sleep(math.max(0, wake - now))
    end
  end)
  if not ok then
    if task.is_cancelled(why) then
      say(opts, "rollout sleep: interrupted after %.0f s", core.loop.now() - t0)
      return "interrupted"
    end
    error(why, 0)
  end
  say(opts, "rollout sleep: %s after %.0f s", why, core.loop.now() - t0)
  return why
end
