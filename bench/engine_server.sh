#!/usr/bin/env bash
# The engine server under load vs a simple Python server (FastAPI + uvicorn)
# wrapping the same model with a lean PyTorch KV-cache loop: 64 concurrent
# clients at max_new_tokens 1, 16 and 128 (greedy, ignore_eos); then a GRPO-style
# group of 8 identical prompts, counting prompt tokens actually prefilled.
#   SHAPE=15m THREADS=2 CONC=64 bench/engine_server.sh
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${BUILD:-$root/build}"
shape="${SHAPE:-15m}" threads="${THREADS:-2}" conc="${CONC:-64}"
model="${MODEL_DIR:-${TMPDIR:-/tmp}/rlhost-bench-llama$shape}"
[ -f "$model/config.json" ] || SHAPES="$shape" THREADS=1 BATCHES=1 NEW=2 "$root/bench/engine_decode.sh" >/dev/null
cmake --build "$build" --target rlhost rlhost_torch >/dev/null
ready="$(mktemp -u)"
"$build/rlhost" engine --model "$model" --port 0 --ready-file "$ready" --threads "$threads" \
    --max-running-requests 64 --log-level warn &
epid=$!
port=$((20000 + RANDOM % 20000))
python3 "$root/bench/engine_server_peer.py" "$model" "$port" "$threads" &
ppid=$!
trap 'kill $epid $ppid 2>/dev/null; wait $epid $ppid 2>/dev/null || true' EXIT
for _ in $(seq 1 600); do [ -s "$ready" ] && break; sleep 0.1; done
ours="$(cat "$ready")"
peer="http://127.0.0.1:$port"
for _ in $(seq 1 600); do curl -sf "$peer/health" >/dev/null && break; sleep 0.1; done
echo "model $model, $threads thread(s) each, $conc concurrent clients; rlhost $ours, python $peer"
out="$(mktemp)"
for new in 1 16 128; do
  n=$(( new == 1 ? 256 : new == 16 ? 128 : 64 ))
  for side in rlhost python; do
    url=$([ $side = rlhost ] && echo "$ours" || echo "$peer")
    r="$(python3 "$root/bench/engine_load.py" "$url" "$conc" "$n" "$new" | grep '^RESULT')"
    echo "$side $r" | tee -a "$out"
  done
done
# Prefix sharing: one group of 8 identical 128-token prompts.
before=$(curl -s "$ours/get_server_info" | python3 -c 'import json,sys; print(json.load(sys.stdin)["internal_states"][0]["prefill_tokens_computed"])')
python3 "$root/bench/engine_load.py" "$ours" 8 8 8 128 --same-prompt >/dev/null
after=$(curl -s "$ours/get_server_info" | python3 -c 'import json,sys; print(json.load(sys.stdin)["internal_states"][0]["prefill_tokens_computed"])')
pb=$(curl -s "$peer/stats" | python3 -c 'import json,sys; print(json.load(sys.stdin)["prefill_tokens"])')
python3 "$root/bench/engine_load.py" "$peer" 8 8 8 128 --same-prompt >/dev/null
pa=$(curl -s "$peer/stats" | python3 -c 'import json,sys; print(json.load(sys.stdin)["prefill_tokens"])')
python3 - "$out" "$((after - before))" "$((pa - pb))" <<'PY'
import sys
rows = {}
for line in open(sys.argv[1]):
    side, _, rest = line.split(None, 2)
    kv = dict(x.split("=", 1) for x in rest.split())
    rows[(side, int(kv["new"]))] = (float(kv["req_s"]), float(kv["tok_s"]), int(kv["errors"]))
print("\n%-8s %12s %12s %12s %12s %8s %8s" % ("new", "rlhost req/s", "python req/s", "rlhost tok/s", "python tok/s",
                                            "req x", "tok x"))
for new in (1, 16, 128):
    a, b = rows[("rlhost", new)], rows[("python", new)]
    print("%-8d %12.2f %12.2f %12.1f %12.1f %7.2fx %7.2fx" % (new, a[0], b[0], a[1], b[1], a[0] / b[0], a[1] / b[1]))
ours, theirs = int(sys.argv[2]), int(sys.argv[3])
print("\nprefill tokens for a group of 8 identical 128-token prompts: rlhost %d, python %d (%.1fx fewer)"
      % (ours, theirs, theirs / max(ours, 1)))
PY
rm -f "$out"
