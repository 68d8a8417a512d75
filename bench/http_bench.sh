#!/usr/bin/env bash
# HTTP client throughput: rlhost's client vs Python httpx.AsyncClient, both
# against the same local nginx (one worker, keep-alive, a small JSON body),
# with 64 and 1,024 requests in flight. Prints a table and rlhost/httpx.
#
#   bench/http_bench.sh                      # uses build/rlhost
#   RLHOST_BIN=build-http/rlhost REQUESTS=20000 PY_REQUESTS=3000 REPEAT=3 bench/http_bench.sh
#
# Throughput is a rate, so the two clients run different request counts
# (httpx is far slower; equal counts would take minutes) after the same warmup.
#
# Needs nginx (apt-get install nginx-light) and httpx (pip install httpx).
# Not part of ctest: numbers depend on the machine; nothing is asserted.
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
root="$(dirname "$here")"
rlhost="${RLHOST_BIN:-$root/build/rlhost}"
requests="${REQUESTS:-20000}"        # per rlhost run
py_requests="${PY_REQUESTS:-3000}"   # per httpx run
repeat="${REPEAT:-3}"
inflights="${INFLIGHT:-64 1024}"

command -v nginx >/dev/null || { echo "nginx not found: apt-get install -y nginx-light" >&2; exit 2; }
python3 -c "import httpx" 2>/dev/null || { echo "httpx not found: pip install httpx" >&2; exit 2; }
[ -x "$rlhost" ] || { echo "rlhost binary not found at $rlhost (set RLHOST_BIN)" >&2; exit 2; }

work="$(mktemp -d /tmp/rlhost_http_bench.XXXXXX)"
nginx_pid=""
cleanup() {
  if [ -n "$nginx_pid" ]; then kill "$nginx_pid" 2>/dev/null || true; wait "$nginx_pid" 2>/dev/null || true; fi
  rm -rf "$work"
}
trap cleanup EXIT

port="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')"
mkdir -p "$work/logs" "$work/tmp"
cat >"$work/nginx.conf" <<CONF
worker_processes 1;
worker_rlimit_nofile 16384;
daemon off;
pid $work/nginx.pid;
error_log $work/logs/error.log warn;
events { worker_connections 8192; multi_accept on; }
http {
  access_log off;
  keepalive_requests 10000000;
  keepalive_timeout 120s;
  client_body_temp_path $work/tmp/body;
  proxy_temp_path $work/tmp/proxy;
  fastcgi_temp_path $work/tmp/fastcgi;
  server {
    listen 127.0.0.1:$port backlog=4096;
    location / {
      default_type application/json;
      return 200 '{"id":"bench","object":"text_completion","choices":[{"text":"hello world","index":0}]}';
    }
  }
}
CONF
nginx -p "$work" -c "$work/nginx.conf" &
nginx_pid=$!
url="http://127.0.0.1:$port/v1/completions"
for _ in $(seq 100); do
  curl -sf -o /dev/null "$url" && break
  sleep 0.05
done
curl -sf -o /dev/null "$url" || { echo "nginx did not come up; see $work/logs/error.log" >&2; cat "$work/logs/error.log" >&2; exit 1; }

field() { sed -n "s/.* $1=\([^ ]*\).*/\1/p"; }
best=0
run_best() {  # sets $best: the best requests/s of $repeat runs of a command printing a RESULT line
  local line rps
  best=0
  for _ in $(seq "$repeat"); do
    line="$("$@" | grep '^RESULT')"
    rps="$(echo "$line" | field rps)"
    echo "  $line"
    if [ "$rps" -gt "$best" ]; then best="$rps"; fi
  done
}

echo "server: nginx $(nginx -v 2>&1 | sed 's/.*\///') (1 worker) at $url"
echo "runs: rlhost $requests requests, httpx $py_requests requests, best of $repeat each"
echo "machine: $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg)"
declare -A rl_rps py_rps
for n in $inflights; do
  warm=$(( n * 2 ))  # opens every connection before timing
  run_best "$rlhost" "$here/http_client.lua" "$url" "$n" "$requests" "$warm"
  rl_rps[$n]=$best
  run_best python3 "$here/http_httpx.py" "$url" "$n" "$py_requests" "$warm"
  py_rps[$n]=$best
done

printf '\n%-10s %14s %14s %14s\n' "in flight" "rlhost req/s" "httpx req/s" "rlhost/httpx"
for n in $inflights; do
  ratio="$(python3 -c "print(f'{${rl_rps[$n]}/${py_rps[$n]}:.2f}x')")"
  printf '%-10s %14s %14s %14s\n' "$n" "${rl_rps[$n]}" "${py_rps[$n]}" "$ratio"
done
