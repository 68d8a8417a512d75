#!/usr/bin/env bash
# Weights to engines on another host: rl.weight_sync's c10d broadcast (what a multi-host
# job does for remote engines, docs/distributed.md) against PyTorch's raw c10d broadcast
# of the same bytes over the same link, and against the files and HTTP fallbacks. Two "hosts":
# network namespaces on a bridge this script makes (198.18.0.0/24, a test range), torn
# down on exit; ENGINES engines on host 1, the trainer on host 0. Needs root and iproute2.
#   SHAPE=42m ENGINES=2 ROUNDS=5 [PATHS="per_tensor distributed disk http"] bench/weight_broadcast.sh [build-dir]
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${1:-$root/build}"
bin="$build/rlhost"
shape="${SHAPE:-42m}" engines="${ENGINES:-2}" rounds="${ROUNDS:-5}" python="${PYTHON:-python3}"
[ -x "$bin" ] || { echo "weight_broadcast.sh: no rlhost binary at $bin" >&2; exit 2; }
# shellcheck source=bench/llama_shapes.sh
source "$root/bench/llama_shapes.sh"
model="$(bench_model "$shape" "$build")"
out="$(mktemp -d "${TMPDIR:-/tmp}/rlhost-weight-broadcast-XXXXXX")"
# shellcheck source=bench/netns_hosts.sh
source "$root/bench/netns_hosts.sh"
netns_hosts_up
export RLHOST_ADMIN_TOKEN="bench-$(head -c 12 /dev/urandom | od -An -tx1 | tr -d ' \n')"
urls=()
for e in $(seq 1 "$engines"); do
  GLOO_SOCKET_IFNAME="${dev[1]}" RLHOST_API_KEY="$RLHOST_ADMIN_TOKEN" ip netns exec "${ns[1]}" \
    "$bin" engine --model "$model" --host "${addr[1]}" --port 0 --threads 1 --ready-file "$out/e$e.url" \
    >"$out/engine$e.log" 2>&1 &
done
for e in $(seq 1 "$engines"); do
  for _ in $(seq 1 600); do grep -q '^http' "$out/e$e.url" 2>/dev/null && break; sleep 0.2; done
  urls+=("$(cat "$out/e$e.url")")
done
echo "# $(date -u +%FT%TZ) $shape, $engines engine(s) on host 1, $rounds rounds, load $(cut -d' ' -f1-3 /proc/loadavg)"
# PyTorch's side first: its ranks wait, rank 0 on the FIFOs, for a round beside each of ours.
mkfifo "$out/go" "$out/done"
port=29555
for e in $(seq 1 "$engines"); do
  GLOO_SOCKET_IFNAME="${dev[1]}" ip netns exec "${ns[1]}" "$python" "$root/bench/weight_broadcast_peer.py" \
    "$e" "$((engines + 1))" "${addr[0]}" "$port" >/dev/null 2>"$out/peer$e.log" &
done
GLOO_SOCKET_IFNAME="${dev[0]}" ip netns exec "${ns[0]}" "$python" "$root/bench/weight_broadcast_peer.py" \
  0 "$((engines + 1))" "${addr[0]}" "$port" "$out/go" "$out/done" >"$out/raw.json" 2>"$out/peer0.log" &
raw_pid=$!
GLOO_SOCKET_IFNAME="${dev[0]}" RAW_GO="$out/go" RAW_DONE="$out/done" ip netns exec "${ns[0]}" "$bin" --no-control \
  "$root/bench/weight_broadcast.lua" "$model" "${addr[0]}" "$rounds" "${urls[@]}" | tail -1 >"$out/rlhost.json"
wait "$raw_pid"
"$python" - "$out/rlhost.json" <<'PY'
import json, statistics, sys
r = json.load(open(sys.argv[1]))
med = statistics.median
gb = r["bytes"] / 1e9
raw = [x for p in r["raw"].values() for x in p]
w = med(raw)
print("%d tensors, %.1f MB, %d engine(s); medians of %d rounds per path, each paired with a raw round "
      "(before it in odd rounds, after it in even ones)" % (r["tensors"], r["bytes"] / 1e6, r["engines"],
                                                           max(len(r[k]) for k in ("per_tensor", "distributed", "disk", "http"))))
print("| path | s | GB/s (bytes sent once) | its paired raw rounds | raw / path: of the medians | per round (median) |")
print("|---|---|---|---|---|---|")
print("| raw c10d broadcast (PyTorch, one flat tensor), all %d rounds | %.3f | %.2f | | 1.00x | |" % (len(raw), w, gb / w))
def row(what, key, job=False):   # the path a multi-host job sends by (rl.recipe.hosts.BUCKET_BYTES) in bold
    if not r[key]:
        return   # not run (PATHS)
    s, pw = med(r[key]), med(r["raw"][key])
    per = med(a / b for a, b in zip(r["raw"][key], r[key]))
    b = "**" if job else ""
    print("| %s | %.3f | %.2f | %.3f | %s%.2fx%s | %.2fx |" % (what + ("; what a job sends" if job else ""), s,
                                                           gb / s, pw, b, pw / s, b, per))
row("rl.weight_sync distributed, a broadcast per tensor (SGLang's way)", "per_tensor", r["job_bucket"] == 0)
row("rl.weight_sync distributed, %d MiB buckets (`bucket_bytes`)" % (r["bucket"] / 2**20), "distributed",
    r["job_bucket"] == r["bucket"])
row("rl.weight_sync disk (safetensors, shared path)", "disk")
row("rl.weight_sync http (%d MiB safetensors buckets, POSTed to each engine)" % (r["http_bucket"] / 2**20), "http")
PY
echo "# logs: $out"
