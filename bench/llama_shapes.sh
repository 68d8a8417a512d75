# Sourced by the benchmarks: random-weight models made once under $TMPDIR, and the
# default model.  bench_model SHAPE BUILD_DIR -> prints the model dir.
#   15m | 42m | 110m: Llama of the llama2.c stories shapes (vocab 32,000, tied embeddings)
#   qwen42m: Qwen2-shaped, the real 151,936-token vocabulary (tied embedding 38.9M of its
#            42.9M parameters), GQA 4/2 heads, q/k/v bias; the Qwen2.5 tokenizer
#   default: rl.mathgen.default_model() (1.2M Llama, vocab 534; built and cached on first use)
bench_model() {
  local shape="$1" build="$2" dims arch="Llama" extra=""
  case "$shape" in
    15m) dims="hidden_size = 288, intermediate_size = 768, num_hidden_layers = 6, num_attention_heads = 6, num_key_value_heads = 6, max_position_embeddings = 256" ;;
    42m) dims="hidden_size = 512, intermediate_size = 1376, num_hidden_layers = 8, num_attention_heads = 8, num_key_value_heads = 8, max_position_embeddings = 1024" ;;
    110m) dims="hidden_size = 768, intermediate_size = 2048, num_hidden_layers = 12, num_attention_heads = 12, num_key_value_heads = 12, max_position_embeddings = 1024" ;;
    qwen42m) arch="Qwen2"
      dims="hidden_size = 256, intermediate_size = 1024, num_hidden_layers = 4, num_attention_heads = 4, num_key_value_heads = 2, max_position_embeddings = 2048"
      extra="bos_token_id = 151643, eos_token_id = 151645," ;;
    default) "$build/rlhost" -e 'print(rl.mathgen.default_model())' | tail -1; return ;;
    *) echo "unknown shape $shape (15m|42m|110m|qwen42m|default)" >&2; return 2 ;;
  esac
  local model="${TMPDIR:-/tmp}/rlhost-bench-$(echo "$arch" | tr 'A-Z' 'a-z')$shape"
  [ "$shape" = qwen42m ] && model="${TMPDIR:-/tmp}/rlhost-bench-qwen42m"
  if [ ! -f "$model/config.json" ]; then
    local vocab=32000 mt="llama" theta="10000.0" eps="1e-5"
    [ "$arch" = Qwen2 ] && vocab=151936 mt="qwen2" theta="1000000.0" eps="1e-6"
    "$build/rlhost" -e "assert(rl.model.init{dir = '$model', seed = 1, config = {
      architectures = {'${arch}ForCausalLM'}, model_type = '$mt', vocab_size = $vocab, $dims, $extra
      rms_norm_eps = $eps, rope_theta = $theta, tie_word_embeddings = true}})" >&2
    if [ "$arch" = Qwen2 ]; then  # the real tokenizer (the benchmarks' prompts are GSM8K questions)
      cp "$build/test-data/tokenizers/qwen/qwen2.5/tokenizer.json" "$build/test-data/tokenizers/qwen/qwen2.5/tokenizer_config.json" "$model/"
    fi
  fi
  echo "$model"
}
