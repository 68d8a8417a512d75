#!/usr/bin/env bash
# The engine's HTTP serving path under wrk: two rlhost binaries (a baseline and
# this tree) serving the same model, driven alternately with the same load:
#   GET /health (the server alone) and POST /generate with max_new_tokens 1
#   (server + one engine step), 64 connections, keep-alive.
# Prints requests/s per run, the medians, and new/base.
#
#   BASE=/path/to/baseline/rlhost bench/engine_wrk.sh
#   BASE=... NEW=build/rlhost MODEL=/models/x DURATION=10 REPEAT=3 CONN=64 bench/engine_wrk.sh
#
# Needs wrk. Not part of ctest: numbers depend on the machine; nothing is asserted.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
base="${BASE:?set BASE to the baseline rlhost binary}"
new="${NEW:-$root/build/rlhost}"
model="${MODEL:-${RLHOST_SHARED_DATA:-$root/../shared/data}/models/stories260K}"
duration="${DURATION:-10}" repeat="${REPEAT:-3}" conn="${CONN:-64}" threads="${WRK_THREADS:-2}"
command -v wrk >/dev/null || { echo "wrk not found (apt-get install wrk)" >&2; exit 2; }

work="$(mktemp -d /tmp/rlhost_engine_wrk.XXXXXX)"
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$work"; }
trap cleanup EXIT

start() {  # start NAME BIN -> URL in $work/NAME.url
  "$2" engine --model "$model" --port 0 --ready-file "$work/$1.url" --threads 1 --log-level warn \
    >"$work/$1.log" 2>&1 &
  pids+=($!)
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

rate() {  # rate URL PATH [script] -> requests/s (non-2xx responses are reported, not counted out)
  local out
  out="$(wrk -t"$threads" -c"$conn" -d"${duration}s" ${3:+-s "$3"} "$1$2")"
  if grep -q "Non-2xx" <<<"$out"; then echo "warning: $(grep Non-2xx <<<"$out") on $1$2" >&2; fi
  awk '/Requests\/sec/ {print $2}' <<<"$out"
}

echo "model $model; $conn connections, ${duration}s x $repeat alternating runs; base $base, new $new"
for what in health generate; do
  path=$([ $what = health ] && echo /health || echo /generate)
  script=$([ $what = generate ] && echo "$work/generate.lua" || true)
  rate "$(cat "$work/new.url")" "$path" "$script" >/dev/null  # warm both
  rate "$(cat "$work/base.url")" "$path" "$script" >/dev/null
  for i in $(seq 1 "$repeat"); do
    for side in base new; do
      r="$(rate "$(cat "$work/$side.url")" "$path" "$script")"
      echo "$what $side $r" | tee -a "$work/results"
    done
  done
done
python3 - "$work/results" <<'PY'
import statistics, sys
rows = {}
for line in open(sys.argv[1]):
    what, side, r = line.split()
    rows.setdefault((what, side), []).append(float(r))
print("\n%-9s %14s %14s %8s" % ("load", "base req/s", "new req/s", "new/base"))
for what in ("health", "generate"):
    b, n = statistics.median(rows[(what, "base")]), statistics.median(rows[(what, "new")])
    print("%-9s %14.0f %14.0f %7.2fx" % (what, b, n, n / b))
PY
