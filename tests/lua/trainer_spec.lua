-- rl.trainer on real parts: a tiny random model learns (SFT loss falls, GRPO
-- moves log-probs the way the advantages say), the engine and the trainer agree
-- on log-probs of the engine's own samples (≤ 1e-5, fp32), and weights handed to
-- an in-process engine change what it computes to exactly the trainer's numbers.
local rl = require "rl"

local STORIES = test_data("models/stories260K")
local TINY = {
  architectures = { "LlamaForCausalLM" }, model_type = "llama", vocab_size = 300, hidden_size = 32,
  intermediate_size = 48, num_hidden_layers = 2, num_attention_heads = 4, num_key_value_heads = 2,
  max_position_embeddings = 64, rms_norm_eps = 1e-6,
}

local function batch_of(seqs, resp_len, rewards)
  local b = { tokens = {}, response_lengths = {}, rewards = {}, loss_masks = {} }
  for i, s in ipairs(seqs) do
    b.tokens[i], b.response_lengths[i], b.rewards[i] = s, resp_len, rewards[i]
    local m = {}
    for j = 1, resp_len do m[j] = 1 end
    b.loss_masks[i] = m
  end
  return b
end

local function mean(t)
  local s = 0
  for _, v in ipairs(t) do s = s + v end
  return s / #t
end

-- A thread engine on the stories model and a rollout over four prompts (groups of 4,
-- reward: the response length's parity) → eng, tok, ro, the prompts file's path.
local function stories_rollout()
  local eng = assert(rl.engine.start { model = STORIES, threads = 1, serve = false })
  local tok = assert(rl.tokenizer.load(STORIES))
  local path = os.tmpname() .. ".jsonl"
  local f = assert(io.open(path, "w"))
  for _, p in ipairs { "Once upon a time", "The little dog", "Lily saw a big", "Tom had a red" } do
    f:write(rl.json.encode { input = p, label = "x" }, "\n")
  end
  f:close()
  local ro = rl.rollout.new { engine = eng, tokenizer = tok, data = rl.data.load(path, { label_key = "label" }),
    -- rewards that vary inside every group (by the sample's index, not its random response), so
    -- each optimiser step moves the weights: a group of equal rewards has no gradient
    reward = function(s) return s.index % 2 end, rollout_batch_size = 2, n_samples_per_prompt = 4,
    rollout_max_response_len = 10 }
  return eng, tok, ro, path
end

describe("rl.trainer", function()
  it("lowers the SFT loss of a tiny model", function()
    local dir = assert(rl.model.init { config = TINY, seed = 3, dir = tmpdir() })
    local tr = rl.trainer.new { model = dir, loss = { loss_type = "sft_loss" },
                                optimizer = { lr = 1e-2, clip_grad = 1.0 }, micro_batch_size = 2 }
    local b = batch_of({ { 5, 6, 7, 8, 9, 10 }, { 11, 12, 13, 14, 15, 16 }, { 5, 6, 7, 20, 21, 22 } }, 3, { 0, 0, 0 })
    local first, last
    for i = 1, 12 do
      local m = assert(tr:train(b))
      if i == 1 then first = m["train/loss"] end
      last = m["train/loss"]
      eq(m["train/num_microbatches"], 2)
      ok(m["train/grad_norm"] > 0)
    end
    ok(last < first * 0.7, ("sft loss %g -> %g"):format(first, last))
    eq(tr:step(), 12)
    os.execute("rm -rf '" .. dir .. "'")
  end, { timeout = 120 })

  it("fills max_tokens_per_gpu micro-batches with the tokens themselves (CPU: no padding)", function()
    local dir = assert(rl.model.init { config = TINY, seed = 3, dir = tmpdir() })
    local tr = rl.trainer.new { model = dir, loss = { loss_type = "sft_loss" }, optimizer = { lr = 1e-3 },
                                max_tokens_per_gpu = 12 }
    -- 4 + 8 tokens fit 12; padded to the longest they would take 16, and every sample
    -- a micro-batch of its own.
    local b = batch_of({ { 5, 6, 7, 8 }, { 11, 12, 13, 14, 15, 16, 17, 18 }, { 5, 6, 7, 20 } }, 2, { 0, 0, 0 })
    local m = assert(tr:train(b))
    eq(m["train/num_microbatches"], 2)
    ok(m["train/loss"] > 0)
    os.execute("rm -rf '" .. dir .. "'")
  end, { timeout = 60 })

  it("runs its work on the CPUs set_cpus names; the event loop stays where it was", function()
    local dir = assert(rl.model.init { config = TINY, seed = 3, dir = tmpdir() })
    local tr = rl.trainer.new { model = dir, loss = { loss_type = "sft_loss" }, optimizer = { lr = 1e-3 } }
    local all = rl.process.cpus()
    local last = all:match("(%d+)$")
    tr:set_cpus(last)
    local b = batch_of({ { 5, 6, 7, 8, 9, 10 }, { 11, 12, 13, 14, 15, 16 } }, 3, { 0, 0 })
    local pid, done, seen = rl.process.pid(), false, {}
    local trainer_task = rl.spawn(function()
      for _ = 1, 15 do assert(tr:train(b)) end
      done = true
    end)
    while not done do   -- the threads of this process and their CPUs while the trainer works
      for tid in io.popen("ls /proc/" .. pid .. "/task"):lines() do
        local f = io.open(("/proc/%d/task/%s/status"):format(pid, tid))
        local st = f and f:read("*a")
        if f then f:close() end
        local cpus = st and st:match("Cpus_allowed_list:%s*(%S+)")
        if cpus then seen[cpus] = (seen[cpus] or 0) + 1 end
      end
      rl.sleep(0.001)
    end
    trainer_task:wait()
    if last ~= all then ok(seen[last], "a thread ran on CPU " .. last .. " only: " .. rl.json.encode(seen)) end
    ok(seen[all], "the event loop's thread kept every CPU")
    eq(rl.process.cpus(), all)
    tr:set_cpus(nil)   -- anywhere again
    assert(tr:train(b))
    local okc, err = pcall(tr.set_cpus, tr, "2-1")
    ok(not okc and tostring(err):find("descending", 1, true), err)
    okc, err = pcall(tr.set_cpus, tr, "1023")
    ok(not okc and tostring(err):find("does not exist", 1, true), err)
    os.execute("rm -rf '" .. dir .. "'")
  end, { timeout = 120 })

  it("GRPO raises the log-probs of rewarded responses and lowers the others", function()
    local dir = assert(rl.model.init { config = TINY, seed = 5, dir = tmpdir() })
    local tr = rl.trainer.new { model = dir, loss = { advantage_estimator = "grpo" },
                                optimizer = { lr = 5e-3 }, micro_batch_size = 4 }
    local b = batch_of({ { 1, 2, 3, 40, 41, 42 }, { 1, 2, 3, 50, 51, 52 } }, 3, { 1, -1 })
    local before = tr:logprobs(b)
    for _ = 1, 3 do
      local m = assert(tr:train(b))
      ok(m["train/pg_clipfrac"] ~= nil and m["train/ppo_kl"] ~= nil, "slime's metric names")
    end
    local after = tr:logprobs(b)
    ok(mean(after[1]) > mean(before[1]), "rewarded response became likelier")
    ok(mean(after[2]) < mean(before[2]), "penalised response became less likely")
    os.execute("rm -rf '" .. dir .. "'")
  end, { timeout = 120 })

  it("several optimiser steps on one rollout are off-policy: the ratio moves and clips", function()
    local dir = assert(rl.model.init { config = TINY, seed = 5, dir = tmpdir() })
    local function run(gbs)
      local tr = rl.trainer.new { model = dir, loss = { eps_clip = 0.01 }, optimizer = { lr = 3e-2 },
                                  micro_batch_size = 2, global_batch_size = gbs }
      local b = batch_of({ { 1, 2, 3, 40, 41, 42 }, { 1, 2, 3, 50, 51, 52 }, { 4, 5, 6, 40, 41, 42 },
                           { 4, 5, 6, 50, 51, 52 } }, 3, { 1, -1, 1, -1 })
      local before = tr:logprobs(b)
      local m = assert(tr:train(b))
      return m, before, tr
    end
    -- one step: old = new, nothing can clip
    local one = run(4)
    eq(one["train/pg_clipfrac"], 0)
    eq(one["perf/train_steps"], 1)
    -- two steps: the second step's old log-probs are the policy's before the first
    -- step, not after it (slime computes them once per rollout)
    local two, before, tr = run(2)
    eq(two["perf/train_steps"], 2)
    ok(two["train/pg_clipfrac"] > 0, "the second step clips: " .. two["train/pg_clipfrac"])
    ok(math.abs(two["train/ppo_kl"]) > 0, "and its ratio is not 1")
    eq(select(2, tr:progress()), 2, "two micro-batches of two were trained")
    ok(#before == 4)
    os.execute("rm -rf '" .. dir .. "'")
  end, { timeout = 120 })

  it("agrees with the engine on log-probs and hands it new weights in memory", function()
    local eng = assert(rl.engine.start { model = STORIES, threads = 1, serve = false })
    local tr = rl.trainer.new { model = STORIES, optimizer = { lr = 1e-3 }, micro_batch_size = 4 }
    local b = { tokens = {}, response_lengths = {}, rewards = {}, loss_masks = {}, rollout_log_probs = {} }
    for i = 1, 4 do
      local out = assert(eng:generate { input_ids = { 1, 403 + i }, return_logprob = true,
        sampling_params = { temperature = 1.0, max_new_tokens = 12, sampling_seed = i, ignore_eos = true } })
      local toks, lps = { 1, 403 + i }, {}
      for j, it in ipairs(out.meta_info.output_token_logprobs) do toks[#toks + 1] = it[2]; lps[j] = it[1] end
      b.tokens[i], b.response_lengths[i], b.rewards[i] = toks, #lps, (i % 2 == 0) and 1 or -1
      b.rollout_log_probs[i] = lps
      local m = {}
      for j = 1, #lps do m[j] = 1 end
      b.loss_masks[i] = m
    end
    local mine = tr:logprobs(b)
    local worst = 0
    for i = 1, 4 do
      for j, lp in ipairs(b.rollout_log_probs[i]) do worst = math.max(worst, math.abs(lp - mine[i][j])) end
    end
    ok(worst <= 1e-5, "engine vs trainer log-prob diff " .. worst)
    print(("engine vs trainer max |logp diff| %.3g over %d tokens"):format(worst, 48))
    local m = assert(tr:train(b))
    ok(m["train/train_rollout_logprob_abs_diff"] <= 1e-5, m["train/train_rollout_logprob_abs_diff"])
    -- the engine now computes with the trained weights: its log-probs of the same
    -- tokens equal the trainer's new ones
    local s = assert(tr:sync(eng))
    eq(s.weight_version, "1")
    eq(eng:stats().weight_version, "1")
    local after = tr:logprobs(b)
    local out = assert(eng:generate { input_ids = b.tokens[1], return_logprob = true,
      sampling_params = { temperature = 1.0, max_new_tokens = 1, sampling_seed = 1 } })
    local changed, agree = 0, 0
    for j = 1, #after[1] do changed = math.max(changed, math.abs(after[1][j] - mine[1][j])) end
    ok(changed > 1e-4, "training moved the weights (" .. changed .. ")")
    -- one more token generated after the full sequence: compare its log-prob with the trainer's
    local next_tok = out.meta_info.output_token_logprobs[1]
    local ext = { tokens = { b.tokens[1] }, response_lengths = { #b.tokens[1] - 1 }, rewards = { 0 }, loss_masks = { {} } }
    ext.tokens[1] = {}
    for j, t in ipairs(b.tokens[1]) do ext.tokens[1][j] = t end
    ext.tokens[1][#ext.tokens[1] + 1] = next_tok[2]
    ext.response_lengths[1] = 1
    ext.loss_masks[1] = { 1 }
    agree = math.abs(tr:logprobs(ext)[1][1] - next_tok[1])
    ok(agree <= 1e-5, "synced engine vs trainer " .. agree)
    eng:stop()
    -- a process engine gets the weights through a safetensors directory on demand
    -- (auto picks shared memory: trainer_dist_spec.lua)
    local peng = assert(rl.engine.start { model = STORIES, mode = "process", threads = 1 })
    local ps = assert(tr:sync(peng, { method = "disk" }))
    eq(ps.weight_version, "1")
    eq(ps.methods[1], "disk")
    local pout = assert(peng:generate { input_ids = b.tokens[1], return_logprob = true,
      sampling_params = { temperature = 1.0, max_new_tokens = 1, sampling_seed = 1 } })
    local pt = pout.meta_info.output_token_logprobs[1]
    ext.tokens[1][#ext.tokens[1]] = pt[2]
    local pagree = math.abs(tr:logprobs(ext)[1][1] - pt[1])
    ok(pagree <= 1e-5, "process engine after sync vs trainer " .. pagree)
    peng:stop()
  end, { timeout = 180 })

  it("one GRPO step end to end: rollout, train, trace, sync", function()
    local eng, tok, ro, path = stories_rollout()
    local groups = ro:generate_rollout(0)
    local batch = rl.rollout.train_data.convert(groups, { estimator = "grpo" })
    local tr = rl.trainer.new { model = STORIES, optimizer = { lr = 1e-4 }, micro_batch_size = 4 }
    -- the batch records the estimator its rewards were normalised for; the trainer checks it is its own
    local other = rl.rollout.train_data.convert(groups, { estimator = "reinforce_plus_plus" })
    raises(function() tr:train(other) end,
      "batch.advantage_estimator is 'reinforce_plus_plus' but this trainer's loss uses 'grpo'")
    eq(tr:step(), 0, "nothing trained on the mismatched batch")
    local m, per_sample = assert(tr:train(batch))
    eq(#per_sample, batch.size)
    ok(m["train/train_rollout_logprob_abs_diff"] <= 1e-5, m["train/train_rollout_logprob_abs_diff"])
    for i, s in ipairs(batch.samples) do
      local ev = s.trace.events[#s.trace.events]
      eq(ev.name, "actor_train")
      eq(ev.attrs.train_step, 1)
      ok(math.abs(ev.attrs.advantage - batch.rewards[i]) < 1e-6)
      ok(math.abs(ev.attrs.loss_weight - 1 / batch.size) < 1e-12)
      eq(ev.attrs.clipped_token_frac, 0)   -- first step: ratio 1, nothing clipped
    end
    assert(tr:sync(eng))
    eq(eng:stats().weight_version, "1")
    eng:stop()
    os.remove(path)
    os.remove((path:gsub("%.jsonl$", "")))
  end, { timeout = 120 })

  it("old log-probs come from the rollout where the engine proves them the trainer's own, else are recomputed", function()
    local eng, tok, ro, path = stories_rollout()
    local function batch_at(id)
      return rl.rollout.train_data.convert(ro:generate_rollout(id), { estimator = "grpo" })
    end
    local batch = batch_at(0)
    eq(#batch.logprob_digests, batch.size)
    for _, d in ipairs(batch.logprob_digests) do eq(d, batch.logprob_digests[1]); eq(#d, 32) end
    -- two optimiser steps per rollout: the behaviour log-probs are the policy's before the first
    local opts = { model = STORIES, optimizer = { lr = 1e-3 }, micro_batch_size = 4, global_batch_size = 4 }
    local function trainer(mode)
      local o = {}
      for k, v in pairs(opts) do o[k] = v end
      o.old_logprobs = mode
      return rl.trainer.new(o)
    end
    -- check: recomputes them too and finds them equal bit for bit
    local checked = trainer("check")
    local m = assert(checked:train(batch))
    eq(m["train/old_logprobs_from_rollout"], 1)
    -- auto takes them: the same step as recomputing them (same loss, same grad norm, same weights)
    local auto, again = trainer("auto"), trainer("recompute")
    local ma, mr = assert(auto:train(batch)), assert(again:train(batch))
    eq(ma["train/old_logprobs_from_rollout"], 1)
    eq(mr["train/old_logprobs_from_rollout"], 0)
    eq(ma["train/loss"], mr["train/loss"])
    eq(ma["train/grad_norm"], mr["train/grad_norm"])
    eq(auto:logprobs(batch), again:logprobs(batch))
    -- the trainer has moved on and the engine has not: nothing is taken
    local m2 = assert(auto:train(batch))
    eq(m2["train/old_logprobs_from_rollout"], 0)
    -- synced, the next rollout is the trainer's own again
    assert(auto:sync(eng))
    local next_batch = batch_at(1)
    ok(next_batch.logprob_digests[1] ~= batch.logprob_digests[1], "new weights, new digest")
    eq(assert(auto:train(next_batch))["train/old_logprobs_from_rollout"], 1)
    -- a log-prob that is not the policy's under a digest that says it is: check mode fails
    local fresh = trainer("check")
    assert(fresh:sync(eng))  -- an untrained trainer: the engine's weights are its own again
    local bad = batch_at(2)
    local i = 1
    while bad.response_lengths[i] < 2 do i = i + 1 end
    bad.rollout_log_probs[i][2] = bad.rollout_log_probs[i][2] * (1 + 2 ^ -20)
    local r, err = fresh:train(bad)
    eq(r, nil)
    ok(tostring(err):find(("old_logprobs = check: sample %d, response token 2"):format(i), 1, true), err)
    raises(function() trainer("sometimes") end, "'opts.old_logprobs' ('auto', 'recompute', 'check' expected, got 'sometimes')")
    eng:stop()
    os.remove(path)
    os.remove((path:gsub("%.jsonl$", "")))
  end, { timeout = 180 })

  it("bf16 mixed precision: float32 master weights, bf16 compute, the float32 step within rounding", function()
    local dir = assert(rl.model.init { config = TINY, seed = 7, dir = tmpdir() })
    local b = batch_of({ { 1, 2, 3, 40, 41, 42, 43 }, { 1, 2, 3, 50, 51, 52, 53 } }, 4, { 1, -1 })
    local function trainer(bf16)
      return rl.trainer.new { model = dir, bf16 = bf16, loss = { entropy_coef = 0.01 }, optimizer = { lr = 5e-3 },
                              micro_batch_size = 2 }
    end
    local t32, t16 = trainer(false), trainer(true)
    local l32, l16 = t32:logprobs(b), t16:logprobs(b)
    local worst = 0
    for i = 1, #l32 do
      for j = 1, #l32[i] do worst = math.max(worst, math.abs(l32[i][j] - l16[i][j])) end
    end
    ok(worst > 1e-5, ("the matmuls ran in bf16 (log-prob gap %g)"):format(worst))
    ok(worst < 0.05, ("bf16 log-probs within rounding of float32 (gap %g)"):format(worst))
    local m32, m16 = assert(t32:train(b)), assert(t16:train(b))
    near(m16["train/entropy_loss"], m32["train/entropy_loss"], 0.01 * m32["train/entropy_loss"])
    near(m16["train/loss"], m32["train/loss"], 1e-3)
    near(m16["train/grad_norm"], m32["train/grad_norm"], 0.05 * m32["train/grad_norm"])
    for _, p in ipairs(t16.model:parameters()) do eq(p.dtype, "float32", p.name) end
    for _ = 1, 2 do assert(t16:train(b)) end
    local after = t16:logprobs(b)
    ok(mean(after[1]) > mean(l16[1]) and mean(after[2]) < mean(l16[2]), "bf16 GRPO moves log-probs the right way")
    raises(function() rl.trainer.new { model = dir, dtype = "bfloat16", bf16 = true } end, "float32 master weights")
    raises(function() rl.trainer.new { model = dir, fp16 = true } end, "loss scaling")
    os.execute("rm -rf '" .. dir .. "'")
  end, { timeout = 120 })

  it("LoRA: trains an adapter over the frozen model, writes PEFT files and resumes from its checkpoint", function()
    local dir = assert(rl.model.init { config = TINY, seed = 3, dir = tmpdir() })
    local opts = { model = dir, loss = { loss_type = "sft_loss" }, optimizer = { lr = 1e-2 }, micro_batch_size = 2,
                   lora_rank = 4, lora_alpha = 8, target_modules = { "q_proj", "v_proj", "down_proj" } }
    local tr = rl.trainer.new(opts)
    local b = batch_of({ { 5, 6, 7, 8, 9, 10 }, { 11, 12, 13, 14, 15, 16 } }, 3, { 0, 0 })
    local before = tr:logprobs(b)
    local first = assert(tr:train(b))["train/loss"]
    local last
    for _ = 1, 5 do last = assert(tr:train(b))["train/loss"] end
    ok(last < first, "the SFT loss falls with the adapter alone trained")
    local l = assert(tr:lora())
    eq(l.config.rank, 4)
    eq(l.config.target_modules, { "q_proj", "v_proj", "down_proj" })
    eq(#l:parameters(), 2 * 3 * TINY.num_hidden_layers)
    local peft = tmpdir()
    assert(tr:save_lora(peft))
    local cfg = rl.json.decode(assert(io.open(peft .. "/adapter_config.json")):read("a"))
    eq({ cfg.peft_type, cfg.r, cfg.lora_alpha, cfg.base_model_name_or_path }, { "LORA", 4, 8, dir })
    -- The base model with that adapter set computes the trainer's log-probs.
    local m = assert(rl.model.load(dir))
    local ids = b.tokens[1]
    local base = m:logprobs(ids)
    m:set_lora(assert(rl.model.load_lora(peft, m)))
    local with = m:logprobs(ids)
    local trained = tr:logprobs(b)[1]
    for j = 1, 3 do eq(with[#with - 3 + j], trained[j]) end
    ok(with[#with] ~= base[#base], "the adapter changes the model")
    -- Greedy decoding through the KV cache applies it too: its first token is the argmax of the logits with it.
    local lg = m:logits(ids)
    local best, arg = -math.huge, nil
    for v, x in ipairs(lg[#lg]) do if x > best then best, arg = x, v - 1 end end
    eq(m:generate(ids, { max_new_tokens = 1, stop_token_ids = {} }), { arg })
    ok(trained[1] ~= before[1][1])
    -- The checkpoint holds the adapter, not the model; rl.trainer.load resumes it on the base.
    local root = tmpdir()
    assert(tr:save(root))
    ok(io.open(root .. "/iter_0000006/adapter_model.safetensors") ~= nil)
    ok(io.open(root .. "/iter_0000006/model.safetensors") == nil)
    local tr2 = assert(rl.trainer.load(root))
    eq(tr2:step(), 6)
    eq(tr2:logprobs(b), tr:logprobs(b))
    raises(function() rl.trainer.new { model = dir, lora_rank = 4, target_modules = { "qkv" } } end, "'qkv'")
  end, { timeout = 120 })

  it("declares its options once: rl.trainer.options' names and defaults are the native trainer's", function()
    local options = require "rl.trainer.options"
    local cxx = rl.json.decode(require("rl.torch")._trainer.default_options())
    -- declared without a default: the trainer derives it (the whole batch, eps_clip, no
    -- decay horizon, off unless reinforce++, refused)
    local derived = { global_batch_size = 0, eps_clip_high = rl.json.null, eps_clip_c = rl.json.null,
                      lr_decay_iters = 0, normalize_advantages = false, fp16 = false, critic_lr = rl.json.null,
                      recompute_granularity = rl.json.null }
    local names = {}
    for _, o in ipairs(options.ALL) do
      names[#names + 1] = o.name
      if o.default == nil then eq(cxx[o.name], derived[o.name], o.name) else eq(o.default, cxx[o.name], o.name) end
    end
    local theirs = {}
    for k in pairs(cxx) do theirs[#theirs + 1] = k end
    table.sort(names)
    table.sort(theirs)
    eq(names, theirs)
  end)

  it("names bad options and bad batches", function()
    raises(function() rl.trainer.new { model = STORIES, loss = { eps_clp = 0.2 } } end,
      "rl.trainer.new: bad argument 'opts.loss.eps_clp' (unknown option; did you mean 'eps_clip'?)")
    raises(function() rl.trainer.new { model = STORIES, micro_batch_size = 0 } end,
      "rl.trainer.new: bad argument 'opts.micro_batch_size' (integer >= 1 expected, got 0)")
    raises(function() rl.trainer.new { model = STORIES, optimizer = { lr = "1e-3" } } end,
      "rl.trainer.new: bad argument 'opts.optimizer.lr' (number expected, got '1e-3')")
    raises(function() rl.trainer.new { model = STORIES, modle = STORIES } end,
      "rl.trainer.new: bad argument 'opts.modle' (unknown option; did you mean 'model'?)")
    raises(function() rl.trainer.new { model = STORIES, loss = { eps_clip_c = 0.5 } } end, "must be > 1")
    raises(function() rl.trainer.new { model = STORIES, loss = { use_kl_loss = true, kl_loss_coef = 0.1 } } end,
      "reference model")
    raises(function() rl.trainer.new { model = STORIES, optimizer = { lr_decay_style = "cos" } } end,
      "rl.trainer.new: bad argument 'opts.optimizer.lr_decay_style' ('constant', 'linear', 'cosine' expected, got 'cos')")
    raises(function() rl.trainer.new {} end, "opts.model is required")
    raises(function() rl.trainer.new { model = STORIES, recompute_granularity = "layers" } end,
      "rl.trainer.new: bad argument 'opts.recompute_granularity' ('full', 'selective' expected, got 'layers')")
    raises(function() rl.trainer.new { model = STORIES, recompute_granularity = "full", recompute_num_layers = 0 } end,
      "rl.trainer.new: bad argument 'opts.recompute_num_layers' (integer >= 1 expected, got 0)")
    local tr = rl.trainer.new { model = STORIES }
    local _, err = pcall(tr.train, tr, { tokens = { { 1, 2, 3 } }, response_lengths = { 5 }, rewards = { 1 },
                                         loss_masks = { { 1 } } })
    ok(tostring(err):find("response_lengths[1]", 1, true), err)
    _, err = pcall(tr.train, tr, { tokens = { { 1, 2, 99999 } }, response_lengths = { 1 }, rewards = { 1 },
                                   loss_masks = { { 1 } } })
    ok(tostring(err):find("outside the vocabulary", 1, true), err)
    _, err = pcall(tr.train, tr, { tokens = { { 1, "x" } } })
    ok(tostring(err):find("batch.tokens[1][2] is not a number", 1, true), err)
  end, { timeout = 60 })
end)
