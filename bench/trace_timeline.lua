-- The rlhost side of bench/trace_timeline.sh: the viewer cache of a dump, built
-- and written as tools/trace_timeline.lua does (load + reconstruction + JSON),
-- best of PASSES runs.
--   rlhost bench/trace_timeline.lua DUMP.pt OUT.json [PASSES]
local pt, out, passes = arg[1], arg[2], tonumber(arg[3] or 3)
local best, best_cpu, res = math.huge, math.huge, nil
for _ = 1, passes do
  local t0, c0 = rl.now(), os.clock()
  local err
  res, err = rl.timeline.build(pt, { pt_path = pt, generated_at = rl.time(), cache_path = out })
  assert(res, err)
  best, best_cpu = math.min(best, rl.now() - t0), math.min(best_cpu, os.clock() - c0)
end
local f = assert(io.open(out, "rb"))
local bytes = f:seek("end")
f:close()
print(("RESULT impl=rlhost rows=%d items=%d total_s=%.3f cpu_s=%.3f bytes=%d"):format(res.rows, res.items, best, best_cpu, bytes))
