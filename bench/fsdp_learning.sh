#!/usr/bin/env bash
# The main job learning under sharding as it does replicated: `rlhost --nproc 2
# recipes/grpo_gsm8k.lua` (embedded default model, shipped defaults) for STEPS rollout
# steps with --train-backend replicated, then fsdp, same seed; prints both held-out
# curves (eval every EVAL steps) and the rollout reward of each tenth side by side.
# Both runs share the 2 ranks' machine in turn, never at once.
#
#   bench/fsdp_learning.sh            # STEPS=30 EVAL=10; KEEP=dir keeps the metrics
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bin="${RLHOST_BIN:-$root/build/rlhost}"
steps="${STEPS:-30}" every="${EVAL:-10}"
out="${KEEP:-$(mktemp -d -t rlhost-fsdp-learning-XXXXXX)}"
[ -n "${KEEP:-}" ] || trap 'rm -rf "$out"' EXIT
mkdir -p "$out"
"$bin" -e 'print(rl.mathgen.default_model())' >/dev/null   # built and cached first, not timed
for be in replicated fsdp; do
  start=$(date +%s)
  "$bin" --nproc 2 "$root/recipes/grpo_gsm8k.lua" --num-rollout "$steps" --eval-interval "$every" \
    --train-backend "$be" --metrics-dir "$out/$be" --no-progress > "$out/$be.log" 2>&1
  echo "$be: $(( $(date +%s) - start )) s for $steps steps"
done
python3 - "$out" <<'PY'
import json, sys
def load(d):
    rows = [json.loads(l) for l in open(d + "/metrics.jsonl")]
    evals = {int(r["eval/step"]): r for r in rows if "eval/step" in r}
    steps = [r for r in rows if "rollout/step" in r]
    return evals, steps
a, b = load(sys.argv[1] + "/replicated"), load(sys.argv[1] + "/fsdp")
print("%-6s %-28s %-28s" % ("eval", "replicated held-out", "fsdp held-out"))
for s in sorted(set(a[0]) | set(b[0])):
    def acc(e):
        r = e.get(s, {})
        ks = [k for k in r if k.startswith("eval/") and k.count("/") == 1 and k != "eval/step"]
        return " ".join("%s %.3f" % (k[5:], r[k]) for k in sorted(ks)[:1]) or "-"
    print("%-6d %-28s %-28s" % (s, acc(a[0]), acc(b[0])))
def tenth(steps):
    n = max(1, len(steps) // 10)
    first = sum(r.get("rollout/raw_reward", 0) for r in steps[:n]) / n
    last = sum(r.get("rollout/raw_reward", 0) for r in steps[-n:]) / n
    t = sorted(r.get("perf/total_step_time", 0) for r in steps)
    return "%.3f -> %.3f, median step %.1f s" % (first, last, t[len(t) // 2])
print("rollout reward first/last tenth: replicated %s; fsdp %s" % (tenth(a[1]), tenth(b[1])))
PY
