-- rl.rollout end to end on real parts: the native engine (stories260K) behind the
-- router, prompts from an rl.data source, a Lua reward, the dynamic filter, abort
-- with partial rollout, eval with pass@k, failures that stay per sample.
local rl = require "rl"

local STORIES = test_data("models/stories260K")
local PROMPTS = { "Once upon a time", "The little dog", "Lily saw a big", "Tom had a red", "The sun was",
                  "A cat and a bird", "One day, Ben", "Sara liked to" }

local function data_file()
  local path = os.tmpname()
  os.remove(path)
  path = path .. ".jsonl"
  local f = assert(io.open(path, "w"))
  for i, p in ipairs(PROMPTS) do f:write(rl.json.encode { input = p, label = tostring(i) }, "\n") end
  f:close()
  return path
end

local stack
local function parts()
  if stack then return stack end
  local eng = assert(rl.engine.start { model = STORIES, threads = 1, port = 0, max_running_requests = 8 })
  local router = assert(rl.router.start { workers = { eng.url }, port = 0, health_interval = 0.5 })
  stack = { eng = eng, router = router, tok = assert(rl.tokenizer.load(STORIES)), path = data_file() }
  return stack
end

-- A reward that depends on the text: the parity of the response's length.
local function parity(s) return #s.response % 2 end

local function names(s)
  local out = {}
  local short = { span_start = "s", span_end = "e", event = "t" }
  for _, ev in ipairs(s.trace.events) do out[#out + 1] = short[ev.type] .. ":" .. ev.name end
  return table.concat(out, " ")
end

describe("rl.rollout over the router and a real engine", function()
  it("fills a batch through the dynamic filter, with traces and counters", function()
    local p = parts()
    local ds = rl.data.load(p.path, { label_key = "label" })
    local ro = rl.rollout.new { url = p.router.url, tokenizer = p.tok, data = ds, reward = parity,
      dynamic_filter = "nonzero_std", rollout_batch_size = 2, n_samples_per_prompt = 4,
      over_sampling_batch_size = 3, rollout_max_response_len = 12, rollout_temperature = 1.0,
      save_debug_rollout_data = p.path:gsub("%.jsonl$", "") .. "_dump/rollout_{rollout_id}.pt" }
    local groups, m = ro:generate_rollout(0)
    eq(#groups, 2)
    local drops = 0
    for k, v in pairs(m) do if k:find("^rollout/dynamic_filter/drop_") then drops = drops + v end end
    ok(drops == 0 or m["rollout/dynamic_filter/drop_zero_std_0.0"] or m["rollout/dynamic_filter/drop_zero_std_1.0"])
    ok(groups[1][1].index < groups[2][1].index, "sorted by index")
    for _, g in ipairs(groups) do
      eq(#g, 4)
      local seen = {}
      for _, s in ipairs(g) do seen[s.reward] = true end
      ok(seen[0] and seen[1], "kept groups have varied rewards")
      for _, s in ipairs(g) do
        ok(s.status == "completed" or s.status == "truncated", s.status)
        ok(s.response_length >= 1 and s.response_length <= 12)
        eq(#s.rollout_log_probs, s.response_length)
        eq(#s.loss_mask, s.response_length)
        local prompt_ids = p.tok:encode(s.prompt, { add_special_tokens = false })
        eq(#s.tokens, #prompt_ids + s.response_length)
        eq(s.tokens[1], prompt_ids[1])
        ok(type(s.session_id) == "string" and #s.session_id == 32)
        eq(s.rollout_id, 0)
        eq(#s.weight_versions, 1)
        local n = names(s)
        ok(n:find("s:generate_and_rm_group s:generate_and_rm s:sglang_generate s:router e:router " ..
                  "s:engine_queue e:engine_queue s:engine_prefill e:engine_prefill s:engine_decode " ..
                  "e:engine_decode e:sglang_generate s:reward_model e:reward_model e:generate_and_rm " ..
                  "e:generate_and_rm_group", 1, true), n)
        local gen_end
        for _, ev in ipairs(s.trace.events) do
          if ev.type == "span_end" and ev.name == "sglang_generate" then gen_end = ev end
        end
        eq(gen_end.attrs.worker, p.eng.url)
        eq(gen_end.attrs.completion_tokens, s.response_length)
        ok(gen_end.attrs.prefill_time >= 0 and gen_end.attrs.e2e_latency > 0)
      end
    end
    -- rewards are counted per sample as each finishes: an over-sampled group aborted once the
    -- batch is full may have been scored in part, so only the kept groups' 8 are certain
    ok(m["rollout/reward/ok"] >= 8, m["rollout/reward/ok"])
    eq(m["rollout/reward/error"] or 0, 0)
    eq(m["rollout/reward/timeout"] or 0, 0)
    eq(m["rollout/generate_failed"], 0, "generate failed: " .. tostring(ro.last_generate_error))
    local all = rl.rollout.metrics.rollout_metrics(0, groups, ro.last_rollout_time, m)
    eq(all["perf/request/count"], 8)
    eq(all["perf/request/profiled_count"], 8)
    ok(all["perf/request/e2e_latency/mean"] > 0)
    ok(all["perf/request/prefill_time/mean"] >= 0)
    ok(all["rollout/response_len/mean"] > 0)
    local b = rl.rollout.train_data.convert(groups, { estimator = "grpo", global_batch_size = 8 })
    eq(b.size, 8)
    -- the step's dump replays without engines: same groups, same traces, same metrics
    ok(ro.last_dump:find("rollout_0.pt", 1, true), ro.last_dump)
    local replay = rl.rollout.new { load_debug_rollout_data = ro.save_debug_rollout_data }
    local again = replay:generate_rollout(0)
    eq(#again, 2)
    for gi, g in ipairs(again) do
      for i, s in ipairs(g) do
        eq(s.tokens, groups[gi][i].tokens)
        eq(s.reward, groups[gi][i].reward)
        eq(#s.trace.events, #groups[gi][i].trace.events)
      end
    end
    eq(rl.rollout.metrics.rollout_metrics(0, again, 1.0)["perf/request/count"], 8)
    os.execute("rm -rf '" .. ro.last_dump:match("^(.*)/[^/]*$") .. "'")
  end, { timeout = 120 })

  it("aborts leftovers until the engines are idle and resumes them next step (partial rollout)", function()
    local p = parts()
    local ds = rl.data.load(p.path, { label_key = "label" })
    local ro = rl.rollout.new { url = p.router.url, tokenizer = p.tok, data = ds, reward = parity,
      rollout_batch_size = 1, n_samples_per_prompt = 2, over_sampling_batch_size = 4, partial_rollout = true,
      rollout_max_response_len = 24, extra_sampling_params = { ignore_eos = true }, abort_retry_interval = 0.05 }
    -- the first group finishes at once; the others are still generating
    ro.generate = function(self, s, params)
      if s.group_index ~= 0 then local p2 = {}; for k, v in pairs(params) do p2[k] = v end; params = p2; params.max_new_tokens = 400 end
      return rl.rollout.Rollout.generate(self, s, params)
    end
    local groups, m, aborted = ro:generate_rollout(0)
    eq(#groups, 1)
    eq(groups[1][1].group_index, 0)
    eq(#aborted, 3)
    eq(m["rollout/aborted_groups"], 3)
    local partial
    for _, g in ipairs(aborted) do
      for _, s in ipairs(g) do
        eq(s.status, "aborted")
        if s.response_length > 0 then
          partial = s
          eq(s.metadata.start_rollout_id, 0)
          eq(#s.rollout_log_probs, s.response_length)
        end
      end
    end
    ok(partial, "some aborted samples kept partial tokens")
    local st = assert(p.eng:stats())
    eq(st.num_running + st.num_queued, 0)
    eq(ds.buffer and #ds.buffer, 3)
    -- next step: the buffered groups come first and resume from their tokens
    ro.generate = nil
    local before, tokens_before = partial.response_length, #partial.tokens
    local g2, m2 = ro:generate_rollout(1)
    eq(#g2, 1)
    eq(m2["rollout/aborted_groups"], 3)
    eq(partial.trace.attempt, 1)
    ok(names(partial):find("t:attempt_start", 1, true), names(partial))
    ok(partial.response_length >= before)
    eq(#partial.tokens, tokens_before + partial.response_length - before)
    eq(#partial.rollout_log_probs, partial.response_length)
  end, { timeout = 120 })

  it("evaluates every prompt n times with pass@k", function()
    local p = parts()
    local ds = rl.data.load(p.path, { label_key = "label" })
    local ro = rl.rollout.new { url = p.router.url, tokenizer = p.tok, reward = parity,
      rollout_max_response_len = 8, deterministic = true }
    local res, m = ro:eval(3, { { name = "stories", data = ds, n_samples_per_eval_prompt = 4, temperature = 0.8 } })
    eq(#res.stories.samples, #PROMPTS * 4)
    eq(#res.stories.rewards, #PROMPTS * 4)
    eq(m["eval/step"], 3)
    ok(m["eval/stories-pass@1"] <= m["eval/stories-pass@2"] and m["eval/stories-pass@2"] <= m["eval/stories-pass@4"])
    ok(math.abs(m["eval/stories"] - m["eval/stories-pass@1"]) < 1e-9)
    ok(m["eval/stories/response_len/mean"] > 0)
    -- deterministic: the same seeds give the same texts
    local res2 = ro:eval(3, { { name = "stories", data = ds, n_samples_per_eval_prompt = 4, temperature = 0.8 } })
    for i, s in ipairs(res.stories.samples) do eq(res2.stories.samples[i].response, s.response) end
  end, { timeout = 120 })

  it("an eval set's own reward scores its samples only, while training groups are scored beside it", function()
    local p = parts()
    local ds = rl.data.load(p.path, { label_key = "label" })
    local ro = rl.rollout.new { url = p.router.url, tokenizer = p.tok, reward = function() return 1 end,
      rollout_max_response_len = 8, n_samples_per_prompt = 2, rollout_batch_size = 2, data = ds }
    local train = rl.spawn(function()   -- a training group generated while the eval runs
      return ro:generate_and_rm_group(ds:get_samples(1, 2)[1], ro:sampling_params(), false)
    end)
    -- a slow eval reward keeps the eval open while the training group is scored
    local res = ro:eval(0, { { name = "own", data = ds, reward = function() rl.sleep(0.5); return 7 end } })
    for _, r in ipairs(res.own.rewards) do eq(r, 7) end
    for _, s in ipairs(train:wait()) do eq(s.reward, 1) end
    local after = ro:generate_and_rm_group(ds:get_samples(1, 2)[1], ro:sampling_params(), false)
    for _, s in ipairs(after) do eq(s.reward, 1) end
  end, { timeout = 120 })

  it("keeps failures per sample: a reward error, an unreachable engine", function()
    local p = parts()
    local ds = rl.data.load(p.path, { label_key = "label" })
    local ro = rl.rollout.new { url = p.router.url, tokenizer = p.tok, data = ds, rollout_batch_size = 1,
      n_samples_per_prompt = 3, rollout_max_response_len = 4,
      reward = function(s) if s.index % 3 == 1 then error("bad reward") end return 1 end }
    local groups, m = ro:generate_rollout(0)
    eq(m["rollout/reward/error"], 1)
    eq(m["rollout/reward/ok"], 2)
    local bad = groups[1][2]
    eq(bad.status, "failed")
    ok(bad.reward_error:find("bad reward", 1, true) and bad.reward_error:find("traceback", 1, true), bad.reward_error)
    eq(bad.reward, nil)
    local b, bm = rl.rollout.train_data.convert(groups)
    eq(b.size, 2)
    eq(bm["rollout/skipped_samples"], 1)

    -- with the failure budget off (max_failed_share = 1) failed generations stay per sample
    local dead = rl.rollout.new { url = "http://127.0.0.1:9", tokenizer = p.tok, data = ds, rollout_batch_size = 1,
      n_samples_per_prompt = 2, retries = 1, retry_interval = 0.01, reward = parity, max_failed_share = 1 }
    local g, dm = dead:generate_rollout(1)
    eq(dm["rollout/generate_failed"], 2)
    eq(g[1][1].status, "failed")
    ok(g[1][1].generate_error:find("127.0.0.1:9", 1, true), g[1][1].generate_error)
    -- with the default budget a step whose every generation failed fails, naming them
    local dead2 = rl.rollout.new { url = "http://127.0.0.1:9", tokenizer = p.tok, data = ds, rollout_batch_size = 1,
      n_samples_per_prompt = 2, retries = 1, retry_interval = 0.01, reward = parity }
    local okk, err = pcall(dead2.generate_rollout, dead2, 2)
    eq(okk, false)
    ok(require("rl.rollout.budget").is_failure(err), tostring(err))
    eq(err.component, "generation")
    ok(err.message:find("failing: generation: 2 failed", 1, true) and err.message:find("127.0.0.1:9", 1, true),
      err.message)
  end, { timeout = 120 })

  it("a failing worker: the router retries on the engine, the sample's trace counts the attempt", function()
    local p = parts()
    -- a real server that answers its health checks but fails every /generate (an engine gone bad)
    local bad = assert(rl.http.serve { handler = function(req)
      if req.path == "/health" then return "ok" end
      return { status = 503, body = "engine down" }
    end })
    local router = assert(rl.router.start { workers = { bad:url(), p.eng.url }, policy = "round_robin",
      circuit_failure_threshold = 1000, retry_backoff = 0.01 })
    -- both probed (a pending worker only gets traffic when no probed one can take it)
    local deadline = rl.now() + 30
    local function all_healthy()
      for _, w in ipairs(router:workers()) do if w.status ~= "healthy" then return false end end
      return true
    end
    while not all_healthy() and rl.now() < deadline do rl.sleep(0.05) end
    ok(all_healthy(), "both workers healthy within 30 s")
    local ds = rl.data.load(p.path, { label_key = "label" })
    local ro = rl.rollout.new { url = router.url, tokenizer = p.tok, data = ds, rollout_batch_size = 1,
      n_samples_per_prompt = 4, rollout_max_response_len = 4, reward = parity }
    local groups = ro:generate_rollout(0)
    local retried = 0
    for _, s in ipairs(groups[1]) do
      eq(s.status ~= "failed", true)
      if s.trace.attempt == 1 then
        retried = retried + 1
        local saw
        for _, ev in ipairs(s.trace.events) do
          if ev.name == "attempt_start" then saw = ev.attrs end
        end
        ok(saw and saw.reason == "engine failed" and saw.worker == p.eng.url, rl.json.encode(saw))
      end
    end
    ok(retried >= 1, "round robin sent some requests to the failing worker first")
    router:stop()
    bad:stop()
  end, { timeout = 120 })

  it("has every request of a step in flight at once, past the HTTP client's 64 per host", function()
    -- a stand-in router holds each /generate until all 96 of the step are in (or 5 s
    -- passed), then passes it to the engine: the peak is what the rollout let out at once
    local p = parts()
    local want, pending, peak = 96, 0, 0
    local relay = assert(rl.http.serve { event_driven = true, handler = function(req)
      pending = pending + 1
      peak = math.max(peak, pending)
      local deadline = rl.now() + 5
      while peak < want and rl.now() < deadline do rl.sleep(0.01) end
      local resp = assert(rl.http.request { method = "POST", url = p.eng.url .. req.path, body = req.body,
                                            headers = { ["content-type"] = "application/json" } })
      pending = pending - 1
      return { status = resp.status, body = resp.body, headers = { ["content-type"] = "application/json" } }
    end })
    local ds = rl.data.load(p.path, { label_key = "label" })
    local ro = rl.rollout.new { url = relay:url(), tokenizer = p.tok, data = ds, reward = parity,
      rollout_batch_size = 8, n_samples_per_prompt = 12, rollout_max_response_len = 2 }
    local groups = ro:generate_rollout(0)
    relay:stop()
    eq(#groups, 8)
    for _, g in ipairs(groups) do for _, s in ipairs(g) do eq(s.status ~= "failed", true) end end
    eq(peak, want, "requests in flight at once")
  end)

  it("runs in process on an engine handle, and rejects bad options", function()
    local p = parts()
    local ds = rl.data.load(p.path, { label_key = "label" })
    local ro = rl.rollout.new { engine = p.eng, tokenizer = p.tok, data = ds, reward = parity, rollout_batch_size = 2,
      n_samples_per_prompt = 2, rollout_max_response_len = 6 }
    local groups = ro:generate_rollout(0)
    eq(#groups, 2)
    eq(groups[1][1].rollout_log_probs ~= nil, true)
    raises(function() rl.rollout.new { url = "http://x", rollout_batchsize = 2 } end,
      "unknown option 'rollout_batchsize'")
    raises(function() rl.rollout.new { rollout_batch_size = 2 } end, "give 'url'")
    raises(function() rl.rollout.new { url = "http://x", rollout_batch_size = 4, over_sampling_batch_size = 2 } end,
      "must be >= rollout_batch_size")
    raises(function() rl.rollout.new { url = "http://x", dynamic_filter = "nope" } end, "unknown filter")
    p.router:stop()
    p.eng:stop()
    os.remove(p.path)
    stack = nil
  end, { timeout = 120 })
end)
