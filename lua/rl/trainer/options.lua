--- rl.trainer.options: every option of the trainer, declared once (slime's names). rl.trainer.new
--- and rl.trainer.load check their tables against these lists (lua/rl/_options.lua: one
--- validator, one message shape), rl.recipe.options takes its loss and optimiser flags from
--- them, and the recipe hands the trainer exactly the declared options it has. The values
--- the C++ trainer parses (runtime/trainer/trainer_options.cpp) have these defaults
--- (tests/lua/trainer_spec.lua compares them); a default of nil is derived there
--- (eps_clip_high: eps_clip; global_batch_size: the whole batch; lr_decay_iters: 0).
local M = {}

--- The loss (loss = {...}, or at the top level): docs/trainer.md, "Losses".
M.LOSS = {
  { name = "advantage_estimator", type = "string", default = "grpo",
    choices = { "grpo", "gspo", "cispo", "reinforce_plus_plus", "reinforce_plus_plus_baseline", "ppo" },
    help = "ppo needs use_critic: a value model's GAE in place of group-normalised rewards" },
  { name = "eps_clip", type = "number", default = 0.2, help = "PPO clip: the ratio stays in [1 - eps_clip, 1 + eps_clip_high]" },
  { name = "eps_clip_high", type = "number", help = "upper clip (default: eps_clip)" },
  { name = "eps_clip_c", type = "number", help = "dual-clip bound (> 1; default: off)" },
  { name = "entropy_coef", type = "number", default = 0.0 },
  { name = "use_kl_loss", type = "bool", default = false, help = "add a KL loss against the reference model" },
  { name = "kl_loss_coef", type = "number", default = 0.0 },
  { name = "kl_loss_type", type = "string", default = "k1", choices = { "k1", "k2", "k3", "low_var_kl" } },
  { name = "use_unbiased_kl", type = "bool", default = false },
  { name = "use_tis", type = "bool", default = false, help = "truncated importance sampling against the rollout's log-probs" },
  { name = "tis_mode", type = "string", default = "clamp", choices = { "clamp", "icepop" } },
  { name = "tis_clip_low", type = "number", default = 0.0 },
  { name = "tis_clip", type = "number", default = 2.0 },
  { name = "calculate_per_token_loss", type = "bool", default = false,
    help = "average the loss over all tokens of the batch (default: per sample, then over samples)" },
  { name = "loss_type", type = "string", default = "policy_loss", choices = { "policy_loss", "sft_loss" } },
}

--- AdamW and the learning-rate schedule (optimizer = {...}, or at the top level).
M.OPTIMIZER = {
  { name = "lr", type = "number", default = 1e-6, help = "learning rate" },
  { name = "min_lr", type = "number", default = 0.0 },
  { name = "adam_beta1", type = "number", default = 0.9 },
  { name = "adam_beta2", type = "number", default = 0.999 },
  { name = "adam_eps", type = "number", default = 1e-8 },
  { name = "weight_decay", type = "number", default = 0.0 },
  { name = "lr_decay_style", type = "string", default = "constant", choices = { "constant", "linear", "cosine" } },
  { name = "lr_warmup_iters", type = "int", default = 0, min = 0 },
  { name = "lr_decay_iters", type = "int", min = 0 },
  { name = "clip_grad", type = "number", default = 1.0, help = "clip by the global gradient norm (<= 0: off)" },
}

--- The batch and the rest (top level).
M.BATCH = {
  { name = "global_batch_size", type = "int", min = 1, help = "samples per optimiser step (default: the whole batch)" },
  { name = "micro_batch_size", type = "int", default = 1, min = 1, help = "samples per micro-batch" },
  { name = "max_tokens_per_gpu", type = "int", default = 0, min = 0, help = "dynamic micro-batches of at most this many tokens" },
  { name = "rollout_temperature", type = "number", default = 1.0 },
  { name = "use_rollout_logprobs", type = "bool", default = false },
  { name = "old_logprobs", type = "string", default = "auto", choices = { "auto", "recompute", "check" },
    help = "old log-probs of a multi-step rollout: auto takes the rollout's where the engine proved them the trainer's "
      .. "own (same weights digest, exact kernels), recompute always runs the no-grad pass, check recomputes and fails "
      .. "unless equal bit for bit" },
  { name = "kl_coef", type = "number", default = 0.0, help = "KL penalty in the reward" },
  { name = "gamma", type = "number", default = 1.0 },
  { name = "use_opd", type = "bool", default = false,
    help = "on-policy distillation: each token's advantage minus opd_kl_coef × (logp − teacher logp) (needs "
      .. "batch.teacher_log_probs)" },
  { name = "opd_kl_coef", type = "number", default = 1.0, help = "weight of the distillation signal (--use-opd)" },
  { name = "normalize_advantages", type = "bool", help = "(default: false; true for reinforce++)" },
  { name = "bf16", type = "bool", default = false,
    help = "bf16 mixed precision in the trainer (float32 master weights, autocast forward passes; CPU or CUDA)" },
  { name = "fp16", type = "bool", help = "refused: float16 needs loss scaling" },
  { name = "train_backend", type = "string", default = "replicated", choices = { "replicated", "fsdp", "megatron" },
    help = "replicated: every data-parallel rank holds the whole model, its gradients and AdamW state; fsdp: each "
      .. "rank holds 1/N of them, gathering each layer for its forward and backward (docs/trainer.md, \"Sharded training\"); "
      .. "megatron: slime's name, run as replicated" },
  { name = "recompute_granularity", type = "string", choices = { "full", "selective" },
    help = "full: the policy's (and critic's) decoder layers keep only their input for the backward pass and run their forward "
      .. "again there (less activation memory for one more forward pass; docs/trainer.md, \"Activation "
      .. "recomputation\"); selective (the attention core alone) is what the trainer's attention does in every "
      .. "backward pass anyway; default off" },
  { name = "recompute_method", type = "string", default = "uniform", choices = { "uniform", "block" },
    help = "with --recompute-granularity full: uniform recomputes every layer, in groups of --recompute-num-layers; "
      .. "block only the first --recompute-num-layers layers, each alone" },
  { name = "recompute_num_layers", type = "int", default = 1, min = 1,
    help = "layers per recomputed group (uniform), or how many layers are recomputed (block)" },
}

--- PPO's critic (top level): docs/trainer.md, "PPO with a critic".
M.CRITIC = {
  { name = "use_critic", type = "bool", default = false,
    help = "train a value model (a copy of the policy's decoder with a scalar head) beside the policy; needed by "
      .. "--advantage-estimator ppo" },
  { name = "critic_lr", type = "number", help = "the critic's learning rate (default: --lr)" },
  { name = "value_clip", type = "number", default = 0.2, help = "the value loss clips V to V_old +- value_clip" },
  { name = "lambd", type = "number", default = 1.0, help = "GAE's lambda (ppo)" },
  { name = "num_critic_only_steps", type = "int", default = 0, min = 0,
    help = "the first N rollouts train the critic only (the policy waits for a useful baseline)" },
}

--- LoRA (top level): docs/trainer.md, "LoRA".
M.LORA = {
  { name = "lora_rank", type = "int", default = 0, min = 0,
    help = "train a LoRA adapter of this rank on the frozen model (0: full fine-tuning)" },
  { name = "lora_alpha", type = "number", default = 16, help = "LoRA scale numerator: deltas are scaled by alpha / rank" },
  { name = "target_modules", default = "all-linear",
    help = "the projections LoRA adapts: \"all-linear\" (q/k/v/o/gate/up/down_proj), a list of their names, or a "
      .. "comma-separated string; \"lm_head\" too (the unembedding; the engines serve it merged per adapter)" },
}

--- What rl.trainer.new takes besides: the models and where they live.
M.TOP = {
  { name = "model", help = "a model directory or an rl.model" },
  { name = "ref", help = "a directory, an rl.model, or true: the model's checkpoint again, frozen" },
  { name = "critic", help = "use_critic: a directory, an rl.model, or true (the default): the model's checkpoint again, "
    .. "trained as the value model" },
  { name = "loss", type = "table" }, { name = "optimizer", type = "table" },
  { name = "dtype", type = "string" }, { name = "device", type = "string" },
}

local O = require "rl._options"

local ALL, TOP_ALL = {}, {}   -- every trainer option, flat; and what rl.trainer.new's table may hold
for _, list in ipairs { M.LOSS, M.OPTIMIZER, M.BATCH, M.CRITIC, M.LORA } do
  for _, o in ipairs(list) do ALL[#ALL + 1], TOP_ALL[#TOP_ALL + 1] = o, o end
end
for _, o in ipairs(M.TOP) do TOP_ALL[#TOP_ALL + 1] = o end
M.ALL = ALL

--- Checks rl.trainer.new's (or rl.trainer.load's) table: the top-level keys, then loss
--- and optimizer (fname: the public function; errors point at its caller). → the flat
--- table of trainer options (loss, optimizer and top level merged; models, dtype and
--- device left out).
function M.flatten(opts, fname)
  O.check(fname, TOP_ALL, opts, { level = 4 })
  if opts.loss ~= nil then O.check(fname, M.LOSS, opts.loss, { prefix = "opts.loss.", level = 4 }) end
  if opts.optimizer ~= nil then O.check(fname, M.OPTIMIZER, opts.optimizer, { prefix = "opts.optimizer.", level = 4 }) end
  local flat = {}
  for _, sub in ipairs { opts.loss or {}, opts.optimizer or {} } do
    for k, v in pairs(sub) do flat[k] = v end
  end
  local top = O.index(M.TOP)
  for k, v in pairs(opts) do
    if not top[k] then flat[k] = v end
  end
  return flat
end

--- rl.args entries for the named options (a recipe's flags), `over[name]` replacing fields
--- (a recipe's own default or help; no_default = true: none, the recipe derives it).
function M.flags(names, over)
  local by, out = O.index(ALL), {}
  for i, name in ipairs(names) do
    local o = assert(by[name], "rl.trainer.options: no option " .. tostring(name))
    local ov = {}
    for k, v in pairs(over and over[name] or {}) do if k ~= "no_default" then ov[k] = v end end
    local f = O.flag(o, ov)
    if over and over[name] and over[name].no_default then f.default = nil end
    if o.choices and f.type == "string" then f.type = nil end   -- rl.args: choices imply the type
    out[i] = f
  end
  return out
end

--- The trainer's loss and optimizer tables, its critic options and its LoRA options
--- (both top level) from a recipe's parsed flags: every declared option the flags hold
--- (nil ones left to the trainer's defaults).
function M.from_flags(opt)
  local loss, optim, critic, lora = {}, {}, {}, {}
  for _, o in ipairs(M.LOSS) do loss[o.name] = opt[o.name] end
  for _, o in ipairs(M.OPTIMIZER) do optim[o.name] = opt[o.name] end
  for _, o in ipairs(M.CRITIC) do critic[o.name] = opt[o.name] end
  for _, o in ipairs(M.LORA) do lora[o.name] = opt[o.name] end
  return loss, optim, critic, lora
end

return M
