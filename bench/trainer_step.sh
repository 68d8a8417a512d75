#!/usr/bin/env bash
# GRPO optimiser step (forward, backward, AdamW on 8 x 256 tokens) tokens/s:
# rl.trainer against the same step in Python PyTorch (transformers' Llama), on
# random-weight Llama models of the llama2.c stories shapes, same run, same threads.
#   SHAPES="42m 110m" THREADS="1 2" BATCH=8 TOKENS=256 STEPS=3 bench/trainer_step.sh
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
. "$root/bench/llama_shapes.sh"
build="${BUILD:-$root/build}"
shapes="${SHAPES:-42m 110m}" threads_list="${THREADS:-1 2}"
B="${BATCH:-8}" T="${TOKENS:-256}" S="${STEPS:-3}"
for shape in $shapes; do
  model="$(bench_model "$shape" "$build")"
  for t in $threads_list; do
    ours=$("$build/rlhost" --no-control "$root/bench/trainer_step.lua" "$model" "$t" "$B" "$T" "$S" 2>/dev/null | grep '^RESULT')
    peer=$(python3 "$root/bench/trainer_step_torch.py" "$model" "$t" "$B" "$T" "$S" 2>/dev/null | grep '^RESULT')
    echo "$shape $ours"; echo "$shape $peer"
    python3 - "$shape" "$t" "$ours" "$peer" <<'PY'
import sys
kv = lambda l: dict(x.split("=", 1) for x in l.split()[1:])
a, b = kv(sys.argv[3]), kv(sys.argv[4])
print(f"== {sys.argv[1]}, {sys.argv[2]} thread(s): rlhost {float(a['tok_s']):.0f} tok/s, PyTorch {float(b['tok_s']):.0f} tok/s -> {float(a['tok_s']) / float(b['tok_s']):.2f}x")
PY
  done
done
