-- serve_idle: start N native engines and a router, then sleep (slime's
-- sleep_rollout) so you can load-test and profile them by hand. Step 1 of
-- docs/profiling.md.
--
--   rlhost tools/serve_idle.lua                                     -- the default math model, 2 engines
--   rlhost tools/serve_idle.lua --model /models/Qwen3-0.6B --num-engines 4 --router-port 30000
--   rlhost tools/serve_idle.lua --model DIR --ready-file /tmp/router.url   -- scripts wait for the file
--
-- Prints "Router launched at HOST:PORT" and each engine's URL, logs once per
-- --interval, and stops everything on Ctrl-C (or after --duration seconds).
local opt = rl.args {
  description = "Starts native engines behind a router and keeps them up, idle, for load tests and profiling.",
  { name = "model", type = "string", help = "HF model directory (default: rl.mathgen.default_model(), built once)" },
  { name = "num_engines", type = "int", default = 2, help = "engines behind the router" },
  { name = "engine_mode", choices = { "process", "thread" }, default = "process",
    help = "process: one child `rlhost engine` each (needed to profile several engines at once); thread: in this process" },
  { name = "router_port", type = "int", default = 0, help = "router port (0: a free one)" },
  { name = "policy", type = "string", default = "cache_aware", help = "router policy" },
  { name = "device", type = "string", default = "cpu", help = "cpu | cuda | cuda:N (engine i gets cuda:i with --device cuda)" },
  { name = "threads", type = "int", default = 1, help = "LibTorch threads per engine" },
  { name = "max_running_requests", type = "int", default = 64 },
  { name = "interval", type = "number", default = 3600, help = "seconds between 'rollout sleep' log lines" },
  { name = "duration", type = "number", help = "stop after this many seconds (default: until Ctrl-C)" },
  { name = "ready_file", type = "string", help = "write the router URL here once everything serves" },
}
if opt.num_engines < 1 then rl.args.usage_error("--num-engines must be at least 1") end

local model = opt.model
if not model then
  rl.log.info("no --model: using rl.mathgen.default_model() (made once into the cache)")
  model = rl.mathgen.default_model()
end

local engines, router = {}, nil
local function stop_all()
  if router then router:stop() end
  for _, e in ipairs(engines) do e:stop() end
end

local function fail(msg)
  io.stderr:write("serve_idle: ", msg, "\n")
  stop_all()
  rl.exit(1)
end

local urls = {}
for i = 1, opt.num_engines do
  local device = opt.device
  if device == "cuda" and opt.num_engines > 1 then device = "cuda:" .. (i - 1) end
  local eng, err = rl.engine.start {
    model = model, mode = opt.engine_mode, port = 0, device = device, threads = opt.threads,
    max_running_requests = opt.max_running_requests,
  }
  if not eng then fail(("engine %d: %s"):format(i, err)) end
  engines[i], urls[i] = eng, eng.url
  rl.log.info("engine %d at %s (%s mode)", i, eng.url, opt.engine_mode)
end

local err
router, err = rl.router.start { workers = urls, port = opt.router_port, policy = opt.policy }
if not router then fail(err) end
print(("Router launched at %s"):format((router.url:gsub("^http://", ""))))
for i, u in ipairs(urls) do print(("  worker %d: %s"):format(i, u)) end
print("profile: rlhost tools/profile_rollout.lua --router-url " .. router.url .. " --action start")
io.stdout:flush()

if opt.ready_file then
  local tmp = opt.ready_file .. ".tmp"
  local f, ferr = io.open(tmp, "w")
  if not f then fail("--ready-file: " .. tostring(ferr)) end
  f:write(router.url, "\n")
  f:close()
  os.rename(tmp, opt.ready_file)
end

local why = rl.rollout.sleep { interval = opt.interval, duration = opt.duration, router_url = router.url, workers = urls }
rl.log.info("serve_idle: %s; stopping the router and %d engine(s)", why, #engines)
stop_all()
if opt.ready_file then os.remove(opt.ready_file) end
