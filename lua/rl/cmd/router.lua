--- `rlhost router`: a standalone router over engines (sglang-router's surface).
--
--   rlhost router --port 30000 --policy cache_aware --worker http://127.0.0.1:30001 http://127.0.0.1:30002
--
-- Runs until SIGINT/SIGTERM. Flags mirror rl.router.start's options (docs/router.md).
local rl = require "rl"
local router = require "rl.router"

local opt = rl.args {
  prog = "router",
  description = "Route requests over engines: sglang-router's HTTP surface (docs/router.md).",
  { name = "host", type = "string", default = "127.0.0.1", help = "bind address (non-loopback needs --allow-remote)" },
  { name = "port", type = "int", default = 30000, help = "port (0 picks a free one)" },
  { name = "allow_remote", type = "bool", default = false, help = "allow a non-loopback --host (only worker changes need a token!)" },
  { name = "allow_link_local_workers", type = "bool", default = false, help = "accept worker URLs on 169.254.0.0/16 or fe80::/10" },
  { name = "policy", type = "string", default = "cache_aware", choices = router.policies(), help = "routing policy" },
  { name = "worker", type = "list", of = "string", default = {}, help = "worker URLs (more via POST /workers)" },
  { name = "ready_file", type = "string", help = "write the router's URL to this file once listening" },
  { name = "health_interval", type = "number", default = 5, help = "seconds between health probes per worker" },
  { name = "health_timeout", type = "number", default = 2, help = "health probe timeout, seconds" },
  { name = "health_failure_threshold", type = "int", default = 2, help = "failed probes before a worker is unhealthy" },
  { name = "health_success_threshold", type = "int", default = 1, help = "good probes before it is healthy again" },
  { name = "health_path", type = "string", default = "/health", help = "probe path" },
  { name = "max_retries", type = "int", default = 3, help = "retries on other workers (connect error or 5xx, before streaming)" },
  { name = "retry_backoff", type = "number", default = 0.02, help = "first retry backoff, seconds (doubles, with jitter)" },
  { name = "retry_max_backoff", type = "number", default = 1, help = "largest retry backoff, seconds" },
  { name = "request_timeout", type = "number", default = 600, help = "whole-request timeout, seconds (504 after)" },
  { name = "connect_timeout", type = "number", default = 5, help = "worker connect timeout, seconds" },
  { name = "circuit_failure_threshold", type = "int", default = 5, help = "consecutive failures that open a worker's circuit" },
  { name = "circuit_success_threshold", type = "int", default = 1, help = "half-open successes that close it" },
  { name = "circuit_open_time", type = "number", default = 5, help = "seconds a circuit stays open before a trial" },
  { name = "cache_threshold", type = "number", default = 0.5, help = "cache_aware: matched fraction that counts as a hit" },
  { name = "balance_abs_threshold", type = "int", default = 32, help = "cache_aware: load difference that counts as imbalance..." },
  { name = "balance_rel_threshold", type = "number", default = 1.5, help = "...together with max > min * this" },
  { name = "max_connections", type = "int", default = 20000, help = "client connections at once" },
  { name = "seed", type = "int", default = 0, help = "random/power_of_two seed (0: random)" },
}

local opts = {}
for k in pairs(router.OPTIONS) do
  if opt[k] ~= nil then opts[k] = opt[k] end
end
opts.workers = opt.worker
if opts.seed == 0 then opts.seed = nil end

rl.script = "router"  -- messages say `rlhost router`, not the path of this file
local ok, h, err = pcall(router.start, opts)
if not ok then rl.args.option_error(h, "rl.router.start") end
if not h then
  io.stderr:write("rlhost router: ", err, "\n")
  rl.exit(1)
end
rl.log.info("router listening on %s (policy %s, %d workers)", h.url, opt.policy, #opt.worker)
rl.log.info("router: worker changes (/add_worker, /remove_worker, POST/DELETE /workers) and /flush_cache"
  .. " " .. require("rl._admin").hint())
if opt.ready_file then
  -- Written whole then renamed, so a reader never sees half a URL.
  local tmp = opt.ready_file .. ".tmp"
  local f = assert(io.open(tmp, "w"))
  f:write(h.url, "\n")
  f:close()
  assert(os.rename(tmp, opt.ready_file))
end

local done, e = pcall(function() while true do rl.sleep(3600) end end)
h:stop()
rl.log.info("router stopped")
if not done and not rl.task.is_cancelled(e) then error(e, 0) end
