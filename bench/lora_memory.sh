#!/usr/bin/env bash
# LoRA next to full fine-tuning: the trainer's step time, peak memory and state, on the
# default math model and on a random Qwen2.5-0.5B-shaped model, in one invocation
# (bench/README.md, "LoRA vs full fine-tuning"). Each job is its own process
# (bench/fsdp_memory.lua replicated, with LORA_RANK for LoRA), so its VmHWM is its own.
# Nothing is asserted.
#
#   bench/lora_memory.sh                   # default model + 0.5B shape (24 layers)
#   LAYERS=4 STEPS=3 bench/lora_memory.sh  # a quicker run
#
# Knobs (environment): RLHOST_BIN (build/rlhost), RANK (LoRA rank, 16; alpha 2 x rank),
# LAYERS (0.5B shape's layers, 24), STEPS (4; the first is left out of the medians),
# SAMPLES (8), PROMPT_LEN / RESPONSE_LEN (64 / 64), MICRO_BATCH (2), THREADS (all cores),
# MODELS ("default qwen0.5b"), IDLE_WAIT (60: seconds to wait for a quiet machine).
set -euo pipefail
cd "$(dirname "$0")/.."

RLHOST=${RLHOST_BIN:-build/rlhost}
RANK=${RANK:-16}
LAYERS=${LAYERS:-24}
export STEPS=${STEPS:-4} LAYERS
THREADS=${THREADS:-$(nproc)}
MODELS=${MODELS:-"default qwen0.5b"}
[[ -x $RLHOST ]] || { echo "no $RLHOST (build it: ninja -C build rlhost)" >&2; exit 1; }

work=$(mktemp -d /tmp/rlhost-lora-bench.XXXXXX)
trap 'rm -rf "$work"' EXIT
results=$work/results.jsonl
: >"$results"

source bench/idle.sh   # wait_idle

for m in $MODELS; do
  case $m in
    default) dir=$("$RLHOST" --no-control -e 'print(rl.mathgen.default_model())' | tail -n 1) ;;
    qwen0.5b) dir=$work/qwen0.5b-L$LAYERS; "$RLHOST" --no-control bench/fsdp_memory.lua init "$dir" ;;
    *) echo "MODELS: unknown model '$m' (default, qwen0.5b)" >&2; exit 2 ;;
  esac
  for r in 0 "$RANK"; do
    label="$m $([[ $r == 0 ]] && echo full || echo "lora-r$r")"
    echo "== $label ($THREADS threads)"
    wait_idle
    log=$work/run.log
    if ! MODEL_DIR=$dir LORA_RANK=$r THREADS=$THREADS OMP_NUM_THREADS=$THREADS LR=${LR:-1e-5} \
        "$RLHOST" --no-control bench/fsdp_memory.lua replicated >"$log" 2>&1; then
      tail -n 20 "$log" >&2; echo "$label failed" >&2; exit 1
    fi
    grep -v '^RESULT ' "$log" | tail -n 4 | sed 's/^/   | /'
    printf '{"label":"%s","model":"%s","lora_rank":%s,"result":%s}\n' "$label" "$m" "$r" \
      "$(sed -n 's/^RESULT //p' "$log" | tail -n 1)" >>"$results"
  done
done

python3 - "$results" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
gib = lambda b: b / 2**30
print("\n| model | mode | params | step (median) | vs full | trainer state | vs full | peak RSS after train | vs full | other CPU |")
print("|---|---|---|---|---|---|---|---|---|---|")
full = {}
for r in rows:
    res = r["result"]; k = res["ranks"][0]
    other = max(0.0, k["machine_busy_train_s"] - k["cpu_train_s"]) / (k["train_wall_s"] * res["cores"])
    cur = (k["step_time"], k["state_bytes"], k["hwm_after_train"])
    if r["lora_rank"] == 0: full[r["model"]] = cur
    f = full.get(r["model"], cur)
    print("| %s | %s | %.1fM | %.3f s | %.2fx | %.3f GiB | %.3fx | %.2f GiB | %.2fx | %.0f%% |" % (
        r["model"], "full" if r["lora_rank"] == 0 else "LoRA r%d" % r["lora_rank"], res["model_params"] / 1e6,
        cur[0], cur[0] / f[0], gib(cur[1]), cur[1] / f[1], gib(cur[2]), cur[2] / f[2], 100 * other))
print("\n(%d steps each, the first left out; %d samples x (%d + %d) tokens, micro-batch %d, %d cores)" % (
    rows[0]["result"]["steps"], rows[0]["result"]["samples"], rows[0]["result"]["prompt_len"],
    rows[0]["result"]["response_len"], rows[0]["result"]["micro_batch"], rows[0]["result"]["cores"]))
PY
