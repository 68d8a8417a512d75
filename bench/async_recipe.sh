#!/usr/bin/env bash
# Lock-step, one-step-off and fully asynchronous GRPO (recipes/grpo_gsm8k_async.lua
# --async-mode off | one-step-off | fully-async --max-staleness K), same run, alternating,
# on the default model: wall time, the median step, the summed train / rollout / wait
# times, engine and trainer busy shares, held-out accuracy against minutes (evaluated every
# EVAL steps), the time each mode takes to reach the accuracy lock-step ends at, and the
# ratios to lock-step; an SVG of accuracy against time (bench/async_recipe_table.py). On 2
# cores the engine is its own process with one thread, pinned to one core, and the trainer
# is pinned to the other (--engine-mode process --threads 1 --engine-cpus 1 --trainer-cpus
# 0), so the two really run at once.
#   STEPS=10 EVAL=5 ROUNDS=1 MODES="off one-step-off fully-async:1 fully-async:2" \
#     PLOT=/tmp/async.svg bench/async_recipe.sh [extra recipe flags]
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bin="${RLHOST_BIN:-${BUILD:-$root/build}/rlhost}"
steps="${STEPS:-10}" rounds="${ROUNDS:-1}" every="${EVAL:-5}"
modes="${MODES:-off one-step-off fully-async:1 fully-async:2}"
# The engine on the last core, the trainer on the others (one core each on 2).
n=$(nproc)
pin=()
[ "$n" -ge 2 ] && pin=(--engine-cpus "$((n - 1))" --trainer-cpus "0-$((n - 2))")
out="$(mktemp -d -t rlhost-async-bench-XXXXXX)"
trap 'rm -rf "$out"' EXIT
for r in $(seq 1 "$rounds"); do
  for mode in $modes; do
    flags=(--async-mode "${mode%%:*}")
    [[ "$mode" == *:* ]] && flags+=(--max-staleness "${mode#*:}")
    d="$out/${mode/:/-k}-$r"
    t0=$(date +%s.%N)
    "$bin" --no-control "$root/recipes/grpo_gsm8k_async.lua" "${flags[@]}" --num-rollout "$steps" \
      --engine-mode process --threads 1 "${pin[@]}" --eval-interval "$every" --no-progress --metrics-dir "$d" "$@" \
      > "$d.log" 2>&1 || { tail -20 "$d.log"; exit 1; }
    t1=$(date +%s.%N)
    echo "RESULT mode=$mode round=$r wall_s=$(python3 -c "print(round($t1 - $t0, 1))") dir=$d"
  done
done | tee "$out/results.txt"
python3 "$root/bench/async_recipe_table.py" "$out/results.txt" ${PLOT:+"$PLOT"}
