#!/usr/bin/env bash
# Engine decode tokens/s against Hugging Face transformers' generate() and a lean
# PyTorch KV-cache loop, on random-weight Llama models of the llama2.c stories
# shapes, same machine, same run, same thread count; plus % of the read-bandwidth
# roofline (weights read once per step) measured in the same run.
#   SHAPES="15m 42m 110m" THREADS="1 2" BATCHES=1,8,32 NEW=128 bench/engine_decode.sh
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
. "$root/bench/llama_shapes.sh"
build="${BUILD:-$root/build}"
shapes="${SHAPES:-15m 42m 110m}" threads_list="${THREADS:-1 2}" batches="${BATCHES:-1,8,32}" new="${NEW:-128}"
cmake --build "$build" --target rlhost rlhost_torch bench_engine_decode >/dev/null
out="$(mktemp)"
for shape in $shapes; do
  model="$(bench_model "$shape" "$build")"
  bytes=$(stat -c %s "$model/model.safetensors")
  for t in $threads_list; do
    bw=$("$build/bench/bench_engine_decode" --bandwidth "$t" | sed -n 's/.*read_gb_s=//p')
    echo "== $shape ($bytes bytes of weights), $t thread(s), read bandwidth $bw GB/s" | tee -a "$out"
    "$build/bench/bench_engine_decode" "$model" "$t" "$batches" "$new" 2>/dev/null | grep '^RESULT' | sed "s/^/$shape bw=$bw bytes=$bytes /" | tee -a "$out"
    python3 "$root/bench/engine_decode_torch.py" "$model" "$t" "$batches" "$new" 2>/dev/null | grep '^RESULT' | sed "s/^/$shape bw=$bw bytes=$bytes /" | tee -a "$out"
  done
done
python3 - "$out" <<'PY'
import collections, sys
rows = collections.defaultdict(dict)
for line in open(sys.argv[1]):
    if "RESULT" not in line: continue
    head, rest = line.split("RESULT", 1)
    shape, bw, nbytes = head.split()[0], float(head.split()[1][3:]), int(head.split()[2][6:])
    kv = dict(x.split("=", 1) for x in rest.split())
    rows[(shape, int(kv["threads"]), int(kv["batch"]))][kv["impl"]] = float(kv["decode_tok_s"])
    rows[(shape, int(kv["threads"]), int(kv["batch"]))]["_roof"] = bw * 1e9 / nbytes
print("\n%-6s %3s %5s %10s %10s %10s %9s %9s %9s" % ("shape", "thr", "batch", "rlhost", "torch_loop", "hf_gen",
                                                   "vs loop", "vs hf", "roofline"))
for (shape, t, b), r in sorted(rows.items()):
    ours, loop, hf = r.get("rlhost", 0), r.get("torch_loop", 0), r.get("hf_generate", 0)
    roof = "%.0f%%" % (100 * ours / r["_roof"]) if b == 1 else "-"
    print("%-6s %3d %5d %10.1f %10.1f %10.1f %8.2fx %8.2fx %9s" % (shape, t, b, ours, loop, hf,
          ours / loop if loop else 0, ours / hf if hf else 0, roof))
print("\ntokens/s of decode (after prefill); roofline = batch-1 tokens/s x weight bytes / read bandwidth")
PY
rm -f "$out"
