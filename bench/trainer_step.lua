-- rlhost side of bench/trainer_step.sh: one GRPO optimiser step (forward,
-- backward, AdamW) on B sequences of T tokens, tokens/s over N timed steps.
-- RAGGED=1: sample i (from 1) holds T/4 prompt tokens and 3T/4 · i/B response tokens, as
-- GRPO's responses spread (bench/trainer_step_torch.py the same); tok/s counts real tokens.
--   rlhost bench/trainer_step.lua MODEL_DIR THREADS [batch=8] [tokens=256] [steps=3] [device=cpu] [bf16=0]
local model, threads = assert(arg[1]), tonumber(arg[2]) or 1
local B, T, steps = tonumber(arg[3]) or 8, tonumber(arg[4]) or 256, tonumber(arg[5]) or 3
local device, bf16 = arg[6] or "cpu", arg[7] == "1"
local prompt = math.floor(T / 4)
rl.torch.set_num_threads(threads)
rl.torch.manual_seed(0)
local cfg = rl.json.decode(assert(io.open(model .. "/config.json")):read("*a"))
local ragged = os.getenv("RAGGED") == "1"
local batch = { tokens = {}, response_lengths = {}, rewards = {}, loss_masks = {} }
local seed = 12345
local function rnd(n) seed = (seed * 1103515245 + 12345) % 2147483648; return seed % n end
local real = 0
for i = 1, B do
  local resp = ragged and math.max(1, math.floor((T - prompt) * i / B)) or T - prompt
  local t = {}
  for j = 1, T do t[j] = rnd(cfg.vocab_size) end  -- the same ids either way; ragged keeps a prefix
  for j = prompt + resp + 1, T do t[j] = nil end
  local m = {}
  for j = 1, resp do m[j] = 1 end
  batch.tokens[i], batch.response_lengths[i], batch.loss_masks[i] = t, resp, m
  batch.rewards[i] = (i % 2 == 0) and 1 or -1
  real = real + prompt + resp
end
local tr = rl.trainer.new { model = model, loss = { advantage_estimator = "grpo" }, device = device, bf16 = bf16 or nil,
                            optimizer = { lr = 1e-6, clip_grad = 1.0 }, micro_batch_size = B }
assert(tr:train(batch))  -- warm-up: allocations, optimiser state
local t0 = rl.now()
for _ = 1, steps do assert(tr:train(batch)) end
local dt = (rl.now() - t0) / steps
print(("RESULT impl=rlhost threads=%d batch=%d tokens=%d device=%s bf16=%d ragged=%d step_s=%.3f tok_s=%.1f"):format(
  threads, B, T, device, bf16 and 1 or 0, ragged and 1 or 0, dt, real / dt))
