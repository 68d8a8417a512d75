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
  -- Megatron: parallelism, fusions
  { "tensor_model_parallel_size", true, PARALLEL }, { "pipeline_model_parallel_size", true, PARALLEL },
  { "context_parallel_size", true, PARALLEL }, { "expert_model_parallel_size", true, PARALLEL },
  { "expert_tensor_parallel_size", true, PARALLEL }, { "sequence_parallel", false, PARALLEL },
  { "decoder_last_pipeline_num_layers", true, PARALLEL },
  { "use_distributed_optimizer", false, "the sharded optimizer state is --train-backend fsdp" },
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


local function flag(k) return "--" .. k:gsub("_", "-") end
local function usage(msg) require("rl.args").usage_error(msg) end

-- Flags that need another (a given => b given) or exclude it; the message says why.
local NEEDS = {
  { "debug_train_only", "load_debug_rollout_data", "trains without engines on dumped rollouts: give "
    .. "--load-debug-rollout-data PATH_WITH_{rollout_id} (written by --save-debug-rollout-data)" },
  { "load_debug_rollout_data_subsample", "load_debug_rollout_data", "subsamples the replayed dumps" },
  { "rollout_external", "rollout_external_engine_addrs", "trains against the engines at HOST:PORT [HOST:PORT ...]" },
  { "rollout_external_engine_addrs", "rollout_external", "names the engines of --rollout-external" },
  { "sglang_router_ip", "sglang_router_port", "names a running router: its port too" },
}
local EXCLUDES = {
  { "debug_rollout_only", "debug_train_only", "one skips training, the other generation" },
  { "debug_rollout_only", "load_debug_rollout_data", "one generates rollouts, the other replays them" },
  { "rollout_external", "sglang_config", "the engines are given, not started" },
  { "rollout_external", "prefill_num_servers", "the engines are given, not started (slime's rule too)" },
  { "sglang_config", "prefill_num_servers", "the config's server groups say which engines prefill: worker_type "
    .. "prefill and decode" },
  { "rollout_external", "use_fault_tolerance", "fault tolerance restarts engines rlhost started; supervise external "
    .. "ones where they run" },
}

local function given(v) return v ~= nil and v ~= false and not (type(v) == "table" and next(v) == nil) end

--- slime's engine-count, debug, external-engine and router flags, checked (usage errors
--- naming them) and turned into rlhost's: engines from --rollout-num-gpus /
--- --rollout-num-gpus-per-engine (or the external addresses), --load-debug-rollout-data
--- implying --debug-train-only, --train-backend megatron run as replicated.
function M.check(opt)
  if opt.load_debug_rollout_data then opt.debug_train_only = true end   -- slime: replaying implies no engines
  for _, r in ipairs(EXCLUDES) do
    if given(opt[r[1]]) and given(opt[r[2]]) then
      usage(("%s and %s exclude each other (%s)"):format(flag(r[1]), flag(r[2]), r[3]))
    end
  end
  for _, r in ipairs(NEEDS) do
    if given(opt[r[1]]) and not given(opt[r[2]]) then usage(("%s needs %s: it %s"):format(flag(r[1]), flag(r[2]), r[3])) end
  end
  local per = opt.rollout_num_gpus_per_engine or 1
  if per ~= 1 then
    usage(("--rollout-num-gpus-per-engine %s: rlhost's engines run on one device each (tensor-parallel engines do not "
      .. "exist yet) (hint: 1, and --rollout-num-gpus for the number of engines)"):format(tostring(per)))
  end
  local ext = opt.rollout_external_engine_addrs or {}
  for _, a in ipairs(ext) do
    local host, port = a:match("^%[?([^%]]-)%]?:(%d+)$")
    if not host or host == "" or tonumber(port) > 65535 then
      usage(("--rollout-external-engine-addrs: '%s' is not HOST:PORT"):format(a))
    end
  end
  local n = opt.rollout_external and #ext or (opt.rollout_num_gpus and math.floor(opt.rollout_num_gpus / per))
  for _, k in ipairs { "num_engines", "rollout_num_gpus" } do
    if n and opt[k] and opt[k] ~= n then
      usage(("%s %d disagrees with %s (engines: --rollout-num-gpus / --rollout-num-gpus-per-engine, or one per "
        .. "--rollout-external-engine-addrs; give one of them)"):format(flag(k), opt[k],
        opt.rollout_external and (#ext .. " --rollout-external-engine-addrs") or ("--rollout-num-gpus " .. opt.rollout_num_gpus)))
    end
  end
  opt.num_engines = n or opt.num_engines or 1
  if opt.train_backend == "megatron" then   -- slime's default backend: rlhost's own trainer in its place
    log.warn("--train-backend megatron: rlhost trains with its own trainer (replicated; --train-backend fsdp shards it)")
    opt.train_backend = "replicated"
  end
end

-- A value as Python's repr writes it (slime prints its argparse Namespace).
local function py_repr(v)
  if v == nil then return "None" elseif v == true then return "True" elseif v == false then return "False" end
  if type(v) == "number" then
    if v == math.floor(v) and math.abs(v) < 1e15 then return ("%d"):format(v) end
    return ("%.17g"):format(v)
  end
  if type(v) == "table" then
    local keys, items = {}, {}
    if v[1] ~= nil or next(v) == nil then
      for i, x in ipairs(v) do items[i] = py_repr(x) end
      return "[" .. table.concat(items, ", ") .. "]"
    end
    for k in pairs(v) do keys[#keys + 1] = k end
    table.sort(keys, function(a, b) return tostring(a) < tostring(b) end)
    for i, k in ipairs(keys) do   -- (--wandb-key and the like: never into a log)
      local secret = tostring(k):match("key$") or tostring(k):match("token$") or tostring(k):match("password")
      items[i] = py_repr(tostring(k)) .. ": " .. (secret and "'<redacted>'" or py_repr(v[k]))
    end
    return "{" .. table.concat(items, ", ") .. "}"
  end
  return "'" .. tostring(v):gsub("\\", "\\\\"):gsub("'", "\\'") .. "'"
end

--- The parsed flags as slime logs them: Namespace(key=value, ...), keys sorted.
function M.args_line(opt)
  local keys, parts = {}, {}
  local na = {}   -- the not-applicable flags nobody gave stay out of it
  for _, f in ipairs(LIST) do na[f[1]] = true end
  for k, v in pairs(opt) do
    local unset = v == false or (type(v) == "table" and next(v) == nil)
    if type(k) == "string" and not (na[k] and unset) then keys[#keys + 1] = k end
  end
  table.sort(keys)
  for i, k in ipairs(keys) do
    local secret = k:match("api_key") or k:match("_token$") or k:match("password") or k:match("secret")
    parts[i] = k .. "=" .. (secret and "'<redacted>'" or py_repr(opt[k]))
  end
  return "Namespace(" .. table.concat(parts, ", ") .. ")"
end


--- One line per not-applicable flag `opt` holds: "--X: not applicable in rlhost: <reason>".
--- Returns the flags named.
function M.report(opt)
  local out = {}
  for _, f in ipairs(LIST) do
    if given(opt[f[1]]) then
      out[#out + 1] = flag(f[1])
      log.warn("%s: not applicable in rlhost: %s", out[#out], f[3])
    end
  end
  for pfx, p in pairs(M.PASSTHROUGH) do
    local keys = {}
    for k in pairs(opt[p.key] or {}) do keys[#keys + 1] = k end
    table.sort(keys)
    for _, k in ipairs(keys) do
      out[#out + 1] = flag(pfx .. "_" .. k)
      log.warn("%s: not applicable in rlhost: %s", out[#out], p.reason)
    end
  end
  return out
end

return M
