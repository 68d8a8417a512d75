#!/usr/bin/env bash
# SGLang's own client benchmark (python -m sglang.bench_serving --backend sglang)
# against `rlhost engine`, as a compatibility check with real SGLang tooling.
# sglang is installed without its dependencies into a venv (its pinned CUDA stack
# is not needed for the client side); only what bench_serving imports is added.
#   MODEL_DIR=... NUM_PROMPTS=64 bench/sglang_bench_serving.sh
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${BUILD:-$root/build}"
venv="${SGLANG_VENV:-${TMPDIR:-/tmp}/rlhost-sglang-venv}"
model="${MODEL_DIR:-${RLHOST_TEST_DATA:-$build/test-data}/models/stories260K}"  # a real tokenizer: bench_serving counts text
if [ ! -x "$venv/bin/python" ] || ! "$venv/bin/python" -c "import sglang.bench_serving" 2>/dev/null; then
  python3 -m venv --system-site-packages "$venv"
  "$venv/bin/pip" install -q --no-deps sglang
  "$venv/bin/pip" install -q psutil pybase64 pillow msgspec pyzmq datasets sentencepiece compressed-tensors gguf \
      apache-tvm-ffi torchvision 2>&1 | grep -v -i "requires\|resolver" || true
fi
[ -f "$model/config.json" ] || { echo "no model at $model (set MODEL_DIR)" >&2; exit 2; }
ready="$(mktemp -u)"
"$build/rlhost" engine --model "$model" --port 0 --ready-file "$ready" --threads "${THREADS:-2}" &
pid=$!
trap 'kill $pid 2>/dev/null; wait $pid 2>/dev/null || true' EXIT
for _ in $(seq 1 300); do [ -s "$ready" ] && break; sleep 0.1; done
url="$(cat "$ready")"
echo "engine at $url"
"$venv/bin/python" -m sglang.bench_serving --backend sglang --base-url "$url" --model "$model" --tokenizer "$model" \
  --dataset-name random-ids --random-input-len "${INPUT_LEN:-32}" --random-output-len "${OUTPUT_LEN:-32}" \
  --random-range-ratio 1.0 --num-prompts "${NUM_PROMPTS:-64}" --max-concurrency "${CONCURRENCY:-16}"
