#!/usr/bin/env bash
# The engine's HTTP serving path under wrk: two rlhost binaries (a baseline and
# this tree) serving the same model, driven alternately with the same load:
#   GET /health (the server alone) and POST /generate with max_new_tokens 1
#   (server + one engine step), 64 connections, keep-alive.
# Prints requests/s per run, the engine process's CPU time per request, the
# medians, and new/base. On a machine with fewer cores than wrk + the engine
# need, CPU per request is the fairer figure: one event-loop thread gets a
# smaller share of an oversubscribed CPU than a pool of 64 worker threads.
#
#   BASE=/path/to/baseline/rlhost bench/engine_wrk.sh
#   BASE=... NEW=build/rlhost MODEL=/models/x DURATION=10 REPEAT=3 CONN=64 bench/engine_wrk.sh
#
# Needs wrk. Not part of ctest: numbers depend on the machine; nothing is asserted.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
base="${BASE:?set BASE to the baseline rlhost binary}"
new="${NEW:-$root/build/rlhost}"
model="${MODEL:-${RLHOST_TEST_DATA:-$root/build/test-data}/models/stories260K}"  # tests/data, unpacked by the build
duration="${DURATION:-10}" repeat="${REPEAT:-3}" conn="${CONN:-64}" threads="${WRK_THREADS:-2}"
command -v wrk >/dev/null || { echo "wrk not found (apt-get install wrk)" >&2; exit 2; }

work="$(mktemp -d /tmp/rlhost_engine_wrk.XXXXXX)"
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$work"; }
trap cleanup EXIT

start() {  # start NAME BIN -> URL in $work/NAME.url, pid in $work/NAME.pid
  "$2" engine --model "$model" --port 0 --ready-file "$work/$1.url" --threads 1 --log-level warn \
    >"$work/$1.log" 2>&1 &
  pids+=($!)
  echo $! >"$work/$1.pid"
  for _ in $(seq 1 600); do [ -s "$work/$1.url" ] && return; sleep 0.1; done
  echo "$1 did not start:" >&2; cat "$work/$1.log" >&2; exit 1
}
start base "$base"
start new "$new"

cat >"$work/generate.lua" <<'LUA'
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.body = '{"input_ids":[1,5,9,13,17,21,25,29],"sampling_params":{"max_new_tokens":1,"temperature":0,"ignore_eos":true}}'
LUA

cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }

rate() {  # rate SIDE PATH [script] -> "requests/s cpu_us_per_request" (non-2xx are reported)
  local out pid t0 t1 url
  url="$(cat "$work/$1.url")" pid="$(cat "$work/$1.pid")"
  t0="$(cpu_ticks "$pid")"
  out="$(wrk -t"$threads" -c"$conn" -d"${duration}s" ${3:+-s "$3"} "$url$2")"
  t1="$(cpu_ticks "$pid")"
  if grep -q "Non-2xx" <<<"$out"; then echo "warning: $(grep Non-2xx <<<"$out") on $url$2" >&2; fi
  awk -v dt=$((t1 - t0)) -v hz="$(getconf CLK_TCK)" '/Requests\/sec/ {rps = $2} /requests in/ {n = $1}
      END {printf "%s %.1f\n", rps, dt * 1e6 / hz / n}' <<<"$out"
}

echo "model $model; $conn connections, ${duration}s x $repeat alternating runs; base $base, new $new"
for what in health generate; do
  path=$([ $what = health ] && echo /health || echo /generate)
  script=$([ $what = generate ] && echo "$work/generate.lua" || true)
  rate new "$path" "$script" >/dev/null  # warm both
  rate base "$path" "$script" >/dev/null
  for i in $(seq 1 "$repeat"); do
    for side in base new; do
      r="$(rate "$side" "$path" "$script")"
      echo "$what $side $r" | tee -a "$work/results"
    done
  done
done
python3 - "$work/results" <<'PY'
import statistics, sys
rows = {}
for line in open(sys.argv[1]):
    what, side, r, cpu = line.split()
    rows.setdefault((what, side), []).append((float(r), float(cpu)))
print("\n%-9s %12s %12s %8s %16s %16s %8s" % ("load", "base req/s", "new req/s", "new/base",
                                               "base CPU us/req", "new CPU us/req", "new/base"))
for what in ("health", "generate"):
    med = lambda side, k: statistics.median(x[k] for x in rows[(what, side)])
    b, n, bc, nc = med("base", 0), med("new", 0), med("base", 1), med("new", 1)
    print("%-9s %12.0f %12.0f %7.2fx %16.1f %16.1f %7.2fx" % (what, b, n, n / b, bc, nc, nc / bc))
PY
