#!/usr/bin/env bash
# Router benchmarks, peers in the same run, ratios printed (bench/README.md).
#
#   bench/router_bench.sh [build-dir]      (default: build-rt, then build)
#
# 1. Added latency (p50/p99, 1 connection) and requests/s (32, 256 connections),
#    `wrk` POSTing /generate against: a fast stub worker directly (nginx
#    `return 200`), nginx proxying it (keep-alive upstream), sglang-router
#    (PyPI, Rust) proxying it, and `rlhost router` proxying it.
# 2. Streaming relay: events/s over 64 concurrent SSE streams from a C++ stub
#    (bench/router_stub.cpp, one event per loop turn), wrk as the client, nginx
#    (proxy_buffering off) vs rlhost router; then the same with a Python worker
#    and client (bench/router_stream.py).
# 3. Makespan of a ragged GRPO batch, least_load and cache_aware vs round_robin
#    (bench/router_grpo.py).
# Peers that are missing are reported and skipped. DURATION (s) per wrk run: 2;
# ROUNDS (3): targets are measured interleaved, ROUNDS times, medians reported.
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
ROOT="$(dirname "$HERE")"
BUILD="${1:-}"
if [ -z "$BUILD" ]; then for d in build-rt build; do [ -x "$ROOT/$d/rlhost" ] && BUILD="$ROOT/$d" && break; done; fi
RLHOST="$BUILD/rlhost"
[ -x "$RLHOST" ] || { echo "no rlhost binary (build first; pass the build dir)" >&2; exit 1; }
command -v wrk >/dev/null || { echo "wrk not installed (scripts/bootstrap.sh --test-deps)" >&2; exit 1; }
command -v nginx >/dev/null || { echo "nginx not installed" >&2; exit 1; }
DURATION="${DURATION:-2}"
TMP="$(mktemp -d)"
PIDS=()
cleanup() {
  for role in stub proxy; do
    [ -f "$TMP/$role/nginx.pid" ] && kill -TERM "$(cat "$TMP/$role/nginx.pid")" 2>/dev/null || true
  done
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$TMP"
}
trap cleanup EXIT

free_port() { python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])'; }
wait_http() { for _ in $(seq 200); do curl -sf -o /dev/null "$1" && return 0; sleep 0.05; done; echo "not up: $1" >&2; return 1; }

STUB=$(free_port); NGX=$(free_port); SGL=$(free_port); RLH=$(free_port)
SSTUB=$(free_port); SNGX=$(free_port); SRLH=$(free_port)   # streaming: C++ stub, nginx, rlhost
CHUNKS="${CHUNKS:-100}"
STUB_BIN="$BUILD/bench/bench_router_stub"
[ -x "$STUB_BIN" ] || { echo "no $STUB_BIN (build with -DRLHOST_BENCH=ON)" >&2; exit 1; }
BODY='{"text":"The quick brown fox jumps over the lazy dog","sampling_params":{"max_new_tokens":8}}'
# Two nginx instances: the stub worker and the proxy peer must be separate
# processes, as the stub and rlhost's router are (one nginx worker serving both
# relays to itself without a process hop, flattering nginx by ~5 us).
for role in stub proxy; do mkdir -p "$TMP/$role"; done
cat > "$TMP/stub/nginx.conf" <<EOF
worker_processes 1;
daemon off;
pid $TMP/stub/nginx.pid;
error_log $TMP/stub/nginx.err warn;
events { worker_connections 8192; }
http {
  access_log off;
  client_body_temp_path $TMP/stub/cb; proxy_temp_path $TMP/stub/px; fastcgi_temp_path $TMP/stub/fc; uwsgi_temp_path $TMP/stub/uw; scgi_temp_path $TMP/stub/sc;
  keepalive_requests 1000000;
  server {  # the fast stub worker
    listen 127.0.0.1:$STUB backlog=4096;
    location / { default_type application/json; return 200 '{"text":"ok","meta_info":{"completion_tokens":8}}'; }
  }
}
EOF
cat > "$TMP/proxy/nginx.conf" <<EOF
worker_processes 1;
daemon off;
pid $TMP/proxy/nginx.pid;
error_log $TMP/proxy/nginx.err warn;
events { worker_connections 8192; }
http {
  access_log off;
  client_body_temp_path $TMP/proxy/cb; proxy_temp_path $TMP/proxy/px; fastcgi_temp_path $TMP/proxy/fc; uwsgi_temp_path $TMP/proxy/uw; scgi_temp_path $TMP/proxy/sc;
  keepalive_requests 1000000;
  upstream stub { server 127.0.0.1:$STUB; keepalive 512; }
  server {  # nginx as the proxy peer
    listen 127.0.0.1:$NGX backlog=4096;
    location / { proxy_pass http://stub; proxy_http_version 1.1; proxy_set_header Connection ""; proxy_buffering off; }
  }
  upstream sstub { server 127.0.0.1:$SSTUB; keepalive 512; }
  server {  # nginx relaying the streaming stub, unbuffered
    listen 127.0.0.1:$SNGX backlog=4096;
    location / { proxy_pass http://sstub; proxy_http_version 1.1; proxy_set_header Connection ""; proxy_buffering off; }
  }
}
EOF
"$STUB_BIN" "$SSTUB" "$CHUNKS" > /dev/null & PIDS+=($!)
nginx -c "$TMP/stub/nginx.conf" -p "$TMP/stub" & PIDS+=($!)
nginx -c "$TMP/proxy/nginx.conf" -p "$TMP/proxy" & PIDS+=($!)
wait_http "http://127.0.0.1:$STUB/health"
wait_http "http://127.0.0.1:$NGX/health"

HAVE_SGL=0
if python3 -c "import sglang_router" 2>/dev/null; then
  python3 -m sglang_router.launch_router --host 127.0.0.1 --port "$SGL" --worker-urls "http://127.0.0.1:$STUB" \
    --policy round_robin --log-level error > "$TMP/sgl.log" 2>&1 & PIDS+=($!)
  wait_http "http://127.0.0.1:$SGL/health" && HAVE_SGL=1 || { echo "sglang-router did not start:"; tail -5 "$TMP/sgl.log"; }
else
  echo "sglang-router not installed (pip install sglang-router): skipped"
fi
"$RLHOST" router --port "$RLH" --policy round_robin --worker "http://127.0.0.1:$STUB" --log-level warn > "$TMP/rlh.log" 2>&1 & PIDS+=($!)
wait_http "http://127.0.0.1:$RLH/health"

cat > "$TMP/post.lua" <<EOF
wrk.method = "POST"
wrk.body = '$BODY'
wrk.headers["Content-Type"] = "application/json"
EOF

# Prints "p50_us p99_us rps" for one wrk run.
run_wrk() {  # url conns
  local threads=1; [ "$2" -ge 32 ] && threads=2
  wrk -t"$threads" -c"$2" -d"${DURATION}s" --latency -s "$TMP/post.lua" "$1/generate" > "$TMP/wrk.out" 2>&1 || true
  python3 - "$TMP/wrk.out" <<'PY'
import re, sys
t = open(sys.argv[1]).read()
def us(s):
    v, u = re.match(r"([\d.]+)(us|ms|s|m)", s).groups()
    return float(v) * {"us": 1, "ms": 1e3, "s": 1e6, "m": 6e7}[u]
try:
    p50 = us(re.search(r"^\s+50%\s+(\S+)", t, re.M).group(1)); p99 = us(re.search(r"^\s+99%\s+(\S+)", t, re.M).group(1))
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", t).group(1))
except Exception:
    sys.stderr.write("wrk output not understood:\n" + t + "\n")
    print("nan nan 0 wrk-failed")
    sys.exit(0)
non2xx = re.search(r"Non-2xx or 3xx responses: (\d+)", t)
print("%.1f %.1f %.0f %s" % (p50, p99, rps, non2xx.group(1) if non2xx else "0"))
PY
}

declare -A P50 P99 R32 R256
TARGETS=(direct nginx rlhost)
[ "$HAVE_SGL" = 1 ] && TARGETS=(direct nginx sglang-router rlhost)
url_of() { case "$1" in direct) echo "http://127.0.0.1:$STUB";; nginx) echo "http://127.0.0.1:$NGX";;
  sglang-router) echo "http://127.0.0.1:$SGL";; rlhost) echo "http://127.0.0.1:$RLH";; esac; }
median() { python3 -c 'import sys,statistics;print(statistics.median(map(float,sys.argv[1:])))' "$@"; }
ROUNDS="${ROUNDS:-3}"
echo "== latency and throughput: wrk POST /generate, ${DURATION}s per run, targets interleaved, median of $ROUNDS rounds =="
declare -A L50 L99 T32 T256
for round in $(seq "$ROUNDS"); do
  for t in "${TARGETS[@]}"; do
    u=$(url_of "$t")
    read -r p50 p99 _ e1 < <(run_wrk "$u" 1)
    read -r _ _ r32 e2 < <(run_wrk "$u" 32)
    read -r _ _ r256 e3 < <(run_wrk "$u" 256)
    L50[$t]+="$p50 "; L99[$t]+="$p99 "; T32[$t]+="$r32 "; T256[$t]+="$r256 "
    [ "$e1$e2$e3" = "000" ] || echo "  $t round $round: non-2xx responses $e1/$e2/$e3"
  done
done
printf "%-14s %10s %10s %12s %12s\n" target p50_us p99_us rps@32 rps@256
for t in "${TARGETS[@]}"; do
  # shellcheck disable=SC2086
  P50[$t]=$(median ${L50[$t]}); P99[$t]=$(median ${L99[$t]}); R32[$t]=$(median ${T32[$t]}); R256[$t]=$(median ${T256[$t]})
  printf "%-14s %10s %10s %12.0f %12.0f\n" "$t" "${P50[$t]}" "${P99[$t]}" "${R32[$t]}" "${R256[$t]}"
done
python3 - "${P50[direct]}" "${P99[direct]}" "${P50[nginx]}" "${P99[nginx]}" "${P50[rlhost]}" "${P99[rlhost]}" \
  "${R32[rlhost]}" "${R256[rlhost]}" "${R32[nginx]}" "${R256[nginx]}" "${R32[sglang-router]:-0}" "${R256[sglang-router]:-0}" \
  "${P50[sglang-router]:-0}" "${P99[sglang-router]:-0}" <<'EOF'
import sys
d50, d99, n50, n99, r50, r99, r32, r256, n32, n256, s32, s256, s50, s99 = map(float, sys.argv[1:])
print("added latency (proxy - direct), 1 connection:")
print("  nginx          p50 +%.0f us  p99 +%.0f us" % (n50 - d50, n99 - d99))
if s50: print("  sglang-router  p50 +%.0f us  p99 +%.0f us" % (s50 - d50, s99 - d99))
print("  rlhost router  p50 +%.0f us  p99 +%.0f us" % (r50 - d50, r99 - d99))
print("ratios: rlhost added p50 / nginx added p50 = %.2fx (goal <= 1)" % ((r50 - d50) / max(n50 - d50, 1e-9)))
if s32:
    print("ratios: rlhost rps / sglang-router rps = %.2fx @32, %.2fx @256 (goal >= 1)" % (r32 / s32, r256 / s256))
print("ratios: rlhost rps / nginx rps = %.2fx @32, %.2fx @256" % (r32 / n32, r256 / n256))
EOF
echo
echo "== streaming relay: 64 concurrent SSE streams of $CHUNKS events from a C++ stub (bench_router_stub), wrk =="
"$RLHOST" router --port "$SRLH" --policy round_robin --worker "http://127.0.0.1:$SSTUB" --log-level warn > "$TMP/rlh2.log" 2>&1 & PIDS+=($!)
wait_http "http://127.0.0.1:$SRLH/health"
cat > "$TMP/stream.lua" <<'EOF2'
wrk.method = "POST"
wrk.body = '{"text":"s","stream":true}'
wrk.headers["Content-Type"] = "application/json"
EOF2
declare -A SR
for round in $(seq "$ROUNDS"); do
  for t in nginx rlhost; do
    port=$SNGX; [ "$t" = rlhost ] && port=$SRLH
    rps=$(wrk -t2 -c64 -d"${DURATION}s" -s "$TMP/stream.lua" "http://127.0.0.1:$port/generate" 2>/dev/null |
          sed -n 's/^Requests\/sec: *\([0-9.]*\).*/\1/p')
    SR[$t]+="${rps:-0} "
  done
done
# shellcheck disable=SC2086
python3 - "$CHUNKS" "$(median ${SR[nginx]})" "$(median ${SR[rlhost]})" <<'EOF2'
import sys
chunks, n, r = int(sys.argv[1]) + 1, float(sys.argv[2]), float(sys.argv[3])
print("nginx (proxy_buffering off) %8.0f streams/s = %9.0f events/s" % (n, n * chunks))
print("rlhost router               %8.0f streams/s = %9.0f events/s" % (r, r * chunks))
print("ratio: rlhost / nginx events/s = %.2fx (median of rounds; goal >= 1)" % (r / max(n, 1e-9)))
EOF2
kill "${PIDS[@]}" 2>/dev/null || true
wait 2>/dev/null || true
PIDS=()

echo
echo "== streaming relay with a Python worker and client (bench/router_stream.py): both proxies bound by them =="
python3 "$HERE/router_stream.py" --rlhost "$RLHOST"
echo
echo "== makespan: ragged GRPO batch (32 prompts x 8 samples, heavy-tailed lengths, 4 workers) =="
python3 "$HERE/router_grpo.py" --rlhost "$RLHOST"
