--- rl.watchdog: the hang report. When nothing has made progress (no sample finished,
--- no generate request answered, no training micro-batch done) for `timeout` seconds,
--- it writes one report — every task's traceback and what it waits on (with the sample
--- it holds), the HTTP requests in flight with target and age, each engine's queued and
--- running counts, the job's phase and the trainer's micro-batch progress — to the log
--- and to `dir`/hang_report_<time>_<n>.txt. rl.watchdog.report() gives the same report at
--- any time (from `rlhost attach`); SIGUSR1 to the host logs it.
--
--   rl.watchdog.start { timeout = 1800, dir = "metrics/", job = job }   -- rl.recipe.setup does this
--   rl.watchdog.progress("sample")                                     -- something moved
--   print(rl.watchdog.text())                                          -- the report, now
local log = require "rl.log"
local task = require "rl.task"
local now = require("rl._core").loop.now

local M = { last = now(), last_what = "start" }

--- Notes that something made progress (`what`: "sample", "request", "train", ...).
function M.progress(what)
  M.last, M.last_what, M.reported = now(), what or "progress", false
end

local function is_sample(v)
  return type(v) == "table" and v.index ~= nil and v.group_index ~= nil and (v.prompt ~= nil or v.tokens ~= nil)
end

-- The samples a suspended task holds: locals and upvalues of its frames.
local function samples_of(co)
  local found, seen = {}, {}
  local function add(v)
    if is_sample(v) and not seen[v] then
      seen[v] = true
      found[#found + 1] = ("sample %s (group %s, status %s)"):format(tostring(v.index), tostring(v.group_index),
        tostring(v.status))
    end
  end
  for level = 0, 60 do
    local info = debug.getinfo(co, level, "f")
    if not info then break end
    for i = 1, 200 do
      local name, v = debug.getlocal(co, level, i)
      if not name then break end
      add(v)
    end
    for i = 1, 60 do
      local name, v = debug.getupvalue(info.func, i)
      if not name then break end
      add(v)
    end
  end
  return found
end

local function section(out, title) out[#out + 1] = "" ; out[#out + 1] = "== " .. title end

local function tasks_part(out, t_now)
  local list = task.live()
  section(out, ("tasks (%d)"):format(#list))
  for _, t in ipairs(list) do
    local wait = t.waiting_on and (" waits on %s for %.1f s"):format(t.waiting_on, t_now - (t.waiting_since or t_now))
      or (t == task.current() and " (running: this report)" or "")
    out[#out + 1] = ("task %d '%s' %s%s"):format(t.id, t.name, t.status, wait)
    for _, s in ipairs(samples_of(t.co)) do out[#out + 1] = "  holds " .. s end
    if t ~= task.current() then
      for line in debug.traceback(t.co, "", 0):gmatch("[^\n]+") do
        line = line:gsub("^%s+", "")
        -- the scheduler's own frames say nothing about the task
        if line ~= "stack traceback:" and not line:find("rl/task.lua:", 1, true) and line ~= "[C]: in function 'co_yield'"
          and line ~= "[C]: in function 'pcall'" then
          out[#out + 1] = "  " .. line
        end
      end
    end
  end
end

local function http_part(out, t_now)
  local list = require("rl.http").in_flight()
  section(out, ("HTTP requests in flight (%d)"):format(#list))
  for _, p in ipairs(list) do
    out[#out + 1] = ("%s %s for %.1f s (task %s)"):format(p.method, tostring(p.url), t_now - p.started,
      p.task and p.task.id or "-")
  end
end

local function engines_part(out, job)
  local engines = job and job.engines or {}
  section(out, ("engines (%d)"):format(#engines))
  for i, eng in ipairs(engines) do
    local st = job.health and job.health.states[i]
    local ok, stats, err = pcall(eng.stats, eng)
    local line = ("engine %d %s%s"):format(i, tostring(eng.url), st and (" [" .. st.state .. "]") or "")
    if ok and type(stats) == "table" then
      line = line .. (": running %s, queued %s, weight version %s"):format(tostring(stats.num_running),
        tostring(stats.num_queued), tostring(stats.weight_version))
    else
      line = line .. ": no stats (" .. tostring(ok and err or stats) .. ")"
    end
    out[#out + 1] = line
  end
end

--- The report as text (inside a task: it asks process engines for their counts).
function M.text(reason)
  local t_now, out = now(), {}
  local job = M.job or (package.loaded["rl.recipe"] and package.loaded["rl.recipe"].current)
  out[1] = ("rlhost hang report (%s): last progress %.1f s ago (%s)"):format(reason or "on demand",
    t_now - M.last, M.last_what)
  if job then
    local phase = job.phase and ("%s for %.1f s"):format(job.phase, t_now - (job.phase_since or t_now)) or "between steps"
    local tr = job.trainer and job.trainer.progress and { job.trainer:progress() } or {}
    out[#out + 1] = ("job: %s; trainer step %s, micro-batches %s/%s"):format(phase,
      job.trainer and tostring(job.trainer:step()) or "-", tostring(tr[1] or "-"), tostring(tr[2] or "-"))
  end
  tasks_part(out, t_now)
  http_part(out, t_now)
  if task.current() then engines_part(out, job) end
  return table.concat(out, "\n")
end

local function write(text)
  if not M.dir then return nil end
  M.count = (M.count or 0) + 1
  local path = ("%s/hang_report_%s_%d.txt"):format(M.dir, os.date("!%Y%m%dT%H%M%S"), M.count)
  local f = io.open(path, "w")
  if not f then return nil end
  f:write(text, "\n")
  f:close()
  return path
end

--- Writes the report to the log (and to a file in `dir`, when set); returns the text
--- and the file's path. Outside a task (SIGUSR1) it runs in a new one.
function M.report(opts)
  opts = opts or {}
  if not task.current() then
    task.spawn_named("watchdog report", M.report, opts)
    return
  end
  local text = M.text(opts.reason)
  local path = write(text)
  log.warn("%s%s", text, path and ("\n(also in " .. path .. ")") or "")
  return text, path
end

--- Starts the watchdog task. opts: timeout (s; 0 or false: off), dir (where report
--- files go), job (the recipe's, for engines and trainer). One report per stall.
function M.start(opts)
  M.stop()
  M.timeout, M.dir, M.job = opts.timeout, opts.dir, opts.job
  M.progress("start")
  if not M.timeout or M.timeout <= 0 then return end
  local every = math.max(0.05, math.min(5, M.timeout / 4))   -- a tiny timeout must not spin the loop
  local function micro_batches()   -- the trainer's micro-batches done so far (Trainer:progress)
    local tr = M.job and M.job.trainer
    return tr and tr.progress and (tr:progress()) or nil
  end
  local micro = micro_batches()
  M.task = task.spawn_named("watchdog", function()
    while true do
      task.sleep(every)
      local done = micro_batches()
      if done ~= nil and done ~= micro then micro = done; M.progress("train") end
      if not M.reported and now() - M.last > M.timeout then
        M.reported = true
        M.report { reason = ("no progress for %g s"):format(M.timeout) }
      end
    end
  end)
  M.task.quiet = true
end

function M.stop()
  if M.task then M.task:cancel("watchdog stopped"); M.task = nil end
end

return M
