#!/usr/bin/env bash
# Prefill/decode disaggregation on one host: K/V transfer GB/s (shm, tcp) vs memcpy,
# and 1 prefill + 1 decode vs 2 unified engines at equal cores (bench/pd_bench.py).
#   SHAPE=default|15m|42m|110m WHAT=transfer|throughput|all bench/pd.sh
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${BUILD:-$root/build}"
source "$root/bench/llama_shapes.sh"
model="$(bench_model "${SHAPE:-default}" "$build")"
exec python3 "$root/bench/pd_bench.py" "${RLHOST_BIN:-$build/rlhost}" "$model" "${WHAT:-all}"
