-- rl.rollout's parts that need no engine: filters, metrics (slime's names and
-- formulas), pass@k, train-data conversion and balanced DP partitions, the data
-- source buffer of partial rollout, and the task queue/semaphore it runs on.
local rl = require "rl"
local sample = rl.sample
local filters = require "rl.rollout.filters"
local metrics = require "rl.rollout.metrics"
local train_data = require "rl.rollout.train_data"

local function group(gi, rewards_, extra)
  local g = {}
  for i, r in ipairs(rewards_) do
    local s = sample.new { group_index = gi, index = gi * 10 + i - 1, reward = r, status = "completed",
                           tokens = { 1, 2, 3, 4 + i }, response_length = i, prompt = "p" }
    s.loss_mask, s.rollout_log_probs = {}, {}
    for j = 1, i do s.loss_mask[j] = 1; s.rollout_log_probs[j] = -0.5 * j end
    for k, v in pairs(extra or {}) do s[k] = v end
    g[i] = s
  end
  return g
end

describe("rl.task queue and semaphore", function()
  it("a queue hands items to waiting tasks in order", function()
    local q = rl.task.queue()
    local got = {}
    local t = rl.spawn(function() for _ = 1, 3 do got[#got + 1] = q:pop() end end)
    rl.sleep(0.01)
    q:push("a"); q:push("b")
    rl.sleep(0.01)
    q:push("c")
    t:wait()
    eq(got, { "a", "b", "c" })
    eq(q:size(), 0)
  end)
  it("a semaphore bounds concurrency and survives errors", function()
    local sem = rl.task.semaphore(2)
    local active, peak = 0, 0
    local tasks = {}
    for i = 1, 6 do
      tasks[i] = rl.spawn(function()
        return sem:with(function()
          active = active + 1
          peak = math.max(peak, active)
          rl.sleep(0.01)
          active = active - 1
          if i == 3 then error("boom") end
          return i
        end)
      end)
    end
    local ok_, err = pcall(rl.wait_all, tasks)
    eq(ok_, false)
    ok(tostring(err):find("boom"), err)
    eq(peak, 2)
    eq(sem.free, 2)
    raises(function() rl.task.semaphore(0) end, "positive number")
  end)
end)

describe("rl.rollout.filters", function()
  it("nonzero_std keeps varied groups and names the reason of uniform ones", function()
    eq(filters.nonzero_std(nil, group(0, { 1, 0, 1 })).keep, true)
    eq(filters.nonzero_std(nil, group(0, { 1, 1, 1 })), { keep = false, reason = "zero_std_1.0" })
    eq(filters.nonzero_std(nil, group(0, { 0, 0 })).reason, "zero_std_0.0")
    eq(filters.nonzero_std(nil, group(0, { 0.25, 0.25 })).reason, "zero_std_0.3")
    eq(filters.nonzero_std(nil, group(0, { 1 })), { keep = false, reason = "insufficient_rewards" })
    local out = filters.nonzero_std_with_fallback(nil, group(0, { 1, 1 }))
    eq(out.keep_when_insufficient, true)
  end)
  it("skipped rewards are not data", function()
    local g = group(0, { 1, 0, 1 })
    g[2].reward = nil
    eq(filters.nonzero_std(nil, g).reason, "zero_std_1.0")
  end)
  it("should_drop follows slime, and legacy booleans work", function()
    eq(filters.should_drop({ keep = true }, 5, 4), false)
    eq(filters.should_drop({ keep = false }, 5, 4), true)
    eq(filters.should_drop({ keep = false, keep_when_insufficient = true }, 4, 4), false)
    eq(filters.should_drop({ keep = false, keep_when_insufficient = true }, 5, 4), true)
    eq(filters.call(function() return false end, nil, {}), { keep = false })
    eq(filters.call(nil, nil, {}), { keep = true })
    raises(function() filters.call(function() return 1 end, nil, {}) end, "keep = bool")
    raises(function() filters.get("nonzero") end, "unknown filter 'nonzero'")
  end)
end)

describe("rl.rollout.metrics", function()
  it("statistics follow numpy", function()
    eq(metrics.statistics { 3, 1, 2, 10 }, { mean = 4, median = 2.5, max = 10, min = 1 })
    eq(metrics.statistics { 5 }, { mean = 5, median = 5, max = 5, min = 5 })
    eq(metrics.statistics {}, nil)
  end)
  it("rollout/ keys from samples", function()
    local g1, g2 = group(0, { 1, 1 }), group(1, { 0, 1 })
    g2[2].status = "truncated"
    g2[2].prefix_cache_info = { cached_tokens = 6, total_prompt_tokens = 8 }
    g1[1].prefix_cache_info = { cached_tokens = 0, total_prompt_tokens = 8 }
    local m = metrics.from_samples { g1, g2 }
    eq(m["response_len/mean"], 1.5)
    eq(m["response_len/max"], 2)
    eq(m["zero_std/count_1.0"], 1)
    eq(m["zero_std/count_0.0"], nil)
    eq(m.truncated_ratio, 0.25)
    eq(m.prefix_cache_hit_rate, 6 / 16)
    eq(m.avg_cached_tokens_per_sample, 1.5)
    eq(m.raw_reward, 0.75)
    eq(metrics.from_samples({ g1 }, { estimator = "ppo" })["zero_std/count_1.0"], nil)
  end)
  it("perf/ keys from samples and their sglang_generate spans, PD included", function()
    local s = group(0, { 1 })[1]
    local s2 = group(1, { 0 })[1]
    s.non_generation_time = 0.5
    rl.trace.span(s, "sglang_generate", nil, function(sp)
      sp:update(rl.trace.sglang_meta_attrs { e2e_latency = 0.2, queue_time = 0.01, decode_throughput = 50,
        pd_prefill_forward_duration = 0.05, pd_decode_forward_duration = 0.1, pd_transfer_speed_gb_s = 3 })
    end)
    rl.trace.span(s2, "sglang_generate", nil, function() end)
    local m = metrics.perf_from_samples({ s, s2 }, 2.0, { rollout_num_gpus = 1 })
    eq(m.rollout_time, 2.0)
    eq(m["request/count"], 2)
    eq(m["request/profiled_count"], 1)
    eq(m["request/e2e_latency/mean"], 0.2)
    eq(m["decode/throughput/max"], 50)
    eq(m["prefill/forward_duration/mean"], 0.05)
    eq(m["decode/forward_duration/min"], 0.1)
    eq(m["prefill/transfer_speed_gb_s/median"], 3)
    eq(m.tokens_per_gpu_per_sec, 2 / 2.0)
    eq(m.longest_sample_tokens_per_sec, 0.5)
    eq(m["non_generation_time/max"], 0.5)
    eq(m.longest_sample_non_generation_time, 0.25)
    local all = metrics.rollout_metrics(3, { s, s2 }, 2.0, { ["rollout/dynamic_filter/drop_x"] = 2 })
    eq(all["rollout/step"], 3)
    eq(all["rollout/dynamic_filter/drop_x"], 2)
    eq(all["perf/request/count"], 2)
    eq(all["rollout/response_len/mean"], 1)
  end)
  it("pass@k is the unbiased estimator", function()
    -- one prompt, n = 4, c = 1: pass@1 = 1/4, pass@2 = 1 - C(3,2)/C(4,2) = 1/2, pass@4 = 1
    eq(metrics.pass_at_k({ 1, 0, 0, 0 }, 4, 1), 0.25)
    eq(metrics.pass_at_k({ 1, 0, 0, 0 }, 4, 2), 0.5)
    eq(metrics.pass_at_k({ 1, 0, 0, 0 }, 4, 4), 1)
    eq(metrics.pass_at_k({ 1, 0, 0, 0, 0, 0, 0, 0 }, 4, 1), 0.125)
    local ev = metrics.eval_metrics({ gsm = { rewards = { 1, 0, 0, 0 }, truncated = { false, true, false, false },
                                               samples = {}, n_samples_per_prompt = 4 } }, 7)
    eq(ev["eval/gsm"], 0.25)
    eq(ev["eval/gsm-pass@2"], 0.5)
    eq(ev["eval/gsm-pass@4"], 1)
    eq(ev["eval/gsm-truncated_ratio"], 0.25)
    eq(ev["eval/step"], 7)
  end)
end)

describe("rl.rollout.train_data", function()
  it("converts groups with group normalisation and leaves skipped samples out", function()
    local g1, g2 = group(0, { 1, 0, 1, 0 }), group(1, { 1, 1, 0, 1 })
    g2[4].reward = nil                 -- skipped: not trained on, not normalised
    g1[3].remove_sample = true
    g1[2].metadata = { raw_reward = 0.5 }
    local b, m = train_data.convert({ g1, g2 }, { estimator = "grpo" })
    eq(b.size, 7)
    eq(m["rollout/skipped_samples"], 1)
    local std = math.sqrt(1 / 3)      -- unbiased std of {1,0,1,0}
    ok(math.abs(b.rewards[1] - 0.5 / (std + 1e-6)) < 1e-9)
    eq(b.raw_reward[2], 0.5)
    eq(b.loss_masks[3], { 0, 0, 0 })
    eq(b.loss_masks[1], { 1 })
    eq(b.sample_indices[5], 10)
    eq(b.tokens[2], { 1, 2, 3, 6 })
    eq(b.total_lengths[2], 4)
    eq(b.rollout_log_probs[2], { -0.5, -1 })
    -- group 1 without its skipped sample: mean of {1,1,0} = 2/3
    ok(math.abs(b.rewards[5] - (1 / 3) / (math.sqrt(1 / 3) + 1e-6)) < 1e-9)
  end)
  it("trims to a multiple of global_batch_size, and says why when it cannot", function()
    local b, m = train_data.convert({ group(0, { 1, 0, 1 }), group(1, { 1, 0, 1 }) }, { global_batch_size = 4 })
    eq(b.size, 4)
    eq(m["rollout/trimmed_samples"], 2)
    raises(function() train_data.convert({ group(0, { 1, 0 }) }, { global_batch_size = 4 }) end,
      "fewer than global_batch_size 4")
    local r = train_data.convert({ group(0, { 1, 0 }) }, { estimator = "reinforce_plus_plus" })
    eq(r.rewards, { 1, 0 })
    local p = train_data.convert({ group(0, { 1, 0 }) }, { estimator = "ppo" })   -- raw: the critic is the baseline
    eq(p.rewards, { 1, 0 })
    eq(p.advantage_estimator, "ppo")
  end)
  it("records the estimator on the batch; takes a per-group normalisation", function()
    local b = train_data.convert({ group(0, { 1, 0, 1, 0 }) }, { estimator = "reinforce_plus_plus_baseline" })
    eq(b.advantage_estimator, "reinforce_plus_plus_baseline")
    eq(b.rewards, { 0.5, -0.5, 0.5, -0.5 })
    eq(train_data.convert({ group(0, { 1, 0 }) }).advantage_estimator, "grpo")
    eq(train_data.convert({ group(0, { 1, 0 }) }, { estimator = function(_, raw) return raw end }).advantage_estimator,
      nil)
    for _, part in ipairs(train_data.split(b, 2)) do eq(part.advantage_estimator, "reinforce_plus_plus_baseline") end
    local seen
    local c = train_data.convert({ group(0, { 1, 0 }), group(1, { 0, 0 }) }, { estimator = "gspo",
      normalize_group = function(rs, est) seen = est; return { rs[1] + 1, rs[2] + 1 } end })
    eq(seen, "gspo")
    eq(c.rewards, { 2, 1, 1, 1 })
    eq(c.raw_reward, { 1, 0, 0, 0 })
    eq(c.advantage_estimator, "gspo")
  end)
  it("passes each sample's logprob_digest on as batch.logprob_digests, and none when no sample has one", function()
    local D = ("c"):rep(32)
    local g = group(0, { 1, 0, 1 })
    g[1].logprob_digest, g[3].logprob_digest = D, D
    g[3].reward = nil                  -- skipped: not in the batch
    local b = train_data.convert({ g })
    eq(b.size, 2)
    eq(b.logprob_digests, { D, "" })   -- "" for a sample without one: the trainer recomputes it
    eq(train_data.convert({ group(0, { 1, 0 }) }).logprob_digests, nil)
    -- without rollout log-probs there is nothing for a digest to vouch for
    local h = group(0, { 1, 0 })
    for _, s in ipairs(h) do s.logprob_digest = D; s.rollout_log_probs = nil end
    local c = train_data.convert({ h })
    eq(c.rollout_log_probs, nil)
    eq(c.logprob_digests, nil)
    for _, part in ipairs(train_data.split(b, 2)) do eq(#part.logprob_digests, part.size) end
  end)
  it("splits across ranks with balanced total lengths", function()
    local parts, sums = train_data.balanced_partitions({ 10, 9, 1, 1, 8, 2 }, 2)
    eq(#parts[1], 3)
    eq(#parts[2], 3)
    eq({ math.min(sums[1], sums[2]), math.max(sums[1], sums[2]) }, { 13, 18 })  -- the best 3 + 3 split
    local b = train_data.convert({ group(0, { 1, 0, 1, 0 }) })
    local ranks = train_data.split(b, 2)
    eq(ranks[1].size + ranks[2].size, 4)
    eq(#ranks[1].tokens, 2)
  end)
end)

describe("slime's surface in rl.rollout (issue 35)", function()
  it("zero_std keys round as Python's round(x, 1)", function()
    eq(metrics.round1(0.25), "0.2")   -- exact tie: half to even
    eq(metrics.round1(0.35), "0.3")   -- 0.35 is 0.34999... as a double
    eq(metrics.round1(0.45), "0.5")
    eq(metrics.round1(1), "1.0")
    eq(metrics.round1(-0.04), "-0.0")
    local m = metrics.from_samples({ group(0, { 0.25, 0.25 }), group(1, { 0.35, 0.35 }) })
    eq(m["zero_std/count_0.2"], 1)
    eq(m["zero_std/count_0.3"], 1)
  end)

  it("repetition_frac: responses over 10000 characters whose tail compresses over 10x", function()
    ok(not metrics.has_repetition(("ab"):rep(5000)), "10000 characters are not over the limit")
    ok(metrics.has_repetition(("ab"):rep(5001)), "a loop")
    local varied = {}
    for i = 1, 3000 do varied[i] = tostring((i * 7919) % 10007) end
    ok(not metrics.has_repetition(table.concat(varied, " ")), "varied text")
    ok(not metrics.has_repetition(("é"):rep(6000)), "6000 characters (12000 bytes) are not over the limit")
    local g = group(0, { 1, 0 })
    g[1].response = ("ab"):rep(6000)
    eq(metrics.from_samples({ g }).repetition_frac, 0.5)
  end)

  it("passrate/pass@k over the step's groups of n", function()
    local m = metrics.rollout_metrics(0, { group(0, { 1, 0 }), group(1, { 0, 0 }) }, 1, nil,
      { log_passrate = true, n_samples_per_prompt = 2 })
    eq(m["passrate/pass@1"], 0.25)
    eq(m["passrate/pass@2"], 0.5)
    local off = metrics.eval_metrics({ e = { rewards = { 1, 0 }, truncated = {}, n_samples_per_prompt = 2 } }, 0,
      { log_passrate = false })
    eq(off["eval/e-pass@1"], nil)
  end)

  it("splits strided as slime without --balance-data", function()
    local b = train_data.convert({ group(0, { 1, 0, 1, 0, 1 }) })
    local parts = train_data.split(b, 2, { balance = false })
    eq(parts[1].sample_indices, { 0, 2, 4 })
    eq(parts[2].sample_indices, { 1, 3 })
  end)

  it("a reward post-process gives rewards and raw rewards; a bad one is named", function()
    local b = train_data.convert({ group(0, { 1, 0 }) }, { estimator = function(ss)
      return { 0.5, -0.5 }, { 5, 6 } end })
    eq(b.rewards, { 0.5, -0.5 })
    eq(b.raw_reward, { 5, 6 })
    raises(function() train_data.convert({ group(0, { 1, 0 }) }, { estimator = function() return { 1, 2 }, { 1 } end })
    end, "returned 1 raw_rewards for 2 samples")
    raises(function() train_data.convert({ group(0, { 1, 0 }) }, { estimator = function() return { 1, "x" } end })
    end, "post-process's rewards[2] is string")
  end)

  it("the batch carries round_number, metadata and teacher_log_probs when the samples have them", function()
    local g = group(0, { 1, 0 })
    for i, smp in ipairs(g) do
      smp.metadata = { round_number = i }
      smp.train_metadata = { source = "s" .. i }
      smp.teacher_log_probs = {}
      for j = 1, smp.response_length do smp.teacher_log_probs[j] = -j end
    end
    local b = train_data.convert({ g })
    eq(b.round_number, { 1, 2 })
    eq(b.metadata, { { source = "s1" }, { source = "s2" } })
    eq(b.teacher_log_probs, { { -1 }, { -1, -2 } })
    eq(train_data.split(b, 2, { balance = false })[2].teacher_log_probs, { { -1, -2 } })
    local plain = train_data.convert({ group(0, { 1, 0 }) })
    eq(plain.round_number, nil); eq(plain.metadata, nil); eq(plain.teacher_log_probs, nil)
    g[2].teacher_log_probs = { -1 }
    raises(function() train_data.convert({ g }) end, "has 1 teacher log-probs for 2 response tokens")
  end)

  it("a converted batch from a hook is checked and completed", function()
    local ss = group(0, { 1, 0 })
    local b = train_data.from_hook({ tokens = { { 1, 2, 3 }, { 1, 2 } }, response_lengths = { 2, 1 }, rewards = { 1, -1 } },
      ss, "--hook")
    eq(b.size, 2)
    eq(b.loss_masks, { { 1, 1 }, { 1 } })
    eq(b.total_lengths, { 3, 2 })
    eq(b.raw_reward, { 1, -1 })
    raises(function() train_data.from_hook({ tokens = {}, rewards = {} }, {}, "--hook") end,
      "--hook: the train data has no 'response_lengths' list")
    raises(function() train_data.from_hook({ tokens = { { 1 } }, response_lengths = { 1, 2 }, rewards = { 1 } }, {}, "--hook")
    end, "'response_lengths' has 2 entries")
    raises(function() train_data.from_hook({ tokens = { { 1, 2 } }, response_lengths = { 2 }, rewards = { 1 },
      loss_masks = { { 1 } } }, {}, "--hook") end, "loss_masks[1] has 1 entries for a response of 2 tokens")
  end)
end)

describe("rl.data buffer (partial rollout)", function()
  it("re-serves added groups first and keeps them in its state", function()
    local path = os.tmpname() .. ".jsonl"
    local f = assert(io.open(path, "w"))
    for i = 1, 3 do f:write(rl.json.encode { input = "q" .. i, label = tostring(i) }, "\n") end
    f:close()
    local ds = rl.data.load(path, { label_key = "label" })
    local g = ds:get_samples(1, 2)[1]
    g[1].response, g[1].status = "partial", "aborted"
    ds:add_samples { g }
    local st = ds:state()
    eq(#st.buffer, 1)
    local again = ds:get_samples(2, 2)
    eq(again[1][1].response, "partial")
    eq(again[2][1].prompt, "q2")
    local ds2 = rl.data.load(path, { label_key = "label" })
    ds2:load_state(st)
    eq(ds2:get_samples(1, 2)[1][1].status, "aborted")
    raises(function() ds:add_samples { { 1 } } end, "groups[1] is not a list of samples")
    os.remove(path)
    os.remove((path:gsub("%.jsonl$", "")))
  end)
end)
