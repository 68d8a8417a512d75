--- rl.router: a router over engines (sglang-router's HTTP surface). See docs/router.md.
--
--   local r = assert(rl.router.start { workers = { e1.url, e2.url }, policy = "cache_aware" })
--   rl.http.post(r.url .. "/generate", { text = "1+1=" })
--   r:add("http://127.0.0.1:30002"); r:remove("http://127.0.0.1:30001")
--   for _, w in ipairs(r:workers()) do print(w.url, w.is_healthy, w.load) end
--   r:stop()
--
-- mode = "thread" (default): the router runs inside this process on its own
-- thread and event loop, so a busy recipe never delays routing.
-- mode = "process": a child `rlhost router ...` (survives nothing of ours, but
-- is isolated from our crashes); the handle talks to it over HTTP, so its
-- methods must be called from a task.
local core = require "rl._core"
local task = require "rl.task"

local crouter = core.router
local M = {}

local options = require "rl.router.options"   -- every option, declared once

--- Policy names: round_robin, random, least_load, power_of_two, cache_aware, consistent_hashing.
function M.policies() return crouter.policies() end

-- ---- thread mode ---------------------------------------------------------------------

local Thread = {}
Thread.__index = Thread

--- Adds a worker; returns its entry ({id, url, is_healthy, load, ...}) or nil, err.
--- opts (PD mode): {worker_type = "prefill" | "decode", bootstrap_port = N}.
function Thread:add(url, opts) return self._h:add(url, opts) end
--- Removes a worker by URL or id; true when it was registered.
function Thread:remove(url) return self._h:remove(url) end
--- The workers: {{id, url, is_healthy, status, load, circuit_state, requests, failures, last_error}, ...};
--- status is "pending" until the first health probe answers, then "healthy" or "unhealthy".
function Thread:workers() return self._h:workers() end
--- The router's own Prometheus text (as GET /metrics).
function Thread:metrics() return self._h:metrics() end
--- Stops serving (in-flight requests are dropped) and joins the router thread.
function Thread:stop() self._h:stop() end

-- ---- process mode --------------------------------------------------------------------

local Process = {}
Process.__index = Process

local function http() return require "rl.http" end
local function json() return require "rl.json" end

-- The child's worker changes need the run's admin token, which it inherited.
local function admin_headers() return require("rl._admin").headers() end

function Process:add(url, opts)
  opts = opts or {}
  local body = { url = url, worker_type = opts.worker_type, bootstrap_port = opts.bootstrap_port }
  local resp, err = http().request { method = "POST", url = self.url .. "/workers", body = json().encode(body),
                                     headers = admin_headers(), timeout = 10 }
  if not resp then return nil, err end
  local body = json().decode(resp.body)
  if resp.status >= 300 then return nil, (body and body.error and body.error.message) or resp.body end
  return body
end

function Process:remove(url)
  local resp = http().request { method = "POST", url = self.url .. "/remove_worker?url=" .. url,
                                headers = admin_headers(), timeout = 10 }
  return resp ~= nil and resp.status == 200
end

function Process:workers()
  local out, err = http().json(http().get(self.url .. "/workers", { timeout = 10 }))
  if not out then return nil, err end
  return out.workers
end

function Process:metrics()
  local resp, err = http().get(self.url .. "/metrics", { timeout = 10 })
  if not resp then return nil, err end
  return resp.body
end

--- SIGTERM, then SIGKILL after 5 s; waits for the child to exit.
function Process:stop()
  if not self.pid then return end
  require("rl.process").stop_pid(self.pid, 5)
  self.pid = nil
end

local function start_process(opts)
  task.need_task("rl.router.start")
  local ready = os.tmpname()
  os.remove(ready)  -- the child creates it once listening
  local argv = { "@self", "router", "--ready-file", ready }
  if opts.port == nil then argv[#argv + 1] = "--port"; argv[#argv + 1] = "0" end
  for _, a in ipairs(options.argv(opts)) do argv[#argv + 1] = a end
  local pid, err = core.process.spawn(argv)   -- dies with us; inherits $RLHOST_ADMIN_TOKEN
  if not pid then return nil, "rl.router.start: " .. err end
  local deadline = core.loop.now() + (opts.ready_timeout or 15)
  while true do
    local f = io.open(ready, "r")
    local url = f and f:read("*l")
    if f then f:close() end
    if url and url:match("^http") then
      os.remove(ready)
      local h = setmetatable({ url = url, pid = pid, mode = "process" }, Process)
      -- The file is written after bind; /health proves the loop answers.
      local resp = http().get(url .. "/health", { timeout = 5 })
      if resp and resp.status == 200 then return h end
    end
    local code = core.process.reap(pid)
    if code then
      os.remove(ready)
      return nil, "rl.router.start: the router process exited with status " .. code
        .. " before it was ready (its log above says why)"
    end
    if core.loop.now() > deadline then
      core.process.kill(pid, 9)
      os.remove(ready)
      return nil, "rl.router.start: the router process was not ready after "
        .. (opts.ready_timeout or 15) .. " s"
    end
    task.sleep(0.02)
  end
end

-- ---- a router someone else runs -----------------------------------------------------

local Lent = setmetatable({}, { __index = Process })
Lent.__index = Lent

function Lent:add(url, opts)
  local r, err = Process.add(self, url, opts)
  if r then self.added[#self.added + 1] = url end
  return r, err
end

--- Takes out the workers this handle added; the router keeps running.
function Lent:stop()
  for _, u in ipairs(self.added) do pcall(Process.remove, self, u) end
  self.added = {}
end

--- A handle on a router already running at `url` (slime's --sglang-router-ip/port):
--- :add, :remove, :workers, :metrics over its HTTP API (worker changes carry the run's
--- admin token); :stop() takes out the workers it added and leaves the router running.
--- nil, err when GET /health does not answer.
function M.connect(url)
  task.need_task("rl.router.connect")
  url = tostring(url):gsub("/+$", "")
  local resp, err = http().get(url .. "/health", { timeout = 5 })
  if not resp or resp.status ~= 200 then
    return nil, ("rl.router.connect: %s: GET /health %s"):format(url, resp and ("answered " .. resp.status) or tostring(err))
  end
  return setmetatable({ url = url, mode = "lent", added = {} }, Lent)
end

--- Starts a router. opts: workers, policy, host, port, mode ("thread"|"process"),
--- PD mode: pd_disaggregation = true, prefill = {URL or {url = URL, bootstrap_port = N}, ...},
--- decode = {URL, ...}, prefill_policy, decode_policy;
--- health_*, max_retries, retry_backoff, request_timeout, circuit_*, cache_threshold,
--- balance_*_threshold, ... (docs/router.md). Returns a handle with `url`,
--- :add(url), :remove(url), :workers(), :metrics(), :stop(); or nil, err when it
--- cannot listen. Bad options raise.
function M.start(opts)
  options.check(opts, "rl.router.start")
  if opts.mode == "process" then return start_process(opts) end
  local h, err = crouter.start(opts)
  if not h then return nil, "rl.router.start: " .. err end
  return setmetatable({ url = h:url(), port = h:port(), mode = "thread", _h = h }, Thread)
end

return M
