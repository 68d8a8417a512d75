-- analyze_profile: what profiler traces spent their time on (slime's
-- tools/analyze_profile.py, for rlhost, SGLang and vLLM traces).
--
--   rlhost tools/analyze_profile.lua --profile-dir /tmp/sglang_profile               -- rank 0 (or the only file)
--   rlhost tools/analyze_profile.lua --profile-dir /tmp/sglang_profile --all-ranks   -- every file + cross-rank table
--   rlhost tools/analyze_profile.lua --profile-dir DIR --rank 1 --top-n 30 --json report.json
--
-- Reads Chrome-trace JSON (*.trace.json.gz, *.json, recursively under the
-- directory). Per trace: time by category, top ops, device busy vs idle, engine
-- step times (vLLM's execute_* step annotations), the biggest idle gaps and the host
-- event that overlapped each. Exit status 1 when
-- a file could not be analysed (named, with the reason).
local opt = rl.args {
  description = "Analyses profiler traces (Chrome trace JSON, gzipped or not) from rlhost engines, SGLang or vLLM.",
  { name = "profile_dir", type = "string", required = true, help = "the output_dir given to /start_profile" },
  { name = "rank", type = "int", help = "analyse the trace(s) of this rank (TP-<n> / rank<n> in the name)" },
  { name = "all_ranks", type = "bool", default = false, help = "analyse every trace and print a cross-rank table" },
  { name = "top_n", type = "int", default = 20, help = "top ops to list" },
  { name = "gaps", type = "int", default = 15, help = "biggest idle gaps to list" },
  { name = "json", type = "string", help = "also write the reports to this JSON file" },
}
if opt.rank and opt.all_ranks then rl.args.usage_error("--rank and --all-ranks exclude each other") end
if opt.top_n < 1 then rl.args.usage_error("--top-n must be at least 1") end

local profile = rl.profile
local out = io.stdout

local function p(fmt, ...) out:write((select("#", ...) > 0 and fmt:format(...) or fmt), "\n") end
local function ms(us) return us / 1000 end
local function pct(x) return x * 100 end

local files, err = profile.find_traces(opt.profile_dir)
if not files then
  io.stderr:write("analyze_profile: --profile-dir ", err, "\n")
  rl.exit(1)
end

-- Pick the files: --rank N, --all-ranks, else rank 0 (or the first file).
local function rank_of(f) return profile.rank_of(f) end
local chosen = {}
if opt.all_ranks then
  chosen = files
else
  local want = opt.rank or 0
  for _, f in ipairs(files) do if rank_of(f) == want then chosen[#chosen + 1] = f end end
  if #chosen == 0 and opt.rank == nil then chosen = { files[1] } end
  if #chosen == 0 then
    local seen = {}
    for _, f in ipairs(files) do seen[#seen + 1] = tostring(rank_of(f) or "?") end
    io.stderr:write(("analyze_profile: --rank %d: no trace of that rank under %s (ranks found: %s; hint: --all-ranks)\n")
      :format(opt.rank, opt.profile_dir, table.concat(seen, ", ")))
    rl.exit(1)
  end
  if #files > #chosen then
    p("(%d trace files under %s; analysing %d — use --all-ranks for all)", #files, opt.profile_dir, #chosen)
  end
end

local function report(r)
  p("")
  p("== %s  (rank %s, %s trace, %d events, %d %s)", r.path, tostring(r.rank or "?"), r.mode, r.events, r.ops,
    r.mode == "gpu" and "device ops" or "cpu ops")
  p("span %.3f ms | busy %.3f ms | idle %.3f ms | utilisation %.1f%%", ms(r.span), ms(r.busy), ms(r.idle), pct(r.util))
  p("")
  p("%-16s %8s %12s %7s", "category", "count", "self ms", "share")
  for _, c in ipairs(r.categories) do
    p("%-16s %8d %12.3f %6.1f%%", c.name, c.count, ms(c.time), pct(c.time / math.max(r.self_total, 1e-9)))
  end
  p("")
  p("top %d ops by self time", #r.top_ops)
  p("%3s %10s %7s %7s %10s  %-14s %s", "#", "self ms", "share", "calls", "avg us", "category", "name")
  for i, o in ipairs(r.top_ops) do
    local name = #o.name > 90 and (o.name:sub(1, 87) .. "...") or o.name
    p("%3d %10.3f %6.1f%% %7d %10.1f  %-14s %s", i, ms(o.time), pct(o.time / math.max(r.self_total, 1e-9)), o.count,
      o.time / o.count, o.category, name)
  end
  if #r.steps > 0 then
    p("")
    p("engine steps (the engine's per-step annotations)")
    p("%-8s %6s %10s %9s %9s %9s %9s %8s %10s", "kind", "steps", "total ms", "mean ms", "p50 ms", "p90 ms", "max ms",
      "batch", "tokens")
    for _, st in ipairs(r.steps) do
      p("%-8s %6d %10.3f %9.3f %9.3f %9.3f %9.3f %8.1f %10d", st.kind, st.count, ms(st.total), ms(st.mean), ms(st.p50),
        ms(st.p90), ms(st.max), st.mean_batch, st.tokens)
    end
  end
  p("")
  if #r.gaps == 0 then
    p("no idle gaps: the %s was busy for the whole span", r.mode == "gpu" and "device" or "CPU")
  else
    p("biggest idle gaps (%s idle; what overlapped each)", r.mode == "gpu" and "device" or "CPU")
    p("%3s %10s %10s  %s", "#", "gap us", "at ms", "overlapped by")
    for i, g in ipairs(r.gaps) do
      local cause = g.cause and ("%s [%s] %.0f us"):format(#g.cause > 70 and (g.cause:sub(1, 67) .. "...") or g.cause,
        g.cause_cat, g.overlap) or "(nothing recorded)"
      p("%3d %10.1f %10.3f  %s", i, g.len, ms(g.offset), cause)
    end
  end
  p("")
  p("%s:", r.mode == "gpu" and "per stream" or "per thread")
  for i, l in ipairs(r.lanes) do
    if i > 8 then p("  ... %d more", #r.lanes - 8); break end
    p("  %-12s %8d ops  busy %10.3f ms  %5.1f%%", l.name, l.events, ms(l.busy), pct(l.util))
  end
  if r.util < 0.5 then
    p(r.mode == "gpu" and "note: the GPU was idle for more than half the span; the gaps above show what the host did meanwhile"
      or "note: the engine thread was idle for more than half the span (waiting for requests, or between steps)")
  end
end

-- A path relative to --profile-dir (per-worker directories stay visible).
local function rel(path)
  local root = opt.profile_dir:gsub("/+$", "") .. "/"
  return path:sub(1, #root) == root and path:sub(#root + 1) or path
end

local reports, failed = {}, 0
for _, f in ipairs(chosen) do
  local tr, lerr = profile.load(f)
  local r
  if tr then r, lerr = profile.analyze(tr, { top_n = opt.top_n, gaps = opt.gaps }) end
  tr = nil
  collectgarbage()
  if r then
    reports[#reports + 1] = r
    report(r)
  else
    failed = failed + 1
    io.stderr:write("analyze_profile: ", lerr, "\n")
  end
end

if opt.all_ranks and #reports > 0 then
  p("")
  p("cross-rank summary")
  p("%5s %10s %10s %7s %6s %9s  %-14s %s", "rank", "span ms", "busy ms", "util", "steps", "step ms", "top category", "file")
  local lo, hi = math.huge, -math.huge
  for _, r in ipairs(reports) do
    lo, hi = math.min(lo, r.util), math.max(hi, r.util)
    local top = r.categories[1]
    local steps, step_total = 0, 0
    for _, st in ipairs(r.steps) do steps, step_total = steps + st.count, step_total + st.total end
    p("%5s %10.3f %10.3f %6.1f%% %6s %9s  %-14s %s", tostring(r.rank or "?"), ms(r.span), ms(r.busy), pct(r.util),
      steps > 0 and tostring(steps) or "-", steps > 0 and ("%.3f"):format(ms(step_total / steps)) or "-",
      top and top.name or "-", rel(r.path))
  end
  if #reports > 1 and hi - lo > 0.05 then
    p("warning: utilisation differs by %.1f points across ranks (%.1f%%..%.1f%%): look for a straggler or load imbalance",
      pct(hi - lo), pct(lo), pct(hi))
  end
end

if opt.json then
  local f, ferr = io.open(opt.json, "w")
  if not f then
    io.stderr:write("analyze_profile: --json: cannot write ", tostring(ferr), "\n")
    rl.exit(1)
  end
  f:write(rl.json.encode(reports, { indent = 1, sort_keys = true }), "\n")
  f:close()
end
if failed > 0 then rl.exit(1) end
