#!/usr/bin/env bash
# Trace timeline viewer: cache build of a SAMPLES-sample dump (~20 trace events
# each) by rlhost (tools/trace_timeline.lua's builder, C++ behind _core.timeline)
# vs a Python peer of slime's builder (bench/trace_timeline_peer.py: torch.load +
# per-sample reconstruction + json.dump; its caches equal slime's on tests/data/
# trace_timeline), same dump, same run; checks the two caches hold the same values;
# then the page's time to first paint in headless Chromium. Prints ratios; asserts nothing.
#   SAMPLES=10000 PASSES=3 REPEAT=3 bench/trace_timeline.sh
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bin="${RLHOST_BIN:-$root/build/rlhost}"
work="$(mktemp -d /tmp/trace_timeline_bench.XXXXXX)"
trap 'rm -rf "$work"' EXIT
samples="${SAMPLES:-10000}"

"$bin" --no-control "$root/tools/trace_timeline/demo_dump.lua" "$work/rollout_0.pt" --samples "$samples" ${PD:+--pd}
ours="$("$bin" --no-control "$root/bench/trace_timeline.lua" "$work/rollout_0.pt" "$work/ours.json" "${PASSES:-3}" | grep '^RESULT')"
peer=""
for _ in $(seq "${PASSES:-3}"); do  # best of PASSES, like ours
  line="$(python3 "$root/bench/trace_timeline_peer.py" "$work/rollout_0.pt" "$work/peer.json" | grep '^RESULT')"
  if [ -z "$peer" ] || python3 -c "import sys; a,b=(float(dict(x.split('=') for x in l.split()[1:])['total_s']) for l in sys.argv[1:]); sys.exit(0 if a<b else 1)" "$line" "$peer"; then
    peer="$line"
  fi
done
t0=$(date +%s.%N)
"$bin" --no-control "$root/tools/trace_timeline.lua" "$work/rollout_0.pt" --no-serve --rebuild > "$work/tool.txt"
t1=$(date +%s.%N)
paint="$(python3 "$root/bench/trace_timeline_paint.py" "$work/rollout_0.trace_timeline_viewer.html" "${REPEAT:-3}" | grep '^RESULT')"
echo "$ours"; echo "$peer"; echo "$paint"
python3 - "$ours" "$peer" "$paint" "$(echo "$t1 - $t0" | bc)" "$work/ours.json" "$work/peer.json" <<'PY'
import json, sys
kv = lambda line: dict(x.split("=", 1) for x in line.split()[1:])
o, p, f = kv(sys.argv[1]), kv(sys.argv[2]), kv(sys.argv[3])
a, b = json.load(open(sys.argv[5])), json.load(open(sys.argv[6]))
for c in (a, b):  # the run's own fields, and rlhost's two extra keys
    for k in ("pt_path", "generated_at", "dump_sample_count", "pd_row_count"):
        c.pop(k, None)
canon = lambda c: json.dumps(c, ensure_ascii=True, separators=(",", ":"))  # keeps 0 vs 0.0 and float repr
same = canon(a) == canon(b)
print("cache build (%s rows, %s items): rlhost %.3f s, python %.3f s (load %s + build %s + json.dump %s) -> %.1fx faster"
      % (o["rows"], o["items"], float(o["total_s"]), float(p["total_s"]), p["load_s"], p["build_s"], p["write_s"],
         float(p["total_s"]) / float(o["total_s"])))
print("  CPU time: rlhost %.3f s, python %.3f s -> %.1fx less" % (float(o["cpu_s"]), float(p["cpu_s"]),
                                                                float(p["cpu_s"]) / float(o["cpu_s"])))
diff = sum(canon(x) != canon(y) for x, y in zip(a["rows"], b["rows"])) + abs(len(a["rows"]) - len(b["rows"]))
print("cache equal to the peer's (json.dump of the same values): %s" % ("yes" if same else "NO, %d rows differ" % diff))
print("whole tool (build + cache + html, --no-serve): %.2f s" % float(sys.argv[4]))
print("first paint in headless chromium (%s rows, %.1f MB page): best %s ms, median %s ms (script start %s ms, "
      "JSON.parse of the first rows %s ms); goal <= 2000 ms" % (f["rows"], int(f["bytes"]) / 1e6, f["best_ms"],
                                                               f["median_ms"], f["script_start_ms"], f["json_ms"]))
print("all rows loaded and prepared: %s ms (median)" % f["full_ms"])
PY
