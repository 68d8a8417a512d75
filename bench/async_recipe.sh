#!/usr/bin/env bash
# Lock-step, one-step-off and fully asynchronous GRPO (recipes/grpo_gsm8k_async.lua
# --async-mode off | one-step-off | fully-async --max-staleness K), same run, alternating,
# on the default model: wall time, the median step, the summed train / rollout / wait
# times, engine and trainer busy shares, held-out accuracy against minutes (evaluated every
# EVAL steps), the machine's CPU busy share over the run, the time each mode takes to
# reach the accuracy lock-step ends at, and the
# ratios to lock-step; an SVG of accuracy against time (bench/async_recipe_table.py).
# Lock-step runs as the main job does (a thread engine; each phase has every core in
# turn); in the overlapped modes the engine is its own process with one thread, pinned to
# one core, and the trainer is pinned to the other (--engine-mode process --threads 1
# --engine-cpus 1 --trainer-cpus 0 on 2 cores), so the two really run at once.
# A mode ending in -shared (one-step-off-shared, fully-async-shared:K) shares the cores
# instead: the engine process at nice 19 and the trainer each with every core, so the
# engine generates whenever the trainer leaves a core idle (--engine-nice 19).
#   STEPS=10 EVAL=5 ROUNDS=1 MODES="off off-pinned one-step-off fully-async:1 fully-async:2 fully-async-shared:2" \
#     PLOT=/tmp/async.svg KEEP=/tmp/async-runs bench/async_recipe.sh [extra recipe flags]
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bin="${RLHOST_BIN:-${BUILD:-$root/build}/rlhost}"
steps="${STEPS:-10}" rounds="${ROUNDS:-1}" every="${EVAL:-5}"
modes="${MODES:-off one-step-off fully-async:1 fully-async:2}"
# The engine on the last core, the trainer on the others (one core each on 2).
n=$(nproc)
pin=()
[ "$n" -ge 2 ] && pin=(--engine-cpus "$((n - 1))" --trainer-cpus "0-$((n - 2))")
# The machine's CPU ticks, busy and all (/proc/stat: user nice system idle iowait irq
# softirq steal): how much of the machine a run kept at work, whoever did it.
cpu_ticks() { awk '/^cpu /{print $2 + $3 + $4 + $7 + $8, $2 + $3 + $4 + $5 + $6 + $7 + $8 + $9}' /proc/stat; }
if [ -n "${KEEP:-}" ]; then   # KEEP=DIR: the runs' metrics and logs stay there
  out="$KEEP"
  mkdir -p "$out"
else
  out="$(mktemp -d -t rlhost-async-bench-XXXXXX)"
  trap 'rm -rf "$out"' EXIT
fi
for r in $(seq 1 "$rounds"); do
  for mode in $modes; do
    # Lock-step gets the main job's own placement (a thread engine, every core for each
    # phase in turn); the overlapped modes an engine process and the trainer on separate
    # cores. off-pinned: lock-step with the overlapped modes' placement, for reference.
    case "$mode" in
      off) flags=(--async-mode off) ;;
      off-pinned) flags=(--async-mode off --engine-mode process --threads 1 "${pin[@]}") ;;
      # -shared: an engine process at nice 19 and the trainer share every core; the
      # engine runs on what the trainer leaves idle (--engine-nice).
      *-shared*) m="${mode%%:*}"; flags=(--async-mode "${m%-shared}" --engine-mode process --engine-nice 19) ;;
      *) flags=(--async-mode "${mode%%:*}" --engine-mode process --threads 1 "${pin[@]}") ;;
    esac
    [[ "$mode" == *:* ]] && flags+=(--max-staleness "${mode#*:}")
    d="$out/${mode/:/-k}-$r"
    read -r b0 a0 < <(cpu_ticks)
    t0=$(date +%s.%N)
    "$bin" --no-control "$root/recipes/grpo_gsm8k_async.lua" "${flags[@]}" --num-rollout "$steps" \
      --eval-interval "$every" --no-progress --metrics-dir "$d" "$@" \
      > "$d.log" 2>&1 || { tail -20 "$d.log"; exit 1; }
    t1=$(date +%s.%N)
    read -r b1 a1 < <(cpu_ticks)
    echo "RESULT mode=$mode round=$r wall_s=$(python3 -c "print(round($t1 - $t0, 1))") dir=$d" \
      "cpu_busy=$(python3 -c "print(round(($b1 - $b0) / max($a1 - $a0, 1), 3))")"
  done
done | tee "$out/results.txt"
python3 "$root/bench/async_recipe_table.py" "$out/results.txt" ${PLOT:+"$PLOT"}
