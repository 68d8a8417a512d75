#!/usr/bin/env bash
# Lock-step against one-step-off GRPO (recipes/grpo_gsm8k_async.lua --async-mode off |
# one-step-off), same run, alternating, on the default model: wall time of N steps, the
# mean step time from step 1 on, held-out accuracy at the end, and the ratio. On 2
# cores the engine is its own process with one thread and the trainer has the other
# (--engine-mode process --threads 1), so the two really run at once.
#   STEPS=10 ROUNDS=1 bench/async_recipe.sh [extra recipe flags]
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bin="${RLHOST_BIN:-${BUILD:-$root/build}/rlhost}"
steps="${STEPS:-10}" rounds="${ROUNDS:-1}"
out="$(mktemp -d -t rlhost-async-bench-XXXXXX)"
trap 'rm -rf "$out"' EXIT
for r in $(seq 1 "$rounds"); do
  for mode in off one-step-off; do
    d="$out/$mode-$r"
    t0=$(date +%s.%N)
    "$bin" --no-control "$root/recipes/grpo_gsm8k_async.lua" --async-mode "$mode" --num-rollout "$steps" \
      --engine-mode process --threads 1 --eval-interval "$steps" --no-progress --metrics-dir "$d" "$@" \
      > "$d.log" 2>&1 || { tail -20 "$d.log"; exit 1; }
    t1=$(date +%s.%N)
    echo "RESULT mode=$mode round=$r wall_s=$(python3 -c "print(round($t1 - $t0, 1))") dir=$d"
  done
done | tee "$out/results.txt"
python3 - "$out/results.txt" <<'PY'
import json, os, statistics, sys
rows = [dict(x.split("=", 1) for x in l.split()[1:]) for l in open(sys.argv[1]) if l.startswith("RESULT")]
by = {}
for r in rows:
    m = [json.loads(l) for l in open(os.path.join(r["dir"], "metrics.jsonl")) if l.strip()]
    steps = [x for x in m if "rollout/step" in x]
    evals = [x for x in m if "eval/step" in x]
    last = evals[-1] if evals else {}
    acc = [last[k] for k in sorted(last) if k.startswith("eval/") and k.count("/") == 1 and "-" not in k and k != "eval/step"]
    step_t = statistics.median(x["perf/total_step_time"] for x in steps[1:]) if len(steps) > 1 else float("nan")
    stale = [x.get("async/staleness_max", 0) for x in steps]
    by.setdefault(r["mode"], []).append((float(r["wall_s"]), step_t, acc[0] if acc else float("nan"), max(stale)))
    steps_sum = sum(x["perf/total_step_time"] for x in steps)
    ev = sum(x.get("perf/eval_time", 0) for x in evals)
    print(f"{r['mode']:>13} round {r['round']}: steps {steps_sum:.1f} s in all (train {sum(x.get('perf/actor_train_time', 0) for x in steps):.1f} s, "
          f"rollout {sum(x.get('perf/rollout_time', 0) for x in steps):.1f} s, waited for it "
          f"{sum(x.get('perf/rollout_wait_time', x.get('perf/rollout_time', 0)) for x in steps):.1f} s), evals {ev:.1f} s")
    print(f"{r['mode']:>13} round {r['round']}: wall {float(r['wall_s']):.1f} s, median step (1+) {step_t:.2f} s, "
          f"held-out acc {acc[0] if acc else float('nan'):.3f}, staleness max {max(stale)}")
if "off" in by and "one-step-off" in by:
    w0 = statistics.median(x[0] for x in by["off"]); w1 = statistics.median(x[0] for x in by["one-step-off"])
    s0 = statistics.median(x[1] for x in by["off"]); s1 = statistics.median(x[1] for x in by["one-step-off"])
    print(f"== one-step-off / lock-step: wall {w1 / w0:.2f}x, step {s1 / s0:.2f}x")
PY
