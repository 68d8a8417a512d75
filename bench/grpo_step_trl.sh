#!/usr/bin/env bash
# The whole GRPO step: rlhost's recipe (recipes/grpo_gsm8k.lua: engine rollout, trainer,
# weight sync) against TRL's GRPOTrainer (model.generate, its trainer) on the same model,
# the same prompts in the same order, the same batch (PROMPTS prompts x N samples, two
# optimiser steps of GLOBAL samples in micro-batches of MICRO), the same reward, fp32,
# THREADS threads each. Runs alternate (rlhost first in odd rounds, TRL first in even
# ones); each run's steps SKIP.. are kept and the table shows medians over all rounds, the
# load average (uptime) beside every run, the ratios, and every setting the two sides do
# not share. The prompts each side actually tokenised are compared id for id.
#   MODELS="default qwen42m" ROUNDS=2 STEPS=7 SKIP=2 THREADS=2 bench/grpo_step_trl.sh
# MODELS: default (rl.mathgen.default_model(), 1.2M Llama, its own problems) and/or
# qwen42m (a random Qwen2-shaped model, 42.9M parameters of which 38.9M are the tied
# 151,936-token embedding, the Qwen2.5 tokenizer, GSM8K train questions).
# VARIANTS: rlhost configurations run beside TRL in the same rounds: exact (the default:
# batch-invariant kernels, old log-probs from the rollout where provably equal), bi0
# (RLHOST_BATCH_INVARIANT=0), recompute (exact kernels, --old-logprobs recompute).
# Output: bench/out/grpo_step_trl-<UTC time>/ (runs, logs, table.txt).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bin="${RLHOST_BIN:-$root/build/rlhost}"
models="${MODELS:-default qwen42m}" rounds="${ROUNDS:-2}" threads="${THREADS:-2}" skip="${SKIP:-2}"
variants="${VARIANTS:-exact}"
prompts="${PROMPTS:-16}" n="${N:-8}" new="${NEW:-128}" gbs="${GLOBAL:-64}" micro="${MICRO:-16}"
python="${PYTHON:-python3}"
[ -x "$bin" ] || { echo "grpo_step_trl.sh: no rlhost binary at $bin (build it, or set RLHOST_BIN)" >&2; exit 2; }
"$python" -c 'import trl' 2>/dev/null || { echo "grpo_step_trl.sh: no trl for $python (the peer is not a test dependency: $python -m pip install trl==1.16.0, measured with transformers 5.23.0)" >&2; exit 2; }
out="${OUT_DIR:-$root/bench/out}/grpo_step_trl-$(date -u +%Y%m%dT%H%M%SZ)"
mkdir -p "$out"
data="$(dirname "$bin")/test-data"

# shellcheck source=bench/llama_shapes.sh
source "$root/bench/llama_shapes.sh"
# prompts_of NAME MODEL_DIR -> its prompts (.jsonl: question, answer)
prompts_of() {
  case "$1" in
    default) echo "$2/data/train.jsonl" ;;
    qwen42m) echo "$data/gsm8k/train.jsonl" ;;
  esac
}

run_rlhost() {  # MODEL_NAME DIR PROMPTS ROUND VARIANT
  local name="$1" dir="$2" pr="$3" r="$4" v="$5" env=() flags=()
  local run="$out/$name-r$r-rlhost-$v"
  mkdir -p "$run"
  case "$v" in
    exact) ;;
    bi0) env=(RLHOST_BATCH_INVARIANT=0) ;;
    recompute) flags=(--old-logprobs recompute) ;;
  esac
  echo "$(date -u +%T) $name round $r rlhost/$v load $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$out/load.txt"
  env "${env[@]}" "$bin" --no-control "$root/recipes/grpo_gsm8k.lua" --hf-checkpoint "$dir" --prompt-data "$pr" \
    --rollout-shuffle=false --num-rollout "$steps" --rollout-batch-size "$prompts" --n-samples-per-prompt "$n" \
    --over-sampling-batch-size "$prompts" --dynamic-sampling-filter none --global-batch-size "$gbs" \
    --micro-batch-size "$micro" --rollout-max-response-len "$new" --rollout-temperature 1.0 --lr "$lr" \
    --threads "$threads" --max-running-requests 256 --progress=false --metrics-dir "$run" \
    --save-debug-rollout-data "$run/rollout_{rollout_id}.pt" "${flags[@]}" >"$run/log.txt" 2>&1 \
    || { echo "rlhost run failed; log $run/log.txt:" >&2; tail -20 "$run/log.txt" >&2; exit 1; }
  echo "$(date -u +%T) $name round $r rlhost/$v done load $(cut -d' ' -f1-3 /proc/loadavg)" >>"$out/load.txt"
}

run_trl() {  # MODEL_NAME DIR PROMPTS ROUND
  local name="$1" dir="$2" pr="$3" r="$4"
  echo "$(date -u +%T) $name round $r trl load $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$out/load.txt"
  "$python" "$root/bench/grpo_step_trl.py" "$dir" "$pr" "$out/$name-r$r-trl.json" --steps "$steps" \
    --threads "$threads" --prompts-per-step "$prompts" --n "$n" --max-new "$new" --global-batch "$gbs" \
    --micro-batch "$micro" --lr "$lr" >"$out/$name-r$r-trl.log" 2>&1 \
    || { echo "TRL run failed; log $out/$name-r$r-trl.log:" >&2; tail -20 "$out/$name-r$r-trl.log" >&2; exit 1; }
  echo "$(date -u +%T) $name round $r trl done load $(cut -d' ' -f1-3 /proc/loadavg)" >>"$out/load.txt"
}

echo "# grpo_step_trl.sh $(date -u +%FT%TZ) host $(hostname) nproc $(nproc) rlhost $(git -C "$root" rev-parse --short HEAD)" \
  | tee "$out/table.txt"
for name in $models; do
  dir="$(bench_model "$name" "$(dirname "$bin")")"
  pr="$(prompts_of "$name" "$dir")"
  steps="${STEPS:-7}"
  [ "$name" = qwen42m ] && steps="${QWEN_STEPS:-$steps}"
  lr=2e-4
  [ "$name" = qwen42m ] && lr=1e-6
  for r in $(seq 1 "$rounds"); do
    if [ $((r % 2)) -eq 1 ]; then
      for v in $variants; do run_rlhost "$name" "$dir" "$pr" "$r" "$v"; done
      run_trl "$name" "$dir" "$pr" "$r"
    else
      run_trl "$name" "$dir" "$pr" "$r"
      for v in $variants; do run_rlhost "$name" "$dir" "$pr" "$r" "$v"; done
    fi
  done
done
"$python" "$root/bench/grpo_step_trl_table.py" "$out" --skip "$skip" | tee -a "$out/table.txt"
echo "# raw runs and logs: $out"
