-- rl.agent on a real engine (the embedded default model, rl.mathgen.default_model(), or a
-- tiny one of its kind where it is not built yet):
-- whole multi-turn rollouts through rl.rollout, checked token by token against what the
-- engine returned and what each observation was tokenized to; the limits; abort and
-- resume in the middle of a turn across a weight update; an environment in a Python
-- process; the debug dump and the metrics.
local rl = require "rl"
local T = require "rl.agent.trajectory"
local json = rl.json

local HERE = debug.getinfo(1, "S").source:match("^@(.*)/[^/]*$") or "."

local stack
local function parts()
  if stack then return stack end
  -- the default model when this machine has built it; on a fresh one, a tiny model of the
  -- same kind (its tokenizer and ChatML template, trained the same way) built in seconds
  local warmup = require "rl.mathgen.warmup"
  local dir = warmup.cache_dir() .. "/default-math-model-v" .. warmup.VERSION
  if os.getenv("RLHOST_AGENT_TEST_TINY") or not io.open(dir .. "/config.json") then
    local o = {}
    for k, v in pairs { train_size = 200, test_size = 8, hidden_size = 32, intermediate_size = 64, num_layers = 2,
                        num_heads = 2, steps = 30, batch_size = 8, micro_batch_size = 8, lr = 1e-2, warmup_steps = 3,
                        max_new_tokens = 24, threads = 1, log_every = 10, quiet = true, max_merges = 100 } do
      o[k] = v
    end
    o.cache_dir, o.name = tmpdir(true), "agent-test-model"
    dir = rl.mathgen.default_model(o)
  end
  local eng = assert(rl.engine.start { model = dir, threads = 1, port = 0, max_running_requests = 16 })
  local tok = assert(rl.tokenizer.load(dir))
  local path = os.tmpname()
  os.remove(path)
  path = path .. ".jsonl"
  local f = assert(io.open(path, "w"))
  for _, p in ipairs(rl.mathgen.dataset { seed = 5, n = 8 }) do
    f:write(json.encode { input = { { role = "user", content = p.question } }, label = tostring(p.value) }, "\n")
  end
  f:close()
  stack = { eng = eng, tok = tok, dir = dir, path = path }
  return stack
end

-- An environment that answers every turn with "turn k: <the turn's last number>" and ends
-- after `turns` turns (reward 1 when the last turn names the label).
-- with_tool: the environment itself calls the calculator (2 * that number) each turn.
local function counting_env(turns, with_tool)
  local E = {}
  local reg = rl.agent.tools.registry { rl.agent.tools.calculator() }
  function E:reset()
    self.k = 0
    if with_tool then return { role = "user", content = "Answer with a number." } end   -- joins the prompt
  end
  function E:step(a)
    self.k = self.k + 1
    if self.k >= turns then return nil, a.text:find(tostring(a.sample.label), 1, true) and 1 or 0, true end
    local last = a.text:match("(%d+)%D*$") or "none"
    if with_tool then
      local content, outcome = reg:call({ name = "calculator", arguments = { expression = "2*" .. last } },
                                        { sample = a.sample }, a.sample)
      rl.agent.env.record_call(a.record, "calculator", outcome)
      last = content
    end
    return ("turn %d: %s"):format(self.k, last), nil, false
  end
  return E
end

-- A rollout whose every engine answer and every observation's ids are recorded apart
-- from the sample, to check the buffer against.
local function recorded_rollout(p, agent_opts, ro_opts)
  -- turns cut at max_turn_tokens go on (the test model need not end its turns itself)
  if agent_opts.on_turn_length == nil then agent_opts.on_turn_length = "continue" end
  local agent = rl.agent.new(agent_opts)
  local o = { engine = p.eng, tokenizer = p.tok, rollout_temperature = 1.0, rollout_max_response_len = 48,
              custom_generate = rl.agent.generate_fn(agent) }
  for k, v in pairs(ro_opts or {}) do o[k] = v end
  local ro = rl.rollout.new(o)
  local rec = { outputs = {}, observations = {} }   -- by session: lists of id lists
  local post = ro._post
  ro._post = function(self, req, key)
    local out, err, info = post(self, req, key)
    if out then
      local ids = {}
      for i, it in ipairs((out[1] or out).meta_info.output_token_logprobs) do ids[i] = it[2] end
      local l = rec.outputs[key] or {}
      rec.outputs[key] = l
      l[#l + 1] = ids
    end
    return out, err, info
  end
  local obs_ids = agent.observation_ids
  agent.observation_ids = function(self, r, sample, msgs)
    local ids, text = obs_ids(self, r, sample, msgs)
    local l = rec.observations[sample.session_id] or {}
    rec.observations[sample.session_id] = l
    l[#l + 1] = { unpack(ids) }
    return ids, text
  end
  return ro, rec, agent
end

-- prompt ids ++ out_1 ++ obs_1 ++ ... compared with what the trainer's batch holds.
local function check_against_record(p, s, rec, row, batch)
  local want = json.array(p.tok:apply_chat_template(s.prompt, { add_generation_prompt = true, tokenize = true }))
  local mask = {}
  local outs, obs = rec.outputs[s.session_id] or {}, rec.observations[s.session_id] or {}
  local tr = s.metadata.trajectory
  local calls = 0
  for _, t in ipairs(tr.turns) do calls = calls + #t.segments end
  eq(#outs, calls, "one /generate per turn, and one more per resumption")
  local next_out = 1
  for k, t in ipairs(tr.turns) do
    for _ = 1, #t.segments do   -- a turn resumed after an abort is the concatenation of its calls
      for _, id in ipairs(outs[next_out]) do want[#want + 1] = id; mask[#mask + 1] = 1 end
      next_out = next_out + 1
    end
    if tr.turns[k].observation_start then   -- an observation that did not fit was not appended
      for _, id in ipairs(obs[k] or {}) do want[#want + 1] = id; mask[#mask + 1] = 0 end
    else
      eq(k, #tr.turns, "only the last turn may go without its observation")
    end
  end
  local mismatches = 0
  for i = 1, math.max(#want, #batch.tokens[row]) do
    if want[i] ~= batch.tokens[row][i] then mismatches = mismatches + 1 end
  end
  eq(mismatches, 0, "token mismatches in sample " .. tostring(s.index))
  eq(batch.loss_masks[row], mask)
  eq(#batch.rollout_log_probs[row], #mask)
  for i, m in ipairs(mask) do
    if m == 0 then eq(batch.rollout_log_probs[row][i], 0.0) end
  end
  assert(T.check(s))
end

describe("rl.agent on the default model", function()
  it("a whole multi-turn rollout: trainer ids == prompt ++ outputs ++ observations, 0 mismatches", function()
    local p = parts()
    local dump = tmpdir(true) .. "/rollout_{rollout_id}.pt"
    local ro, rec = recorded_rollout(p, { env = counting_env(4, true), max_turns = 6, max_total_tokens = 380 },
      { data = rl.data.load(p.path, { label_key = "label" }), rollout_batch_size = 3, n_samples_per_prompt = 2,
        reward = function() return 0 end, save_debug_rollout_data = dump })
    local groups, m = ro:generate_rollout(0)
    eq(#groups, 3)
    local batch = rl.rollout.train_data.convert(groups, { normalize = false })
    eq(batch.size, 6)
    local turns, reencode_changes, total_turns = 0, 0, 0
    for row, s in ipairs(batch.samples) do
      eq(s.prompt[#s.prompt].content, "Answer with a number.", "reset's observation joined the prompt")
      check_against_record(p, s, rec, row, batch)
      local tr = s.metadata.trajectory
      ok(tr.end_reason == "done" or tr.end_reason == "max_total_tokens" or tr.end_reason == "length", tr.end_reason)
      turns = turns + #tr.turns
      for _, t in ipairs(tr.turns) do
        total_turns = total_turns + 1
        local ids = { unpack(s.tokens, t.output_start, t.output_start + t.output_length - 1) }
        local again = p.tok:encode(p.tok:decode(ids), { add_special_tokens = false })
        if #again ~= #ids then reencode_changes = reencode_changes + 1
        else for i = 1, #ids do if again[i] ~= ids[i] then reencode_changes = reencode_changes + 1; break end end end
        eq(t.segments[1].weight_version, "default")
      end
    end
    print(("      %d samples, %d turns; a decode->re-encode would have changed %d of the turns' outputs"):format(
      batch.size, total_turns, reencode_changes))
    ok(turns > batch.size, "several turns per sample")
    -- the trainer computes, on the ids it receives, the engine's log-probs for every generated token
    local tr = assert(rl.trainer.new { model = p.dir })
    local lps = tr:logprobs(batch)
    local worst, compared = 0, 0
    for row = 1, batch.size do
      for i, mk in ipairs(batch.loss_masks[row]) do
        if mk == 1 then
          worst = math.max(worst, math.abs(lps[row][i] - batch.rollout_log_probs[row][i]))
          compared = compared + 1
        end
      end
    end
    print(("      trainer vs engine log-probs over %d generated tokens: max |diff| %.3g"):format(compared, worst))
    ok(worst < 1e-4, "trainer and engine log-probs agree on the trainer's ids: " .. worst)
    -- the trainer honours the per-token mask: a trailing observation (mask 0) leaves the
    -- training step's loss unchanged and its update the same up to float reduction order;
    -- the same tokens with mask 1 (the control) move the model
    local function one_step(extra, extra_mask)
      local b = rl.rollout.train_data.convert({ batch.samples[1], batch.samples[2] }, { normalize = false })
      b.rewards = { 1, -1 }
      for r = 1, 2 do
        local toks, mask, lp = { unpack(b.tokens[r]) }, { unpack(b.loss_masks[r]) }, { unpack(b.rollout_log_probs[r]) }
        for _, id in ipairs(extra or {}) do toks[#toks + 1] = id; mask[#mask + 1] = extra_mask; lp[#lp + 1] = 0.0 end
        b.tokens[r], b.loss_masks[r], b.rollout_log_probs[r] = toks, mask, lp
        b.response_lengths[r] = #mask
      end
      local t = assert(rl.trainer.new { model = p.dir, optimizer = { lr = 1e-2 }, micro_batch_size = 2 })
      local met = assert(t:train(b))
      local after = t:logprobs(rl.rollout.train_data.convert({ batch.samples[1] }, { normalize = false }))
      return met["train/loss"], after[1]
    end
    local function maxdiff(a, b)
      local d = 0
      for i = 1, #a do d = math.max(d, math.abs(a[i] - b[i])) end
      return d
    end
    local extra = T.observation_ids(p.tok, { { role = "tool", content = "a trailing observation" } }, nil)
    local loss_a, lp_a = one_step()
    local loss_b, lp_b = one_step(extra, 0)
    local _, lp_c = one_step(extra, 1)
    local masked, unmasked = maxdiff(lp_a, lp_b), maxdiff(lp_a, lp_c)
    print(("      one train step (lr 1e-2) with a trailing observation: masked 0 -> log-probs after the step differ "
      .. "by at most %.2g from the step without it; masked 1 (control) -> by %.2g"):format(masked, unmasked))
    eq(loss_b, loss_a)
    ok(masked < 1e-2 and unmasked > 100 * masked, ("masked %g, unmasked %g"):format(masked, unmasked))
    local metrics = rl.rollout.metrics.rollout_metrics(0, groups, 1.0, m)
    ok(metrics["rollout/turns/mean"] > 1, "rollout/turns/mean")
    eq(metrics["rollout/turns/max"] <= 4, true)
    ok(metrics["rollout/tool_calls/mean"] > 0, "rollout/tool_calls/mean")
    ok(metrics["rollout/tool/calculator/calls"] > 0 and metrics["rollout/tool_errors/rate"] ~= nil)
    -- the debug dump keeps the whole trajectory
    local d = assert(rl.dump.load(dump, { rollout_id = 0 }))
    eq(#d.samples, 6)
    local s0 = d.samples[1]
    eq(s0.tokens, batch.samples[1].tokens)
    eq(s0.loss_mask, batch.samples[1].loss_mask)
    eq(#s0.metadata.trajectory.turns, #batch.samples[1].metadata.trajectory.turns)
    ok(s0.metadata.trajectory.turns[1].observation_start ~= nil or #s0.metadata.trajectory.turns == 1)
    assert(T.check(s0))
    -- traces: a turn span per turn, holding sglang_generate, then env_step
    local names = {}
    for _, ev in ipairs(batch.samples[1].trace.events) do
      if ev.type == "span_start" then names[#names + 1] = ev.name end
    end
    local seq = table.concat(names, " ")
    ok(seq:find("^generate_and_rm_group generate_and_rm env_reset turn sglang_generate .- env_step tool_call turn sglang_generate"),
       seq)
    -- the trace viewer's cache has the turn and tool_call spans
    local pt = rl.dump.path(dump, 0)
    local code, out = rl.process.run({ rl.process.self(), "--no-control", HERE .. "/../../tools/trace_timeline.lua", pt,
                                       "--no-serve" }, { timeout = 120 })
    eq(code, 0, out)
    local cache = read_file((pt:gsub("%.pt$", ".trace_timeline_cache.json")))
    ok(cache and cache:find('"turn"', 1, true) and cache:find('"tool_call"', 1, true), "turn and tool_call spans in the viewer")
  end)

  it("ends cleanly at max_turns, max_total_tokens and a turn's length, with the reason", function()
    local p = parts()
    local endless = { step = function(_, a) return "go on", nil, false end }
    local cases = {
      { { env = endless, max_turns = 2, max_total_tokens = 380 }, "max_turns", "truncated" },
      { { env = endless, max_turns = 50, max_total_tokens = 120 }, "max_total_tokens", "truncated" },
      { { env = endless, max_turns = 50, max_turn_tokens = 3, on_turn_length = "end" }, "length", "truncated" },
    }
    for _, c in ipairs(cases) do
      local ro, rec = recorded_rollout(p, c[1], { extra_sampling_params = { ignore_eos = c[2] == "length" } })
      local s = rl.sample.new { prompt = { { role = "user", content = "Mia has 3 pens. How many pens?" } }, index = 0,
                                group_index = 0, session_id = "s" .. c[2] }
      s = ro:generate_and_rm(s, ro:sampling_params())
      eq(s.metadata.trajectory.end_reason, c[2])
      eq(s.status, c[3])
      assert(T.check(s))
      s.reward = 0
      check_against_record(p, s, rec, 1, rl.rollout.train_data.convert({ s }, { normalize = false }))
      if c[2] == "max_turns" then eq(#s.metadata.trajectory.turns, 2) end
      if c[2] == "max_total_tokens" then ok(#s.tokens <= 120, #s.tokens) end
      if c[2] == "length" then eq(s.metadata.trajectory.turns[1].output_length, 3) end
    end
    -- an environment that raises fails the sample (as a failed /generate does), with the reason
    local broken = { step = function(_, a) if a.turn == 2 then error("env exploded") end; return "ok", nil, false end }
    local ro = recorded_rollout(p, { env = broken, max_turns = 5, max_total_tokens = 380 })
    local s = ro:generate_and_rm(rl.sample.new { prompt = { { role = "user", content = "Hi" } }, index = 0, session_id = "boom" },
                                 ro:sampling_params())
    eq(s.status, "failed")
    ok(s.generate_error:find("env exploded", 1, true), s.generate_error)
    eq(s.metadata.trajectory.end_reason, "env_error")
    eq(#s.metadata.trajectory.turns, 2)
    assert(T.check(s))
  end)

  it("an abort mid-turn keeps the partial turn; the resumed turn continues from the exact ids on new weights", function()
    local p = parts()
    local env = counting_env(3)
    local ro, rec = recorded_rollout(p, { env = env, max_turns = 3, max_total_tokens = 380, max_turn_tokens = 200 })
    ro.partial_rollout = true   -- the aborted trajectory is resumed, not dropped
    local call = ro.generate_call
    ro.generate_call = function(self, sample, params, cb)   -- turn 2 runs long (ignore_eos) so an abort lands in it
      local tr = sample.metadata.trajectory
      if tr and #tr.turns >= 1 then params.ignore_eos = true end
      return call(self, sample, params, cb)
    end
    local s, aborted
    for attempt = 1, 8 do
      local step = env.step
      s = rl.sample.new { prompt = { { role = "user", content = "Tom has 2 toys." } }, index = attempt, group_index = 0,
                          session_id = "abort" .. attempt }
      local inst_step = function(self, a)
        if a.turn == 1 then rl.after(0.002 * attempt, function() p.eng:abort() end) end
        return step(self, a)
      end
      env.step = inst_step
      s = ro:generate_and_rm(s, ro:sampling_params())
      env.step = step
      if s.status == "aborted" then aborted = true; break end
      print("      no abort inside turn 2:", s.status, s.generate_error, s.metadata.trajectory and s.metadata.trajectory.end_reason)
    end
    ok(aborted, "an abort landed inside turn 2")
    local tr = s.metadata.trajectory
    eq(tr.end_reason, "aborted")
    eq(#tr.turns, 2)
    ok(tr.turns[2].open, "turn 2 is still open")
    local partial = tr.turns[2].output_length
    assert(p.eng:update_weights_from_disk(p.dir, "v2"))
    ro.aborted = false
    s = ro:generate_and_rm(s, ro:sampling_params())
    tr = s.metadata.trajectory
    ok(tr.end_reason ~= "aborted", tr.end_reason)
    local t2 = tr.turns[2]
    eq(#t2.segments, 2)
    eq(t2.segments[1].length, partial)
    eq(t2.segments[2].weight_version, "v2")
    s.reward = 0
    check_against_record(p, s, rec, 1, rl.rollout.train_data.convert({ s }, { normalize = false }))
    local wv = T.token_weight_versions(s)
    eq(wv[1], "default")
    eq(wv[#wv], "v2")
  end)

  it("partial rollout: trajectories aborted mid-step go back to the data and finish next step", function()
    local p = parts()
    local ro, rec = recorded_rollout(p, { env = counting_env(4), max_turns = 4, max_total_tokens = 380, max_turn_tokens = 60 },
      { data = rl.data.load(p.path, { label_key = "label" }), rollout_batch_size = 1, n_samples_per_prompt = 1,
        over_sampling_batch_size = 4, partial_rollout = true, reward = function() return 0 end,
        extra_sampling_params = { min_new_tokens = 30 } })
    local all, resumed = {}, 0
    for step = 0, 3 do
      local groups, m, aborted = ro:generate_rollout(step)
      for _, g in ipairs(groups) do for _, s in ipairs(g) do all[#all + 1] = s end end
      for _, g in ipairs(aborted) do
        for _, s in ipairs(g) do
          local tr = s.metadata.trajectory
          if tr and tr.end_reason == "aborted" then eq(s.status, "aborted") end
          if tr then assert(T.check(s)) end
        end
      end
    end
    for _, s in ipairs(all) do
      if s.metadata.start_rollout_id ~= nil then resumed = resumed + 1 end
    end
    print(("      %d trajectories trained, %d of them resumed after an abort"):format(#all, resumed))
    ok(resumed > 0, "some trajectory finished in a later step than it started")
    local batch = rl.rollout.train_data.convert({ all }, { normalize = false })
    for row, s in ipairs(batch.samples) do
      ok(s.metadata.trajectory.end_reason ~= "aborted")
      check_against_record(p, s, rec, row, batch)
    end
  end)

  it("runs an environment that lives in a Python process", function()
    local p = parts()
    local pf = os.tmpname()
    os.remove(pf)
    local server = assert(rl.process.spawn { "python3", HERE .. "/support/agent_env_server.py", pf, "3" })
    local url
    local deadline = rl.now() + 20
    while not url do
      url = read_file(pf)
      if not url then ok(rl.now() < deadline, "env server up"); rl.sleep(0.05) end
    end
    local ro, rec = recorded_rollout(p, { env = rl.agent.http_env { url = url }, max_turns = 5, max_total_tokens = 380 })
    local groups = {}
    for i = 1, 2 do
      local s = rl.sample.new { prompt = { { role = "user", content = "Ben has 4 cards. He gets 2 more. How many?" } },
                                label = "6", index = i, group_index = 0, session_id = "http" .. i }
      groups[i] = ro:generate_and_rm(s, ro:sampling_params())
    end
    local batch = rl.rollout.train_data.convert(groups, { normalize = false })
    eq(batch.size, 2)
    for row, s in ipairs(batch.samples) do
      eq(s.metadata.trajectory.end_reason, "done")
      eq(#s.metadata.trajectory.turns, 3)
      eq(s.reward, 1.0)
      eq(s.metadata.trajectory.turns[1].observation[1].content, "turn 1")
      check_against_record(p, s, rec, row, batch)
    end
    local log = json.decode(rl.http.get(url .. "/log").body)
    eq(log.sessions, 0, "every session closed")
    -- a trajectory stopped after turn 1 goes on under another agent (as in another process):
    -- the adapter reattaches to the server's session
    local env = rl.agent.http_env { url = url }
    local ro1 = recorded_rollout(p, { env = env, max_turns = 5, max_total_tokens = 380 })
    ro1.partial_rollout = true   -- an aborted trajectory is kept for the next step
    local s = rl.sample.new { prompt = { { role = "user", content = "Ben has 4 cards." } }, label = "4", index = 9,
                              group_index = 0, session_id = "http-resume" }
    local orig_step
    -- (turns cut at the 48-token cap go on here too, as in recorded_rollout: a sampled first
    -- turn that runs to the cap must not end the trajectory before the abort is seen)
    local stop_after_one = rl.agent.new { env = { new = function(smp)
      local inst = env.new(smp)
      orig_step = inst.step
      inst.step = function(self, a) local o, r, d = orig_step(self, a); ro1.aborted = true; return o, r, d end
      return inst
    end }, max_turns = 5, max_total_tokens = 380, on_turn_length = "continue" }
    s = stop_after_one:generate(ro1, s, ro1:sampling_params())
    eq(s.status, "aborted")
    eq(#s.metadata.trajectory.turns, 1)
    ro1.aborted = false
    local ro2 = recorded_rollout(p, { env = env, max_turns = 5, max_total_tokens = 380 })
    s = ro2:generate_and_rm(s, ro2:sampling_params())
    eq(s.metadata.trajectory.end_reason, "done")
    eq(#s.metadata.trajectory.turns, 3)
    assert(T.check(s))
    eq(json.decode(rl.http.get(url .. "/log").body).sessions, 0, "the resumed session closed")
    -- without partial rollout an aborted trajectory is dropped: its session is closed at once
    local ro3 = recorded_rollout(p, { env = env, max_turns = 5, max_total_tokens = 380 })
    local s3 = rl.sample.new { prompt = { { role = "user", content = "Ben has 4 cards." } }, label = "4", index = 10,
                               group_index = 0, session_id = "http-dropped" }
    local abort_after_one = rl.agent.new { env = { new = function(smp)
      local inst = env.new(smp)
      local step = inst.step
      inst.step = function(self, a) local o, r, d = step(self, a); ro3.aborted = true; return o, r, d end
      return inst
    end }, max_turns = 5, max_total_tokens = 380, on_turn_length = "continue" }
    s3 = abort_after_one:generate(ro3, s3, ro3:sampling_params())
    eq(s3.status, "aborted")
    eq(json.decode(rl.http.get(url .. "/log").body).sessions, 0, "the dropped trajectory's session closed")

    -- Observation ids an environment gives are checked at the boundary: an id outside the
    -- vocabulary (or not an id at all) fails that sample (env_error); the others go on and
    -- only good ids ever reach the train batch.
    local vocab = p.tok.vocab_size
    local function ids_env(answer)   -- the HTTP server's {"observation": {"ids": ...}}, whatever the model said
      return { new = function(smp)
        local inst = env.new(smp)
        local step = inst.step
        inst.step = function(self, a)
          local b = {}
          for k, v in pairs(a) do b[k] = v end
          b.text = "IDS " .. answer
          return step(self, b)
        end
        return inst
      end }
    end
    for _, bad in ipairs { tostring(vocab), tostring(vocab + 100000), "-1", "1.5", '"7"', "null", "1e300" } do
      local ro4 = recorded_rollout(p, { env = ids_env("5," .. bad .. ",6"), max_turns = 3, max_total_tokens = 380 })
      local s4 = rl.sample.new { prompt = { { role = "user", content = "Ben has 4 cards." } }, label = "4", index = 11,
                                 group_index = 0, session_id = "http-ids" }
      s4 = ro4:generate_and_rm(s4, ro4:sampling_params())
      eq(s4.status, "failed", bad)
      ok(tostring(s4.generate_error):find("ids[2] = ", 1, true)
        and tostring(s4.generate_error):find("is not a token id of the vocabulary (integers 0.." .. (vocab - 1), 1, true),
        tostring(s4.generate_error))
      eq(s4.metadata.trajectory.end_reason, "env_error")
    end
    local good = recorded_rollout(p, { env = ids_env("5," .. (vocab - 1) .. ",6"), max_turns = 2, max_total_tokens = 380 })
    local s5 = rl.sample.new { prompt = { { role = "user", content = "Ben has 4 cards." } }, label = "4", index = 12,
                               group_index = 0, session_id = "http-ids-ok" }
    s5 = good:generate_and_rm(s5, good:sampling_params())
    ok(s5.status ~= "failed", tostring(s5.generate_error))
    local o = s5.metadata.trajectory.turns[1]
    eq({ unpack(s5.tokens, o.observation_start, o.observation_start + 2) }, { 5, vocab - 1, 6 })
    server:stop()
  end)
end)
