--- rl.dist: data parallel over processes (a c10d process group: Gloo on the CPU,
--- NCCL on CUDA builds).
--
--   rlhost --nproc 2 recipe.lua          -- or torchrun-style RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT
--   rl.dist.init()                        -- from the environment (rl.trainer.new does it too)
--   local part
--   if rl.dist.is_main() then
--     local batch = rl.rollout.train_data.convert(groups)
--     part = rl.dist.scatter_object(rl.rollout.train_data.split(batch, rl.dist.world_size()))
--   else
--     part = rl.dist.scatter_object(nil)
--   end
--   tr:train(part)                         -- gradients averaged over the ranks
--
-- Collectives run on a helper thread; the calling task waits (servers and other
-- tasks keep going). Each has the group's timeout: a rank that is gone or stuck
-- makes them fail with an error naming the op, the rank and the timeout.
local json = require "rl.json"
local task = require "rl.task"

local M = {}
local state = { group = nil, rank = nil, world_size = nil }

local function native() return require("rl.torch")._dist end

local function env_opts()
  local text = native().env()
  return text and json.decode(text) or nil
end

-- A collective's op: its text, or it raises (a rank cannot go on without its peers).
local function await(op, fname)
  local text, err = task.await_json(op, fname, true)
  if text == nil then error(fname .. ": " .. tostring(err), 0) end
  return text
end

local KNOWN = { rank = true, world_size = true, master_addr = true, master_port = true, timeout = true,
                backend = true, local_rank = true }

--- Joins the process group. opts (all optional, default from the environment that
--- `rlhost --nproc` or torchrun set): rank, world_size, master_addr (127.0.0.1),
--- master_port, timeout (seconds, 300: rendezvous and every collective), backend
--- ("auto": nccl on CUDA builds with a GPU, else gloo), local_rank. world_size 1 (or no WORLD_SIZE):
--- nothing to join. Returns true; a failed rendezvous raises naming it.
function M.init(opts)
  local fname = "rl.dist.init"
  if opts ~= nil and type(opts) ~= "table" then error(fname .. ": bad argument #1 'opts' (table expected)", 2) end
  if state.rank ~= nil then error(fname .. ": already initialised (rank " .. state.rank .. ")", 2) end
  local o = {}
  local env = env_opts()
  for k, v in pairs(env or {}) do o[k] = v end
  for k, v in pairs(opts or {}) do
    if not KNOWN[k] then
      error(("%s: unknown option '%s' (rank, world_size, master_addr, master_port, timeout, backend, local_rank)")
        :format(fname, tostring(k)), 2)
    end
    o[k] = v
  end
  o.rank, o.world_size, o.backend = o.rank or 0, o.world_size or 1, o.backend or "auto"
  if o.world_size > 1 and not o.master_port then
    error(fname .. ": master_port is required with world_size > 1 so that the other ranks find rank 0 "
      .. "(hint: rlhost --nproc N sets MASTER_PORT)", 2)
  end
  if o.world_size > 1 then
    task.need_task(fname)
    local g = native().group_new(json.encode(o))
    await(g:connect(), fname)
    g:set_default()
    state.group = g
  end
  state.rank, state.world_size = o.rank, o.world_size
  return true
end

--- A process group of its own, beside the default one (rl.weight_sync's trainer-to-engines
--- group): opts {rank, world_size, master_addr, master_port (0 = a free one), timeout,
--- name, backend}. Rank 0 starts its store now (handle:port()); the rendezvous is the
--- handle's owner's to run (a weight source joins it on its helper thread). → the handle
--- (:port(), :close()).
function M.new_group(opts)
  if type(opts) ~= "table" then error("rl.dist.new_group: bad argument #1 'opts' (table expected)", 2) end
  return native().group_new(json.encode(opts))
end

--- Initialises from the environment when that asks for more than one rank and
--- nothing is initialised yet (rl.trainer.new calls it). Returns the group or nil.
function M.ensure()
  if state.rank == nil then
    local env = env_opts()
    if env and (env.world_size or 1) > 1 then M.init() end
  end
  return state.group
end

-- Before init: the environment's value (no LibTorch needed to ask).
local function from_env(key, var, default)
  if state[key] ~= nil then return state[key] end
  return tonumber(os.getenv(var) or "") or default
end

--- This process's rank (0 when not distributed).
function M.rank() return from_env("rank", "RANK", 0) end
--- The number of ranks (1 when not distributed).
function M.world_size() return from_env("world_size", "WORLD_SIZE", 1) end
--- True on rank 0 (it drives the rollout and syncs engines).
function M.is_main() return M.rank() == 0 end
--- True once init joined a group of more than one rank.
function M.is_initialized() return state.group ~= nil end

local function group()
  M.ensure()
  return state.group
end

--- Waits until every rank gets here.
function M.barrier()
  local g = group()
  if not g then return true end
  task.need_task("rl.dist.barrier")
  await(g:barrier(), "rl.dist.barrier")
  return true
end

--- Rank 0's obj (a JSON-able value) on every rank; other ranks pass anything (ignored).
function M.broadcast_object(obj, root)
  local fname = "rl.dist.broadcast_object"
  root = root or 0
  local g = group()
  if not g then return obj end
  task.need_task(fname)
  local text
  if M.rank() == root then
    local ok, enc = pcall(json.encode, { v = obj })
    if not ok then error(fname .. ": bad argument #1 'obj' (not JSON-able: " .. tostring(enc) .. ")", 2) end
    text = enc
  end
  return json.decode(await(g:broadcast(text, root), fname)).v
end

--- Rank r gets list[r + 1] of rank 0's list (world_size JSON-able values, e.g. the
--- parts of rl.rollout.train_data.split); other ranks pass nil.
function M.scatter_object(list, root)
  local fname = "rl.dist.scatter_object"
  root = root or 0
  local n = M.world_size()
  if M.rank() == root then
    if type(list) ~= "table" or #list ~= n then
      error(("%s: bad argument #1 'list' (a list of world_size = %d values expected, got %s)")
        :format(fname, n, type(list) == "table" and ("%d entries"):format(#list) or type(list)), 2)
    end
  end
  local g = group()
  if not g then return list[1] end
  task.need_task(fname)
  local blobs
  if M.rank() == root then
    blobs = {}
    for i = 1, n do
      local ok, enc = pcall(json.encode, { v = list[i] })
      if not ok then error(("%s: list[%d] is not JSON-able: %s"):format(fname, i, tostring(enc)), 2) end
      blobs[i] = enc
    end
  end
  return json.decode(await(g:scatter(blobs, root), fname)).v
end

--- Every rank's obj (a JSON-able value), as a list by rank (list[r + 1] is rank r's), on
--- rank `root` (default 0); other ranks get nil. Every rank must call it. Small values
--- (per-sample stats): one broadcast per rank.
function M.gather_object(obj, root)
  local fname = "rl.dist.gather_object"
  root = root or 0
  local ok, enc = pcall(json.encode, { v = obj })
  if not ok then error(fname .. ": bad argument #1 'obj' (not JSON-able: " .. tostring(enc) .. ")", 2) end
  local g = group()
  if not g then return { obj } end
  task.need_task(fname)
  local me, out = M.rank(), {}
  for r = 0, M.world_size() - 1 do
    local text = await(g:broadcast(r == me and enc or nil, r), fname)
    if me == root then out[r + 1] = json.decode(text).v end
  end
  return me == root and out or nil
end

-- ---- the job's store ----------------------------------------------------------------

local Store = {}
Store.__index = Store

local function store_call(self, fname, method, ...)
  task.need_task(fname)
  self.lock:acquire()   -- the native handle runs one call at a time
  local ok, text, err = pcall(function(...) return task.await_json(self._h[method](self._h, ...), fname, true) end, ...)
  self.lock:release()
  if not ok then error(text, 0) end
  if text == nil then return nil, fname .. ": " .. tostring(err) end
  return text
end

--- Sets key to value (a string). → true, or nil and why.
function Store:set(key, value)
  local r, err = store_call(self, "rl.dist.Store:set", "set", key, value)
  return r and true, err
end

--- The key's value, or nil when no one set it (never waits for it); nil, why on failure.
function Store:get(key)
  local text, err = store_call(self, "rl.dist.Store:get", "get", key)
  if not text then return nil, err end
  return json.decode(text).v
end

--- Adds delta (an integer) to the counter at key (0 when new). → the sum, or nil, why.
function Store:add(key, delta)
  local text, err = store_call(self, "rl.dist.Store:add", "add", key, delta or 1)
  return text and tonumber(text), err
end

function Store:close() self._h:close() end

--- The job's key-value store — the c10d store every rank already reaches (rank 0's, or
--- torchrun's agent's) — with keys under `name` of its own, apart from the groups'
--- (rl.recipe.hosts publishes engines there). Its own connection: a collective in flight
--- never delays it. Each call waits at most `timeout` seconds (default 30). A job of
--- one process has no store: an error.
function M.store(name, timeout)
  if type(name) ~= "string" or name == "" then
    error("rl.dist.store: bad argument #1 'name' (a non-empty string expected)", 2)
  end
  return setmetatable({ _h = native().store_new(name, timeout or 30), lock = task.semaphore(1) }, Store)
end

--- The address the job's other hosts reach this one at: GLOO_SOCKET_IFNAME's interface's,
--- else this host's address on the route to `towards` (default MASTER_ADDR); 127.0.0.1 on
--- one host. → the address, or nil and why.
function M.host_address(towards)
  local ifname = os.getenv("GLOO_SOCKET_IFNAME")
  return native().local_address(towards or os.getenv("MASTER_ADDR") or "127.0.0.1", ifname ~= "" and ifname or nil)
end

--- Leaves the group (the trainer stops all-reducing). Idempotent.
function M.destroy()
  if state.group then state.group:close() end
  state.group, state.rank, state.world_size = nil, nil, nil
end

return M
