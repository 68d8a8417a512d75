#!/usr/bin/env bash
# GRPO optimiser step (forward, backward, AdamW on BATCH x TOKENS) tokens/s: rl.trainer
# against the same step in Python PyTorch (transformers' model, sdpa attention), same run,
# same threads. rlhost runs twice per round: with the batch-invariant kernels (exact, the
# default) and with RLHOST_BATCH_INVARIANT=0 (ATen's kernels); the three runs alternate
# their order every round; medians over ROUNDS, the load average beside each run; then
# each side's arithmetic rate against the roof (bench/trainer_step_flops.py: MKL's sgemm
# on the step's own GEMM shapes, same threads).
#   SHAPES="42m qwen42m default" THREADS="2" ROUNDS=3 BATCH=8 TOKENS=256 STEPS=3 bench/trainer_step.sh
# RAGGED=1: responses of 1/8 .. 8/8 of the longest (GRPO's spread); both sides count real
# tokens, rlhost runs them end to end, the peer right-padded (the arithmetic line is skipped).
# Shapes: bench/llama_shapes.sh (15m, 42m, 110m Llama; qwen42m; default).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
. "$root/bench/llama_shapes.sh"
build="${BUILD:-$root/build}"
shapes="${SHAPES:-42m 110m}" threads_list="${THREADS:-1 2}" rounds="${ROUNDS:-1}"
B="${BATCH:-8}" T="${TOKENS:-256}" S="${STEPS:-3}"
run() {  # run VARIANT MODEL THREADS -> one RESULT line, tagged
  local v="$1" model="$2" t="$3" load
  load="$(cut -d' ' -f1 /proc/loadavg)"
  case "$v" in
    exact) "$build/rlhost" --no-control "$root/bench/trainer_step.lua" "$model" "$t" "$B" "$T" "$S" 2>/dev/null \
             | grep '^RESULT' | sed "s/\$/ variant=exact load=$load/" ;;
    bi0) RLHOST_BATCH_INVARIANT=0 "$build/rlhost" --no-control "$root/bench/trainer_step.lua" "$model" "$t" "$B" "$T" "$S" \
             2>/dev/null | grep '^RESULT' | sed "s/\$/ variant=bi0 load=$load/" ;;
    torch) python3 "$root/bench/trainer_step_torch.py" "$model" "$t" "$B" "$T" "$S" 2>/dev/null \
             | grep '^RESULT' | sed "s/\$/ variant=torch load=$load/" ;;
  esac
}
for shape in $shapes; do
  model="$(bench_model "$shape" "$build")"
  for t in $threads_list; do
    lines=()
    order=(exact bi0 torch)
    for r in $(seq 1 "$rounds"); do
      for v in "${order[@]}"; do
        l="$(run "$v" "$model" "$t")"
        echo "$shape round $r $l"
        lines+=("$l")
      done
      order=("${order[@]:1}" "${order[0]}")  # rotate
    done
    flops=""
    [ "${RAGGED:-0}" = 1 ] || flops="$(python3 "$root/bench/trainer_step_flops.py" "$model" "$t" "$B" "$T" 2>/dev/null | grep '^FLOPS' || true)"
    python3 - "$shape" "$t" "$B" "$T" "$flops" "${lines[@]}" <<'PY'
import statistics, sys
kv = lambda l: dict(x.split("=", 1) for x in l.split()[1:])
rows = [kv(l) for l in sys.argv[6:] if l.strip()]
tok = {v: statistics.median(float(r["tok_s"]) for r in rows if r["variant"] == v) for v in ("exact", "bi0", "torch")}
loads = ", ".join(r["load"] for r in rows)
print(f"== {sys.argv[1]}{' ragged' if rows[0].get('ragged') == '1' else ''}, {sys.argv[2]} thread(s), medians of {sum(r['variant'] == 'exact' for r in rows)} round(s): "
      f"rlhost exact {tok['exact']:.0f} tok/s, RLHOST_BATCH_INVARIANT=0 {tok['bi0']:.0f}, PyTorch {tok['torch']:.0f} -> "
      f"exact/PyTorch {tok['exact'] / tok['torch']:.2f}x, BI=0/PyTorch {tok['bi0'] / tok['torch']:.2f}x, "
      f"cost of exactness {tok['bi0'] / tok['exact']:.2f}x (load {loads})")
if sys.argv[5]:  # each side's own arithmetic per second against MKL's sgemm on the step's shapes
    f = kv(sys.argv[5])
    tokens = int(sys.argv[3]) * int(sys.argv[4])
    roof = float(f["roof_gflops"])
    rate = {v: int(f["torch" if v == "torch" else "rlhost"]) * tok[v] / tokens / 1e9 for v in tok}
    print(f"   arithmetic: rlhost exact {rate['exact']:.0f} GFLOP/s ({rate['exact'] / roof:.0%} of the roof), "
          f"BI=0 {rate['bi0']:.0f} ({rate['bi0'] / roof:.0%}), PyTorch {rate['torch']:.0f} ({rate['torch'] / roof:.0%}); "
          f"roof (MKL sgemm on the step's GEMM shapes, same threads) {roof:.0f} GFLOP/s; the peer does "
          f"{int(f['torch']) / int(f['rlhost']):.2f}x rlhost's arithmetic (its lm_head over every position)")
PY
  done
done
