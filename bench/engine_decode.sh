#!/usr/bin/env bash
# Engine decode tokens/s against Hugging Face transformers' generate() and a lean
# PyTorch KV-cache loop, on random-weight Llama models of the llama2.c stories
# shapes, same machine, same run, same thread count; plus % of the read-bandwidth
# roofline (weights read once per step) measured in the same run.
#   SHAPES="15m 42m 110m" THREADS="1 2" BATCHES=1,8,32 NEW=128 bench/engine_decode.sh
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${BUILD:-$root/build}"
shapes="${SHAPES:-15m 42m 110m}" threads_list="${THREADS:-1 2}" batches="${BATCHES:-1,8,32}" new="${NEW:-128}"
cmake --build "$build" --target rlhost rlhost_torch bench_engine_decode >/dev/null
out="$(mktemp)"
for shape in $shapes; do
  case "$shape" in
    15m) dims="hidden_size = 288, intermediate_size = 768, num_hidden_layers = 6, num_attention_heads = 6, num_key_value_heads = 6, max_position_embeddings = 256" ;;
    42m) dims="hidden_size = 512, intermediate_size = 1376, num_hidden_layers = 8, num_attention_heads = 8, num_key_value_heads = 8, max_position_embeddings = 1024" ;;
    110m) dims="hidden_size = 768, intermediate_size = 2048, num_hidden_layers = 12, num_attention_heads = 12, num_key_value_heads = 12, max_position_embeddings = 1024" ;;
    *) echo "unknown shape $shape (15m|42m|110m)" >&2; exit 2 ;;
  esac
  model="${TMPDIR:-/tmp}/rlhost-bench-llama$shape"
  [ -f "$model/config.json" ] || "$build/rlhost" -e "assert(rl.model.init{dir = '$model', seed = 1, config = {
      architectures = {'LlamaForCausalLM'}, model_type = 'llama', vocab_size = 32000, $dims,
      rms_norm_eps = 1e-5, rope_theta = 10000.0, tie_word_embeddings = true}})"
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
