-- hello.lua: the smallest complete recipe. It shows options (rl.args), logging
-- (rl.log), tasks (rl.spawn) and waiting for them (rl.wait_all).
--
--   rlhost recipes/hello.lua
--   rlhost recipes/hello.lua --workers 8 --max-delay 0.05 --greeting "hi there"
--   rlhost recipes/hello.lua --help
--   rlhost recipes/hello.lua --log-level debug        # shows each worker's record

local opt = rl.args {
  description = "Spawns a few workers that each sleep a little and report back.",
  { name = "workers", type = "int", default = 4, help = "how many worker tasks to spawn" },
  { name = "max_delay", type = "number", default = 0.1, help = "longest sleep of a worker, in seconds" },
  { name = "greeting", type = "string", default = "hello", help = "what the workers say" },
  { name = "seed", type = "int", default = 0, help = "random seed (0: a new one each run)" },
  { name = "json", type = "bool", default = false, help = "print the reports as one JSON line" },
}

if opt.workers < 1 then rl.args.usage_error("--workers must be at least 1") end
if opt.max_delay < 0 then rl.args.usage_error("--max-delay must not be negative") end
math.randomseed(opt.seed ~= 0 and opt.seed or os.time())

-- One worker: a plain function run as a task. rl.sleep suspends only this task;
-- the others keep running on the same thread.
local function worker(i)
  local delay = math.random() * opt.max_delay
  local started = rl.now()
  rl.sleep(delay)
  local report = { worker = i, slept = rl.now() - started, says = opt.greeting .. " from worker " .. i }
  rl.log.debug("worker %d done after %.3f s", i, report.slept)
  return report
end

rl.log.info("spawning %d workers (max delay %.3f s)", opt.workers, opt.max_delay)
local started = rl.now()
local tasks = {}
for i = 1, opt.workers do tasks[i] = rl.spawn(worker, i) end

-- wait_all returns each task's first value, in spawn order (not finishing order).
local reports = rl.wait_all(tasks)

local elapsed = rl.now() - started
if opt.json then
  print(rl.json.encode({ reports = reports, elapsed = elapsed }, { sort_keys = true }))
else
  for _, r in ipairs(reports) do print(("%-28s (slept %.3f s)"):format(r.says, r.slept)) end
end
-- The sleeps overlapped: the whole run takes about the longest one, not their sum.
rl.log.info("%d workers finished in %.3f s", #reports, elapsed)
