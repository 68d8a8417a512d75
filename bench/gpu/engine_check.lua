-- The engine's CUDA step checked against itself and against probability, one RESULT
-- line per check (bench/gpu/check.sh prints them; parity.lua checks it against the trainer):
--   graphs  greedy decode of B prompts at once with CUDA graphs and without: tokens equal,
--           max |Δ log-prob| up to each sequence's first differing token, graph steps used
--   overlap the same with the overlap schedule off (each step's tokens on the host before
--           the next step), and how many steps ran ahead in the default engine
--   sampler T = 1 draws of one token from one prompt: each frequent token's count against
--           N·p (p from the engine's own log-prob), max |z| (about 4 or less when right)
--   seeded  a seeded request alone and inside a batch: the same tokens
--   filters top-p / top-k / top log-probs rows (the CPU sampler) mixed with plain rows
--   rlhost bench/gpu/engine_check.lua MODEL_DIR [device=cuda] [dtype=bfloat16] [prompts=13] [new=32]
local model, device = assert(arg[1], "usage: engine_check.lua MODEL_DIR [device] [dtype] [prompts] [new]"), arg[2] or "cuda"
local dtype, B, N = arg[3] or "bfloat16", tonumber(arg[4]) or 13, tonumber(arg[5]) or 32
local cfg = rl.json.decode(assert(io.open(model .. "/config.json")):read("*a"))
local V = cfg.vocab_size

local function prompts(b, len, salt)
  local list = {}
  for i = 1, b do
    local ids = {}
    for j = 1, len do ids[j] = (salt * 7919 + i * 131 + j * 17) % V end
    list[i] = ids
  end
  return list
end

local function start(extra)
  local o = { model = model, device = device, dtype = dtype, serve = false, max_running_requests = 256 }
  for k, v in pairs(extra or {}) do o[k] = v end
  return assert(rl.engine.start(o))
end

local function greedy(eng, ids, n)
  local outs = assert(eng:generate { input_ids = ids, return_logprob = true,
    sampling_params = { max_new_tokens = n, temperature = 0, ignore_eos = true } })
  return outs
end

-- graphs ----------------------------------------------------------------------------
do
  local ids = prompts(B, 16, 1)
  for i = 1, B, 3 do  -- longer prompts for some: several blocks per sequence
    for j = 17, 16 + 21 * i do ids[i][j] = (i * 31 + j * 7) % V end
  end
  local function compare(a, b)
    local equal, maxd = 0, 0
    for i = 1, B do
      local la, lb = a[i].meta_info.output_token_logprobs, b[i].meta_info.output_token_logprobs
      local same = true
      for j = 1, N do
        if la[j][2] ~= lb[j][2] then same = false break end
        maxd = math.max(maxd, math.abs(la[j][1] - lb[j][1]))
      end
      if same then equal = equal + 1 end
    end
    return equal, maxd
  end
  local g, e, o = start(), start { disable_cuda_graph = true }, start { overlap_schedule = "off" }
  local a, b, c = greedy(g, ids, N), greedy(e, ids, N), greedy(o, ids, N)
  local sg, se, so = g:stats(), e:stats(), o:stats()
  g:stop()
  e:stop()
  o:stop()
  local equal, maxd = compare(a, b)
  print(("RESULT check=graphs dtype=%s sequences=%d equal=%d max_abs_logprob_diff=%.3g graph_steps=%d eager_engine_graph_steps=%d graphs=%d")
    :format(dtype, B, equal, maxd, sg.cuda_graph_steps or 0, se.cuda_graph_steps or 0, sg.cuda_graphs or 0))
  equal, maxd = compare(a, c)
  print(("RESULT check=overlap dtype=%s sequences=%d equal=%d max_abs_logprob_diff=%.3g overlap_steps=%d of %d off_engine_overlap_steps=%d")
    :format(dtype, B, equal, maxd, sg.overlap_steps or 0, sg.steps or 0, so.overlap_steps or 0))
end

-- sampler, seeded, filters -------------------------------------------------------------
local eng = start()
do
  local draws = 4096
  local p1 = prompts(1, 12, 7)[1]
  local outs = assert(eng:generate { input_ids = { p1, p1, p1, p1 }, return_logprob = true,
    sampling_params = { max_new_tokens = 1, temperature = 1.0, n = math.floor(draws / 4) } })
  local count, p, spread = {}, {}, 0
  for _, o in ipairs(outs) do
    local lp, t = o.meta_info.output_token_logprobs[1][1], o.meta_info.output_token_logprobs[1][2]
    count[t] = (count[t] or 0) + 1
    if p[t] then spread = math.max(spread, math.abs(p[t] - math.exp(lp))) end
    p[t] = math.exp(lp)
  end
  local maxz, checked, mass = 0, 0, 0
  for t, pt in pairs(p) do
    mass = mass + pt
    if pt * draws >= 20 then
      local z = (count[t] - draws * pt) / math.sqrt(draws * pt * (1 - pt))
      maxz, checked = math.max(maxz, math.abs(z)), checked + 1
    end
  end
  print(("RESULT check=sampler draws=%d distinct=%d tokens_checked=%d max_abs_z=%.2f seen_mass=%.3f logprob_spread=%.3g")
    :format(draws, #(function() local k = {} for t in pairs(count) do k[#k + 1] = t end return k end)(), checked, maxz,
      mass, spread))
end
do
  local sp = { max_new_tokens = 24, temperature = 1.0, seed = 1234, ignore_eos = true }
  local alone = assert(eng:generate { input_ids = prompts(1, 16, 3)[1], sampling_params = sp })
  local ids = prompts(9, 16, 3)
  local reqs = {}
  for i = 1, 9 do reqs[i] = { max_new_tokens = 24, temperature = 1.0, seed = i == 5 and 1234 or 100 + i, ignore_eos = true } end
  ids[5] = prompts(1, 16, 3)[1]
  local outs = assert(eng:generate { input_ids = ids, sampling_params = reqs })
  local same = #alone.output_ids == #outs[5].output_ids
  for j = 1, #alone.output_ids do same = same and alone.output_ids[j] == outs[5].output_ids[j] end
  print(("RESULT check=seeded same_tokens=%s"):format(tostring(same)))
end
do
  local ids = prompts(6, 16, 5)
  local sps = {
    { max_new_tokens = 8, temperature = 1.0, ignore_eos = true },
    { max_new_tokens = 8, temperature = 0.7, top_p = 0.9, ignore_eos = true },
    { max_new_tokens = 8, temperature = 1.0, top_k = 20, ignore_eos = true },
    { max_new_tokens = 8, temperature = 0, ignore_eos = true },
    { max_new_tokens = 8, temperature = 1.0, min_p = 0.05, ignore_eos = true },
    { max_new_tokens = 8, temperature = 1.0, ignore_eos = true },
  }
  local outs = assert(eng:generate { input_ids = ids, sampling_params = sps, return_logprob = true,
    top_logprobs_num = { 0, 0, 0, 5, 0, 3 } })
  local ok = true
  for i, o in ipairs(outs) do
    for j, e in ipairs(o.meta_info.output_token_logprobs) do
      ok = ok and e[2] >= 0 and e[2] < V and e[1] <= 1e-6 and e[1] == e[1]
    end
    if i == 4 or i == 6 then
      ok = ok and #o.meta_info.output_top_logprobs == 8 and #o.meta_info.output_top_logprobs[1] >= 3
    end
    ok = ok and #o.output_ids == 8
  end
  print(("RESULT check=filters rows=%d valid=%s"):format(#outs, tostring(ok)))
end
eng:stop()
