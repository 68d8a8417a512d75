-- Engine ↔ trainer log-probs on one device: the engine samples responses (with the
-- log-prob of each sampled token) for prompts submitted together, so they decode as
-- one batch (on CUDA: graph buckets with padding rows); the trainer scores the same
-- tokens; max |Δ| over all. Two rounds: P prompts × 2 samples, then 3 prompts × 1.
--   rlhost bench/gpu/parity.lua MODEL_DIR [device=cuda] [dtype=float32] [prompts=8] [new_tokens=48] [k=v engine options]
local model, device = assert(arg[1], "usage: parity.lua MODEL_DIR [device] [dtype] [prompts] [new_tokens]"), arg[2] or "cuda"
local dtype, P, N = arg[3] or "float32", tonumber(arg[4]) or 8, tonumber(arg[5]) or 48
local opts = { model = model, device = device, dtype = dtype, serve = false }
for i = 6, #arg do
  local k, v = arg[i]:match("^([%w_]+)=(.*)$")
  if k then opts[k] = tonumber(v) or (v == "true" and true) or (v == "false" and false) or v end
end
rl.torch.manual_seed(1)
local eng = assert(rl.engine.start(opts))
local tok = assert(rl.tokenizer.load(model))
local batch = { tokens = {}, response_lengths = {}, rewards = {}, loss_masks = {} }
local engine_lp = {}

local function round(prompts, n)
  local ids = {}
  for i = 1, prompts do
    ids[i] = tok:apply_chat_template({ { role = "user", content = ("What is %d + %d?"):format(i, 2 * i + n) } },
      { add_generation_prompt = true, tokenize = true })
  end
  local outs = assert(eng:generate { input_ids = ids, return_logprob = true,
    sampling_params = { max_new_tokens = N, temperature = 1.0, ignore_eos = true, n = n } })
  for k, out in ipairs(outs) do
    local prompt = ids[math.floor((k - 1) / n) + 1]  -- SGLang's order: each prompt's n samples together
    local lp, toks, all, mask = {}, {}, {}, {}
    for j, e in ipairs(out.meta_info.output_token_logprobs) do lp[j], toks[j] = e[1], e[2] end
    for _, t in ipairs(prompt) do all[#all + 1] = t end
    for j, t in ipairs(toks) do all[#all + 1], mask[j] = t, 1 end
    local i = #batch.tokens + 1
    batch.tokens[i], batch.response_lengths[i], batch.rewards[i], batch.loss_masks[i] = all, #toks, 0, mask
    engine_lp[i] = lp
  end
end
round(P, 2)
round(3, 1)
local st = eng:stats()
eng:stop()
local tr = rl.trainer.new { model = model, device = device, bf16 = dtype == "bfloat16" or nil, micro_batch_size = #batch.tokens }
local train_lp = tr:logprobs(batch)
local max, sum, n = 0, 0, 0
for i = 1, #batch.tokens do
  for j, a in ipairs(engine_lp[i]) do
    local d = math.abs(a - train_lp[i][j])
    max, sum, n = math.max(max, d), sum + d, n + 1
  end
end
print(("RESULT impl=parity device=%s dtype=%s sequences=%d tokens=%d max_abs_diff=%.3g mean_abs_diff=%.3g cuda_graph_steps=%d steps=%d")
  :format(device, dtype, #batch.tokens, n, max, sum / n, st.cuda_graph_steps or 0, st.steps))
