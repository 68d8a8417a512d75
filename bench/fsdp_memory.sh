#!/usr/bin/env bash
# Per-rank memory and step time of the sharded trainer (train_backend = "fsdp") next to
# the replicated one, on a random Qwen2.5-0.5B-shaped model, all in one invocation
# (bench/README.md, "Sharded training memory"). Nothing is asserted.
#
#   bench/fsdp_memory.sh                      # replicated 1 and 2 ranks, fsdp 2 and 4 ranks
#   LAYERS=2 STEPS=2 bench/fsdp_memory.sh     # a quick run
#   CAP_GIB=6 bench/fsdp_memory.sh            # + the memory-cap demonstration (root, cgroup v1)
#   RECOMPUTE_RUNS= bench/fsdp_memory.sh      # without the activation-recomputation runs
#
# Knobs (environment): RLHOST_BIN (build/rlhost), LAYERS (24), STEPS (3; the first is
# left out of the medians), WORLDS (fsdp world sizes, "2 4"), SAMPLES (8), PROMPT_LEN /
# RESPONSE_LEN (64 / 64), MICRO_BATCH (2), THREADS (LibTorch threads per rank; default
# cores / world, at least 1), KEEP=dir (make the model in dir and keep it; reused when
# it is already there), CAP_GIB (per-rank memory cap of the cap demonstration; off when
# unset), CAP_ONLY=1 (only the cap demonstration), CGROUP_PARENT (where the cgroups go;
# default: this shell's own memory cgroup), RECOMPUTE_RUNS (BACKEND:WORLD pairs run again with
# RECOMPUTE, labelled +recompute; default "replicated:1 fsdp:4"), RECOMPUTE (the method of
# those runs, uniform:1; bench/fsdp_memory.lua).
set -euo pipefail
cd "$(dirname "$0")/.."

RLHOST=${RLHOST_BIN:-build/rlhost}
LAYERS=${LAYERS:-24}
STEPS=${STEPS:-3}
WORLDS=${WORLDS:-"2 4"}
CORES=$(nproc)
export LAYERS STEPS

[[ -x $RLHOST ]] || { echo "no $RLHOST (build it: ninja -C build rlhost)" >&2; exit 1; }

work=$(mktemp -d /tmp/rlhost-fsdp-bench.XXXXXX)
results=$work/results.jsonl
: >"$results"

# ---- cgroups (v1 memory controller) ----------------------------------------------------
cg_root=/sys/fs/cgroup/memory
cg_parent=${CGROUP_PARENT:-$cg_root$(awk -F: '$2 == "memory" { print $3 }' /proc/self/cgroup 2>/dev/null)}
cg_parent=${cg_parent%/}

cleanup() {
  local cg pid
  for cg in "$cg_parent"/rlhost-bench-$$-*; do
    [[ -d $cg ]] || continue
    # our own jobs, should one still run (interrupted): stop them by id
    if [[ -r $cg/cgroup.procs ]]; then
      while read -r pid; do kill -9 "$pid" 2>/dev/null || true; done <"$cg/cgroup.procs"
    fi
    for _ in 1 2 3 4 5 6 7 8 9 10; do rmdir "$cg" 2>/dev/null && break; sleep 0.5; done
    [[ -d $cg ]] && echo "warning: could not remove cgroup $cg" >&2
  done
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

gib() { awk -v b="$1" 'BEGIN { printf "%.2f", b / 1073741824 }'; }
mem_available() { echo $(( $(awk '/^MemAvailable:/ { print $2 }' /proc/meminfo) * 1024 )); }

# ---- the model, made once --------------------------------------------------------------
if [[ -n ${KEEP:-} ]]; then
  mkdir -p "$KEEP"
  model=$KEEP/qwen2.5-0.5b-shape-L$LAYERS
else
  model=$work/model
fi
if [[ -f $model/config.json && -f $model/model.safetensors ]]; then
  echo "== reusing the model in $model"
else
  echo "== making a random Qwen2.5-0.5B-shaped model ($LAYERS layers) in $model"
  "$RLHOST" bench/fsdp_memory.lua init "$model"
fi
export MODEL_DIR=$model

# make_cgroup NAME LIMIT_BYTES -> prints the path, or nothing (and a reason on stderr)
make_cgroup() {
  local cg=$cg_parent/rlhost-bench-$$-$1
  if ! mkdir "$cg" 2>/dev/null; then
    echo "cannot create cgroup $cg (needs root and a cgroup v1 memory controller at $cg_root)" >&2
    return 0
  fi
  if ! echo "$2" >"$cg/memory.limit_in_bytes" 2>/dev/null; then
    echo "cannot set $cg/memory.limit_in_bytes" >&2
    rmdir "$cg" 2>/dev/null || true
    return 0
  fi
  # memory + swap: the same limit, so the job cannot swap instead of being killed
  if [[ -w $cg/memory.memsw.limit_in_bytes ]]; then echo "$2" >"$cg/memory.memsw.limit_in_bytes" 2>/dev/null || true; fi
  echo "$cg"
}

# cg_report CG -> "oom_kills failcnt max_usage_bytes"
cg_report() {
  local oom
  oom=$(awk '$1 == "oom_kill" { print $2 }' "$1/memory.oom_control" 2>/dev/null)
  # failcnt: times usage hit the limit (memory, or memory + swap when that limit hit first)
  local f1 f2
  f1=$(cat "$1/memory.failcnt")
  f2=$(cat "$1/memory.memsw.failcnt" 2>/dev/null || echo 0)
  echo "${oom:--1} $(( f1 > f2 ? f1 : f2 )) $(cat "$1/memory.max_usage_in_bytes")"
}

# wait_idle: timings on a shared machine wait for it to settle (bench/idle.sh)
source bench/idle.sh

# ---- one configuration -----------------------------------------------------------------
# run_config LABEL BACKEND WORLD [CGROUP] -> appends {"kind": "result", ...} or {"kind": "failed", ...}
last_rc=0 last_elapsed=0
run_config() {
  local label=$1 backend=$2 world=$3 cg=${4:-} threads log rc t0 t1
  threads=${THREADS:-$(( CORES / world > 0 ? CORES / world : 1 ))}
  log=$work/$label.log
  echo "== $label: $backend, $world rank(s), $threads thread(s) each${cg:+, in cgroup $cg (limit $(gib "$(cat "$cg/memory.limit_in_bytes")") GiB)}"
  wait_idle
  local cmd=("$RLHOST")
  ((world > 1)) && cmd+=(--nproc "$world")
  cmd+=(bench/fsdp_memory.lua "$backend")
  t0=$(date +%s.%N)
  set +e
  if [[ -n $cg ]]; then
    # the shell joins the cgroup, then becomes rlhost: every rank (a child) is in it too
    OMP_NUM_THREADS=$threads THREADS=$threads bash -c 'echo $$ >"$1/cgroup.procs" && shift && exec "$@"' _ "$cg" "${cmd[@]}" \
      >"$log" 2>&1
  else
    OMP_NUM_THREADS=$threads THREADS=$threads "${cmd[@]}" >"$log" 2>&1
  fi
  rc=$?
  set -e
  t1=$(date +%s.%N)
  last_rc=$rc
  last_elapsed=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", b - a }')
  # (with --nproc the launcher prefixes each rank's lines with "[rank R] ")
  grep -v 'RESULT {' "$log" | tail -n 8 | sed 's/^/   | /' || true
  local res
  res=$(sed -n 's/^\(\[rank 0\] \)\{0,1\}RESULT //p' "$log" | tail -n 1)
  if [[ $rc -eq 0 && -n $res ]]; then
    printf '{"kind":"result","label":"%s","threads":%d,"elapsed_s":%s,"result":%s}\n' \
      "$label" "$threads" "$(awk -v a="$t0" -v b="$t1" 'BEGIN { print b - a }')" "$res" >>"$results"
  else
    local why="exit status $rc"
    ((rc > 128)) && why="$why (signal $((rc - 128)))"
    echo "   $label failed after $(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.0f", b - a }') s: $why (log: see above)"
    printf '{"kind":"failed","label":"%s","backend":"%s","world":%d,"rc":%d,"elapsed_s":%s}\n' "$label" "$backend" "$world" \
      "$rc" "$(awk -v a="$t0" -v b="$t1" 'BEGIN { print b - a }')" >>"$results"
  fi
}

skip() {  # skip LABEL BACKEND WORLD REASON
  echo "== $1: skipped: $4"
  printf '{"kind":"skip","label":"%s","backend":"%s","world":%d,"reason":"%s"}\n' "$1" "$2" "$3" "$4" >>"$results"
}

# A guard for the big jobs: a cgroup that holds them to what the machine has free, so a
# job that outgrows it is OOM-killed alone (not some other process on the machine).
guard_cgroup() {
  local limit=$(( $(mem_available) - 1073741824 ))
  make_cgroup "guard-$1" "$limit" 2>/dev/null || true
}

t_all=$(date +%s)
if [[ ${CAP_ONLY:-0} != 1 ]]; then
  # A replicated rank holds the whole model, its gradients and the AdamW state whatever
  # the world size: world 1 shows its state; world 2 adds the data-parallel split of
  # the batch (half the activations per rank) and the step time to compare against.
  run_config replicated-1 replicated 1 "$(guard_cgroup replicated-1)"
  rep1_hwm=$(python3 -c 'import json,sys
for l in open(sys.argv[1]):
    d = json.loads(l)
    if d["kind"] == "result" and d["label"] == "replicated-1": print(max(r["hwm_after_train"] for r in d["result"]["ranks"]))' "$results")
  avail=$(mem_available)
  if [[ -z $rep1_hwm ]]; then
    skip replicated-2 replicated 2 "replicated-1 did not finish, so its peak is unknown"
  elif (( 2 * rep1_hwm + 1073741824 > avail )); then
    skip replicated-2 replicated 2 "2 x replicated-1's peak RSS ($(gib "$rep1_hwm") GiB) + 1 GiB > MemAvailable ($(gib "$avail") GiB)"
  else
    run_config replicated-2 replicated 2 "$(guard_cgroup replicated-2)"
  fi
  for w in $WORLDS; do
    run_config "fsdp-$w" fsdp "$w" "$(guard_cgroup "fsdp-$w")"
  done
  # Activation recomputation: the same configurations keeping one hidden state per layer
  # (the ratios stay to the replicated trainer that keeps its activations).
  recompute_runs=${RECOMPUTE_RUNS-replicated:1 fsdp:4}
  for spec in $recompute_runs; do
    backend=${spec%%:*} w=${spec##*:}
    export RECOMPUTE=${RECOMPUTE:-uniform:1}
    run_config "$backend-$w+recompute" "$backend" "$w" "$(guard_cgroup "$backend-$w-recompute")"
  done
  unset RECOMPUTE
fi

# ---- the memory-cap demonstration ------------------------------------------------------
if [[ -n ${CAP_GIB:-} ]]; then
  cap=$(awk -v g="$CAP_GIB" 'BEGIN { printf "%.0f", g * 1073741824 }')
  echo "== cap demonstration: $CAP_GIB GiB per rank (replicated, 1 rank: one cgroup of $CAP_GIB GiB;"
  echo "   fsdp, 2 ranks: the whole 'rlhost --nproc 2' tree in one cgroup of 2 x $CAP_GIB GiB)"
  for spec in "replicated 1" "fsdp 2"; do
    set -- $spec
    backend=$1 world=$2 label=cap-$1-$2
    cg=$(make_cgroup "$label" $((cap * world)))
    if [[ -z $cg ]]; then
      skip "$label" "$backend" "$world" "could not create a memory cgroup under $cg_parent"
      continue
    fi
    run_config "$label" "$backend" "$world" "$cg"
    read -r ooms failcnt maxuse <<<"$(cg_report "$cg")"
    echo "   $label: exit status $last_rc, oom kills $ooms, failcnt $failcnt, cgroup peak $(gib "$maxuse") GiB"
    printf '{"kind":"cap","label":"%s","backend":"%s","world":%d,"cap_per_rank":%s,"cgroup_limit":%s,"rc":%d,"oom_kills":%s,"failcnt":%s,"max_usage":%s,"elapsed_s":%s}\n' \
      "$label" "$backend" "$world" "$cap" $((cap * world)) "$last_rc" "$ooms" "$failcnt" "$maxuse" "$last_elapsed" >>"$results"
  done
fi

echo "== total wall time: $(( $(date +%s) - t_all )) s (cores: $CORES, layers: $LAYERS, steps: $STEPS)"
echo
python3 bench/fsdp_memory_table.py "$results"
if [[ -n ${KEEP:-} ]]; then cp "$results" "$KEEP/results.jsonl" && echo "(results: $KEEP/results.jsonl)"; fi
