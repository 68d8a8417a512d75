-- The trainer's weights to engines on another host by c10d broadcast (rl.weight_sync's
-- "distributed": what a multi-host job does for remote engines), by files (a safetensors
-- directory every engine reads) and by HTTP (safetensors buckets POSTed to every engine:
-- the fallback with no shared filesystem), timed per push; run by
-- bench/weight_broadcast.sh on host 0 of two network namespaces. With RAW_GO and RAW_DONE
-- (FIFOs of weight_broadcast_peer.py's rank 0, told the weights' bytes first), every timed
-- round is paired with a round of PyTorch's raw broadcast of the same bytes, before it in
-- odd rounds and after it in even ones, so both are timed on the same machine state.
--   [PATHS="per_tensor distributed disk http"] rlhost bench/weight_broadcast.lua MODEL MASTER_ADDR ROUNDS URL...
local model, addr, rounds = arg[1], arg[2], tonumber(arg[3])
local urls = {}
for i = 4, #arg do urls[#urls + 1] = arg[i] end
rl.torch.set_num_threads(1)
local tr = rl.trainer.new { model = model }
local bytes = 0
local meta = tr:weight_source():meta()
for i, shape in ipairs(meta.shapes) do
  local n = 1
  for _, d in ipairs(shape) do n = n * d end
  bytes = bytes + n * (meta.dtypes[i]:match("16") and 2 or 4)
end
local job_bucket = require("rl.recipe.hosts").BUCKET_BYTES   -- what a multi-host job sends with
local bucket = 64 * 2 ^ 20                                      -- the bucketed option beside it
local function time(method, v, b)
  local t0 = rl.now()
  assert(tr:sync(urls, { method = method, version = v, master_address = addr, timeout = 300, bucket_bytes = b }))
  return rl.now() - t0
end
local go, done   -- the raw peer's FIFOs (paired rounds), when given
if os.getenv("RAW_GO") then
  go = assert(io.open(os.getenv("RAW_GO"), "w"))
  done = assert(io.open(os.getenv("RAW_DONE"), "r"))
  go:write(("bytes %d\n"):format(bytes))
  go:flush()
end
local function raw()
  go:write("go\n")
  go:flush()
  return assert(tonumber(done:read("*l")), "weight_broadcast.lua: the raw peer sent no time")
end
local out = { tensors = #meta.names, bytes = bytes, engines = #urls, bucket = bucket, job_bucket = job_bucket, distributed = {},
              per_tensor = {}, disk = {}, http = {}, http_bucket = rl.weight_sync.HTTP_BUCKET_BYTES, raw = {} }
-- Each path's rounds back to back after two untimed pushes (the first forms the group:
-- the rendezvous of the trainer and every engine), as a job repeats its one path: the
-- buffers both sides keep for the next update of the same size are then warm (paths
-- alternating, with buffers of other sizes, would time fresh memory instead).
local only = os.getenv("PATHS")   -- a space-separated subset of the keys below (all by default)
for _, p in ipairs { { "per_tensor", "distributed", 0 }, { "distributed", "distributed", bucket }, { "disk", "disk" },
                     { "http", "http" } } do
  if only and not (" " .. only .. " "):find(" " .. p[1] .. " ", 1, true) then goto next_path end
  for w = 1, 2 do time(p[2], p[1] .. " warm " .. w, p[3]) end
  local paired = {}
  for r = 1, rounds do
    if go and r % 2 == 1 then paired[r] = raw() end
    out[p[1]][r] = time(p[2], p[1] .. r, p[3])
    if go and r % 2 == 0 then paired[r] = raw() end
  end
  out.raw[p[1]] = go and paired or nil
  ::next_path::
end
if go then go:close() end
print(rl.json.encode(out))
