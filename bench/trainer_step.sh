#!/usr/bin/env bash
# GRPO optimiser step (forward, backward, AdamW on 8 x 256 tokens) tokens/s:
# rl.trainer against the same step in Python PyTorch (transformers' Llama), on
# random-weight Llama models of the llama2.c stories shapes, same run, same threads.
#   SHAPES="42m 110m" THREADS="1 2" BATCH=8 TOKENS=256 STEPS=3 bench/trainer_step.sh
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${BUILD:-$root/build}"
shapes="${SHAPES:-42m 110m}" threads_list="${THREADS:-1 2}"
B="${BATCH:-8}" T="${TOKENS:-256}" S="${STEPS:-3}"
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
  for t in $threads_list; do
    ours=$("$build/rlhost" --no-control "$root/bench/trainer_step.lua" "$model" "$t" "$B" "$T" "$S" 2>/dev/null | grep '^RESULT')
    peer=$(python3 "$root/bench/trainer_step_torch.py" "$model" "$t" "$B" "$T" "$S" 2>/dev/null | grep '^RESULT')
    echo "$shape $ours"; echo "$shape $peer"
    python3 - "$shape" "$t" "$ours" "$peer" <<'PY'
import sys
kv = lambda l: dict(x.split("=", 1) for x in l.split()[1:])
a, b = kv(sys.argv[3]), kv(sys.argv[4])
print(f"== {sys.argv[1]}, {sys.argv[2]} thread(s): rlhost {float(a['tok_s']):.0f} tok/s, PyTorch {float(b['tok_s']):.0f} tok/s -> {float(a['tok_s']) / float(b['tok_s']):.2f}x")
PY
  done
done
