#!/usr/bin/env bash
# The learning curve of the main job: `rlhost recipes/grpo_gsm8k.lua` with its defaults
# (the embedded default model, built and cached first if needed — not timed) for
# MINUTES of GRPO (default 10; the recipe's default of 100 steps is lifted unless a
# --num-rollout is given), stopped by Ctrl-C (SIGINT) as a user would, which makes the
# recipe finish its step, evaluate once more and save. Then the curve —
# rollout reward per step and held-out accuracy per eval — goes to
# docs/grpo_learning.svg and the figures to stdout.
#
#   bench/grpo_learning.sh [MINUTES] [recipe flags...]
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bin="${RLHOST_BIN:-$root/build/rlhost}"
minutes="${1:-10}"; shift || true
out="${OUT:-$root/bench/out/grpo_learning}"
rm -rf "$out"; mkdir -p "$out"

# Build (or find) the default model first, so the 10 minutes are GRPO only.
"$bin" -e 'print(rl.mathgen.default_model())' >/dev/null

steps=(--num-rollout 100000)
for a in "$@"; do case "$a" in --num-rollout|--num-rollout=*|--num-epoch|--num-epoch=*) steps=() ;; esac; done
start=$(date +%s)
set +e
timeout -s INT -k 300 "$((minutes * 60))" "$bin" --no-control "$root/recipes/grpo_gsm8k.lua" \
  --metrics-dir "$out" --no-progress "${steps[@]}" "$@" 2>&1 | tee "$out/run.log" | grep -E "\] (eval|rollout) [0-9]+ \||done:" 
set -e
wall=$(( $(date +%s) - start ))
if [ "$wall" -ge "$((minutes * 60))" ]; then
  echo "wall: $wall s (GRPO stopped at ${minutes} min, then the final eval)"
else
  echo "wall: $wall s (the run ended by itself before ${minutes} min: its --num-rollout or --num-epoch)"
fi
python3 "$root/bench/grpo_learning_plot.py" "$out/metrics.jsonl" "$root/docs/grpo_learning.svg"
