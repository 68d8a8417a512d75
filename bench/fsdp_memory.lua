-- Per-rank memory and step time of the trainer, sharded (train_backend = "fsdp") or
-- replicated, on a random Qwen2.5-0.5B-shaped model (bench/fsdp_memory.sh drives it;
-- bench/README.md, "Sharded training memory"). Nothing is asserted.
--
--   build/rlhost bench/fsdp_memory.lua init DIR            -- write the random model to DIR
--   build/rlhost [--nproc N] bench/fsdp_memory.lua BACKEND  -- replicated | fsdp
--
-- Environment: MODEL_DIR (a model made by `init`; without it rank 0 makes one in a
-- temporary directory and deletes it at the end), LAYERS (num_hidden_layers, 24),
-- STEPS (optimiser steps, 3; the first is left out of the median), SAMPLES (8),
-- PROMPT_LEN / RESPONSE_LEN (64 / 64 tokens), MICRO_BATCH (2), THREADS (LibTorch
-- intra-op threads per rank; default: its own), LORA_RANK (train a LoRA adapter of this
-- rank, alpha 2 x rank, all linear projections, on the frozen model — replicated, or over
-- the sharded base with fsdp; bench/lora_memory.sh), LR (the AdamW learning rate, 1e-5),
-- RECOMPUTE=<method>:<n> (activation recomputation: recompute_granularity full,
-- recompute_method <method>, recompute_num_layers <n>).
--
-- Every rank trains on its part (rl.rollout.train_data.split) of one fixed batch,
-- global_batch_size = the whole batch, so each train() call is one optimiser step.
-- Rank 0 prints one line `RESULT {json}` with every rank's figures.
local mode = arg[1] or "fsdp"

local function env_int(name, default)
  local v = os.getenv(name)
  if v == nil or v == "" then return default end
  return assert(tonumber(v), name .. " must be a number")
end

local LAYERS = env_int("LAYERS", 24)

-- Qwen2.5-0.5B's config.json (shape only: the weights are random). Qwen2 always has
-- q/k/v biases (runtime/model/config.cpp: qkv_bias_always); the embedding is tied.
local CONFIG = {
  architectures = { "Qwen2ForCausalLM" }, model_type = "qwen2", vocab_size = 151936, hidden_size = 896,
  intermediate_size = 4864, num_hidden_layers = LAYERS, num_attention_heads = 14, num_key_value_heads = 2,
  max_position_embeddings = 32768, rms_norm_eps = 1e-6, rope_theta = 1000000.0, tie_word_embeddings = true,
  hidden_act = "silu", torch_dtype = "float32", bos_token_id = 151643, eos_token_id = 151643,
}

if mode == "init" then
  local dir = assert(arg[2], "usage: rlhost bench/fsdp_memory.lua init DIR")
  local t0 = rl.now()
  local out = assert(rl.model.init { config = CONFIG, seed = 7, dir = dir })
  print(("model (%d layers) written to %s in %.1f s"):format(LAYERS, out, rl.now() - t0))
  return
end

local backend = mode
assert(backend == "fsdp" or backend == "replicated", "usage: rlhost [--nproc N] bench/fsdp_memory.lua fsdp|replicated")
local STEPS = env_int("STEPS", 3)
local SAMPLES = env_int("SAMPLES", 8)
local PROMPT, RESPONSE = env_int("PROMPT_LEN", 64), env_int("RESPONSE_LEN", 64)
local MICRO = env_int("MICRO_BATCH", 2)
local THREADS = env_int("THREADS", 0)
if THREADS > 0 then rl.torch.set_num_threads(THREADS) end
local LORA_RANK = env_int("LORA_RANK", 0)
local LR = tonumber(os.getenv("LR") or "") or 1e-5
local RECOMPUTE = os.getenv("RECOMPUTE")
if RECOMPUTE == "" then RECOMPUTE = nil end
local RC_METHOD, RC_LAYERS = (RECOMPUTE or ""):match("^(%a+):(%d+)$")
if RECOMPUTE and not RC_METHOD then error("RECOMPUTE: <method>:<layers> expected (uniform:1, block:4), got " .. RECOMPUTE) end

-- /proc/self/status fields, in bytes (VmHWM: peak resident set; VmRSS: now; RssAnon /
-- RssFile: the anonymous and file-backed parts of VmRSS).
local function status()
  local f = assert(io.open("/proc/self/status"))
  local text = f:read("*a")
  f:close()
  local out = {}
  for _, k in ipairs { "VmHWM", "VmRSS", "RssAnon", "RssFile" } do
    local kb = text:match(k .. ":%s*(%d+) kB")
    out[k] = kb and tonumber(kb) * 1024 or -1
  end
  return out
end

-- This process's CPU seconds (user + system; clock ticks of 1/100 s, Linux's USER_HZ).
local function cpu_seconds()
  local f = assert(io.open("/proc/self/stat"))
  local text = f:read("*a")
  f:close()
  local rest = text:match("%) (.*)$")   -- after the command name, which may hold spaces
  local fields = {}
  for w in rest:gmatch("%S+") do fields[#fields + 1] = w end
  -- rest starts at field 3 (state): utime is field 14, stime 15
  return (tonumber(fields[12]) + tonumber(fields[13])) / 100
end

-- The machine's busy CPU seconds so far (/proc/stat: user + nice + system + irq +
-- softirq + steal, all cores): with every rank's own CPU seconds, what other processes
-- took while this job trained.
local function machine_busy_seconds()
  local f = assert(io.open("/proc/stat"))
  local line = f:read("*l")
  f:close()
  local v = {}
  for n in line:gmatch("%d+") do v[#v + 1] = tonumber(n) end
  return (v[1] + v[2] + v[3] + v[6] + v[7] + (v[8] or 0)) / 100
end

local function cores()
  local n, f = 0, assert(io.open("/proc/stat"))
  for line in f:lines() do
    if line:match("^cpu%d") then n = n + 1 end
  end
  f:close()
  return n
end

local function median(xs)
  if #xs == 0 then return nil end
  local s = {}
  for i, x in ipairs(xs) do s[i] = x end
  table.sort(s)
  local n = #s
  return n % 2 == 1 and s[(n + 1) / 2] or (s[n / 2] + s[n / 2 + 1]) / 2
end

local rank, ws = rl.dist.rank(), rl.dist.world_size()
local t_start = rl.now()

-- The model: MODEL_DIR, or made once by rank 0 (its path broadcast).
local dir, made = os.getenv("MODEL_DIR"), false
if dir == nil or dir == "" then
  made = true
  dir = rl.dist.broadcast_object(rl.dist.is_main() and assert(rl.model.init { config = CONFIG, seed = 7 }) or nil)
else
  rl.dist.broadcast_object(nil)   -- join the group here too, so every rank's timeline is alike
end

-- The batch: SAMPLES samples of PROMPT + RESPONSE random token ids (a fixed LCG, the
-- same on every rank and every run), rewards of both signs, every response token trained.
-- The vocabulary is the model's (MODEL_DIR may hold another model than CONFIG's shape).
local V = CONFIG.vocab_size
if not made then
  local f = assert(io.open(dir .. "/config.json"))
  V = assert(rl.json.decode(f:read("*a")).vocab_size, dir .. "/config.json: no vocab_size")
  f:close()
end
local batch = { tokens = {}, response_lengths = {}, rewards = {}, loss_masks = {}, total_lengths = {} }
local state = 12345
local function rand_id()
  state = (state * 1103515245 + 12345) % 2147483648
  return state % V
end
for i = 1, SAMPLES do
  local toks, mask = {}, {}
  for j = 1, PROMPT + RESPONSE do toks[j] = rand_id() end
  for j = 1, RESPONSE do mask[j] = 1 end
  batch.tokens[i], batch.response_lengths[i], batch.loss_masks[i] = toks, RESPONSE, mask
  batch.rewards[i] = (i % 2 == 0 and 1 or -1) * (0.5 + i / 10)
  batch.total_lengths[i] = #toks
end
local part = batch
if ws > 1 then part = rl.dist.scatter_object(rl.dist.is_main() and rl.rollout.train_data.split(batch, ws) or nil) end

local mem = { start = status() }
local t0 = rl.now()
-- Sharded: the trainer takes the directory and each rank reads only its own slices
-- (nothing whole is loaded); replicated: the whole model, as a replicated rank must.
local model = backend == "fsdp" and dir or assert(rl.model.load(dir))
local load_s = rl.now() - t0
mem.after_load = status()

t0 = rl.now()
local topts = { model = model, train_backend = backend, optimizer = { lr = LR },
                micro_batch_size = MICRO, global_batch_size = SAMPLES }
if LORA_RANK > 0 then topts.lora_rank, topts.lora_alpha = LORA_RANK, 2 * LORA_RANK end
if RC_METHOD then
  topts.recompute_granularity, topts.recompute_method, topts.recompute_num_layers = "full", RC_METHOD, tonumber(RC_LAYERS)
end
local tr = rl.trainer.new(topts)
local new_s = rl.now() - t0
mem.after_new = status()
local n_params = tr.model:num_parameters()

rl.dist.barrier()   -- every rank starts training (and its CPU windows) together
local steps = {}
local cpu0, busy0, train_t0 = cpu_seconds(), machine_busy_seconds(), rl.now()
for s = 1, STEPS do
  local w0 = rl.now()
  local m = assert(tr:train(part))
  steps[s] = {
    wall = rl.now() - w0, step_time = m["perf/step_time"], actor_train_time = m["perf/actor_train_time"],
    gather_wait = m["perf/fsdp_gather_wait_time"], reduce_scatter = m["perf/fsdp_reduce_scatter_time"],
    gathers = m["perf/fsdp_gathers"], gathered_bytes = m["perf/fsdp_gathered_bytes"],
    state_bytes = m["perf/trainer_state_bytes"], loss = m["train/loss"], grad_norm = m["train/grad_norm"],
    micro_batches = m["train/num_microbatches"], hwm = status().VmHWM, perf = {},
  }
  for k, v in pairs(m) do
    if type(k) == "string" and k:match("^perf/") and type(v) == "number" then steps[s].perf[k:sub(6)] = v end
  end
  if rank == 0 then
    io.stderr:write(("[%s ws=%d] step %d: %.2f s, loss %.5f, grad_norm %.4f\n"):format(backend, ws, s,
      steps[s].step_time, steps[s].loss or 0 / 0, steps[s].grad_norm or 0 / 0))
  end
end
rl.dist.barrier()
local cpu_train = cpu_seconds() - cpu0
local busy_train, train_wall = machine_busy_seconds() - busy0, rl.now() - train_t0
mem.after_train = status()

-- Medians over the steps after the first (the first allocates the AdamW state and
-- warms the allocator); with one step, that step.
local function med(field)
  local xs = {}
  for s = (#steps > 1 and 2 or 1), #steps do
    if steps[s][field] ~= nil then xs[#xs + 1] = steps[s][field] end
  end
  return median(xs)
end

local mine = {
  rank = rank, samples = #part.tokens, tokens = 0,
  threads = rl.torch.info().num_threads,
  load_s = load_s, trainer_new_s = new_s,
  mem = mem, hwm_after_load = mem.after_load.VmHWM, hwm_after_train = mem.after_train.VmHWM,
  state_bytes = steps[#steps].state_bytes,
  step_time = med("step_time"), actor_train_time = med("actor_train_time"), wall = med("wall"),
  gather_wait = med("gather_wait"), reduce_scatter = med("reduce_scatter"), gathers = med("gathers"),
  gathered_bytes = med("gathered_bytes"), cpu_train_s = cpu_train,
  machine_busy_train_s = busy_train, train_wall_s = train_wall,
  loss = steps[#steps].loss, grad_norm = steps[#steps].grad_norm, steps = steps,
}
for _, t in ipairs(part.tokens) do mine.tokens = mine.tokens + #t end

local all = rl.dist.gather_object(mine)
if rl.dist.is_main() then
  local cfg = {}
  for k, v in pairs(CONFIG) do cfg[k] = v end
  print("RESULT " .. rl.json.encode {
    backend = backend, world = ws, layers = LAYERS, lora_rank = LORA_RANK, recompute = RECOMPUTE, model_dir = dir, steps = STEPS, samples = SAMPLES, prompt_len = PROMPT,
    response_len = RESPONSE, micro_batch = MICRO, cores = cores(), model_params = n_params,
    wall_s = rl.now() - t_start, ranks = all,
  })
end
rl.dist.barrier()
if made and rl.dist.is_main() then os.execute("rm -rf '" .. dir .. "'") end
