#!/usr/bin/env bash
# The engine's HTTP serving path under wrk: two rlhost binaries (a baseline and
# this tree) serving the same model, driven alternately with the same load:
#   GET /health (the server alone) and POST /generate with max_new_tokens 1
#   (server + one engine step), 64 connections, keep-alive.
# Prints requests/s per run, the engine process's CPU time per request, the
# medians, and new/base. On a machine with fewer cores than wrk + the engine
# need, CPU per request is the fairer figure: one event-loop thread gets a
# smaller share of an oversubscribed CPU than a pool of 64 worker threads.
# For /generate it also prints where the CPU went (the two busiest threads of
# the engine process: the scheduler and, for the event server, the loop) and
# the mean batch (requests per engine step, from /get_server_info).
# Without BASE only NEW is measured.
#
#   BASE=/path/to/baseline/rlhost bench/engine_wrk.sh
#   BASE=... NEW=build/rlhost MODEL=/models/x DURATION=10 REPEAT=3 CONN=64 bench/engine_wrk.sh
#
# Needs wrk. Not part of ctest: numbers depend on the machine; nothing is asserted.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
base="${BASE:-}"
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
sides=new
if [ -n "$base" ]; then start base "$base"; sides="base new"; fi
start new "$new"

cat >"$work/generate.lua" <<'LUA'
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.body = '{"input_ids":[1,5,9,13,17,21,25,29],"sampling_params":{"max_new_tokens":1,"temperature":0,"ignore_eos":true}}'
LUA

cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
thread_ticks() { for t in /proc/"$1"/task/*; do echo "${t##*/} $(awk '{print $14 + $15}' "$t/stat")"; done | sort; }
steps() { curl -s "$1/get_server_info" | python3 -c 'import json,sys; print(json.load(sys.stdin)["internal_states"][0]["steps"])'; }

rate() {  # rate SIDE PATH [script] -> "requests/s cpu_us_per_request busiest_thread_us second_us requests_per_step"
  local out pid t0 t1 url s0 s1
  url="$(cat "$work/$1.url")" pid="$(cat "$work/$1.pid")"
  t0="$(cpu_ticks "$pid")"
  thread_ticks "$pid" >"$work/threads0"
  s0="$(steps "$url")"
  out="$(wrk -t"$threads" -c"$conn" -d"${duration}s" ${3:+-s "$3"} "$url$2")"
  t1="$(cpu_ticks "$pid")"
  thread_ticks "$pid" >"$work/threads1"
  s1="$(steps "$url")"
  if grep -q "Non-2xx" <<<"$out"; then echo "warning: $(grep Non-2xx <<<"$out") on $url$2" >&2; fi
  local busiest
  busiest="$(join "$work/threads0" "$work/threads1" | awk '{print $3 - $2}' | sort -rn | head -2 | tr '\n' ' ')"
  awk -v dt=$((t1 - t0)) -v hz="$(getconf CLK_TCK)" -v b="$busiest" -v ds=$((s1 - s0)) \
      '/Requests\/sec/ {rps = $2} /requests in/ {n = $1}
      END {split(b, t, " "); printf "%s %.1f %.1f %.1f %.1f\n", rps, dt * 1e6 / hz / n, t[1] * 1e6 / hz / n,
           t[2] * 1e6 / hz / n, (ds > 0 ? n / ds : 0)}' <<<"$out"
}

echo "model $model; $conn connections, ${duration}s x $repeat alternating runs; base ${base:-none}, new $new"
for what in health generate; do
  path=$([ $what = health ] && echo /health || echo /generate)
  script=$([ $what = generate ] && echo "$work/generate.lua" || true)
  for side in $sides; do rate "$side" "$path" "$script" >/dev/null; done  # warm
  for i in $(seq 1 "$repeat"); do
    for side in $sides; do
      r="$(rate "$side" "$path" "$script")"
      echo "$what $side $r" | tee -a "$work/results"
    done
  done
done
python3 - "$work/results" <<'PY'
import statistics, sys
rows = {}
for line in open(sys.argv[1]):
    what, side, *vals = line.split()
    rows.setdefault((what, side), []).append([float(v) for v in vals])
sides = [s for s in ("base", "new") if any(k[1] == s for k in rows)]
med = lambda what, side, k: statistics.median(x[k] for x in rows[(what, side)])
print("\n%-9s %-5s %10s %12s %18s %18s %12s" % ("load", "side", "req/s", "CPU us/req", "busiest thr us/req",
                                                "2nd thread us/req", "req/step"))
for what in ("health", "generate"):
    for side in sides:
        print("%-9s %-5s %10.0f %12.1f %18.1f %18.1f %12.1f" % ((what, side) + tuple(med(what, side, k) for k in range(5))))
    if len(sides) == 2:
        print("%-9s new/base: req/s %.2fx, CPU per request %.2fx" % (
            what, med(what, "new", 0) / med(what, "base", 0), med(what, "new", 1) / med(what, "base", 1)))
PY
