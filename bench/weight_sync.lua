-- Weight hand-off from rl.trainer to engines against a save/load round trip
-- (trainer writes safetensors to disk, the engine loads them: slime's
-- update_weights_from_disk path), same model, same run.
--   rlhost bench/weight_sync.lua MODEL_DIR [reps=3]
local model = assert(arg[1], "usage: rlhost bench/weight_sync.lua MODEL_DIR [reps]")
local reps = tonumber(arg[2]) or 3
rl.torch.set_num_threads(1)
local tr = rl.trainer.new { model = model }
local function best(fn)
  local b = math.huge
  for _ = 1, reps do
    local t0 = rl.now()
    fn()
    b = math.min(b, rl.now() - t0)
  end
  return b
end
local disk = (os.getenv("TMPDIR") or "/tmp") .. "/rlhost-bench-weights"
local thread = assert(rl.engine.start { model = model, threads = 1, serve = false })
local mem = best(function() assert(tr:sync(thread)) end)
local round = best(function()
  assert(tr:save_model(disk))
  assert(thread:update_weights_from_disk(disk, "r"))
end)
thread:stop()
local proc = assert(rl.engine.start { model = model, mode = "process", threads = 1 })
local pshm = best(function() assert(tr:sync(proc, { method = "shm" })) end)
local ptmpfs = best(function() assert(tr:sync(proc, { method = "disk" })) end)
-- c10d (Gloo) broadcast over loopback; the first sync also forms the group, best-of
-- keeps the steady state.
local pdist = best(function() assert(tr:sync(proc, { method = "distributed" })) end)
local pround = best(function()
  assert(tr:save_model(disk))
  assert(proc:update_weights_from_disk(disk, "r"))
end)
proc:stop()
os.execute("rm -rf '" .. disk .. "'")
print(("RESULT what=thread_engine in_memory_s=%.3f disk_round_trip_s=%.3f ratio=%.2f"):format(mem, round, mem / round))
print(("RESULT what=process_engine shared_memory_s=%.3f disk_round_trip_s=%.3f ratio=%.2f"):format(pshm, pround,
  pshm / pround))
print(("RESULT what=process_engine tmpfs_s=%.3f disk_round_trip_s=%.3f ratio=%.2f"):format(ptmpfs, pround, ptmpfs / pround))
print(("RESULT what=process_engine distributed_s=%.3f disk_round_trip_s=%.3f ratio=%.2f"):format(pdist, pround,
  pdist / pround))
