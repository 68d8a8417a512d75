-- Recovery time of a dead engine under rl.recipe.health (--use-fault-tolerance): SIGKILL
-- to one of two process engines behind a router → the monitor marks it dead → restart,
-- refit with the trainer's weights, back in the router → a /generate through the router
-- answered by it. Peer, same run: a cold start of the same engine plus its first sync
-- (what a user does by hand today). In a recipe the restart waits for the step's end
-- (the next weight sync); this measures the mechanism right after the death.
--   rlhost bench/engine_recovery.lua [MODEL_DIR] [reps=3]
local model = arg[1] or rl.mathgen.default_model()
local reps = tonumber(arg[2]) or 3
rl.torch.set_num_threads(1)
local health = require "rl.recipe.health"
local tr = rl.trainer.new { model = model }
local eopts = { model = model, mode = "process", threads = 1 }

local function cold()
  local t0 = rl.now()
  local e = assert(rl.engine.start(eopts))
  assert(tr:sync(e))
  local s = rl.now() - t0
  e:stop()
  return s
end

local e1, e2 = assert(rl.engine.start(eopts)), assert(rl.engine.start(eopts))
local router = assert(rl.router.start { workers = { e1.url, e2.url }, health_interval = 0.5 })
local job = { engines = { e1, e2 }, router = router, trainer = tr }
local h = health.new(job, { interval = 0.2, timeout = 2, engine_opts = eopts }):start()
local drills = require("rl.recipe.faults").new(job)
assert(h:sync_weights(tr))

local function served_by(url)   -- back in the router, and a /generate answered by it
  local listed = false
  for _, w in ipairs(router:workers()) do listed = listed or w.url == url end
  assert(listed, "the restarted engine is not in the router")
  local resp = rl.http.post(url .. "/generate", { text = "1+1=", sampling_params = { max_new_tokens = 2 } },
                            { timeout = 30 })
  return resp and resp.status == 200
end

local cold_best = math.huge
for _ = 1, reps do cold_best = math.min(cold_best, cold()) end
for _, action in ipairs { "kill", "stop" } do
local best = { total = math.huge, detect = math.huge, restart = math.huge }
for _ = 1, reps do
  local t0 = rl.now()
  assert(drills:inject(action, 2))
  while h.states[2].state ~= "dead" do rl.sleep(0.01) end
  local t_dead = rl.now()
  assert(h:sync_weights(tr))
  assert(served_by(job.engines[2].url))
  local t1 = rl.now()
  best.detect = math.min(best.detect, t_dead - t0)
  best.restart = math.min(best.restart, t1 - t_dead)
  best.total = math.min(best.total, t1 - t0)
end
-- kill: the probe sees the exit; stop (SIGSTOP): two probes time out (2 s each) first
print(("RESULT what=engine_recovery_%s death_to_serving_s=%.2f detect_s=%.2f restart_refit_rejoin_s=%.2f "
  .. "cold_start_and_sync_s=%.2f ratio=%.2f"):format(action, best.total, best.detect, best.restart, cold_best,
  best.total / cold_best))
end
h:stop()
router:stop()
for _, e in ipairs(job.engines) do e:stop() end
