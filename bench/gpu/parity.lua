-- Engine ↔ trainer log-probs on one device: the engine samples responses (with the
-- log-prob of each sampled token), the trainer scores the same tokens; max |Δ| over all.
--   rlhost bench/gpu/parity.lua MODEL_DIR [device=cuda] [dtype=float32] [prompts=8] [new_tokens=48]
local model, device = assert(arg[1], "usage: parity.lua MODEL_DIR [device] [dtype] [prompts] [new_tokens]"), arg[2] or "cuda"
local dtype, P, N = arg[3] or "float32", tonumber(arg[4]) or 8, tonumber(arg[5]) or 48
rl.torch.manual_seed(1)
local eng = assert(rl.engine.start { model = model, device = device, dtype = dtype, serve = false })
local tok = assert(rl.tokenizer.load(model))
local batch = { tokens = {}, response_lengths = {}, rewards = {}, loss_masks = {} }
local engine_lp = {}
for i = 1, P do
  local ids = tok:apply_chat_template({ { role = "user", content = ("What is %d + %d?"):format(i, 2 * i) } },
    { add_generation_prompt = true, tokenize = true })
  local out = assert(eng:generate { input_ids = ids, return_logprob = true,
    sampling_params = { max_new_tokens = N, temperature = 1.0, ignore_eos = true } })
  local lp, toks = {}, {}
  for j, e in ipairs(out.meta_info.output_token_logprobs) do lp[j], toks[j] = e[1], e[2] end
  local all = {}
  for _, t in ipairs(ids) do all[#all + 1] = t end
  for _, t in ipairs(toks) do all[#all + 1] = t end
  local mask = {}
  for j = 1, #toks do mask[j] = 1 end
  batch.tokens[i], batch.response_lengths[i], batch.rewards[i], batch.loss_masks[i] = all, #toks, 0, mask
  engine_lp[i] = lp
end
eng:stop()
local tr = rl.trainer.new { model = model, device = device, bf16 = dtype == "bfloat16" or nil, micro_batch_size = P }
local train_lp = tr:logprobs(batch)
local max, sum, n = 0, 0, 0
for i = 1, P do
  for j, a in ipairs(engine_lp[i]) do
    local d = math.abs(a - train_lp[i][j])
    max, sum, n = math.max(max, d), sum + d, n + 1
  end
end
print(("RESULT impl=parity device=%s dtype=%s tokens=%d max_abs_diff=%.3g mean_abs_diff=%.3g"):format(device, dtype, n, max, sum / n))
