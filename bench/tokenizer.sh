#!/usr/bin/env bash
# Tokenizer throughput: rlhost's C++ Tokenizer vs HF `tokenizers` (Rust, from
# Python), both single-threaded, encoding every GSM8K train question with the
# Qwen3 tokenizer in the same run. Checks that the ids are identical on all
# questions, then prints tokens/s and the ratio.
#
#   bench/tokenizer.sh                       # uses build/bench/bench_tokenizer
#   BENCH_BIN=build-tok/bench/bench_tokenizer REPEAT=5 bench/tokenizer.sh
#
# HF runs with RAYON_NUM_THREADS=1 and TOKENIZERS_PARALLELISM=false, as a Python
# loop of encode() (one call per question) and as encode_batch (one call, the
# Rayon pool pinned to one thread). Needs `pip install tokenizers`.
# Not part of ctest: numbers depend on the machine; nothing is asserted.
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
root="$(dirname "$here")"
bin="${BENCH_BIN:-$root/build/bench/bench_tokenizer}"
data="${RLHOST_TEST_DATA:-$root/build/test-data}"  # tests/data, unpacked by the build
tokdir="${TOKENIZER_DIR:-$data/tokenizers/qwen}"
gsm8k="${GSM8K:-$data/gsm8k/train.jsonl}"
repeat="${REPEAT:-5}"

python3 -c "import tokenizers" 2>/dev/null || { echo "tokenizers not found: python3 -m pip install tokenizers" >&2; exit 2; }
[ -x "$bin" ] || { echo "bench_tokenizer not found at $bin (ninja -C build bench_tokenizer, or set BENCH_BIN)" >&2; exit 2; }

work="$(mktemp -d /tmp/rlhost_tok_bench.XXXXXX)"
trap 'rm -rf "$work"' EXIT

"$bin" "$tokdir" "$gsm8k" --repeat "$repeat" --ids-out "$work/rlhost_ids.jsonl" | tee "$work/rlhost.txt"
RAYON_NUM_THREADS=1 TOKENIZERS_PARALLELISM=false \
  python3 "$here/tokenizer_hf.py" "$tokdir/tokenizer.json" "$gsm8k" --repeat "$repeat" \
  --check "$work/rlhost_ids.jsonl" | tee "$work/hf.txt"

python3 - "$work/rlhost.txt" "$work/hf.txt" <<'PY'
import sys
def result(path):
    for line in open(path):
        if line.startswith("RESULT"):
            return {k: float(v) for k, v in (kv.split("=") for kv in line.split()[2:])}
    sys.exit(f"no RESULT line in {path}")
r, h = result(sys.argv[1]), result(sys.argv[2])
hf_best = max(h["loop_tokens_per_s"], h["batch_tokens_per_s"])
print()
print(f"| single thread, Qwen3, GSM8K train ({int(r['tokens'])} tokens) | tokens/s |")
print("|---|---|")
print(f"| rlhost Tokenizer::encode, warm word cache | {r['warm_tokens_per_s']:,.0f} |")
print(f"| rlhost Tokenizer::encode, cold (first pass) | {r['cold_tokens_per_s']:,.0f} |")
print(f"| HF tokenizers, Python loop of encode() | {h['loop_tokens_per_s']:,.0f} |")
print(f"| HF tokenizers, encode_batch, RAYON_NUM_THREADS=1 | {h['batch_tokens_per_s']:,.0f} |")
print()
print(f"ratio rlhost(warm) / HF(best of the two) = {r['warm_tokens_per_s'] / hf_best:.2f}x")
print(f"ratio rlhost(cold) / HF(best of the two) = {r['cold_tokens_per_s'] / hf_best:.2f}x")
print(f"load: rlhost {r['load_s']:.3f} s, HF {h['load_s']:.3f} s")
PY
