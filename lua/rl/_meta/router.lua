---@meta
-- LuaLS type stubs for rl.router (never loaded at run time). See docs/router.md.
-- The options are declared in lua/rl/router/options.lua; tests/lua/router_spec.lua checks StartOpts against it.

---@class rl.router
rl.router = {}

---@class rl.router.StartOpts
---@field workers? string[] worker URLs ("http://host:port"; "host:port" is accepted)
---@field policy? "round_robin"|"random"|"least_load"|"power_of_two"|"cache_aware"|"consistent_hashing" default "cache_aware"
---@field host? string bind address, default "127.0.0.1" (non-loopback needs allow_remote)
---@field port? integer default 0 (a free port)
---@field allow_remote? boolean
---@field allow_link_local_workers? boolean accept worker URLs on 169.254.0.0/16 or fe80::/10 (refused otherwise)
---@field mode? "thread"|"process" default "thread"
---@field ready_timeout? number process mode: seconds to wait for the child (default 15)
---@field log_level? string process mode: the child's --log-level
---@field health_interval? number seconds between probes (5)
---@field health_timeout? number probe timeout (2)
---@field health_failure_threshold? integer failed probes before unhealthy (2)
---@field health_success_threshold? integer good probes before healthy again (1)
---@field health_path? string "/health"
---@field max_retries? integer retries on other workers before the first relayed byte (3)
---@field retry_backoff? number first backoff seconds (0.02), doubling, jittered
---@field retry_max_backoff? number (1)
---@field request_timeout? number whole request incl. retries (600) -> 504
---@field connect_timeout? number (5)
---@field circuit_failure_threshold? integer consecutive failures that open a circuit (5)
---@field circuit_success_threshold? integer half-open successes that close it (1)
---@field circuit_open_time? number seconds open before a trial (5)
---@field cache_threshold? number cache_aware hit fraction (0.5)
---@field balance_abs_threshold? integer cache_aware imbalance: max-min load above this (32)...
---@field balance_rel_threshold? number ...and max > min * this (1.5)
---@field max_tree_chars? integer cache_aware radix tree budget in bytes
---@field max_connections? integer client connections at once (20000)
---@field max_conns_per_worker? integer upstream transfers per worker at once (2048)
---@field seed? integer random/power_of_two seed
---@field pd_disaggregation? boolean prefill/decode disaggregation: each generation to a prefill and a decode worker
---@field prefill? (string|{url: string, bootstrap_port?: integer})[] PD mode: prefill workers (no bootstrap_port: asked from the worker)
---@field decode? string[] PD mode: decode worker URLs
---@field prefill_policy? string PD mode: the prefill pool's policy (default: policy)
---@field decode_policy? string PD mode: the decode pool's policy (default: policy)

---@class rl.router.Worker
---@field id string
---@field url string
---@field is_healthy boolean false while "pending"
---@field status "pending"|"healthy"|"unhealthy" pending until its first health probe answers
---@field load integer requests in flight through this router
---@field circuit_state "closed"|"open"|"half_open"
---@field requests integer
---@field failures integer
---@field last_error string
---@field worker_type "regular"|"prefill"|"decode"
---@field bootstrap_port? integer prefill workers: the KV bootstrap port (absent while unknown)

---@class rl.router.Handle
---@field url string
---@field mode "thread"|"process"
local Handle = {}
--- Registers a worker; its entry, or nil, err. opts (PD mode): {worker_type = "prefill"|"decode", bootstrap_port = N}.
---@param url string
---@param opts? {worker_type?: "regular"|"prefill"|"decode", bootstrap_port?: integer}
---@return rl.router.Worker|nil
---@return string|nil err
function Handle:add(url, opts) end
--- Removes a worker by URL or id; true when it was registered.
---@param url string
---@return boolean
function Handle:remove(url) end
---@return rl.router.Worker[]
function Handle:workers() end
--- The router's own Prometheus text.
---@return string
function Handle:metrics() end
--- Stops the router (joins its thread / ends the child process).
function Handle:stop() end

--- A handle on a router already running at url (its HTTP API; stop() takes out the workers it added and leaves the router running).
---@param url string
---@return rl.router.Handle|nil
---@return string|nil err
function rl.router.connect(url) end

--- Starts a router. Bad options raise; a busy port returns nil, err.
---@param opts rl.router.StartOpts
---@return rl.router.Handle|nil
---@return string|nil err
function rl.router.start(opts) end

--- The policy names.
---@return string[]
function rl.router.policies() end
