-- Driven by test_trainer_dist.py: `rlhost [--nproc N] dist_train.lua MODE OUT_DIR [BACKEND]`
-- (BACKEND: the trainer's train_backend, replicated by default, or fsdp).
--   train: a tiny random Llama, two GRPO optimiser steps (token-mean loss, whitened
--          advantages) on one fixed global batch of 8 samples; rank 0 splits it
--          (rl.rollout.train_data.split) and scatters the parts. Each rank writes
--          OUT_DIR/rank<R>/ (the model) and OUT_DIR/rank<R>.json (metrics).
--   die:   rank 1 exits with status 3 while rank 0 waits in a barrier.
--   sleep: both ranks print "ready R" and sleep (the test sends Ctrl-C to the launcher).
--   stall: rank 1 sleeps while rank 0's barrier times out (2 s).
--   init:  rl.dist.init{timeout = 2} (the test sets the environment).
-- DIST_CRITIC=1 (train): PPO with a critic (use_critic); each rank also writes the
-- critic's values of the whole global batch into OUT_DIR/rank<R>.json.
-- DIST_RECOMPUTE=<method>:<n> (train): activation recomputation (recompute_granularity
-- full, recompute_method <method>, recompute_num_layers <n>).
-- DIST_LORA=1 (train, sync): a LoRA adapter (r 4, all seven projections and lm_head) over
-- the frozen model; train also writes the adapter (PEFT files) into OUT_DIR/rank<R>/.
--   sync:  a sharded trainer (BACKEND fsdp) trains a step, then rank 0 pushes its weights
--          to a thread and a process engine by one method while the other ranks follow
--          the gathers, for each method in turn; after each, the engines' log-probs of a
--          continuation against the trainer's (a collective). Rank 0 writes
--          OUT_DIR/sync.json.
local mode, out, backend = arg[1], arg[2], arg[3] or "replicated"
local LORA = os.getenv("DIST_LORA") == "1"
  and { lora_rank = 4, lora_alpha = 8, target_modules = { "all-linear", "lm_head" } } or {}
local RECOMPUTE = {}
do
  local method, n = (os.getenv("DIST_RECOMPUTE") or ""):match("^(%a+):(%d+)$")
  if method then RECOMPUTE = { recompute_granularity = "full", recompute_method = method, recompute_num_layers = tonumber(n) } end
end

local TINY = {
  architectures = { "LlamaForCausalLM" }, model_type = "llama", vocab_size = 300, hidden_size = 32,
  intermediate_size = 48, num_hidden_layers = 2, num_attention_heads = 4, num_key_value_heads = 2,
  max_position_embeddings = 64, rms_norm_eps = 1e-6,
}

local function write(path, text)
  local f = assert(io.open(path, "w"))
  f:write(text)
  f:close()
end

if mode == "init" then
  rl.dist.init { timeout = 2 }
  return
end

if mode == "sleep" then   -- Ctrl-C reaches every rank through the launcher
  print("ready " .. rl.dist.rank())
  rl.sleep(60)
  return
end

if mode == "stall" then
  rl.dist.init { timeout = 2 }
  if rl.dist.rank() == 1 then rl.sleep(30) end
  rl.dist.barrier()   -- rank 0: times out after 2 s
  return
end

if mode == "die" then
  rl.dist.init { timeout = 60 }
  if rl.dist.rank() == 1 then os.exit(3) end
  rl.dist.barrier()   -- never completes: the launcher stops this rank
  return
end

-- The global batch: 8 samples of different lengths, rewards of both signs.
local batch = { tokens = {}, response_lengths = {}, rewards = {}, loss_masks = {}, total_lengths = {} }
for i = 1, 8 do
  local toks = { 1, 10 + i, 20 + i }
  local resp = 2 + (i % 4)
  for j = 1, resp do toks[#toks + 1] = 40 + ((i * 7 + j * 13) % 250) end
  local mask = {}
  for j = 1, resp do mask[j] = (j == 2 and i % 3 == 0) and 0 or 1 end
  batch.tokens[i], batch.response_lengths[i], batch.loss_masks[i] = toks, resp, mask
  batch.rewards[i] = (i % 2 == 0 and 1 or -1) * (0.5 + i / 10)
  batch.total_lengths[i] = #toks
end

if mode == "sync" then
  local dir = rl.dist.broadcast_object(rl.dist.is_main() and assert(rl.model.init { config = TINY, seed = 7 }) or nil)
  local tr = rl.trainer.new { model = dir, optimizer = { lr = 1e-2 }, micro_batch_size = 2, train_backend = backend,
    lora_rank = LORA.lora_rank, lora_alpha = LORA.lora_alpha, target_modules = LORA.target_modules }
  local part = rl.dist.scatter_object(rl.dist.is_main() and rl.rollout.train_data.split(batch, rl.dist.world_size()) or nil)
  local engines = rl.dist.is_main() and { assert(rl.engine.start { model = dir, threads = 1 }),
                                          assert(rl.engine.start { model = dir, threads = 1, mode = "process" }) }
  local ids = { 1, 11, 21, 41, 52 }
  local report = {}
  for _, method in ipairs { "auto", "shm", "distributed", "disk" } do
    assert(tr:train(part))   -- new weights for each method to deliver
    local r = assert(tr:sync(engines or {}, { method = method ~= "auto" and method or nil, version = method,
                                              timeout = 60 }))
    -- each engine's greedy continuation and its log-probs, scored by the trainer
    local gaps = {}
    for i = 1, 2 do
      local toks, lps
      if engines then
        local out = assert(engines[i]:generate { input_ids = ids, return_logprob = true,
          lora_path = tr:lora() and tr.lora_name or nil,
          sampling_params = { temperature = 0, max_new_tokens = 4, ignore_eos = true } })
        toks, lps = { unpack(ids) }, {}
        for j, it in ipairs(out.meta_info.output_token_logprobs) do toks[#toks + 1], lps[j] = it[2], it[1] end
      end
      local b = rl.dist.broadcast_object(engines and { tokens = { toks }, response_lengths = { #lps }, rewards = { 0 },
                                                       loss_masks = { { 1, 1, 1, 1 } } } or nil)
      local mine = tr:logprobs(b)   -- every rank: a sharded trainer's log-probs are a collective
      if engines then
        local worst = 0
        for j, lp in ipairs(lps) do worst = math.max(worst, math.abs(lp - mine[1][j])) end
        gaps[i] = worst
      end
    end
    if engines then
      report[method] = { methods = r.methods, versions = r.versions, gaps = gaps,
                         served = { engines[1]:stats().weight_version, engines[2]:weight_receiver():version() } }
    end
  end
  if engines then
    for _, e in ipairs(engines) do e:stop() end
    write(out .. "/sync.json", rl.json.encode(report))
  end
  return
end

local ws = rl.dist.world_size()
-- rank 0 decides the model directory and hands it to everyone (broadcast_object)
local dir = rl.dist.broadcast_object(rl.dist.is_main() and assert(rl.model.init { config = TINY, seed = 7 }) or nil)
local part = batch
if ws > 1 then
  part = rl.dist.scatter_object(rl.dist.is_main() and rl.rollout.train_data.split(batch, ws) or nil)
end
-- DIST_LOAD: resume from that checkpoint (any backend, any world size) and train one
-- step; DIST_SAVE: save a checkpoint there after training (sharded: every rank saves
-- together; replicated: rank 0).
local load_from, save_to = os.getenv("DIST_LOAD"), os.getenv("DIST_SAVE")
local tr
if load_from then
  tr = assert(rl.trainer.load(load_from, { train_backend = backend }))
else
  local critic = os.getenv("DIST_CRITIC") == "1"
  tr = rl.trainer.new { model = dir, optimizer = { lr = 1e-2, clip_grad = 0.5 }, micro_batch_size = 2,
    calculate_per_token_loss = true, normalize_advantages = true, train_backend = backend,
    lora_rank = LORA.lora_rank, lora_alpha = LORA.lora_alpha, target_modules = LORA.target_modules,
    loss = critic and { advantage_estimator = "ppo" } or nil, use_critic = critic or nil,
    critic_lr = critic and 1e-2 or nil, recompute_granularity = RECOMPUTE.recompute_granularity,
    recompute_method = RECOMPUTE.recompute_method, recompute_num_layers = RECOMPUTE.recompute_num_layers }
end
local steps, stats = {}, nil
for s = 1, load_from and 1 or 2 do
  local m
  m, stats = assert(tr:train(part))
  steps[s] = { loss = m["train/loss"], grad_norm = m["train/grad_norm"], pg_loss = m["train/pg_loss"],
               global_batch_size = m["train/global_batch_size"], state_bytes = m["perf/trainer_state_bytes"],
               value_loss = m["train/value_loss"], critic_grad_norm = m["train/critic_grad_norm"] }
end
-- every rank's per-sample stats of the last step, on rank 0 (what the recipe puts in traces)
local gathered = rl.dist.gather_object(stats)
rl.dist.barrier()
if save_to and (tr:is_sharded() or rl.dist.is_main()) then assert(tr:save(save_to)) end
rl.dist.barrier()
local r = rl.dist.rank()
assert(tr:save_model(("%s/rank%d"):format(out, r)))
if tr:lora() then assert(tr:save_lora(("%s/rank%d"):format(out, r))) end
write(("%s/rank%d.json"):format(out, r), rl.json.encode { rank = r, world_size = ws, samples = #part.tokens,
                                                          steps = steps, gathered = gathered or false,
                                                          values = tr.critic and tr:values(batch) or false })
print(("rank %d of %d trained on %d samples"):format(r, ws, #part.tokens))
