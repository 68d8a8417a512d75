#!/usr/bin/env bash
# A GRPO job on two hosts against the same job on one host: the main job on the default
# model, two data-parallel ranks and two engines either way — on one host (`rlhost
# --nproc 2`, both engines rank 0's) or on two (network namespaces on a bridge this
# script makes, 198.18.0.0/24, torn down on exit; ranks started with srun's variables;
# `--rollout-num-gpus-per-node 1`: one engine per host, the remote one synced by c10d
# broadcast). Prints where each step's time goes (medians of steps SKIP..). On one
# machine the two "hosts" share its cores: no speed-up is expected, the point is what
# crossing hosts costs. Needs root and iproute2.
#   STEPS=8 SKIP=2 bench/multihost_step.sh [build-dir]
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${1:-$root/build}"
bin="$build/rlhost" steps="${STEPS:-8}" skip="${SKIP:-2}" python="${PYTHON:-python3}"
[ -x "$bin" ] || { echo "multihost_step.sh: no rlhost binary at $bin" >&2; exit 2; }
[ "$(id -u)" = 0 ] || { echo "multihost_step.sh: making network namespaces needs root" >&2; exit 2; }
out="$(mktemp -d "${TMPDIR:-/tmp}/rlhost-multihost-step-XXXXXX")"
# shellcheck source=bench/netns_hosts.sh
source "$root/bench/netns_hosts.sh"
flags=("$root/recipes/grpo_gsm8k.lua" --num-rollout "$steps" --eval-interval 100000 --no-progress --threads 1
       --router-policy round_robin --rollout-seed 7)
export RLHOST_ADMIN_TOKEN="bench-$(head -c 12 /dev/urandom | od -An -tx1 | tr -d ' \n')"
echo "# $(date -u +%FT%TZ) $steps steps, load $(cut -d' ' -f1-3 /proc/loadavg)"
env -u WORLD_SIZE -u RANK "$bin" --no-control --nproc 2 "${flags[@]}" --num-engines 2 --engine-mode process \
  --metrics-dir "$out/one" >"$out/one.log" 2>&1
netns_hosts_up
for r in 0 1; do
  env -u WORLD_SIZE -u RANK SLURM_JOB_ID=4343 SLURM_STEP_ID=0 SLURM_NTASKS=2 SLURM_STEP_NUM_TASKS=2 \
    SLURM_STEP_TASKS_PER_NODE="1(x2)" SLURM_STEP_NODELIST="${addr[0]},${addr[1]}" SLURM_PROCID=$r SLURM_LOCALID=0 \
    SLURM_NODEID=$r GLOO_SOCKET_IFNAME="${dev[$r]}" ip netns exec "${ns[$r]}" \
    "$bin" --no-control "${flags[@]}" --rollout-num-gpus-per-node 1 --metrics-dir "$out/two" >"$out/two$r.log" 2>&1 &
done
wait
"$python" - "$out" "$skip" <<'PY'
import json, statistics, sys
out, skip = sys.argv[1], int(sys.argv[2])
keys = [("perf/total_step_time", "whole step"), ("perf/rollout_time", "rollout"), ("perf/scatter_time", "batch to ranks"),
        ("perf/actor_train_time", "train"), ("perf/update_weights_time", "weight sync"),
        ("perf/update_weights_remote_time", "  of it to the other host")]
def rows(d):
    return [json.loads(l) for l in open(out + "/" + d + "/metrics.jsonl") if '"rollout/step"' in l][skip:]
one, two = rows("one"), rows("two")
print("| | one host (--nproc 2, 2 engines) | two hosts (1 engine each) | two / one |")
print("|---|---|---|---|")
for k, name in keys:
    a = [r[k] for r in one if k in r]; b = [r[k] for r in two if k in r]
    ma = statistics.median(a) if a else None; mb = statistics.median(b) if b else None
    f = lambda v: "%.3f s" % v if v is not None else "-"
    print("| %s | %s | %s | %s |" % (name, f(ma), f(mb), "%.2fx" % (mb / ma) if ma and mb else "-"))
print("steps: one host %d, two hosts %d (medians of steps %d..); every sync to both engines agreed: %s" % (
    len(one) + skip, len(two) + skip, skip, all(r.get("rollout/engines/versions_agree") == 1 for r in two)))
PY
echo "# logs: $out"
