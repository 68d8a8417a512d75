-- Tracing on vs off over the real rollout loop: an engine (thread mode) behind
-- the router, rl.rollout's generate_rollout with a GSM8K-style Lua reward, the
-- same seeds both ways; steps alternate on/off so drift hits both equally.
--   rlhost bench/rollout_trace.lua MODEL_DIR [steps=6] [batch=8] [n=4] [max_tokens=32]
local model = assert(arg[1], "usage: rlhost bench/rollout_trace.lua MODEL_DIR [steps] [batch] [n] [max_tokens]")
local steps = tonumber(arg[2]) or 6
local batch, n, max_tokens = tonumber(arg[3]) or 8, tonumber(arg[4]) or 4, tonumber(arg[5]) or 32
if not rl.trace.enabled then error("this rl.trace has no enabled() switch") end

local eng = assert(rl.engine.start { model = model, threads = 1, port = 0, max_running_requests = 64 })
local router = assert(rl.router.start { workers = { eng.url }, port = 0 })
local tok = assert(rl.tokenizer.load(model))
local path = os.tmpname() .. ".jsonl"
local f = assert(io.open(path, "w"))
for i = 1, 64 do f:write(rl.json.encode { input = "Once upon a time there was a number " .. i, label = tostring(i) }, "\n") end
f:close()

local reward = rl.rewards.get("gsm8k", { extract = "last_number" })
local function run(on, step)
  rl.trace.enabled(on)
  local ds = rl.data.load(path, { label_key = "label" })
  local ro = rl.rollout.new { url = router.url, tokenizer = tok, data = ds, reward = reward, rollout_batch_size = batch,
    n_samples_per_prompt = n, rollout_max_response_len = max_tokens, deterministic = true, rollout_seed = step,
    extra_sampling_params = { ignore_eos = true } }
  local t0 = rl.now()
  local groups = ro:generate_rollout(step)
  local dt = rl.now() - t0
  local events = 0
  for _, g in ipairs(groups) do for _, s in ipairs(g) do events = events + (s.trace and #s.trace.events or 0) end end
  return dt, events
end

run(true, 0)  -- warm-up (JIT, caches)
local on_t, off_t, ev = 0, 0, 0
for step = 1, steps do
  local order = step % 2 == 1 and { true, false } or { false, true }
  for _, on in ipairs(order) do
    local dt, e = run(on, step)
    if on then on_t, ev = on_t + dt, ev + e else off_t = off_t + dt end
  end
end
rl.trace.enabled(true)
local samples = steps * batch * n
print(("RESULT what=rollout steps=%d samples_per_step=%d tokens=%d on_s=%.3f off_s=%.3f events_per_sample=%.1f " ..
  "overhead_pct=%.2f"):format(steps, batch * n, max_tokens, on_t, off_t, ev / samples, (on_t / off_t - 1) * 100))
router:stop()
eng:stop()
os.remove(path)
os.remove((path:gsub("%.jsonl$", "")))
