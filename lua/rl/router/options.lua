--- rl.router.options: every option of a router, declared once. rl.router.start checks its
--- table against this list (lua/rl/_options.lua), a process-mode router's child gets its
--- flags from it, and `rlhost router` declares its command line from it (defaults and help
--- included). The C++ defaults (runtime/router/router.hpp RouterOptions, PolicyOptions,
--- BreakerOptions) are these values: tests/lua/router_spec.lua compares them.
--
-- Fields beyond rl.args': min / max / above (ranges; above = strictly greater), cli_default
-- (the command line's default where it differs: the port), cli (the flag where it differs:
-- workers is --worker, a list), flag = false (Lua-side only), child = true (log_level: a
-- flag rlhost router has built in); rl._options.
local M = {}

M.ROUTER = {
  { name = "host", type = "string", default = "127.0.0.1", help = "bind address (non-loopback needs --allow-remote)" },
  { name = "port", type = "int", default = 0, cli_default = 30000, min = 0, max = 65535, help = "port (0 picks a free one)" },
  { name = "allow_remote", type = "bool", default = false,
    help = "allow a non-loopback --host (only worker changes need a token!)" },
  { name = "allow_link_local_workers", type = "bool", default = false,
    help = "accept worker URLs on 169.254.0.0/16 or fe80::/10" },
  { name = "policy", type = "string", default = "cache_aware", choices = require("rl._core").router.policies(),
    help = "routing policy" },
  { name = "workers", type = "table", cli = { name = "worker", type = "list", of = "string", default = {} },
    help = "worker URLs (more via POST /workers)" },
  { name = "health_interval", type = "number", default = 5, above = 0, help = "seconds between health probes per worker" },
  { name = "health_timeout", type = "number", default = 2, above = 0, help = "health probe timeout, seconds" },
  { name = "health_failure_threshold", type = "int", default = 2, min = 1, max = 1000,
    help = "failed probes before a worker is unhealthy" },
  { name = "health_success_threshold", type = "int", default = 1, min = 1, max = 1000,
    help = "good probes before it is healthy again" },
  { name = "health_path", type = "string", default = "/health", help = "probe path" },
  { name = "max_retries", type = "int", default = 3, min = 0, max = 100,
    help = "retries on other workers (connect error or 5xx, before streaming)" },
  { name = "retry_backoff", type = "number", default = 0.02, above = 0,
    help = "first retry backoff, seconds (doubles, with jitter)" },
  { name = "retry_max_backoff", type = "number", default = 1, above = 0, help = "largest retry backoff, seconds" },
  { name = "request_timeout", type = "number", default = 600, above = 0, help = "whole-request timeout, seconds (504 after)" },
  { name = "connect_timeout", type = "number", default = 5, above = 0, help = "worker connect timeout, seconds" },
  { name = "circuit_failure_threshold", type = "int", default = 5, min = 1, max = 100000,
    help = "consecutive failures that open a worker's circuit" },
  { name = "circuit_success_threshold", type = "int", default = 1, min = 1, max = 100000,
    help = "half-open successes that close it" },
  { name = "circuit_open_time", type = "number", default = 5, above = 0, help = "seconds a circuit stays open before a trial" },
  { name = "cache_threshold", type = "number", default = 0.5, min = 0, max = 1,
    help = "cache_aware: matched fraction that counts as a hit" },
  { name = "balance_abs_threshold", type = "int", default = 32, min = 0, max = 2 ^ 30,
    help = "cache_aware: load difference that counts as imbalance..." },
  { name = "balance_rel_threshold", type = "number", default = 1.5, above = 0, help = "...together with max > min * this" },
  { name = "max_tree_chars", type = "int", default = 8 * 2 ^ 20, min = 1, max = 2 ^ 30,
    help = "cache_aware: the radix tree's budget in bytes" },
  { name = "max_connections", type = "int", default = 20000, min = 1, max = 2 ^ 24, help = "client connections at once" },
  { name = "max_conns_per_worker", type = "int", default = 2048, min = 1, max = 2 ^ 20,
    help = "upstream transfers per worker at once (the rest queue)" },
  { name = "seed", type = "int", default = 0, min = 0, max = 2 ^ 30, help = "random/power_of_two seed (0: random)" },
  -- prefill/decode disaggregation (sglang-router's PD mode; docs/router.md)
  { name = "pd_disaggregation", type = "bool", default = false,
    help = "PD mode: each generation goes to a prefill and a decode worker (--prefill, --decode)" },
  { name = "prefill", type = "table", cli = { name = "prefill", type = "list", of = "string", default = {},
                                              metavar = "URL [BOOTSTRAP_PORT]" },
    help = "PD mode: a prefill worker and its KV bootstrap port (repeatable; no port: asked from its /server_info)" },
  { name = "decode", type = "table", cli = { name = "decode", type = "list", of = "string", default = {}, metavar = "URL" },
    help = "PD mode: decode worker URLs (repeatable)" },
  { name = "prefill_policy", type = "string", choices = require("rl._core").router.policies(),
    help = "PD mode: the prefill pool's policy (default: --policy)" },
  { name = "decode_policy", type = "string", choices = require("rl._core").router.policies(),
    help = "PD mode: the decode pool's policy (default: --policy)" },
  -- Lua-side: how rl.router runs it
  { name = "mode", type = "string", default = "thread", choices = { "thread", "process" }, flag = false,
    help = "thread: in this process, on a thread and loop of its own; process: a child `rlhost router`" },
  { name = "ready_timeout", type = "number", default = 15, min = 0, flag = false,
    help = "process mode: seconds to wait for the child" },
  { name = "log_level", type = "string", flag = false, child = true, help = "process mode: the child's --log-level" },
}

--- `rlhost router`'s own flags.
M.CLI_ONLY = {
  { name = "ready_file", type = "string", help = "write the router's URL to this file once listening" },
}

local O = require "rl._options"

local function is_port(v) return type(v) == "number" and v == math.floor(v) and v >= 1 and v <= 65535 end

-- PD mode's options: prefill entries are a URL string or {url = URL, bootstrap_port = N};
-- prefill/decode workers need pd_disaggregation, which takes no regular workers.
local function check_pd(opts, fname)
  local function bad(field, why) error(("%s: bad argument 'opts.%s' (%s)"):format(fname, field, why), 5) end
  for i, p in ipairs(opts.prefill or {}) do
    if type(p) == "table" then
      for k in pairs(p) do
        if k ~= "url" and k ~= "bootstrap_port" then
          bad(("prefill[%d].%s"):format(i, tostring(k)), "unknown field; an entry is {url = URL, bootstrap_port = N}")
        end
      end
      if type(p.url) ~= "string" then bad(("prefill[%d].url"):format(i), "URL string expected, got " .. type(p.url)) end
      if p.bootstrap_port ~= nil and not is_port(p.bootstrap_port) then
        bad(("prefill[%d].bootstrap_port"):format(i), "integer 1-65535 expected, got " .. tostring(p.bootstrap_port))
      end
    elseif type(p) ~= "string" then
      bad(("prefill[%d]"):format(i), "URL string or {url = URL, bootstrap_port = N} expected, got " .. type(p))
    end
  end
  for i, d in ipairs(opts.decode or {}) do
    if type(d) ~= "string" then bad(("decode[%d]"):format(i), "URL string expected, got " .. type(d)) end
  end
  if not opts.pd_disaggregation then
    for _, k in ipairs { "prefill", "decode", "prefill_policy", "decode_policy" } do
      local v = opts[k]
      if v ~= nil and not (type(v) == "table" and #v == 0) then
        bad(k, "needs PD mode: add pd_disaggregation = true (--pd-disaggregation)")
      end
    end
  elseif opts.workers and #opts.workers > 0 then
    bad("workers", "regular workers and PD mode do not mix: give prefill and decode workers")
  end
end

--- Checks rl.router.start's table (fname: the public function; errors point at its caller).
function M.check(opts, fname)
  O.check(fname, M.ROUTER, opts, { level = 4 })
  for i, w in ipairs(opts.workers or {}) do
    if type(w) ~= "string" then
      error(("%s: bad argument 'opts.workers[%d]' (URL string expected, got %s)"):format(fname, i, type(w)), 4)
    end
  end
  check_pd(opts, fname)
end

--- `--prefill`'s words (URL [BOOTSTRAP_PORT], repeated: one flat list) as prefill entries:
--- {"http://a:1", "8998", "http://b:2"} -> {{url = "http://a:1", bootstrap_port = 8998}, "http://b:2"};
--- a port of "none" (sglang-router's) is no port.
function M.prefill_entries(words)
  local out = {}
  for _, w in ipairs(words or {}) do
    if w:lower() == "none" and type(out[#out]) == "string" then
      -- sglang-router's spelling of "no bootstrap port": the worker is asked for it
    elseif w:match("^%d+$") then
      local last = out[#out]
      if last == nil or type(last) == "table" then
        error(("rl.router.start: bad argument 'opts.prefill' (a bootstrap port must follow a URL: --prefill URL "
          .. "[BOOTSTRAP_PORT], got '%s'%s)"):format(w, last and " after a port" or " first"), 0)
      end
      local port = tonumber(w)
      if not is_port(port) then
        error(("rl.router.start: bad argument 'opts.prefill' (bootstrap port of %s must be 1-65535, got %s)")
          :format(last, w), 0)
      end
      out[#out] = { url = last, bootstrap_port = port }
    else
      out[#out + 1] = w
    end
  end
  return out
end

--- A process-mode router's flags for `opts` (those given; the child has the same defaults).
function M.argv(opts)
  local flat = {}
  for k, v in pairs(opts) do flat[k] = v end
  if opts.prefill then   -- entries back to --prefill's words
    local words = {}
    for _, p in ipairs(opts.prefill) do
      if type(p) == "table" then
        words[#words + 1] = p.url
        if p.bootstrap_port then words[#words + 1] = tostring(p.bootstrap_port) end
      else
        words[#words + 1] = p
      end
    end
    flat.prefill = words
  end
  return O.argv(M.ROUTER, flat)
end

--- `rlhost router`'s rl.args spec: every flag option, with the command line's defaults.
function M.cli_spec(spec) return O.cli_spec(M.ROUTER, spec, M.CLI_ONLY) end

--- rl.router.start's table from `rlhost router`'s parsed flags (raises on a bad --prefill).
function M.from_cli(opt)
  local out = O.from_cli(M.ROUTER, opt)
  out.prefill = M.prefill_entries(out.prefill)
  return out
end

return M
