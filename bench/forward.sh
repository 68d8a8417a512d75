#!/usr/bin/env bash
# Training forward+backward tokens/s: rlhost's transformer vs the same model in
# Python PyTorch (transformers' LlamaForCausalLM), same machine, same run, same
# thread count. The model is a random-initialised 42M-parameter Llama (the shape
# of llama2.c's stories42M: dim 512, 8 layers, 8 heads, FFN 1376, vocab 32000, tied).
#   BUILD=build BATCH=2 SEQ=256 ITERS=3 THREADS=<nproc> bench/forward.sh
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${BUILD:-$root/build}"
batch="${BATCH:-2}" seq="${SEQ:-256}" iters="${ITERS:-3}" threads="${THREADS:-$(nproc)}"
model="${MODEL_DIR:-${TMPDIR:-/tmp}/rlhost-bench-llama42m}"
cmake --build "$build" --target rlhost rlhost_torch bench_forward >/dev/null
if [ ! -f "$model/config.json" ]; then
  "$build/rlhost" -e "assert(rl.model.init{dir = '$model', seed = 1, config = {
      architectures = {'LlamaForCausalLM'}, model_type = 'llama', vocab_size = 32000, hidden_size = 512,
      intermediate_size = 1376, num_hidden_layers = 8, num_attention_heads = 8, num_key_value_heads = 8,
      max_position_embeddings = 1024, rms_norm_eps = 1e-5, rope_theta = 10000.0, tie_word_embeddings = true}})"
fi
echo "model: $model  batch=$batch seq=$seq iters=$iters threads=$threads"
ours="$("$build/bench/bench_forward" "$model" "$batch" "$seq" "$iters" "$threads" | grep '^RESULT')"
peer="$(python3 "$root/bench/forward_torch.py" "$model" "$batch" "$seq" "$iters" "$threads" 2>/dev/null | grep '^RESULT')"
echo "$ours"
echo "$peer"
python3 - "$ours" "$peer" <<'PY'
import sys
def parse(line): return dict(kv.split("=", 1) for kv in line.split()[1:])
a, b = parse(sys.argv[1]), parse(sys.argv[2])
print("params %s vs %s; first-step loss %s vs %s" % (a["params"], b["params"], a["loss"], b["loss"]))
print("forward+backward tokens/s: rlhost %.0f, pytorch %.0f, ratio %.2fx"
      % (float(a["tok_per_s"]), float(b["tok_per_s"]), float(a["tok_per_s"]) / float(b["tok_per_s"])))
PY
