-- rlhost engine: serve a model over SGLang's HTTP API (and OpenAI's) until
-- SIGINT/SIGTERM.
--
--   rlhost engine --model /models/Qwen3-0.6B --port 30000
--   rlhost engine --model DIR --port 0 --ready-file /tmp/engine.url   # for parents that spawn it
--   rlhost engine --model DIR --host 0.0.0.0 --api-key SECRET          # remote: control needs the key
--   RLHOST_API_KEY=SECRET rlhost engine --model DIR --host 198.18.0.5  # the same, the key off argv
--
-- The flags are rl.engine.start's options in kebab-case; docs/engine.md lists
-- the endpoints.
local options = require "rl.engine.options"   -- the flags are rl.engine.start's options, declared once
local opt = rl.args(options.cli_spec {
  prog = "engine",
  description = "Serves a model with rlhost's native engine over SGLang's HTTP API (/generate, /v1/*, /metrics).",
})
rl.script = "engine"  -- usage errors say `rlhost engine`, not the path of this file
options.check_cli(opt)
-- A parent passes the key in the environment, where other users cannot read it (argv they can).
if opt.api_key == nil and (os.getenv("RLHOST_API_KEY") or "") ~= "" then opt.api_key = os.getenv("RLHOST_API_KEY") end

rl.engine.forward_sigterm()  -- SIGTERM stops gracefully, like Ctrl-C

local server_args = {}
for k, v in pairs(opt) do server_args[k] = v end
server_args.api_key, server_args.ready_file = nil, nil

-- --cpus: this process, every thread the engine starts included, runs on those CPUs only
if opt.cpus then
  local ok, err = pcall(rl.process.set_cpus, opt.cpus)
  if not ok then rl.args.usage_error("--cpus: " .. tostring(err):gsub("^.-set_cpus: ", "")) end
  rl.log.info("rlhost engine: pinned to CPUs %s", opt.cpus)
end

local start_opts = options.from_cli(opt)
start_opts.cpus = nil
if opt.disable_overlap_schedule then start_opts.overlap_schedule = "off" end
start_opts.server_args = rl.json.encode(server_args)
local started, eng, err = pcall(rl.engine.start, start_opts)
if not started then rl.args.option_error(eng, "rl.engine.start") end   -- a flag out of range: name it
if not eng then
  io.stderr:write("rlhost engine: ", err, "\n")
  rl.exit(1)
end

-- Before the ready file: a parent that sees it finds the token saved and both lines logged.
rl.log.info("rlhost engine: serving %s at %s (Ctrl-C or SIGTERM stops)", opt.model, eng.url)
rl.log.info("rlhost engine: control endpoints (weights, memory, profile, abort, flush)"
  .. " " .. require("rl._admin").hint() .. (opt.api_key and "; the --api-key works too" or ""))

if opt.ready_file then
  -- Atomic: a parent polling the file never reads half a URL.
  local tmp = opt.ready_file .. ".tmp"
  local f, ferr = io.open(tmp, "w")
  if not f then
    eng:stop()
    io.stderr:write("rlhost engine: cannot write --ready-file: ", ferr, "\n")
    rl.exit(1)
  end
  f:write(eng.url, "\n")
  f:close()
  assert(os.rename(tmp, opt.ready_file))
end

local ok, werr = pcall(function()
  while true do rl.sleep(3600) end
end)
rl.log.info("rlhost engine: stopping (running requests get up to %gs to finish)", opt.shutdown_timeout)
eng:stop(opt.shutdown_timeout)
if opt.ready_file then os.remove(opt.ready_file) end
if not ok and not rl.task.is_cancelled(werr) then error(werr, 0) end
