--- `rlhost router`: a standalone router over engines (sglang-router's surface).
--
--   rlhost router --port 30000 --policy cache_aware --worker http://127.0.0.1:30001 http://127.0.0.1:30002
--
-- Runs until SIGINT/SIGTERM. Flags mirror rl.router.start's options (docs/router.md).
local rl = require "rl"
local router = require "rl.router"

local options = require "rl.router.options"   -- the flags are rl.router.start's options, declared once
local opt = rl.args(options.cli_spec {
  prog = "router",
  description = "Route requests over engines: sglang-router's HTTP surface (docs/router.md).",
})
rl.script = "router"  -- messages say `rlhost router`, not the path of this file
local okc, opts = pcall(options.from_cli, opt)
if not okc then rl.args.option_error(opts, "rl.router.start") end
local ok, h, err = pcall(router.start, opts)
if not ok then rl.args.option_error(h, "rl.router.start") end
if not h then
  io.stderr:write("rlhost router: ", err, "\n")
  rl.exit(1)
end
if opts.pd_disaggregation then
  rl.log.info("router listening on %s in PD mode (%d prefill, %d decode workers; policies: prefill %s, decode %s)",
    h.url, #opts.prefill, #opts.decode, opts.prefill_policy or opt.policy, opts.decode_policy or opt.policy)
else
  rl.log.info("router listening on %s (policy %s, %d workers)", h.url, opt.policy, #opt.worker)
end
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
