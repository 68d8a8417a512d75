--- rl.recipe.health: slime's fault tolerance (--use-fault-tolerance) for the engines a
--- recipe owns. A monitor task probes every engine's /health every
--- --rollout-health-check-interval s (each probe bounded by --rollout-health-check-timeout,
--- none before --rollout-health-check-first-wait s after an engine starts); one failed
--- probe makes the engine "suspect", a second in a row (or its process exiting) "dead".
--- A dead engine leaves the router at once and is killed (a stuck one too: SIGKILL
--- ends a stopped process); the router retries its in-flight requests on the others.
--- Before the next weight sync it is restarted with the same options, handed the current
--- weights, and only then rejoins the router. The sync (Health:sync_weights) is the
--- trainer's own (rl.weight_sync), engine by engine under a guard of probes, so one
--- engine failing costs that engine, never the run. Monitoring pauses during the sync
--- and while the recipe has released the engines (health:pause() / health:resume(), and
--- hold/release around --offload-rollout). Every engine group is watched (one slot per
--- engine of job.groups); a frozen group's (update_weights false) restarted engine
--- loads its own model and rejoins its router at once, with no refit. Other hosts'
--- engines (rl.recipe.hosts) are probed in the same rounds through the controller, which
--- benches one that fails twice (never killed from here). Fault drills are
--- rl.recipe.faults. See docs/fault_tolerance.md.
local rl = require "rl"
local log = require "rl.log"
local task = require "rl.task"

local M = {}
local Health = {}
Health.__index = Health
M.Health = Health

local function now() return rl.now() end
local proc = require("rl._core").process  -- reap of child processes
local engines = require "rl.recipe.engines"

--- The job's monitor under --use-fault-tolerance (started), else nil.
function M.from_options(opt, job)
  if not opt.use_fault_tolerance then return nil end
  for _, k in ipairs { "rollout_health_check_interval", "rollout_health_check_timeout" } do
    if not (opt[k] > 0) then rl.args.usage_error(("--%s must be > 0 (got %s)"):format(k:gsub("_", "-"), opt[k])) end
  end
  return M.new(job, { interval = opt.rollout_health_check_interval, timeout = opt.rollout_health_check_timeout,
    first_wait = opt.rollout_health_check_first_wait, engine_opts = job.engine_opts }):start()
end

--- A monitor for the engines of job.groups (rl.recipe.engines), or of job.engines
--- behind job.router. opts: interval, timeout, first_wait (seconds), engine_opts
--- (rl.engine.start's, for restarts of job.engines when there are no groups).
function M.new(job, opts)
  local self = setmetatable({ job = job, interval = opts.interval or 30, timeout = opts.timeout or 30,
    first_wait = opts.first_wait or 0, engine_opts = opts.engine_opts,
    states = {}, paused = false, holds = {}, events = {}, recoveries = {}, external = {} }, Health)
  local groups = engines.groups_of(job)
  for _, g in ipairs(groups) do
    for i = 1, #g.engines do
      -- the policy group's engines keep their plain names (engine 1, ...), as in --fault-injection
      self.states[#self.states + 1] = { state = "healthy", fails = 0, started = now(), restarts = 0, group = g,
        index = i, label = engines.engine_label(groups, g, i),
        engine_opts = g.engine_opts and g.engine_opts[i] or opts.engine_opts }
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
  if (eng.mode ~= "process" and eng.mode ~= "vllm") or not eng.pid then return false end
  local code = proc.reap(eng.pid)
  if code == nil then return false end
  eng.pid = nil
  return true, code
end

-- GET url/health within the probe timeout: true, or false and why.
local function probe_url(self, url)
  local resp, err = require("rl.http").get(url .. "/health", { timeout = self.timeout })
  if resp and resp.status == 200 then return true end
  return false, resp and ("GET /health: HTTP %d%s"):format(resp.status, resp.body ~= "" and (" " .. resp.body) or "")
    or ("no answer to GET /health within %g s (%s)"):format(self.timeout, tostring(err))
end

-- Requests `router` has in flight to `url` (0 without a router).
local function router_load(router, url)
  if not router then return 0 end
  local ok_list, workers = pcall(router.workers, router)
  if not ok_list or type(workers) ~= "table" then return 0 end
  for _, w in ipairs(workers) do if w.url == url then return tonumber(w.load) or 0 end end
  return 0
end

-- Whether engine i's scheduler moves: an engine whose HTTP server answers while its
-- scheduler is stuck has work waiting (its own counters, which a stuck scheduler stops
-- publishing, or the router's requests in flight to it) and a step counter that stands
-- still. Stuck for longer than the probe timeout: false and why.
function Health:progressing(i)
  local st = self.states[i]
  local eng = engine_of(st)
  local got, s = pcall(eng.stats, eng)   -- a thread engine stopped meanwhile raises
  if not got then return true end
  if type(s) ~= "table" or type(s.steps) ~= "number" then return true end
  local t = now()
  local waiting = math.max((s.num_running or 0) + (s.num_queued or 0), router_load(st.group.router, eng.url))
  if waiting == 0 or s.steps ~= st.last_steps or not st.progress_at then
    st.last_steps, st.progress_at = s.steps, t
    return true
  end
  if t - st.progress_at <= self.timeout then return true end
  return false, ("stuck: %d requests in the engine and no step for %.1f s"):format(waiting, t - st.progress_at)
end

--- One probe of engine i (in_sync: during its weight sync, which runs on the scheduler:
--- /health only): true, or false and why.
function Health:probe(i, in_sync)
  local eng = engine_of(self.states[i])
  local gone, code = exited(eng)
  if gone then return false, ("its process exited (status %s)"):format(tostring(code)), true end
  local ok, why = probe_url(self, eng.url)
  if not ok or in_sync then return ok, why end
  return self:progressing(i)
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
  -- Bounded: a stuck thread engine is abandoned rather than holding the run.
  local stopped, err = eng:stop_within(math.max(self.timeout, 2))
  if not stopped then log.warn("%s: %s", st.label, tostring(err)) end
  log.warn("%s removed from the router and %s; its requests are retried on the other engines; "
    .. "it restarts before the next weight sync", st.label, eng.mode == "process" and "killed" or "stopped")
end

-- Workers the router fronts that the recipe does not own (added from `rlhost attach`
-- with router:add, or POST /workers): probed like the engines; after two failed probes
-- in a row one leaves the router and is probed on, and it rejoins once it answers
-- again. Never killed, restarted or synced: not ours to manage.
local function external_round(self, tasks)
  local router = self.job.router
  if not router then return end
  local ok_list, workers = pcall(router.workers, router)
  if not ok_list or type(workers) ~= "table" then return end
  local owned, listed = {}, {}
  for _, st in ipairs(self.states) do
    local eng = engine_of(st)
    if eng and eng.url then owned[eng.url] = true end
  end
  -- other hosts' engines are rl.recipe.hosts' to watch (their hosts restart them)
  for url in pairs(self.job.hosts and self.job.hosts:urls() or {}) do owned[url] = true end
  for _, w in ipairs(workers) do
    listed[w.url] = true
    if not owned[w.url] and not self.external[w.url] then
      self.external[w.url] = { state = "healthy", fails = 0 }
      log.info("fault tolerance: probing %s, a worker the router fronts but the recipe does not own", w.url)
    end
  end
  for url, st in pairs(self.external) do
    if st.state ~= "dead" and not listed[url] then
      self.external[url] = nil   -- removed from the router by someone else: no longer ours to watch
    else
      tasks[#tasks + 1] = task.spawn_named("health probe " .. url, function()
        local ok, why = probe_url(self, url)
        if self:is_paused() or self.external[url] ~= st then return end
        self:record_external(url, ok, why)
      end)
    end
  end
end

--- Takes a probe of an external worker: suspect after one failure; dead (out of the
--- router) after two; back in the router at its first good probe.
function Health:record_external(url, ok, why)
  local st, router = self.external[url], self.job.router
  if ok then
    st.fails = 0
    if st.state == "dead" then
      router:add(url)
      log.warn("external worker %s: dead -> healthy: answers again; back in the router", url)
      self.events[#self.events + 1] = "external " .. url .. " back"
    end
    st.state = "healthy"
    return
  end
  st.fails = st.fails + 1
  if st.state == "dead" then return end
  if st.fails >= 2 then
    router:remove(url)
    log.warn("external worker %s: %s -> dead: %s; removed from the router (not restarted: the recipe does not "
      .. "own it), probed on", url, st.state, tostring(why))
    st.state = "dead"
    self.events[#self.events + 1] = "external " .. url .. " died"
  elseif st.state == "healthy" then
    st.state = "suspect"
    log.warn("external worker %s: healthy -> suspect: %s", url, tostring(why))
  end
end

-- Other hosts' engines (rl.recipe.hosts, --rollout-num-gpus-per-node): probed in the same
-- round through the controller, which benches one that fails twice in a row (out of the
-- router, refit by the sync it answers). Their hosts own the processes: never killed here.
local function remote_round(self, tasks)
  local hosts = self.job.hosts
  if not hosts then return end
  tasks[#tasks + 1] = task.spawn_named("health probes of other hosts' engines", function()
    hosts:check(function(url) return probe_url(self, url) end, function() return self:is_paused() end)
  end)
end

--- One round: every live engine, every external worker and every other host's engine,
--- probed concurrently.
function Health:round()
  local tasks = {}
  external_round(self, tasks)
  remote_round(self, tasks)
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
  log.info("fault tolerance: engines probed every %g s (timeout %g s, first wait %g s): %s%s", self.interval,
    self.timeout, self.first_wait, table.concat(names, ", "),
    self.job.hosts and "; other hosts' engines too (benched after 2 failed probes, refit when they answer)" or "")
  return self
end

function Health:pause() self.paused = true end
function Health:resume()
  self.paused = false
  for _, st in ipairs(self.states) do st.progress_at = nil end   -- no step while paused is no fault
end
--- A pause that outlasts resume() until released (--offload-rollout: "offloaded").
function Health:hold(why) self.holds[why] = true end
function Health:release(why)
  self.holds[why] = nil
  for _, st in ipairs(self.states) do st.progress_at = nil end
end
function Health:is_paused() return self.paused or next(self.holds) ~= nil end

function Health:stop()
  self.stopped = true
  if self.task then self.task:cancel("job finished"); self.task = nil end
end

--- Called as a rollout step starts: resumes monitoring, a new step's events.
function Health:step_start(rollout_id)
  self:resume()
  self.events = {}
  self.step = rollout_id
end

-- Restarts each dead engine (of only_group, when given; not yet in the router: an
-- updatable group's joins after its refit; a frozen group's loaded its own model and
-- joins at once). All the dead are spawned first, then waited for together (each under
-- its own ready_timeout).
function Health:restart_dead(only_group)
  local t0, starting = now(), {}
  for i, st in ipairs(self.states) do
    if st.state == "dead" and (only_group == nil or st.group == only_group) then
      local l, err = rl.engine.launch(st.engine_opts)
      if l then
        starting[#starting + 1] = { i = i, st = st, launch = l }
      else
        log.warn("%s did not restart (tried again before the next sync): %s", st.label, tostring(err))
      end
    end
  end
  local pending = #starting
  while pending > 0 do
    pending = 0
    for _, r in ipairs(starting) do
      local state = r.done and "done" or r.launch:poll()
      if state == "ready" then
        r.done = true
        local st, eng = r.st, r.launch.engine
        st.group.engines[st.index] = eng
        st.state, st.fails, st.started, st.restarts = "restarting", 0, now(), st.restarts + 1
        st.last_steps, st.progress_at = nil, nil
        log.info("%s restarted in %.1f s: %s%s", st.label, now() - t0, eng.url,
          eng.pid and (" (pid " .. eng.pid .. ")") or "")
        self.events[#self.events + 1] = st.label .. " restarted"
        if not st.group.update_weights then self:rejoin(r.i, nil) end
      elseif state == "failed" then
        r.done = true
        log.warn("%s did not restart (tried again before the next sync): %s", r.st.label, tostring(r.launch.err))
      elseif state == "starting" then
        pending = pending + 1
      end
    end
    if pending > 0 then task.sleep(0.05) end
  end
end

-- How long a finding that the engines serve stands for on_engine_failure's callers:
-- many requests failing at once cost one round of probes.
local RECHECK_S = 1.0

-- Engines of group g whose state is healthy or suspect (indices into self.states).
local function live_of(self, g)
  local out = {}
  for i, st in ipairs(self.states) do
    if st.group == g and (st.state == "healthy" or st.state == "suspect") then out[#out + 1] = i end
  end
  return out
end

-- Whether engines `idx` (indices into self.states) of group g can serve it: any one, or
-- in a prefill/decode group at least one of each (the router sends every request to a pair).
local function serves(self, g, idx)
  if not g.pd then return #idx > 0 end
  local have = {}
  for _, i in ipairs(idx) do have[g.roles[self.states[i].index]] = true end
  return have.prefill == true and have.decode == true
end

-- One recovery (await_engines): probes g's engines now, twice if need be (one failed
-- probe is only "suspect"); when none serves (a PD group: no prefill/decode pair),
-- restarts the dead at once and, for the policy's group, refits them with the trainer's
-- weights (the trainer is idle while the rollout waits) before they rejoin the router.
-- True when g serves again.
function Health:recover_group(g)
  for _ = 1, 2 do
    local live = live_of(self, g)
    local tasks = {}
    for _, i in ipairs(live) do
      tasks[#tasks + 1] = task.spawn_named("health probe " .. i, function()
        local ok, why, fatal = self:probe(i)
        self:record(i, ok, why, fatal)
        return ok
      end)
    end
    local up = {}
    for k, t in ipairs(tasks) do if t:wait() then up[#up + 1] = live[k] end end
    if serves(self, g, up) then return true end
    if not serves(self, g, live_of(self, g)) then break end
  end
  local t0 = now()
  log.warn("fault tolerance: %s of group '%s' serves; restarting now so the rollout's requests wait for it "
    .. "rather than fail", g.pd and "no prefill/decode pair" or "no engine", g.name)
  self:restart_dead(g)
  local restarted = {}
  for i, st in ipairs(self.states) do
    if st.group == g and st.state == "restarting" then restarted[#restarted + 1] = i end
  end
  if #restarted > 0 and g.update_weights and self.job.trainer then
    local out = { versions = {}, methods = {}, errs = {} }
    self:sync_engines(self.job.trainer, restarted, out)
    if #out.errs > 0 then log.warn("fault tolerance: refit after the restart failed: %s", table.concat(out.errs, "; ")) end
  end
  local serving = serves(self, g, live_of(self, g))
  log.info("fault tolerance: group '%s' %s %.1f s after its requests found no engine", g.name,
    serving and "serves again" or "still has no engine", now() - t0)
  return serving
end

--- For the rollout's on_engine_failure: a request to group g (default: the policy's)
--- failed. Finds out now whether g's engines serve; when none does, restarts them at
--- once (not at the next weight sync) and returns once they serve, so a job with one
--- engine waits for it instead of failing its step. Concurrent callers share one
--- recovery. True when g serves (retry the request), false when it does not or the
--- monitor is paused (a weight sync, offload) or stopped.
function Health:await_engines(g)
  if self.stopped or self:is_paused() then return false end
  g = g or engines.plain_group(engines.groups_of(self.job))
  if not g then return false end
  self.recovering = self.recovering or {}
  local r = self.recovering[g]
  if not r then
    local checked = self.checked_at and self.checked_at[g]
    if checked and now() - checked < RECHECK_S then return false end   -- just found serving: an ordinary failure
    r = task.spawn_named("engine recovery " .. g.name, function() return self:recover_group(g) end)
    self.recovering[g] = r
  end
  local ok, serving = pcall(r.wait, r)
  if self.recovering[g] == r then
    self.recovering[g] = nil
    self.checked_at = self.checked_at or {}
    self.checked_at[g] = now()
  end
  return ok and serving == true
end

-- A guard of probes around engine i's weight transfer (receiver rx): an engine whose
-- process exits, or that leaves two probes in a row unanswered, during its sync is marked
-- dead (killed, so the transfer's request fails at once) instead of holding the sync for
-- the trainer's whole timeout. Returns the function that ends the guard.
function Health:sync_guard(i, rx)
  local done, killing = false, false
  local thread = rx:can("memory")   -- its transfer is a command its scheduler runs between steps
  local guard = task.spawn_named("sync guard " .. i, function()
    local fails, t0 = 0, now()
    while not done do
      if fails == 0 then task.sleep(math.min(self.interval, self.timeout, 1)) end
      if done then return end
      local ok, why, fatal = self:probe(i, true)
      if done then return end
      -- One still queued after the probe timeout sits behind a stuck scheduler. Dropping
      -- it fails the transfer at once (else it would wait for good).
      if ok and thread and now() - t0 > self.timeout and rx:cancel_pending() > 0 then
        ok, why = false, ("its scheduler did not take the weight sync within %g s (stuck)"):format(self.timeout)
        fatal = true
      end
      fails = ok and 0 or fails + 1
      if fatal or fails >= 2 then
        killing = true
        self:mark_dead(i, ("%s (during its weight sync, %.1f s in)"):format(why, now() - t0))
        -- what is still queued on a stuck thread engine's scheduler is dropped until the sync returns
        while thread and not done do
          rx:cancel_pending()
          task.sleep(0.2)
        end
        return
      end
    end
  end)
  return function()
    done = true
    if killing then guard:wait() else guard:cancel("sync done") end   -- a kill in progress finishes (reaped)
  end
end

-- Syncs the engines in `which` (indices) one by one, each under its guard, through the
-- trainer's sync; fills out.versions/methods/errs.
function Health:sync_engines(trainer, which, out)
  local idx, targets, engs = {}, {}, {}
  for _, i in ipairs(which) do
    local st = self.states[i]
    if st.state ~= "dead" then
      local eng = engine_of(st)
      local k = #idx + 1
      idx[k], engs[k], targets[k] = i, eng, require("rl.weight_sync").receiver(eng)
    end
  end
  if #idx == 0 then return end
  local r, err = trainer:sync(targets, { keep_going = true,
                                         guard = function(k, rx) return self:sync_guard(idx[k], rx) end })
  for k, i in ipairs(idx) do
    local st = self.states[i]
    local v = r and r.versions[k]
    if v and st.state ~= "dead" then
      out.versions[i], out.methods[i], out.version = v, r.methods[k] or "?", v
      if st.state == "restarting" then self:rejoin(i, v) end
    else
      local why = r and r.errors[k] or err
      out.errs[#out.errs + 1] = ("%s: %s"):format(st.label, tostring(why or st.why))
      if engine_of(st) == engs[k] then self:mark_dead(i, "weight sync failed: " .. tostring(why)) end
    end
  end
end

--- The fault-tolerant weight sync: probes every engine first (a stuck one is killed
--- rather than stalling the sync), restarts the dead, calls opts.after_probes (the
--- step's sync-time fault drills), syncs engine by engine, each under a guard of probes
--- (one that dies or sticks meanwhile is killed, restarted and synced right after the
--- others); a restarted engine rejoins the router once it serves the new version.
--- Returns {weight_version, methods, versions (per engine: the version or false),
--- seconds} or nil, err when no engine took the weights.
function Health:sync_weights(trainer, opts)
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
  if opts and opts.after_probes then opts.after_probes() end
  -- only the groups that take weight updates are synced (job.engines: the policy's)
  local out = { versions = {}, methods = {}, errs = {} }
  local all = {}
  for i, st in ipairs(self.states) do
    if st.group.update_weights then all[#all + 1], out.versions[i], out.methods[i] = i, false, "none" end
  end
  self:sync_engines(trainer, all, out)
  -- Engines that died during this sync: restarted and refit now rather than a step later.
  local again = {}
  for i, st in ipairs(self.states) do
    if st.group.update_weights and st.state == "dead" and st.died_at and st.died_at >= t0 then again[#again + 1] = i end
  end
  if #again > 0 then
    self:restart_dead()
    self:sync_engines(trainer, again, out)
  end
  self:resume()
  -- per synced engine, in order (the policy group's: engine 1, 2, ...)
  local versions, methods, parts, ok_n = {}, {}, {}, 0
  for _, i in ipairs(all) do
    local v = out.versions[i]
    versions[#versions + 1], methods[#methods + 1] = v, out.methods[i]
    parts[#parts + 1] = ("%s: %s"):format(self.states[i].label, v or "none (dead)")
    if v then ok_n = ok_n + 1 end
  end
  if ok_n == 0 and #all > 0 then return nil, "no engine took the weights: " .. table.concat(out.errs, "; ") end
  if ok_n < #all then
    log.warn("weight sync reached %d of %d engines (%s)", ok_n, #all, table.concat(parts, ", "))
  end
  return { weight_version = out.version, methods = methods, versions = versions, seconds = now() - t0 }
end

-- A restarted engine, refit (version: the trainer's; nil for a frozen group's, which
-- serves its own model): checks the version it serves, then back into its router.
function Health:rejoin(i, version)
  local st = self.states[i]
  local eng = engine_of(st)
  local stats = eng:stats()
  local serving = type(stats) == "table" and stats.weight_version or "?"
  if st.group.router then   -- a PD group's engine rejoins as prefill (its new bootstrap port) or decode
    local ok, err = engines.router_add(st.group, st.index)
    if not ok then log.warn("%s: back into the router failed: %s", st.label, tostring(err)) end
  end
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
  if next(self.external) then   -- workers the router fronts but the recipe does not own
    m["rollout/engines/external_healthy"], m["rollout/engines/external_dead"] = 0, 0
    for _, st in pairs(self.external) do
      local k = st.state == "dead" and "rollout/engines/external_dead" or "rollout/engines/external_healthy"
      m[k] = m[k] + 1
    end
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
