--- rl.weight_sync: new weights from a trainer (any weight source) into inference engines.
--
-- Engine side, a receiver per engine: what it can take and the version it serves.
--
--   local rx = eng:weight_receiver()                 -- rl.engine (either mode) or a vLLM engine
--   local rx = rl.weight_sync.receiver("http://10.0.0.2:30000")   -- any engine server ({url, api_key} too)
--   rx:methods()                  -- e.g. {"memory", "shm", "disk", "distributed", "http"}
--   assert(rx:receive_disk("/dev/shm/step_7", "7"))
--   rx:version()                  -- "7": the weight version it serves
--
-- Sender side, one per weight source (rl.trainer's tr:weight_source()): it keeps what lasts
-- between syncs (per engine, the shared-memory file it writes; per engine set, a c10d group).
--
--   local tx = rl.weight_sync.sender(tr:weight_source())
--   local r = assert(tx:push({ eng1, eng2 }, { version = "7" }))   -- r.methods, r.versions, r.seconds
--
-- Methods (docs/trainer.md, "Weight sync"): "memory" — a thread-mode engine in this process
-- takes the source's tensors between two of its steps; "shm" — an engine server on this
-- machine shares two buffers in /dev/shm, the sender writes the one it is not reading and it
-- switches; "disk" — a safetensors directory on tmpfs (update_weights_from_disk);
-- "distributed" — a c10d broadcast to engine servers that joined a group (SGLang's
-- endpoints); "http" — the source's safetensors cut into buckets (of opts.bucket_bytes,
-- default 64 MiB) and POSTed to every engine server's /update_weights_from_safetensors,
-- the engines concurrently, installed at the last bucket (engines on other hosts with no
-- shared filesystem and no c10d group). "auto" picks memory, else shm for process
-- engines (files when one cannot share), else disk; never http. Every receive swaps the weights between two engine steps and flushes
-- the prefix cache; the engine then reports the new version.
--
-- A weight source is a table with these methods (each waits in the calling task):
--   src:meta()                         -> {names, dtypes, shapes} (what /update_weights_from_distributed takes)
--   src:copy_to_engine(native, version) -> {weight_version} | nil, err   (memory: a thread engine's handle)
--   src:write_shm(layout_json, buffer) -> true | nil, err   (every tensor into that buffer, in the engine's layout)
--   src:forget_shm(id)                 -- unmap an engine's shared file
--   src:join_group(group)              -> true | nil, err   (rank 0 of a c10d group, rl.dist.new_group)
--   src:broadcast(group, bucket_bytes) -> true | nil, err   (bucket_bytes: dist::weight_buckets; 0 a tensor at a time)
--   src:can_bucket()                   -> bool (optional: false sends a tensor at a time whatever is asked)
--   src:save(dir)                      -> true | nil, err   (a Hugging Face directory)
--
-- A LoRA trainer's weights are its adapter, and only the adapter moves (the base never
-- does): each engine takes it under src.lora_name (or opts.lora_name) in place of the last
-- one, and the rollout's requests name it (lora_path). The same methods carry it: "memory"
-- (a copy into a thread engine), "shm" (a two-buffer file for the adapter's tensors,
-- /init_lora_shm + /update_lora_from_shm), "disk" (PEFT files, /load_lora_adapter: what
-- vLLM and SGLang take too), "distributed" (/update_lora_from_distributed over the same
-- c10d group); "auto" picks as for weights. The source's side of it:
--   src.lora_name                      -- the name engines serve the adapter under
--   src:lora_meta()                    -> {names, dtypes, shapes, r, lora_alpha, target_modules}
--   src:save_lora(dir)                 -> true | nil, err   (the adapter as PEFT files)
--   src:copy_lora_to_engine(native, name, version) -> {weight_version} | nil, err
--   src:write_lora_shm(layout_json, buffer) -> true | nil, err
--   src:broadcast_lora(group, bucket_bytes) -> true | nil, err
-- and a push reports methods[i] as "lora/memory", "lora/shm", "lora/disk" or "lora/distributed".
local json = require "rl.json"
local task = require "rl.task"
local log = require "rl.log"

local M = {}

local function now() return require("rl._core").loop.now() end
local function control_headers(api_key) return require("rl._admin").headers(api_key) end

-- ---- receivers (the engine side) ---------------------------------------------------

local Receiver = {}
Receiver.__index = Receiver
M.Receiver = Receiver

--- A receiver from an engine's own parts (what an engine backend's :weight_receiver()
--- passes): url (its server, if any), api_key (what its control endpoints want; default
--- the run's admin token), engine (an object with update_weights_from_disk and stats),
--- native (a thread-mode rl.engine's handle: memory transfers), kind ("thread",
--- "process", "vllm", "server"), disk_only (no shm / c10d endpoints: vLLM).
function M.new_receiver(parts)
  return setmetatable({ url = parts.url, kind = parts.kind or "server", engine = parts.engine,
                        disk_only = parts.disk_only or false, _api_key = parts.api_key, _native = parts.native },
    Receiver)
end

--- The receiver of `target`: a Receiver (itself), an engine with :weight_receiver()
--- (rl.engine, vLLM engines), an engine server's URL or {url, api_key}, or any object
--- with update_weights_from_disk(dir, version) (files only). nil, why otherwise.
function M.receiver(target)
  if getmetatable(target) == Receiver then return target end
  if type(target) == "string" then return M.new_receiver { url = target } end
  if type(target) ~= "table" then return nil, "neither an rl.engine nor has update_weights_from_disk" end
  if type(target.weight_receiver) == "function" then return target:weight_receiver() end
  if type(target.url) == "string" and not target.update_weights_from_disk then
    return M.new_receiver { url = target.url, api_key = target.api_key }
  end
  if type(target.update_weights_from_disk) == "function" then
    return M.new_receiver { url = target.url, engine = target, kind = "object", disk_only = true }
  end
  return nil, "neither an rl.engine nor has update_weights_from_disk"
end

--- The methods this engine can take, in the order "auto" prefers them.
function Receiver:methods()
  local out = {}
  if self._native then out[#out + 1] = "memory" end
  if self.url and not self.disk_only then out[#out + 1] = "shm" end
  out[#out + 1] = "disk"
  if self.url and not self.disk_only then
    out[#out + 1] = "distributed"
    out[#out + 1] = "http"
  end
  return out
end

function Receiver:can(method)
  for _, m in ipairs(self:methods()) do if m == method then return true end end
  return false
end

function Receiver:__tostring() return ("rl.weight_sync.Receiver(%s, %s)"):format(self.kind, tostring(self.url)) end

-- POST url..path to a control endpoint, `body` a table sent as JSON (or, with
-- content_type, bytes sent as they are); → the decoded reply or nil, err (any non-200,
-- or success = false).
function Receiver:post(path, body, timeout, content_type)
  local headers = control_headers(self._api_key)
  if content_type then headers["content-type"] = content_type end
  local resp, err = require("rl.http").request { method = "POST", url = self.url .. path,
    body = content_type and body or json.encode(body), headers = headers, timeout = timeout }
  if not resp then return nil, tostring(err) end   -- rl.http's error names the method and URL
  local r = json.decode(resp.body)
  if resp.status ~= 200 or (type(r) == "table" and r.success == false) then
    local msg = type(r) == "table" and (r.message or (r.error and r.error.message)) or resp.body
    return nil, ("POST %s%s: HTTP %d: %s"):format(self.url, path, resp.status, tostring(msg))
  end
  return type(r) == "table" and r or { success = true }
end

--- Memory: the source's tensors copied into this thread-mode engine between two of its
--- steps (its prefix cache flushed). → {weight_version, seconds} or nil, err.
function Receiver:receive_memory(source, version)
  if not self._native then return nil, "memory transfers need a thread-mode rl.engine in this process" end
  return source:copy_to_engine(self._native, version)
end

--- Shared memory, step 1 (/init_weights_shm): the engine moves its weights into a new
--- two-buffer file in /dev/shm. → its layout {id, path, buffer_bytes, buffers, active,
--- next_buffer, tensors} or nil, err.
function Receiver:open_shm(timeout)
  return self:post("/init_weights_shm", {}, timeout)
end

--- Shared memory, step 2 (/update_weights_from_shm): `buffer` of file `id` holds the new
--- weights; the engine switches to it. → {weight_version, next_buffer} or nil, err.
function Receiver:receive_shm(id, buffer, version, timeout)
  return self:post("/update_weights_from_shm", { id = id, buffer = buffer, weight_version = version }, timeout)
end

--- Files: the safetensors in `dir` loaded into the live weights. → {weight_version} or nil, err.
function Receiver:receive_disk(dir, version, timeout)
  if self.engine then return self.engine:update_weights_from_disk(dir, version) end
  return self:post("/update_weights_from_disk", { model_path = dir, weight_version = version }, timeout or 3600)
end

--- LoRA: the adapter in `dir` (PEFT files) loaded under `name`, replacing the adapter of
--- that name between two engine steps (its prefix-cache entries dropped); requests that
--- name it (lora_path) run under the new one from then on. → {weight_version} or nil, err.
function Receiver:receive_lora(name, dir, version, timeout)
  if self.engine and type(self.engine.load_lora) == "function" then return self.engine:load_lora(name, dir, version) end
  if self.disk_only or not self.url then
    return nil, ("this engine (%s) takes no LoRA adapters from rl.weight_sync (rlhost's engines do)"):format(self.kind)
  end
  return self:post("/load_lora_adapter", { lora_name = name, lora_path = dir, weight_version = version }, timeout or 600)
end

--- LoRA in memory: a copy of the source's adapter loaded under `name` by this thread-mode
--- engine between two of its steps. → {weight_version, seconds} or nil, err.
function Receiver:receive_lora_memory(source, name, version)
  if not self._native then return nil, "memory transfers need a thread-mode rl.engine in this process" end
  return source:copy_lora_to_engine(self._native, name, version)
end

--- LoRA through shared memory, step 1 (/init_lora_shm): a two-buffer file for an adapter
--- like `meta` ({r, lora_alpha, target_modules}) under `name`. → its layout or nil, err.
function Receiver:open_lora_shm(name, meta, timeout)
  return self:post("/init_lora_shm", { lora_name = name, r = meta.r, lora_alpha = meta.lora_alpha,
    target_modules = meta.target_modules }, timeout)
end

--- LoRA through shared memory, step 2 (/update_lora_from_shm): `buffer` of file `id`
--- holds the adapter; the engine installs a copy under `name`. → {weight_version,
--- next_buffer} or nil, err.
function Receiver:receive_lora_shm(name, id, buffer, version, timeout)
  return self:post("/update_lora_from_shm", { lora_name = name, id = id, buffer = buffer, weight_version = version },
    timeout)
end

--- LoRA by c10d (/update_lora_from_distributed): the adapter's tensors (`meta`: names,
--- dtypes, shapes, r, lora_alpha, target_modules) by broadcast from rank 0 of group
--- `group_name` (joined as for weights), installed under `name`.
function Receiver:receive_lora_distributed(name, meta, group_name, version, timeout, bucket_bytes)
  return self:post("/update_lora_from_distributed", { lora_name = name, r = meta.r, lora_alpha = meta.lora_alpha,
    target_modules = meta.target_modules, names = meta.names, dtypes = meta.dtypes, shapes = meta.shapes,
    group_name = group_name, weight_version = version,
    bucket_bytes = (bucket_bytes or 0) > 0 and bucket_bytes or nil }, timeout)
end

--- c10d, step 1 (/init_weights_update_group): joins the group as rank `args.rank_offset`
--- (master_address, master_port, world_size, group_name, backend, timeout).
function Receiver:join_group(args, timeout)
  return self:post("/init_weights_update_group", args, timeout)
end

--- c10d, step 2 (/update_weights_from_distributed): receives every tensor of `meta`
--- ({names, dtypes, shapes}) by broadcast from rank 0 of group `group_name`, then swaps.
--- bucket_bytes (rlhost's engines; SGLang's take a tensor per broadcast): the sender packs
--- consecutive tensors of one dtype into flat buffers of at most that many bytes.
function Receiver:receive_distributed(meta, group_name, version, timeout, bucket_bytes)
  return self:post("/update_weights_from_distributed", { names = meta.names, dtypes = meta.dtypes,
    shapes = meta.shapes, group_name = group_name, flush_cache = true, weight_version = version,
    bucket_bytes = (bucket_bytes or 0) > 0 and bucket_bytes or nil }, timeout)
end

--- HTTP (/update_weights_from_safetensors): one bucket of a weight update, `body` a
--- safetensors file with some of the model's tensors (or row slices); the engine stages
--- the parts of `update_id` and installs them all at the one with last = true, setting
--- `version`. → {weight_version, installed, staged} or nil, err.
function Receiver:receive_http(body, update_id, last, version, timeout)
  local function q(v) return (tostring(v):gsub("[^%w%-%._~]", function(c) return ("%%%02X"):format(c:byte()) end)) end
  local path = ("/update_weights_from_safetensors?update_id=%s&last=%d"):format(q(update_id), last and 1 or 0)
  if last and version ~= nil then path = path .. "&weight_version=" .. q(version) end
  return self:post(path, body, timeout, "application/octet-stream")
end

--- Seconds an engine has to answer /destroy_weights_update_group.
M.LEAVE_TIMEOUT = 5

--- Leaves a c10d group (/destroy_weights_update_group), best effort.
function Receiver:leave_group(group_name, timeout)
  return self:post("/destroy_weights_update_group", { group_name = group_name }, timeout or M.LEAVE_TIMEOUT)
end

--- The weight version the engine serves now (nil, err when it cannot say).
function Receiver:version()
  if self.engine then
    local s, err = self.engine:stats()
    if type(s) ~= "table" then return nil, err end
    return s.weight_version ~= nil and tostring(s.weight_version) or nil
  end
  local resp, err = require("rl.http").get(self.url .. "/get_model_info", { timeout = 30 })
  if not resp then return nil, tostring(err) end
  local info = json.decode(resp.body)
  return type(info) == "table" and info.weight_version ~= nil and tostring(info.weight_version) or nil
end

--- Thread-mode engines: drops the transfers its scheduler has not taken yet (each fails
--- at once); the number dropped. For a stuck scheduler (fault tolerance's sync guard).
--- Still works after the engine object was stopped, while its scheduler lingers.
function Receiver:cancel_pending()
  if not self._native then return 0 end
  local ok, n = pcall(self._native.cancel_commands, self._native)
  return ok and n or 0
end

-- ---- the sender --------------------------------------------------------------------

local Sender = {}
Sender.__index = Sender
M.Sender = Sender

--- A sender of `source`'s weights (see the module comment for the source's methods).
function M.sender(source)
  if type(source) ~= "table" then
    error("rl.weight_sync.sender: bad argument #1 'source' (a weight source table expected, got " .. type(source) .. ")", 2)
  end
  return setmetatable({ source = source, shm = {}, group = nil, warned = {}, leaving = {} }, Sender)
end

local function tmp_dir()
  local base = io.open("/dev/shm/.rlhost_probe", "w")
  if base then
    base:close()
    os.remove("/dev/shm/.rlhost_probe")
    return "/dev/shm"
  end
  return os.getenv("TMPDIR") or "/tmp"
end

local group_seq = 0

--- After a failed broadcast (or join), seconds the engines' requests still get to say
--- why (their own errors say more than the trainer's timeout); one still out then is
--- given up: its engine is stalled (the controller's probe finds out).
M.REPLY_GRACE = 1

-- Drops the c10d group (after a failure, or for another engine set): the trainer's end is
-- closed first (the engines' receives in it fail at once), then every engine is asked to
-- leave, all at once, each within M.LEAVE_TIMEOUT. The leaves run on while the caller
-- goes on (a stalled engine costs no one its timeout); Sender:close waits for them.
local function drop_group(self)
  local g = self.group
  if not g then return end
  self.group = nil
  pcall(g.handle.close, g.handle)
  local still = {}
  for _, t in ipairs(self.leaving) do if not t:done() then still[#still + 1] = t end end
  for _, rx in ipairs(g.receivers) do
    local t = task.spawn_named("leave " .. g.name .. " " .. tostring(rx.url), function()
      local ok, err = rx:leave_group(g.name, M.LEAVE_TIMEOUT)
      if not ok then log.debug("rl.weight_sync: %s did not leave group %s: %s", tostring(rx.url), g.name, tostring(err)) end
      return ok
    end)
    t.quiet = true
    still[#still + 1] = t
  end
  self.leaving = still
end

-- The source's job and one request per receiver, concurrently (in sequence, the
-- first engine's join would wait for a rendezvous the others never reach); → the
-- engines' replies, or nil and the first error (the engines' first: they say more than a
-- timeout). When the job fails, on_fail() runs at once (the group is dropped: the
-- engines' receives fail) and the requests get M.REPLY_GRACE more seconds; when it
-- succeeds, they get `timeout` more (the last bytes may still sit in the engines' socket
-- buffers, then each installs). One still out then is given up (cancelled), so a stalled
-- engine costs the job's timeout, not its request's — also when the trainer's last
-- bytes were out (in the kernel's buffers) before the engine stalled.
local function overlap(job, receivers, request, on_fail, timeout)
  local tasks = {}
  for i, rx in ipairs(receivers) do
    tasks[i] = task.spawn(function() return { request(i, rx) } end)
  end
  local okk, jerr = job()
  if not okk and on_fail then on_fail() end
  local wait = (not okk) and M.REPLY_GRACE or timeout   -- nil: each request's own timeout only
  local cutoff = wait and task.spawn_named("weight sync: the engines' replies", function()
    task.sleep(wait)
    for _, t in ipairs(tasks) do if not t:done() then t:cancel("no reply") end end
  end)
  local first, silent, replies = nil, nil, {}
  for i, t in ipairs(tasks) do
    local got, r = pcall(t.wait, t)
    if got then
      replies[i] = r[1]
      if not r[1] and not first then first = ("engine %d (%s): %s"):format(i, receivers[i].url, tostring(r[2])) end
    elseif task.is_cancelled(r) then
      silent = silent or ("engine %d (%s) did not answer within %g s of the %s"):format(i, receivers[i].url,
        wait, okk and "trainer's side being done" or "failure")
    elseif not first then
      first = ("engine %d (%s): %s"):format(i, receivers[i].url, tostring(r))
    end
  end
  if cutoff then cutoff:cancel("done") end
  if not okk then
    local why = "trainer: " .. tostring(jerr)
    if silent then why = silent .. "; " .. why end
    return nil, first and (first .. "; " .. why) or why
  end
  if first or silent then return nil, first or silent end
  return replies
end

-- c10d: one group of the source (rank 0) and the engines (ranks 1..n), made on the first
-- push to this engine set; then every tensor is broadcast while the engines'
-- /update_weights_from_distributed calls receive it (lora: the adapter's, while their
-- /update_lora_from_distributed calls do).
local function push_distributed(self, receivers, version, o, lora)
  local timeout = o.timeout or 120
  local keys = {}
  for i, rx in ipairs(receivers) do keys[i] = rx.url end
  local key = table.concat(keys, " ")
  if self.group and self.group.key ~= key then drop_group(self) end
  local function drop() drop_group(self) end
  if not self.group then
    group_seq = group_seq + 1
    local name = ("rlhost_weights_%d_%d"):format(math.floor(now() * 1000), group_seq)
    local addr, backend = o.master_address or "127.0.0.1", o.backend or "gloo"
    local g = require("rl.dist").new_group {
      rank = 0, world_size = #receivers + 1, master_addr = addr, master_port = o.master_port or 0,
      timeout = timeout, name = name, backend = backend,
    }
    self.group = { key = key, handle = g, name = name, receivers = receivers }
    local okk, err = overlap(function() return self.source:join_group(g) end, receivers, function(i, rx)
      return rx:join_group({ master_address = addr, master_port = g:port(), rank_offset = i,
        world_size = #receivers + 1, group_name = name, backend = backend, timeout = timeout }, timeout + 10)
    end, drop, timeout)
    if not okk then
      drop_group(self)
      return nil, "init_weights_update_group: " .. err
    end
  end
  local g, src = self.group, self.source
  local bucket = o.bucket_bytes or 0
  if src.can_bucket and not src:can_bucket() then bucket = 0 end
  local job, request, ep
  if lora then
    local meta = src:lora_meta()
    ep = "update_lora_from_distributed"
    job = function() return src:broadcast_lora(g.handle, bucket) end
    request = function(_, rx) return rx:receive_lora_distributed(lora, meta, g.name, version, timeout + 10, bucket) end
  else
    local meta = src:meta()
    ep = "update_weights_from_distributed"
    job = function() return src:broadcast(g.handle, bucket) end
    request = function(_, rx) return rx:receive_distributed(meta, g.name, version, timeout + 10, bucket) end
  end
  local replies, err = overlap(job, receivers, request, drop, timeout)
  if not replies then
    drop_group(self)
    return nil, ep .. ": " .. err
  end
  return replies
end

M.HTTP_BUCKET_BYTES = 64 * 1024 * 1024
M.HTTP_MAX_BUCKET_BYTES = 255 * 1024 * 1024   -- an engine server takes request bodies up to 256 MiB

local update_seq = 0

-- HTTP: the source's safetensors (saved once, as for "disk") cut into buckets of at most
-- bucket_bytes; each bucket goes to every engine concurrently (one body in C++ memory,
-- no copy per engine), the next once all took it, and is encoded on a thread while the
-- last one is sent; the last one installs. A failure leaves the engines' staged parts to
-- the next update (a new update_id drops them). `dir`: the files() of the push. → the
-- engines' replies to the last bucket, or nil, err.
local function post_buckets(receivers, version, o, enc)
  local n = enc:count()
  if n == 0 then return nil, "the saved weights hold no tensors" end
  local function encode(b)   -- → the op whose event brings bucket b
    local op = enc:start(b)
    task.op_open(op)
    return op
  end
  update_seq = update_seq + 1
  local id = ("%d-%d-%d"):format(os.time(), math.random(1e9), update_seq)
  local replies
  local op = encode(1)
  for b = 1, n do
    local kind, body = task.op_next(op, "rl.weight_sync (http)")
    task.op_close(op)
    if kind ~= "done" then return nil, "reading the saved weights: " .. tostring(body) end
    op = b < n and encode(b + 1) or nil
    local ok, err
    ok, replies, err = pcall(overlap, function() return true end, receivers, function(_, rx)
      return rx:receive_http(body, id, b == n, version, o.timeout or 120)
    end)
    body:release()   -- its megabytes now, not at the next collection
    if op and not (ok and replies) then task.op_close(op) end   -- the next bucket is not wanted
    if not ok then error(replies, 0) end                         -- cancelled
    if not replies then return nil, ("update_weights_from_safetensors (bucket %d of %d): %s"):format(b, n, err) end
  end
  return replies
end

local function push_http(receivers, version, o, dir)
  local bucket = (o.bucket_bytes or 0) > 0 and o.bucket_bytes or M.HTTP_BUCKET_BYTES
  if bucket > M.HTTP_MAX_BUCKET_BYTES then
    return nil, ("bucket_bytes %d is over %d, what fits the engines' 256 MiB request limit with its header"):format(
      bucket, M.HTTP_MAX_BUCKET_BYTES)
  end
  local oke, enc = pcall(require("rl._core").safetensors.encoder, dir, bucket)
  if not oke then return nil, "reading the saved weights: " .. tostring(enc) end
  local ok, replies, err = pcall(post_buckets, receivers, version, o, enc)
  enc:close()   -- the saved files' mapping, which would keep them in memory once removed
  if not ok then error(replies, 0) end
  return replies, err
end

-- Unmaps one shared file the sender keeps (by its key in self.shm).
local function forget_key(self, key)
  local st = self.shm[key]
  if not st then return end
  self.shm[key] = nil
  self.source:forget_shm(st.id)
end

--- Forgets what the sender keeps for the engine at `url` (its shared-memory files: the
--- weights', an adapter's): the engine is gone.
function Sender:forget(url)
  local keys = {}
  for key, st in pairs(self.shm) do if st.url == url then keys[#keys + 1] = key end end
  for _, key in ipairs(keys) do forget_key(self, key) end
end

-- Shared memory: the layout the engine described is kept per URL (and adapter name), with
-- the buffer to write next. → the engine's reply, or nil, err, stage ("init" when the
-- engine cannot share). lora: the adapter's name (its own file; only the adapter moves).
local function push_shm(self, rx, version, timeout, lora)
  local src, key = self.source, lora and rx.url .. "\0lora\0" .. lora or rx.url
  local ep = lora and "update_lora_from_shm" or "update_weights_from_shm"
  for attempt = 1, 2 do
    local st = self.shm[key]
    if not st then
      local r, err
      if lora then r, err = rx:open_lora_shm(lora, src:lora_meta(), timeout) else r, err = rx:open_shm(timeout) end
      if not r then return nil, (lora and "init_lora_shm: " or "init_weights_shm: ") .. err, "init" end
      st = { layout = json.encode(r), id = r.id, next = r.next_buffer, url = rx.url }
      self.shm[key] = st
    end
    local w, werr
    if lora then w, werr = src:write_lora_shm(st.layout, st.next) else w, werr = src:write_shm(st.layout, st.next) end
    if not w then
      forget_key(self, key)
      return nil, (lora and "writing the shared adapter: " or "writing shared weights: ") .. tostring(werr)
    end
    local r, err
    if lora then r, err = rx:receive_lora_shm(lora, st.id, st.next, version, timeout)
    else r, err = rx:receive_shm(st.id, st.next, version, timeout) end
    if r then
      st.next = r.next_buffer
      return r
    end
    forget_key(self, key)
    -- The engine released or re-shared its weights (or dropped the adapter): share anew, once.
    local gone = err:find("no shared weights", 1, true) or err:find("no shared adapter file", 1, true)
    if attempt == 2 or not gone then return nil, ep .. ": " .. err end
  end
end

-- What a weight source needs for each method (of its weights; of its LoRA adapter).
local NEEDS = { memory = { "copy_to_engine" }, shm = { "write_shm", "forget_shm" }, disk = { "save" }, http = { "save" },
                distributed = { "meta", "join_group", "broadcast" } }
local LORA_NEEDS = { memory = { "copy_lora_to_engine" }, shm = { "lora_meta", "write_lora_shm", "forget_shm" },
                     disk = { "save_lora" }, distributed = { "lora_meta", "join_group", "broadcast_lora" } }

-- Whether the source has what `method` needs (for its adapter: lora); false and the
-- first missing method.
local function source_can(source, method, lora)
  if lora and method == "http" then return false, "way to send an adapter over HTTP (use shm, disk or distributed)" end
  for _, f in ipairs((lora and LORA_NEEDS or NEEDS)[method]) do
    if type(source[f]) ~= "function" then return false, f end
  end
  return true
end

-- One engine of a push that is not "distributed". → reply, err, how. lora: the adapter's
-- name (only the adapter moves, loaded under it in place of the last).
local function push_one(self, rx, method, version, o, files, lora)
  local src, tag = self.source, lora and "lora/" or ""
  if method == "auto" and rx:can("memory") and source_can(src, "memory", lora) then
    local r, err
    if lora then r, err = rx:receive_lora_memory(src, lora, version) else r, err = rx:receive_memory(src, version) end
    return r, err, tag .. "memory"
  end
  if method == "shm" or (method == "auto" and rx.kind == "process" and source_can(src, "shm", lora)) then
    local r, err, stage = push_shm(self, rx, version, o.timeout or 120, lora)
    if r or method == "shm" or stage ~= "init" then return r, err, tag .. "shm" end
    -- auto: this engine cannot share its weights now (on a GPU, /dev/shm full, weights
    -- released): files this time, shared memory tried again next time.
    if not self.warned[rx.url] then
      self.warned[rx.url] = true
      log.warn("rl.trainer: %s cannot share its weights (%s); syncing it through files", rx.url, err)
    end
  end
  local d, err = files()
  if not d then return nil, err, tag .. "disk" end
  local r, uerr
  if lora then r, uerr = rx:receive_lora(lora, d, version, o.timeout) else r, uerr = rx:receive_disk(d, version) end
  return r, uerr, tag .. "disk"
end

local METHODS = { auto = true, shm = true, disk = true, distributed = true, http = true }

-- The receivers of `targets` (one engine or a list), misuse raising in fname's name.
local function receivers_of(targets, method, fname)
  if type(targets) == "string" or getmetatable(targets) == Receiver
      or (type(targets) == "table" and targets[1] == nil and (targets.url or targets.weight_receiver)) then
    targets = { targets }
  end
  local out = {}
  for i, t in ipairs(targets or {}) do
    local rx, why = M.receiver(t)
    if (method == "shm" or method == "distributed" or method == "http") and not (rx and rx.url) then
      error(("%s: engines[%d] has no url (method '%s' talks to engine servers%s)"):format(fname, i, method,
        method == "distributed" and "; start thread-mode engines with serve = true" or ""), 4)
    end
    if not rx then error(("%s: engines[%d] is %s"):format(fname, i, why), 4) end
    if method ~= "auto" and method ~= "disk" and not rx:can(method) then
      error(("%s: engines[%d] (%s) cannot take method '%s' (it takes %s)"):format(fname, i, tostring(rx.url), method,
        table.concat(rx:methods(), ", ")), 4)
    end
    out[i] = rx
  end
  return out
end

--- Hands the source's weights to `targets` (one engine or a list: anything M.receiver
--- takes). opts: version (string, required), method ("auto" | "shm" | "disk" |
--- "distributed" | "http"), timeout (s, default 120), master_address, master_port, backend (c10d),
--- tmp_dir (where "disk" writes its directory; default /dev/shm, else $TMPDIR),
--- bucket_bytes ("distributed" to rlhost engines: tensors packed into broadcasts of at most
--- that many bytes; default 0, one per tensor, as SGLang's endpoint takes them; "http":
--- the request bodies' tensor bytes, default M.HTTP_BUCKET_BYTES = 64 MiB),
--- keep_going (a failed engine does not stop the others), guard (function(i, receiver)
--- called as engine i's transfer starts; may return a function called when it ends).
--- → {seconds, weight_version, methods, versions, errors} (per engine: how it got them,
--- the version it reports or false, why it failed), or nil, err (the first failure;
--- without keep_going). fname: the public function misuse errors name.
function Sender:push(targets, opts, fname)
  fname = fname or "rl.weight_sync.Sender:push"
  task.need_task(fname)
  local method = opts.method or "auto"
  if not METHODS[method] then
    error(fname .. ": bad argument 'opts.method' ('auto', 'shm', 'disk', 'distributed' or 'http' expected, got '"
      .. tostring(method) .. "')", 3)
  end
  local version = tostring(opts.version)
  local lora = self.source.save_lora and (opts.lora_name or self.source.lora_name)
  if self.source.save_lora and (type(lora) ~= "string" or lora == "") then
    error(fname .. ": a LoRA trainer syncs its adapter under a name the rollout's requests use "
      .. "(give opts.lora_name)", 3)
  end
  local can, missing = source_can(self.source, method == "auto" and "disk" or method, lora)
  if not can then
    error(("%s: the weight source cannot send %sby '%s' (it has no %s)"):format(fname, lora and "its adapter " or "",
      method == "auto" and "disk" or method, missing), 3)
  end
  local receivers = receivers_of(targets, method, fname)
  local t0 = now()
  local methods, versions, errors = {}, {}, {}
  if method == "distributed" then
    local replies, err = push_distributed(self, receivers, version, opts, lora)
    if not replies then return nil, err end
    for i = 1, #receivers do   -- the version each engine says it serves now
      local v = type(replies[i]) == "table" and replies[i].weight_version
      methods[i], versions[i] = (lora and "lora/" or "") .. "distributed", v ~= nil and tostring(v) or version
    end
    return { seconds = now() - t0, weight_version = version, methods = methods, versions = versions, errors = errors }
  end
  local dir
  local function files()   -- one directory on tmpfs for every "disk" (or "lora") engine of this push
    if not dir then
      dir = ("%s/rlhost-%s-%s-%s"):format(opts.tmp_dir or tmp_dir(), lora and "lora" or "weights",
        os.time() .. "-" .. math.random(1e6), (version:gsub("[^%w%.%-_]", "_")))
      local ok, serr
      if lora then ok, serr = self.source:save_lora(dir) else ok, serr = self.source:save(dir) end
      if not ok then return nil, "rl.trainer: writing weights for sync: " .. tostring(serr) end
    end
    return dir
  end
  if method == "http" then
    local d, err = files()
    local replies
    if d then replies, err = push_http(receivers, version, opts, d) end
    if dir then require("rl._fs").remove_tree(dir) end
    if not replies then return nil, err end
    for i = 1, #receivers do
      local v = type(replies[i]) == "table" and replies[i].weight_version
      methods[i], versions[i] = "http", v ~= nil and tostring(v) or version
    end
    return { seconds = now() - t0, weight_version = version, methods = methods, versions = versions, errors = errors }
  end
  local last
  for i, rx in ipairs(receivers) do
    local finish = opts.guard and opts.guard(i, rx)
    local r, err, how = push_one(self, rx, method, version, opts, files, lora)
    if finish then finish() end
    methods[i] = how
    if r then
      versions[i] = r.weight_version ~= nil and tostring(r.weight_version) or version
      last = versions[i]
    else
      versions[i], errors[i] = false, tostring(err)
      if not opts.keep_going then
        if dir then require("rl._fs").remove_tree(dir) end
        return nil, ("sync to engine %d failed: %s"):format(i, tostring(err))
      end
    end
  end
  if dir then require("rl._fs").remove_tree(dir) end
  return { seconds = now() - t0, weight_version = last or version, methods = methods, versions = versions,
           errors = errors }
end

--- Drops the c10d group (the engines leave it, each within M.LEAVE_TIMEOUT, all at
--- once; waited for) and unmaps every shared file.
function Sender:close()
  drop_group(self)
  for _, t in ipairs(self.leaving) do pcall(t.wait, t) end
  self.leaving = {}
  for url in pairs(self.shm) do self:forget(url) end
end

return M
