--- rl.recipe.hosts: engines on every host of a multi-host job (--rollout-num-gpus-per-node
--- N, slime's flag; on the CPU it counts engines). Rank 0, the controller, runs N engines
--- on its host as a one-host job runs --num-engines. The first rank of every other host
--- (LOCAL_RANK 0) starts N process engines of its own, bound to the address the hosts
--- reach each other at, and publishes them in the job's c10d store with a heartbeat.
--- The controller registers them with its router, hands them the trainer's weights by
--- c10d broadcast (every remote engine at once, beside the local engines' shared memory),
--- and takes them out of the router when their heartbeat lapses, a sync to them fails or
--- (--use-fault-tolerance: rl.recipe.health's rounds call Controller:check) two health
--- probes in a row fail; a benched engine is refit by the sync it answers.
--- A remote engine that dies is restarted by its host and rejoins at the next weight
--- sync. A host whose heartbeat stops for --host-lost-timeout seconds ends the run. See
--- docs/distributed.md, "Engines on every host".
--
-- The store, keys under rlhost/kv/engines/ (rl.dist.store):
--   hosts               a counter: each host's rank takes a slot
--   host/<s>/info       {rank, hostname, addr, pub}: pub is the host's sealed-box key
--   host/<s>/token      the run's admin token sealed to pub (the control endpoints of the
--                       host's engines take it; never in clear in the store or on argv)
--   host/<s>/engines    {generation, urls} or {error}: the host's engines now
--   host/<s>/beat       a counter the host adds 1 to every second
local rl = require "rl"
local log = require "rl.log"
local task = require "rl.task"
local json = require "rl.json"

local M = {}

local BEAT = 1.0   -- seconds between a host's heartbeats (and the controller's polls)
local SILENT_BEATS = 3   -- beats missed before a host's engines leave the router
--- Weights to remote engines (rlhost's own): tensors packed into broadcasts of at most
--- this many bytes (0: a broadcast per tensor, as SGLang's endpoint takes them). With
--- warm buffers on both sides, 64 MiB buckets measured 1.00-1.14x faster than a broadcast
--- per tensor over a host link (bench/weight_broadcast.sh). A sharded trainer sends a
--- tensor at a time whatever this says.
M.BUCKET_BYTES = 64 * 1024 * 1024

local function key(slot, what) return ("host/%d/%s"):format(slot, what) end

local function must(v, err, what)
  if v == nil then error(("%s: %s"):format(what, tostring(err)), 0) end
  return v
end

--- Whether this job runs engines on every host, and this rank's part: "controller" (rank
--- 0), "host" (the first rank of another host), or nil (no engines here, or one host).
function M.role(opt)
  if not opt.rollout_num_gpus_per_node or rl.dist.world_size() <= 1 then return nil end
  if rl.dist.rank() == 0 then return "controller" end
  if tonumber(os.getenv("LOCAL_RANK") or "0") == 0 then return "host" end
  return nil
end

--- The number of hosts: WORLD_SIZE / LOCAL_WORLD_SIZE (every host runs as many ranks).
function M.host_count()
  local per = tonumber(os.getenv("LOCAL_WORLD_SIZE") or "") or rl.dist.world_size()
  return math.max(1, math.floor(rl.dist.world_size() / math.max(per, 1)))
end

--- Checks the flags of a multi-host engine job (a usage error naming the flag).
function M.check_options(opt)
  local n = opt.rollout_num_gpus_per_node
  if opt.remote_weights_dir then   -- every host reads it; the controller writes there
    local probe = opt.remote_weights_dir:gsub("/+$", "") .. ("/.rlhost-check-%d"):format(rl.process.pid())
    local okw = require("rl._fs").write_file(probe, "x")
    os.remove(probe)
    if not okw then
      rl.args.usage_error(("--remote-weights-dir %s: cannot write there (hint: a directory on a filesystem every "
        .. "host of the job mounts)"):format(opt.remote_weights_dir))
    end
  end
  if opt.remote_weight_sync == "disk" and not opt.remote_weights_dir then
    rl.args.usage_error("--remote-weight-sync disk needs --remote-weights-dir DIR (a directory every host reads: "
      .. "a shared filesystem)")
  end
  if opt.remote_weight_sync == "http" and (opt.lora_rank or 0) > 0 then
    rl.args.usage_error("--remote-weight-sync http sends full weights; a LoRA adapter goes by distributed or disk "
      .. "(hint: drop --remote-weight-sync, or give --remote-weight-sync disk --remote-weights-dir DIR)")
  end
  if not n then
    if opt.remote_weights_dir or opt.remote_weight_sync ~= "distributed" then
      rl.args.usage_error("--remote-weight-sync and --remote-weights-dir are for engines on other hosts "
        .. "(hint: add --rollout-num-gpus-per-node N)")
    end
    return
  end
  if n < 1 or n % 1 ~= 0 then
    rl.args.usage_error(("--rollout-num-gpus-per-node must be an integer >= 1 (got %s)"):format(tostring(n)))
  end
  if opt.sglang_config then
    rl.args.usage_error("--rollout-num-gpus-per-node and --sglang-config: engine groups run on rank 0's host only "
      .. "(hint: give one of the two)")
  end
  if opt.rollout_backend == "vllm" then
    rl.args.usage_error("--rollout-num-gpus-per-node: remote engines are rlhost's own (--rollout-backend native)")
  end
  opt.num_engines = n   -- the controller's host runs as many as every other
end

-- ---- a host's rank: its engines, published with a heartbeat --------------------------

local Host = {}
Host.__index = Host

-- The engine options of a remote engine: the controller's flags, as a process engine
-- serving on this host's address with the run's token as its key.
local function remote_engine_opts(eopts, addr, token)
  local o = {}
  for k, v in pairs(eopts) do o[k] = v end
  o.mode, o.host, o.port, o.api_key = "process", addr, 0, token
  return o
end

--- Starts the host side (in a task of its own): publishes the host, waits for the run's
--- token, starts `n` engines with `eopts` (rl.engine.start's), publishes their URLs,
--- beats and restarts an engine that dies. Returns the Host (:stop()).
function M.host(eopts, n, opts)
  opts = opts or {}
  local self = setmetatable({ engines = {}, generation = 0, n = n, stopped = false }, Host)
  self.store = rl.dist.store("engines", opts.timeout)
  self.addr = must(rl.dist.host_address())
  self.task = task.spawn_named("engines of this host", function()
    local ok, err = pcall(self.run, self, eopts)
    if not ok and not self.stopped and not task.is_cancelled(err) then
      log.error("engines of this host: %s", tostring(err))
      if self.slot then pcall(self.store.set, self.store, key(self.slot, "engines"), json.encode { error = tostring(err) }) end
    end
  end)
  return self
end

function Host:publish()
  local urls = {}
  for i, e in ipairs(self.engines) do urls[i] = e.url end
  self.generation = self.generation + 1
  must(self.store:set(key(self.slot, "engines"), json.encode { generation = self.generation, urls = urls }))
end

function Host:run(eopts)
  local admin = require("rl._core").admin
  self.slot = must(self.store:add("hosts", 1))
  local pub, priv = admin.box_keypair()
  local hostname = (require("rl._fs").read_file("/proc/sys/kernel/hostname") or "?"):gsub("%s+$", "")
  must(self.store:set(key(self.slot, "info"), json.encode { rank = rl.dist.rank(), hostname = hostname,
    addr = self.addr, pub = pub }))
  local sealed
  while not sealed do   -- the controller seals the run's token to our key
    sealed = self.store:get(key(self.slot, "token"))
    if not sealed then task.sleep(0.1) end
  end
  local token = must(admin.box_open(pub, priv, sealed))
  self.eopts = remote_engine_opts(eopts, self.addr, token)
  local launches = {}
  for i = 1, self.n do launches[i] = must(rl.engine.launch(self.eopts)) end
  local ok, i, err = rl.engine.wait_all(launches)
  if not ok then
    for _, l in ipairs(launches) do l:stop() end
    error(("engine %d did not start: %s"):format(i, tostring(err)), 0)
  end
  for k, l in ipairs(launches) do self.engines[k] = l.engine end
  log.info("%d engine(s) on this host (%s): %s", self.n, self.addr, table.concat(self:urls(), ", "))
  self:publish()
  -- the beat has a task of its own: restarting an engine (a big model loads for minutes)
  -- must not look like a lost host
  self.beat_task = task.spawn_named("heartbeat of this host", function()
    while not self.stopped do
      -- a store that does not answer (rank 0 ending the run) is the controller's to judge
      local ok, err = pcall(self.store.add, self.store, key(self.slot, "beat"), 1)
      if not ok and not task.is_cancelled(err) then log.debug("heartbeat: %s", tostring(err)) end
      task.sleep(BEAT)
    end
  end)
  while not self.stopped do
    self:restart_dead()
    task.sleep(BEAT / 2)
  end
end

function Host:urls()
  local out = {}
  for i, e in ipairs(self.engines) do out[i] = e.url end
  return out
end

-- An engine whose process exited is started again with the same options; the new URL
-- is published (the controller refits it at the next weight sync).
function Host:restart_dead()
  local changed = false
  for i, e in ipairs(self.engines) do
    local code = e.pid and require("rl._core").process.reap(e.pid)
    if code then
      e.pid = nil
      log.warn("engine %d of this host (%s) exited with status %s; starting it again", i, tostring(e.url), tostring(code))
      local eng, err = rl.engine.start(self.eopts)
      if not eng then error(("engine %d could not be started again: %s"):format(i, tostring(err)), 0) end
      self.engines[i] = eng
      log.info("engine %d of this host serves again at %s", i, eng.url)
      changed = true
    end
  end
  if changed then self:publish() end
end

--- Stops the beat and the engines.
function Host:stop()
  if self.stopped then return end
  self.stopped = true
  for _, t in ipairs { self.task, self.beat_task } do
    if t and not t:done() then t:cancel("stopping") end
  end
  for _, e in ipairs(self.engines) do pcall(e.stop, e) end
  pcall(self.store.close, self.store)
end

-- ---- the controller: the other hosts' engines in the router and the weight syncs -------

local Controller = {}
Controller.__index = Controller
M.Controller = Controller

--- The controller's side: router (the policy's), the number of other hosts to wait for,
--- opts {lost_timeout (s, a host whose beat stops that long ends the run), ready_timeout
--- (s, for every host's engines to serve), timeout (store calls), method ("distributed",
--- "disk" or "http"), files_dir (a directory every host reads: the files fallback), sync_timeout (s, each
--- method's try of a weight sync; default 120)}. Call :wait_ready()
--- before the first rollout.
function M.controller(router, n_hosts, opts)
  opts = opts or {}
  local self = setmetatable({ router = router, expected = n_hosts, hosts = {}, by_url = {},
    lost_timeout = opts.lost_timeout or 60, ready_timeout = opts.ready_timeout or 600, events = {},
    files_dir = opts.files_dir, method = opts.method or "distributed", sync_timeout = opts.sync_timeout or 120 },
    Controller)
  self.store = rl.dist.store("engines", opts.timeout)
  self.addr = must(rl.dist.host_address())
  self.token = require("rl._core").admin.token()
  self.task = task.spawn_named("engines of other hosts", function()
    while not self.stopped do
      local ok, err = pcall(self.poll, self)
      if not ok and not self.stopped and not task.is_cancelled(err) then
        self.failure = tostring(err)
        log.error("engines of other hosts: %s", self.failure)
        -- the main task may wait in a collective with that host for --dist-timeout, which
        -- an orderly exit would sit out: end now (engines stopped, logs flushed)
        require("rl._core").process.exit_now(1)
      end
      task.sleep(BEAT / 2)
    end
  end)
  return self
end

-- One look at the store: new hosts get the token; new engine lists are taken in; a
-- beat that stopped ends the run.
function Controller:poll()
  local n = must(self.store:add("hosts", 0))
  local now = rl.now()
  for slot = 1, n do
    local h = self.hosts[slot]
    if not h then
      local info = self.store:get(key(slot, "info"))
      if info then
        h = json.decode(info)
        h.slot, h.generation, h.beat, h.beat_at, h.urls = slot, 0, -1, now, {}
        must(self.store:set(key(slot, "token"), require("rl._core").admin.box_seal(h.pub, self.token)))
        self.hosts[slot] = h
        log.info("host %s (rank %d, %s) joined; its engines start", h.addr, h.rank, h.hostname)
      end
    end
    if h then
      local beat = must(self.store:add(key(slot, "beat"), 0))
      if beat ~= h.beat then
        if h.silent then   -- beating again: its engines rejoin at the next weight sync
          h.silent = false
          log.warn("host %s (rank %d) beats again after %.1f s; its engines rejoin at the next weight sync", h.addr,
            h.rank, now - h.beat_at)
        end
        h.beat, h.beat_at = beat, now
      elseif h.generation > 0 and now - h.beat_at > self.lost_timeout then
        error(("host %s (rank %d) lost: no heartbeat for %.0f s (--host-lost-timeout); the run ends (resume it "
          .. "from its last checkpoint with --load; torchrun --max-restarts does so itself)"):format(h.addr, h.rank,
          now - h.beat_at), 0)
      elseif h.generation > 0 and not h.silent and now - h.beat_at > SILENT_BEATS * BEAT then
        -- a host that misses a few beats serves no more requests until it beats again
        h.silent = true
        for _, u in ipairs(h.urls) do
          local e = self.by_url[u]
          if e and e.state == "serving" then
            self.router:remove(u)
            e.state = "pending"
            self.events[#self.events + 1] = ("%s engine %d out (no heartbeat)"):format(h.addr, e.index)
          end
        end
        log.warn("host %s (rank %d): no heartbeat for %.1f s; its engines leave the router (the run ends after "
          .. "%g s without one: --host-lost-timeout)", h.addr, h.rank, now - h.beat_at, self.lost_timeout)
      end
      local rec = self.store:get(key(slot, "engines"))
      if rec then self:take(h, json.decode(rec)) end
    end
  end
end

-- A host's engine list: {generation, urls} (or {error}). URLs gone leave the router;
-- new ones wait for the next sync ("pending"), or join at once while the trainer has not
-- stepped (they serve the checkpoint as loaded).
function Controller:take(h, rec)
  if rec.error then
    error(("host %s (rank %d) could not run its engines: %s"):format(h.addr, h.rank, rec.error), 0)
  end
  if rec.generation == h.generation then return end
  h.generation = rec.generation
  local now_urls = {}
  for _, u in ipairs(rec.urls) do now_urls[u] = true end
  for _, u in ipairs(h.urls) do
    if not now_urls[u] then self:drop(u, "its host restarted it") end
  end
  h.urls = rec.urls
  for i, u in ipairs(rec.urls) do
    if not self.by_url[u] then
      self.by_url[u] = { url = u, host = h, index = i, state = "pending",
                         receiver = require("rl.weight_sync").receiver { url = u } }
      if self.fresh_weights and self.fresh_weights() then self:admit(self.by_url[u]) end
      log.info("engine %d of host %s at %s: %s", i, h.addr, u,
        self.by_url[u].state == "serving" and "serving" or "joins the router at the next weight sync")
    end
  end
  h.ready = true   -- every engine it published is in the router, or waits for the next sync
end

-- Into the router, and until its health probes find it healthy (a router sends nothing
-- to an unprobed or unhealthy worker while another can take the request: a first probe
-- that failed on a loaded host would otherwise keep it idle for the next rollout), at
-- most 10 s; then a warning says why the router holds it back.
function Controller:admit(e)
  local ok, err = self.router:add(e.url)
  if not ok then return log.warn("router: adding %s: %s", e.url, tostring(err)) end
  e.state, e.fails = "serving", 0
  local deadline, last = rl.now() + 10, nil
  while rl.now() < deadline do
    for _, w in ipairs(self.router:workers() or {}) do
      if w.url == e.url then
        if w.status == "healthy" then return end
        last = w
      end
    end
    task.sleep(0.05)
  end
  log.warn("engine %d of host %s (%s): in the router, which holds it back after 10 s: %s%s", e.index, e.host.addr,
    e.url, last and last.status or "not listed", last and last.last_error and last.last_error ~= "" and
    (" (" .. tostring(last.last_error) .. ")") or "")
end

function Controller:drop(url, why)
  local e = self.by_url[url]
  if not e then return end
  self.by_url[url] = nil
  self.events[#self.events + 1] = ("%s engine %d out (%s)"):format(e.host.addr, e.index, why)
  if e.state ~= "serving" then   -- benched already: forgotten
    return log.info("engine %d of host %s (%s), out of the router, forgotten: %s", e.index, e.host.addr, url, why)
  end
  self.router:remove(url)
  log.warn("engine %d of host %s (%s) out of the router: %s", e.index, e.host.addr, url, why)
end

--- Waits until every other host's engines serve (or are pending). fresh(): true while
--- the trainer holds the weights the engines loaded (they join the router at once).
function Controller:wait_ready(fresh)
  self.fresh_weights = fresh
  local deadline = rl.now() + self.ready_timeout
  while true do
    if self.failure then error(self.failure, 0) end
    local ready = 0
    for _, h in pairs(self.hosts) do if h.ready then ready = ready + 1 end end
    if ready >= self.expected then break end
    if rl.now() > deadline then
      error(("%d of %d other host(s) published engines within %g s (each host's first rank starts them; "
        .. "its log says why not)"):format(ready, self.expected, self.ready_timeout), 0)
    end
    task.sleep(0.1)
  end
  local per = {}
  for _, h in pairs(self.hosts) do per[#per + 1] = ("%s: %d"):format(h.addr, #h.urls) end
  table.sort(per)
  log.info("engines on %d other host(s): %s", self.expected, table.concat(per, ", "))
end

--- Every URL this controller manages (health's probes leave them alone).
function Controller:urls()
  local out = {}
  for u in pairs(self.by_url) do out[u] = true end
  return out
end

local function probe(url)
  local resp = require("rl.http").get(url .. "/health", { timeout = 5 })
  return resp ~= nil and resp.status == 200
end

-- The engines a sync goes to: every one that answers its health probe. One that does
-- not leaves the router and waits, known still: its process may be stopped (SIGSTOP),
-- swapping or busy; it is probed again at the next sync, then after 2, 4 and every 8
-- syncs while it stays silent, and refit by the sync it answers (one whose process exits
-- is replaced by its host's restart instead). Sorted by URL: the c10d group's order.
function Controller:live()
  local list = {}
  for _, e in pairs(self.by_url) do
    if not e.host.silent then   -- a silent host's engines wait for its beat
      if (e.wait or 0) > 0 then e.wait = e.wait - 1 else list[#list + 1] = e end
    end
  end
  table.sort(list, function(a, b) return a.url < b.url end)
  local alive = task.wait_all((function()
    local ts = {}
    for i, e in ipairs(list) do ts[i] = task.spawn(function() return probe(e.url) end) end
    return ts
  end)())
  local out = {}
  for i, e in ipairs(list) do
    if alive[i] then
      if e.misses then
        log.info("engine %d of host %s (%s) answers again: this sync refits it", e.index, e.host.addr, e.url)
        self.events[#self.events + 1] = ("%s engine %d back"):format(e.host.addr, e.index)
      end
      e.misses, e.wait = nil, nil
      out[#out + 1] = e
    else
      self:bench(e, "no answer to /health before the sync")
    end
  end
  return out
end

-- Out of the router, kept for a later sync's probe (Controller:live).
function Controller:bench(e, why)
  e.misses = (e.misses or 0) + 1
  e.wait = math.min(8, 2 ^ (e.misses - 1)) - 1
  if e.state == "serving" then self.router:remove(e.url) end
  e.state = "pending"
  if e.misses > 1 then return end
  self.events[#self.events + 1] = ("%s engine %d out (%s)"):format(e.host.addr, e.index, why)
  log.warn("engine %d of host %s (%s) out of the router: %s (probed again at later syncs)", e.index, e.host.addr,
    e.url, why)
end

--- One round of fault tolerance's probes (rl.recipe.health, --use-fault-tolerance) of the
--- remote engines in the router, all at once: probe(url) → ok, why; stale() → true when
--- the results no longer count (monitoring paused meanwhile). A failed probe makes an
--- engine suspect; a second in a row benches it (out of the router, which sends the
--- requests it holds to the others; kept, and the sync it answers refits it: see
--- Controller:live). Never killed or restarted from here: its host owns the process.
--- Skipped while a weight sync runs (the sync probes them itself).
function Controller:check(probe, stale)
  if self.syncing then return end
  local list = {}
  for _, e in pairs(self.by_url) do
    if e.state == "serving" and not e.host.silent then list[#list + 1] = e end
  end
  table.sort(list, function(a, b) return a.url < b.url end)
  local seq, ts = self.sync_seq, {}
  for i, e in ipairs(list) do
    ts[i] = task.spawn_named("health probe " .. e.url, function() return { probe(e.url) } end)
  end
  for i, t in ipairs(ts) do
    local got, r = pcall(t.wait, t)
    local e = list[i]
    local current = not (stale and stale()) and not self.syncing and self.sync_seq == seq and self.by_url[e.url] == e
      and e.state == "serving"
    if got and current then self:record_probe(e, r[1], r[2]) end
  end
end

-- A health probe's result for a serving engine: suspect after one failure, benched after two.
function Controller:record_probe(e, ok, why)
  local name = ("engine %d of host %s (%s)"):format(e.index, e.host.addr, e.url)
  if ok then
    if (e.fails or 0) > 0 then log.info("%s: suspect -> healthy: answers its health probe again", name) end
    e.fails = 0
    return
  end
  e.fails = (e.fails or 0) + 1
  if e.fails < 2 then return log.warn("%s: healthy -> suspect: %s", name, tostring(why)) end
  e.fails = 0
  self:bench(e, ("2 health probes in a row failed (%s); the router sends its requests to the other engines")
    :format(tostring(why)))
end

--- The trainer's weights to every live remote engine: by one c10d broadcast (the trainer
--- rank 0 of a group with them; their /init_weights_update_group and
--- /update_weights_from_distributed calls concurrently); when the broadcast fails, as files
--- from a directory every host reads (--remote-weights-dir), else over HTTP (safetensors
--- buckets POSTed to each engine's /update_weights_from_safetensors). --remote-weight-sync
--- disk or http: that way every time. `version`: the local engines'. Pending engines join the
--- router after it. A failure drops the engines that stopped answering and tries once
--- more; then every remote engine waits out of the router until the next sync (the run
--- goes on with the others). → {urls, versions, methods, seconds}.
function Controller:sync(tr, version, timeout)
  self.syncing, self.sync_seq = true, (self.sync_seq or 0) + 1
  local ok, r = pcall(self.sync_all, self, tr, version, timeout)
  self.syncing, self.sync_seq = false, self.sync_seq + 1
  if not ok then error(r, 0) end
  return r
end

function Controller:sync_all(tr, version, timeout)
  local t0 = rl.now()
  local function push(live, method)
    local rxs = {}
    for i, e in ipairs(live) do rxs[i] = e.receiver end
    return tr:sync(rxs, { method = method, version = version, master_address = self.addr, timeout = timeout or self.sync_timeout,
                          bucket_bytes = method == "distributed" and M.BUCKET_BYTES or nil,
                          tmp_dir = method == "disk" and self.files_dir or nil })
  end
  local methods = { self.method, self.method }
  if self.method == "distributed" and self.files_dir then
    methods[2] = "disk"
  elseif self.method == "distributed" and not tr:lora() then
    methods[2] = "http"   -- an adapter has no HTTP path: the broadcast once more
  end
  for attempt = 1, 2 do
    local live = self:live()
    if #live == 0 then return { urls = {}, versions = {}, methods = {}, seconds = rl.now() - t0 } end
    local r, err = push(live, methods[attempt])
    if r then
      local urls = {}
      for i, e in ipairs(live) do
        urls[i] = e.url
        if e.state == "pending" then
          self:admit(e)
          log.info("engine %d of host %s (%s) refit: serves weight version %s (%s); in the router", e.index,
            e.host.addr, e.url, tostring(r.versions[i]), methods[attempt])
        end
      end
      return { urls = urls, versions = r.versions, methods = r.methods, seconds = rl.now() - t0 }
    end
    log.warn("weight sync to the other hosts' engines (%s) failed (attempt %d of 2): %s", methods[attempt], attempt,
      tostring(err))
  end
  for url, e in pairs(self.by_url) do
    if e.state == "serving" then self.router:remove(url) end
    e.state = "pending"
  end
  self.events[#self.events + 1] = "remote engines out until the next sync"
  return { urls = {}, versions = {}, methods = {}, seconds = rl.now() - t0, failed = true }
end

--- Engines per host for the step line and metrics: {["<addr>"] = serving count}.
function Controller:per_host()
  local out = {}
  for _, h in pairs(self.hosts) do out[h.addr] = 0 end
  for _, e in pairs(self.by_url) do
    if e.state == "serving" then out[e.host.addr] = out[e.host.addr] + 1 end
  end
  return out
end

--- " | engines <addr> n, ..." for the console's step line, and the events since the last.
function Controller:step_note(local_addr, local_n)
  local parts = { ("%s %d"):format(local_addr, local_n) }
  local per = self:per_host()
  local addrs = {}
  for a in pairs(per) do addrs[#addrs + 1] = a end
  table.sort(addrs)
  for _, a in ipairs(addrs) do parts[#parts + 1] = ("%s %d"):format(a, per[a]) end
  local note = " | engines " .. table.concat(parts, ", ")
  if #self.events > 0 then note = note .. " (" .. table.concat(self.events, "; ") .. ")" end
  self.events = {}
  return note
end

function Controller:stop()
  if self.stopped then return end
  self.stopped = true
  if self.task and not self.task:done() then self.task:cancel("stopping") end
  pcall(self.store.close, self.store)
end

return M
