--- rl.recipe.health: slime's fault tolerance (--use-fault-tolerance) for the engines a
--- recipe owns. A monitor task probes every engine's /health every
--- --rollout-health-check-interval s (each probe bounded by --rollout-health-check-timeout,
--- none before --rollout-health-check-first-wait s after an engine starts); one failed
--- probe makes the engine "suspect", a second in a row (or its process exiting) "dead".
--- A dead engine leaves the router at once and is killed (a stuck one too: SIGKILL
--- ends a stopped process); the router retries its in-flight requests on the others.
--- Before the next weight sync it is restarted with the same options, handed the current
--- weights, and only then rejoins the router. The sync goes engine by engine, so one
--- engine failing costs that engine, never the run. Monitoring pauses during the sync
--- and while the recipe has released the engines (health:pause() / health:resume(), and
--- hold/release around --offload-rollout). Every engine group is watched (one slot per
--- engine of job.groups); a frozen group's (update_weights false) restarted engine
--- loads its own model and rejoins its router at once, with no refit.
--- Fault injection (--fault-injection, or job:inject_fault from `rlhost attach`) kills or
--- stops a chosen engine at a chosen step. See docs/fault_tolerance.md.
local rl = require "rl"
local log = require "rl.log"
local task = require "rl.task"

local M = {}
local Health = {}
Health.__index = Health
M.Health = Health

local SIGKILL, SIGSTOP = 9, 19
local ACTIONS = { kill = SIGKILL, stop = SIGSTOP }

local function now() return rl.now() end
local proc = require("rl._core").router  -- spawn/kill/reap of child processes (their process groups)

--- Parses --fault-injection: "ACTION:ENGINE:STEP[:DELAY]" items, comma-separated
--- (ACTION kill | stop, ENGINE 1-based, STEP the rollout id, DELAY seconds into that
--- step's rollout, default 1). Returns the list or raises a usage error.
function M.parse_injections(text, num_engines)
  local out = {}
  if not text or text == "" then return out end
  for item in text:gmatch("[^,]+") do
    local action, engine, step, delay = item:match("^%s*(%a+):(%d+):(%d+):?([%d%.]*)%s*$")
    local hint = " (expected ACTION:ENGINE:STEP[:DELAY_S], e.g. kill:2:2:1.5; ACTION kill or stop)"
    if not action or not ACTIONS[action] then
      rl.args.usage_error("--fault-injection: bad item '" .. item .. "'" .. hint)
    end
    engine, step = tonumber(engine), tonumber(step)   -- ENGINE: of the policy group
    if engine < 1 or engine > num_engines then
      rl.args.usage_error(("--fault-injection %s: engine %d is not one of 1..%d (--num-engines)")
        :format(item, engine, num_engines))
    end
    out[#out + 1] = { action = action, engine = engine, step = step, delay = tonumber(delay) or 1 }
  end
  return out
end

--- The job's monitor under --use-fault-tolerance (started), else nil.
function M.from_options(opt, job)
  if not opt.use_fault_tolerance then
    if opt.fault_injection then rl.args.usage_error("--fault-injection needs --use-fault-tolerance") end
    return nil
  end
  for _, k in ipairs { "rollout_health_check_interval", "rollout_health_check_timeout" } do
    if not (opt[k] > 0) then rl.args.usage_error(("--%s must be > 0 (got %s)"):format(k:gsub("_", "-"), opt[k])) end
  end
  return M.new(job, { interval = opt.rollout_health_check_interval, timeout = opt.rollout_health_check_timeout,
    first_wait = opt.rollout_health_check_first_wait, engine_opts = job.engine_opts,
    injections = M.parse_injections(opt.fault_injection, #job.engines) }):start()
end

--- A monitor for the engines of job.groups (rl.recipe.engines), or of job.engines
--- behind job.router. opts: interval, timeout, first_wait (seconds), injections
--- (parse_injections' list), engine_opts (rl.engine.start's, for restarts of
--- job.engines when there are no groups).
function M.new(job, opts)
  local self = setmetatable({ job = job, interval = opts.interval or 30, timeout = opts.timeout or 30,
    first_wait = opts.first_wait or 0, injections = opts.injections or {}, engine_opts = opts.engine_opts,
    states = {}, paused = false, holds = {}, events = {}, recoveries = {} }, Health)
  local groups = job.groups or { { name = "default", engines = job.engines, router = job.router, update_weights = true } }
  local named = #groups > 1
  for _, g in ipairs(groups) do
    for i = 1, #g.engines do
      -- the policy group's engines keep their plain names (engine 1, ...), as in --fault-injection
      local label = (named and not g.update_weights) and ("%s engine %d"):format(g.name, i) or ("engine " .. i)
      self.states[#self.states + 1] = { state = "healthy", fails = 0, started = now(), restarts = 0, group = g,
        index = i, label = label, engine_opts = g.engine_opts and g.engine_opts[i] or opts.engine_opts }
    end
  end
  return self
end

local function engine_of(st) return st.group.engines[st.index] end

local function set_state(self, i, state, why)
  local st = self.states[i]
  if st.state == state then return end
  log.warn("%s (%s): %s -> %s%s", st.label, tostring(engine_of(st).url), st.state, state, why and (": " .. why) or "")
  st.state, st.why = state, why
end

-- Whether a process-mode engine's process has exited (reaped then); its status.
local function exited(eng)
  if eng.mode ~= "process" or not eng.pid then return false end
  local code = proc.reap(eng.pid)
  if code == nil then return false end
  eng.pid = nil
  return true, code
end

--- One probe of engine i: true, or false and why.
function Health:probe(i)
  local eng = engine_of(self.states[i])
  local gone, code = exited(eng)
  if gone then return false, ("its process exited (status %s)"):format(tostring(code)), true end
  local resp, err = require("rl.http").get(eng.url .. "/health", { timeout = self.timeout })
  if resp and resp.status == 200 then return true end
  return false, resp and ("GET /health: HTTP %d"):format(resp.status)
    or ("no answer to GET /health within %g s (%s)"):format(self.timeout, tostring(err))
end

--- Takes a probe's result: healthy; suspect after one failure; dead after two, or at
--- once when the process is gone.
function Health:record(i, ok, why, fatal)
  local st = self.states[i]
  if st.state == "dead" or st.state == "restarting" then return end
  if ok then
    st.fails = 0
    set_state(self, i, "healthy")
    return
  end
  st.fails = st.fails + 1
  if fatal or st.fails >= 2 then return self:mark_dead(i, why) end
  set_state(self, i, "suspect", why)
end

--- Marks engine i dead: out of the router, its process killed and reaped (a thread
--- engine stopped). Idempotent.
function Health:mark_dead(i, why)
  local st, job = self.states[i], self.job
  local eng = engine_of(st)
  if st.state == "dead" then return end
  set_state(self, i, "dead", why)
  st.died_at = st.died_at or now()
  self.events[#self.events + 1] = st.label .. " died"
  if st.group.router then st.group.router:remove(eng.url) end
  if job.trainer and job.trainer.forget_engine then job.trainer:forget_engine(eng.url) end
  if eng.mode == "process" and eng.pid then
    proc.kill(eng.pid, SIGKILL)
    local deadline = now() + 10
    while eng.pid and not exited(eng) and now() < deadline do task.sleep(0.05) end
    eng.pid = nil
  elseif eng.mode == "thread" then
    eng:stop()
  end
  log.warn("%s removed from the router and killed; its requests are retried on the other engines; "
    .. "it restarts before the next weight sync", st.label)
end

--- One round: every live engine probed concurrently.
function Health:round()
  local tasks = {}
  for i, st in ipairs(self.states) do
    if (st.state == "healthy" or st.state == "suspect") and now() - st.started >= self.first_wait then
      local eng = engine_of(st)
      tasks[#tasks + 1] = task.spawn_named("health probe " .. i, function()
        local ok, why, fatal = self:probe(i)
        -- a result that comes back after a pause, or for an engine since replaced, is stale
        if not self:is_paused() and engine_of(st) == eng then self:record(i, ok, why, fatal) end
      end)
    end
  end
  for _, t in ipairs(tasks) do t:wait() end
end

--- Starts the monitor task; returns self.
function Health:start()
  self.task = task.spawn_named("engine health monitor", function()
    while not self.stopped do
      task.sleep(self.interval)
      if not self:is_paused() and not self.stopped then self:round() end
    end
  end)
  local names = {}
  for i, st in ipairs(self.states) do
    local eng = engine_of(st)
    names[i] = ("%s %s%s"):format(st.label, tostring(eng.url), eng.pid and (" (pid " .. eng.pid .. ")") or "")
  end
  log.info("fault tolerance: engines probed every %g s (timeout %g s, first wait %g s): %s", self.interval,
    self.timeout, self.first_wait, table.concat(names, ", "))
  return self
end

function Health:pause() self.paused = true end
function Health:resume() self.paused = false end
--- A pause that outlasts resume() until released (--offload-rollout: "offloaded").
function Health:hold(why) self.holds[why] = true end
function Health:release(why) self.holds[why] = nil end
function Health:is_paused() return self.paused or next(self.holds) ~= nil end

function Health:stop()
  self.stopped = true
  if self.task then self.task:cancel("job finished"); self.task = nil end
end

--- Kills (SIGKILL) or stops (SIGSTOP) engine i now: a fault drill. Process engines only.
function Health:inject(action, i)
  local eng = self.job.engines[i]   -- the policy group's engine i
  local sig = ACTIONS[action]
  if not sig then return nil, "inject: action must be 'kill' or 'stop' (got " .. tostring(action) .. ")" end
  if not eng then return nil, ("inject: no engine %s (1..%d)"):format(tostring(i), #self.job.engines) end
  if eng.mode ~= "process" or not eng.pid then
    return nil, ("inject: engine %d is not a running process (--engine-mode process)"):format(i)
  end
  log.warn("fault injection: %s engine %d (pid %d)", action == "kill" and "SIGKILL to" or "SIGSTOP to", i, eng.pid)
  proc.kill(eng.pid, sig)
  return true
end

--- Called as a rollout step starts: resumes monitoring, schedules this step's drills.
function Health:step_start(rollout_id)
  self:resume()
  self.events = {}
  for _, inj in ipairs(self.injections) do
    if inj.step == rollout_id then
      task.after(inj.delay, function()
        local ok, err = self:inject(inj.action, inj.engine)
        if not ok then log.warn("fault injection %s:%d:%d not done: %s", inj.action, inj.engine, inj.step, err) end
      end)
    end
  end
end

-- Restarts each dead engine (not yet in the router: an updatable group's joins after
-- its refit; a frozen group's loaded its own model and joins at once).
function Health:restart_dead()
  for i, st in ipairs(self.states) do
    if st.state == "dead" then
      local t0 = now()
      local eng, err = rl.engine.start(st.engine_opts)
      if eng then
        st.group.engines[st.index] = eng
        st.state, st.fails, st.started, st.restarts = "restarting", 0, now(), st.restarts + 1
        log.info("%s restarted in %.1f s: %s%s", st.label, now() - t0, eng.url,
          eng.pid and (" (pid " .. eng.pid .. ")") or "")
        self.events[#self.events + 1] = st.label .. " restarted"
        if not st.group.update_weights then self:rejoin(i, nil) end
      else
        log.warn("%s did not restart (tried again before the next sync): %s", st.label, tostring(err))
      end
    end
  end
end

--- The fault-tolerant weight sync: probes every engine first (a stuck one is killed
--- rather than stalling the sync), restarts the dead, syncs engine by engine; a
--- restarted engine rejoins the router once it serves the new version. Returns
--- {weight_version, methods, versions (per engine: the version or false), seconds} or
--- nil, err when no engine took the weights.
function Health:sync(trainer)
  local t0 = now()
  self:pause()
  local probes = {}
  for i, st in ipairs(self.states) do
    if st.state == "healthy" or st.state == "suspect" then
      probes[i] = task.spawn(function() return { self:probe(i) } end)
    end
  end
  for i, t in pairs(probes) do
    local r = t:wait()
    if not r[1] then self:mark_dead(i, r[2] .. " (before the weight sync)") end
  end
  self:restart_dead()
  -- only the groups that take weight updates are synced (job.engines: the policy's)
  local versions, methods, version, ok_n, errs, n = {}, {}, nil, 0, {}, 0
  for i, st in ipairs(self.states) do
    if st.group.update_weights then
      n = n + 1
      versions[n], methods[n] = false, "none"
      if st.state ~= "dead" then
        local r, err = trainer:sync(engine_of(st))
        if r then
          versions[n], methods[n], version, ok_n = r.weight_version, (r.methods or {})[1] or "?", r.weight_version, ok_n + 1
          if st.state == "restarting" then self:rejoin(i, r.weight_version) end
        else
          errs[#errs + 1] = ("%s: %s"):format(st.label, tostring(err))
          self:mark_dead(i, "weight sync failed: " .. tostring(err))
        end
      end
    end
  end
  self:resume()
  if ok_n == 0 and n > 0 then return nil, "no engine took the weights: " .. table.concat(errs, "; ") end
  if ok_n < n then
    local parts = {}
    for i, v in ipairs(versions) do parts[i] = ("engine %d: %s"):format(i, v or "none (dead)") end
    log.warn("weight sync reached %d of %d engines (%s)", ok_n, n, table.concat(parts, ", "))
  end
  return { weight_version = version, methods = methods, versions = versions, seconds = now() - t0 }
end

-- A restarted engine, refit (version: the trainer's; nil for a frozen group's, which
-- serves its own model): checks the version it serves, then back into its router.
function Health:rejoin(i, version)
  local st = self.states[i]
  local eng = engine_of(st)
  local stats = eng:stats()
  local serving = type(stats) == "table" and stats.weight_version or "?"
  if st.group.router then st.group.router:add(eng.url) end
  st.state, st.why = "healthy", nil
  local took = st.died_at and (now() - st.died_at)
  st.died_at = nil
  self.recoveries[#self.recoveries + 1] = took
  if version == nil then
    log.info("%s (frozen) serves its own model, weight version %s; back in the router, %.1f s after its death",
      st.label, tostring(serving), took or 0)
    self.events[#self.events + 1] = ("%s back v%s"):format(st.label, tostring(serving))
    return
  end
  log.info("%s refit: serves weight version %s (trainer's %s); back in the router, %.1f s after its death",
    st.label, tostring(serving), tostring(version), took or 0)
  self.events[#self.events + 1] = ("%s refit v%s"):format(st.label, tostring(serving))
end

--- The step's metrics: rollout/engines/{healthy,suspect,dead,restarting} now, and
--- rollout/engines/restarts (total) and recovery_time (s, the last death → back in the router).
function Health:metrics()
  local m = { ["rollout/engines/healthy"] = 0, ["rollout/engines/suspect"] = 0, ["rollout/engines/dead"] = 0,
              ["rollout/engines/restarting"] = 0, ["rollout/engines/restarts"] = 0 }
  for _, st in ipairs(self.states) do
    local k = "rollout/engines/" .. st.state
    m[k] = m[k] + 1
    m["rollout/engines/restarts"] = m["rollout/engines/restarts"] + st.restarts
  end
  if #self.events > 0 and #self.recoveries > 0 then
    m["rollout/engines/recovery_time"] = self.recoveries[#self.recoveries]
  end
  return m
end

--- Text for the step line when the engines' state changed during the step, else "".
function Health:step_note()
  if #self.events == 0 then return "" end
  local healthy = 0
  for _, st in ipairs(self.states) do if st.state == "healthy" then healthy = healthy + 1 end end
  return (" | engines %d/%d healthy (%s)"):format(healthy, #self.states, table.concat(self.events, ", "))
end

return M
