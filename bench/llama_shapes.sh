# Sourced by the benchmarks: random-weight Llama models of the llama2.c stories
# shapes, made once under $TMPDIR.  bench_model SHAPE BUILD_DIR -> prints the model dir.
bench_model() {
  local shape="$1" build="$2" dims
  case "$shape" in
    15m) dims="hidden_size = 288, intermediate_size = 768, num_hidden_layers = 6, num_attention_heads = 6, num_key_value_heads = 6, max_position_embeddings = 256" ;;
    42m) dims="hidden_size = 512, intermediate_size = 1376, num_hidden_layers = 8, num_attention_heads = 8, num_key_value_heads = 8, max_position_embeddings = 1024" ;;
    110m) dims="hidden_size = 768, intermediate_size = 2048, num_hidden_layers = 12, num_attention_heads = 12, num_key_value_heads = 12, max_position_embeddings = 1024" ;;
    *) echo "unknown shape $shape (15m|42m|110m)" >&2; return 2 ;;
  esac
  local model="${TMPDIR:-/tmp}/rlhost-bench-llama$shape"
  [ -f "$model/config.json" ] || "$build/rlhost" -e "assert(rl.model.init{dir = '$model', seed = 1, config = {
      architectures = {'LlamaForCausalLM'}, model_type = 'llama', vocab_size = 32000, $dims,
      rms_norm_eps = 1e-5, rope_theta = 10000.0, tie_word_embeddings = true}})" >&2
  echo "$model"
}
