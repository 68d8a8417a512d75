--- rl.recipe.slime_flags: the flags of a slime launch script that have no meaning in
--- rlhost (Megatron's parallelism and model shape, Ray's placement, SGLang's server tuning,
--- W&B), accepted so that the script runs, each logged once with what to use instead.
--- Everything else a slime script sets is a real rlhost flag (docs/recipes.md, "slime's
--- flags"); an unknown one stays an error with a did-you-mean.
local log = require "rl.log"

local M = {}

local SHAPE = "rlhost reads the model's shape from --hf-checkpoint's config.json"
local PARALLEL = "rlhost's trainer is data parallel (--nproc, torchrun), sharded with --train-backend fsdp"
local RAY = "rlhost has no Ray: ranks come from --nproc, torchrun or srun, engines from --num-engines / "
  .. "--rollout-num-gpus-per-node (docs/distributed.md)"
local FUSED = "rlhost's trainer has its own kernels (docs/trainer.md)"

-- {flag, takes a value, reason}
local LIST = {
  -- Megatron: model shape (slime's MODEL_ARGS)
  { "num_layers", true, SHAPE }, { "hidden_size", true, SHAPE }, { "ffn_hidden_size", true, SHAPE },
  { "num_attention_heads", true, SHAPE }, { "group_query_attention", false, SHAPE }, { "num_query_groups", true, SHAPE },
  { "kv_channels", true, SHAPE }, { "swiglu", false, SHAPE }, { "disable_bias_linear", false, SHAPE },
  { "add_qkv_bias", false, SHAPE }, { "normalization", true, SHAPE }, { "norm_epsilon", true, SHAPE },
  { "rotary_base", true, SHAPE }, { "rotary_percent", true, SHAPE }, { "use_rotary_position_embeddings", false, SHAPE },
  { "position_embedding_type", true, SHAPE }, { "vocab_size", true, SHAPE }, { "qk_layernorm", false, SHAPE },
  { "untie_embeddings_and_output_weights", false, SHAPE }, { "max_position_embeddings", true, SHAPE },
  { "seq_length", true, SHAPE }, { "make_vocab_size_divisible_by", true, SHAPE },
  { "num_experts", true, SHAPE }, { "moe_router_topk", true, SHAPE }, { "moe_ffn_hidden_size", true, SHAPE },
  -- Megatron: parallelism, recompute, fusions
  { "tensor_model_parallel_size", true, PARALLEL }, { "pipeline_model_parallel_size", true, PARALLEL },
  { "context_parallel_size", true, PARALLEL }, { "expert_model_parallel_size", true, PARALLEL },
  { "expert_tensor_parallel_size", true, PARALLEL }, { "sequence_parallel", false, PARALLEL },
  { "decoder_last_pipeline_num_layers", true, PARALLEL },
  { "use_distributed_optimizer", false, "the sharded optimizer state is --train-backend fsdp" },
  { "recompute_granularity", true, "rlhost's trainer keeps activations per micro-batch (--micro-batch-size)" },
  { "recompute_method", true, "rlhost's trainer keeps activations per micro-batch (--micro-batch-size)" },
  { "recompute_num_layers", true, "rlhost's trainer keeps activations per micro-batch (--micro-batch-size)" },
  { "use_dynamic_batch_size", false, "micro-batches are packed by --max-tokens-per-gpu whenever it is given" },
  { "log_probs_chunk_size", true, "log-probs are computed per micro-batch without a vocabulary-sized tensor" },
  { "attention_dropout", true, "rlhost trains without dropout" }, { "hidden_dropout", true, "rlhost trains without dropout" },
  { "accumulate_allreduce_grads_in_fp32", false, "gradients are reduced in fp32 already" },
  { "attention_softmax_in_fp32", false, "attention's softmax runs in fp32 already" },
  { "attention_backend", true, FUSED }, { "no_gradient_accumulation_fusion", false, FUSED },
  { "no_masked_softmax_fusion", false, FUSED }, { "no_bias_swiglu_fusion", false, FUSED },
  { "optimizer", true, "rlhost's optimiser is AdamW (--lr, --weight-decay, --adam-beta1/2, --adam-eps)" },
  { "use_precision_aware_optimizer", false, "the master weights are fp32 (--bf16 for bf16 compute)" },
  { "optimizer_cpu_offload", false, "no CPU offload of the optimiser yet (--train-backend fsdp shards it)" },
  { "overlap_cpu_optimizer_d2h_h2d", false, "no CPU offload of the optimiser yet" },
  { "megatron_to_hf_mode", true, "checkpoints are Hugging Face directories already" },
  { "ref_load", true, "the KL reference is --hf-checkpoint's model (or --load's), kept by the trainer" },
  { "train_memory_margin_bytes", true, "no Megatron memory planner" },
  -- Ray placement
  { "actor_num_nodes", true, RAY }, { "actor_num_gpus_per_node", true, RAY }, { "num_gpus_per_node", true, RAY },
  -- W&B (slime's logger); rlhost writes TensorBoard, JSONL and Prometheus
  { "use_wandb", false, "W&B is not built in: --use-tensorboard, --metrics-dir (JSONL) or --metrics-port" },
}

-- Prefix families handed to pass-through tables (rl.args spec.passthrough): anything
-- --sglang-<x> that is not an rlhost flag (SGLang server tuning), --wandb-<x>.
M.PASSTHROUGH = {
  sglang = { key = "sglang_args", reason = "rlhost's engines take their own options (--max-running-requests, "
    .. "--sglang-config overrides; docs/engine.md)" },
  wandb = { key = "wandb_args", reason = "W&B is not built in: --use-tensorboard, --metrics-dir (JSONL) or --metrics-port" },
}

--- The flags as rl.args specs (valued ones take one or more values).
function M.flags()
  local out = {}
  for _, f in ipairs(LIST) do
    out[#out + 1] = { name = f[1], type = f[2] and "list" or "bool", of = f[2] and "string" or nil,
                      help = "slime/Megatron's; not applicable in rlhost: " .. f[3], not_applicable = f[3] }
  end
  return out
end

local function given(v) return v == true or (type(v) == "table" and next(v) ~= nil) or type(v) == "string" end

--- One line per not-applicable flag `opt` holds: "--X: not applicable in rlhost: <reason>".
--- Returns the flags named.
function M.report(opt)
  local named = {}
  for _, f in ipairs(LIST) do
    if given(opt[f[1]]) then
      local flag = "--" .. f[1]:gsub("_", "-")
      named[#named + 1] = flag
      log.warn("%s: not applicable in rlhost: %s", flag, f[3])
    end
  end
  for pfx, p in pairs(M.PASSTHROUGH) do
    local keys = {}
    for k in pairs(opt[p.key] or {}) do keys[#keys + 1] = k end
    table.sort(keys)
    for _, k in ipairs(keys) do
      local flag = "--" .. pfx .. "-" .. k:gsub("_", "-")
      named[#named + 1] = flag
      log.warn("%s: not applicable in rlhost: %s", flag, p.reason)
    end
  end
  return named
end

return M
