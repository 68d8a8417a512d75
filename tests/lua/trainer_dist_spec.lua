-- Weight sync to engine servers. Distributed (tr:sync(engines, {method =
-- "distributed"})): the trainer broadcasts its parameters over a c10d group to
-- engines that joined it through SGLang's /init_weights_update_group. Shared
-- memory (method "shm", auto for process engines): the trainer writes the
-- engine's spare buffer and the engine switches to it. Afterwards the engine
-- computes exactly the trainer's log-probs. A dead engine or one that never joins
-- fails the sync with a clear error within the timeout. (Data parallel:
-- tests/e2e/test_trainer_dist.py.)
local rl = require "rl"

local STORIES = test_data("models/stories260K")

local function now() return require("rl._core").loop.now() end

-- Samples from the engine: a train batch with its rollout log-probs.
local function engine_batch(eng, n)
  local b = { tokens = {}, response_lengths = {}, rewards = {}, loss_masks = {}, rollout_log_probs = {} }
  for i = 1, n do
    local out = assert(eng:generate { input_ids = { 1, 403 + i }, return_logprob = true,
      sampling_params = { temperature = 1.0, max_new_tokens = 10, sampling_seed = i, ignore_eos = true } })
    local toks, lps, mask = { 1, 403 + i }, {}, {}
    for j, it in ipairs(out.meta_info.output_token_logprobs) do
      toks[#toks + 1], lps[j], mask[j] = it[2], it[1], 1
    end
    b.tokens[i], b.response_lengths[i], b.rewards[i] = toks, #lps, (i % 2 == 0) and 1 or -1
    b.rollout_log_probs[i], b.loss_masks[i] = lps, mask
  end
  return b
end

-- |engine − trainer| on the log-prob of one more token after sample 1.
local function gap(eng, tr, b)
  local out = assert(eng:generate { input_ids = b.tokens[1], return_logprob = true,
    sampling_params = { temperature = 1.0, max_new_tokens = 1, sampling_seed = 1 } })
  local t = out.meta_info.output_token_logprobs[1]
  local toks = {}
  for j, x in ipairs(b.tokens[1]) do toks[j] = x end
  toks[#toks + 1] = t[2]
  local mine = tr:logprobs { tokens = { toks }, response_lengths = { 1 }, rewards = { 0 }, loss_masks = { { 1 } } }
  return math.abs(mine[1][1] - t[1])
end

describe("rl.trainer distributed weight sync", function()
  it("broadcasts the weights to a process engine, which then agrees with the trainer", function()
    local eng = assert(rl.engine.start { model = STORIES, mode = "process", threads = 1 })
    local tr = rl.trainer.new { model = STORIES, optimizer = { lr = 1e-3 }, micro_batch_size = 4 }
    local b = engine_batch(eng, 4)
    for round = 1, 2 do   -- the second sync reuses the group made by the first
      assert(tr:train(b))
      local before = gap(eng, tr, b)
      ok(before > 1e-4, "training moved the weights away from the engine's (" .. before .. ")")
      local s, err = tr:sync(eng, { method = "distributed", timeout = 30 })
      ok(s, err)
      eq(s.weight_version, tostring(round))
      eq(eng:stats().weight_version, tostring(round))
      local after = gap(eng, tr, b)
      ok(after <= 1e-5, "engine vs trainer after distributed sync " .. after)
      print(("round %d: sync %.3f s, |logp gap| %.3g -> %.3g"):format(round, s.seconds, before, after))
    end
    -- The engine dies: the next sync fails with an error, well within its timeout.
    rl.process.signal_pid(eng.pid, 9)
    assert(tr:train(b))
    local t0 = now()
    local s, err = tr:sync(eng, { method = "distributed", timeout = 10 })
    ok(s == nil, "sync to a dead engine fails")
    ok(tostring(err):find("update_weights_from_distributed", 1, true), err)
    -- a guard, not a speed check: ignoring timeout = 10 would wait the default 120 s (+10)
    ok(now() - t0 < 90, "failed within the timeout (" .. (now() - t0) .. " s)")
    print("dead engine: " .. tostring(err):sub(1, 300))
    eng:stop()
  end, { timeout = 240 })

  it("fails within the timeout when an engine never joins", function()
    local tr = rl.trainer.new { model = STORIES }
    local t0 = now()
    local s, err = tr:sync({ url = "http://127.0.0.1:9" }, { method = "distributed", timeout = 3 })
    ok(s == nil)
    ok(tostring(err):find("init_weights_update_group", 1, true), err)
    ok(tostring(err):find("127.0.0.1:9", 1, true), err)
    ok(now() - t0 < 60, "within the timeout (" .. (now() - t0) .. " s)")  -- the default would be 130 s
    raises(function() tr:sync({ {} }, { method = "distributed" }) end, "has no url")
    raises(function() tr:sync({ { url = "http://x" } }, { method = "nccl" }) end, "opts.method")
  end, { timeout = 60 })

  it("the engine names bad requests; a thread-mode engine's server takes the broadcast too", function()
    -- A CPU engine's answers (it refuses nccl), whatever device the other specs run on.
    local eng = assert(rl.engine.start { model = STORIES, threads = 1, device = "cpu" })
    local http = rl.http
    local function post(path, body)
      local r = assert(http.request { method = "POST", url = eng.url .. path, body = rl.json.encode(body),
        headers = rl.engine.control_headers(), timeout = 10 })
      return r.status, r.body
    end
    local st, body = post("/init_weights_update_group", { master_address = "127.0.0.1", rank_offset = 1,
                                                          world_size = 2 })
    eq(st, 400)
    ok(body:find("master_port", 1, true), body)
    st, body = post("/update_weights_from_distributed", { names = {}, dtypes = {}, shapes = {}, group_name = "nope" })
    eq(st, 400)
    ok(body:find("no weight update group 'nope'", 1, true), body)
    st, body = post("/init_weights_update_group", { master_address = "127.0.0.1", master_port = 1, rank_offset = 1,
                                                    world_size = 2, backend = "nccl" })
    eq(st, 400)
    ok(body:find("nccl", 1, true), body)
    -- the same endpoints serve an engine in this process (thread mode with a server)
    local tr = rl.trainer.new { model = STORIES, optimizer = { lr = 1e-3 }, micro_batch_size = 2, device = "cpu" }
    local b = engine_batch(eng, 2)
    assert(tr:train(b))
    local s, err = tr:sync({ eng }, { method = "distributed", timeout = 30, version = "v7" })
    ok(s, err)
    eq(eng:stats().weight_version, "v7")
    local after = gap(eng, tr, b)
    ok(after <= 1e-5, "thread engine vs trainer after distributed sync " .. after)
    -- a sender announcing more values than the model has is refused before the engine
    -- allocates them; the group goes, and the next sync makes a new one
    local src = tr:weight_source()
    local meta = src.meta
    src.meta = function(self) local m = meta(self); m.shapes[1] = { 1000000, 1000 }; return m end
    local tx = rl.weight_sync.sender(src)
    s, err = tx:push(eng, { version = "huge", method = "distributed", timeout = 5 })
    eq(s, nil)
    ok(tostring(err):find("the tensors announced hold 1000", 1, true), err)
    tx:close()
    s, err = tr:sync({ eng }, { method = "distributed", timeout = 30, version = "v8" })
    ok(s, err)
    eq(eng:stats().weight_version, "v8")
    eng:stop()
  end, { timeout = 60 })
end)

-- Shared-memory sync is for engines on the CPU (a GPU engine answers with a hint to use
-- "distributed"): these specs run on the CPU whatever RLHOST_TEST_DEVICE says.
describe("rl.trainer shared-memory weight sync", function()
  it("a process engine takes the weights through shared memory, buffer after buffer", function()
    local eng = assert(rl.engine.start { model = STORIES, mode = "process", threads = 1, device = "cpu" })
    local tr = rl.trainer.new { model = STORIES, optimizer = { lr = 1e-3 }, micro_batch_size = 4, device = "cpu" }
    local b = engine_batch(eng, 4)
    for round = 1, 3 do  -- buffers 1, 0, 1
      assert(tr:train(b))
      local before = gap(eng, tr, b)
      ok(before > 1e-4, "training moved the weights away from the engine's (" .. before .. ")")
      local s, err = tr:sync(eng)  -- auto: shared memory for a process engine
      ok(s, err)
      eq(s.methods[1], "shm")
      eq(eng:stats().weight_version, tostring(round))
      local after = gap(eng, tr, b)
      ok(after <= 1e-5, "engine vs trainer after shared-memory sync " .. after)
      print(("round %d: sync %.3f s, |logp gap| %.3g -> %.3g"):format(round, s.seconds, before, after))
    end
    -- Released weights: shared memory cannot be set up, auto falls back to files,
    -- which fail too (the error says so); once resumed, shared memory again (a new file).
    assert(eng:release_memory { "weights" })
    assert(tr:train(b))
    local s, err = tr:sync(eng)
    ok(s == nil and tostring(err):find("weights are released", 1, true), err)
    assert(eng:resume_memory { "weights" })
    s, err = tr:sync(eng)
    ok(s, err)
    eq(s.methods[1], "shm")
    ok(gap(eng, tr, b) <= 1e-5, "after release and resume")
    -- Files still work on demand, and shared memory after them.
    assert(tr:train(b))
    s = assert(tr:sync(eng, { method = "disk" }))
    eq(s.methods[1], "disk")
    ok(gap(eng, tr, b) <= 1e-5, "after a disk sync")
    assert(tr:train(b))
    s = assert(tr:sync(eng, { method = "shm", version = "v9" }))
    eq(eng:stats().weight_version, "v9")
    ok(gap(eng, tr, b) <= 1e-5, "after a disk sync, shared memory again")
    eng:stop()
  end, { timeout = 240 })

  it("the engine names bad requests; a thread-mode engine's server shares too", function()
    local eng = assert(rl.engine.start { model = STORIES, threads = 1, device = "cpu" })
    local function post(path, body)
      local r = assert(rl.http.request { method = "POST", url = eng.url .. path, body = rl.json.encode(body),
        headers = rl.engine.control_headers(), timeout = 10 })
      return r.status, r.body
    end
    -- control endpoints want the run's admin token even on loopback (rl.engine.control_headers sends it)
    local anon = assert(rl.http.request { method = "POST", url = eng.url .. "/init_weights_shm", body = "{}",
      headers = { ["content-type"] = "application/json" }, timeout = 10 })
    eq(anon.status, 401)
    local st, body = post("/update_weights_from_shm", { buffer = 1 })
    eq(st, 400)
    ok(body:find("'id' is required", 1, true), body)
    st, body = post("/update_weights_from_shm", { id = "nope", buffer = 1 })
    eq(st, 400)
    ok(body:find("no shared weights 'nope'", 1, true) and body:find("init_weights_shm", 1, true), body)
    st, body = post("/init_weights_shm", {})
    eq(st, 200)
    local layout = rl.json.decode(body)
    eq(layout.active, 0)
    eq(layout.next_buffer, 1)
    st, body = post("/update_weights_from_shm", { id = layout.id, buffer = 2 })
    eq(st, 400)
    ok(body:find("'buffer' must be an integer in [0, 1]", 1, true), body)
    st, body = post("/update_weights_from_shm", { id = layout.id, buffer = 0 })
    eq(st, 400)
    ok(body:find("is the one the engine reads", 1, true), body)
    os.remove(layout.path)  -- this test is the writer here: it drops the name

    local tr = rl.trainer.new { model = STORIES, optimizer = { lr = 1e-3 }, micro_batch_size = 2, device = "cpu" }
    local b = engine_batch(eng, 2)
    assert(tr:train(b))
    local s, err = tr:sync({ eng }, { method = "shm", version = "v3" })
    ok(s, err)
    eq(s.methods[1], "shm")
    eq(eng:stats().weight_version, "v3")
    ok(gap(eng, tr, b) <= 1e-5, "thread engine vs trainer after shared-memory sync")
    raises(function() tr:sync({ {} }, { method = "shm" }) end, "has no url")
    eng:stop()
    -- an engine server with an API key: the control endpoints want it, and the trainer sends it
    local keyed = assert(rl.engine.start { model = STORIES, threads = 1, api_key = "sesame", device = "cpu" })
    local r = assert(rl.http.request { method = "POST", url = keyed.url .. "/init_weights_shm", body = "{}",
      headers = { ["content-type"] = "application/json" }, timeout = 10 })
    eq(r.status, 401)
    s, err = tr:sync(keyed, { method = "shm", version = "k1" })
    ok(s, err)
    eq(keyed:stats().weight_version, "k1")
    ok(gap(keyed, tr, b) <= 1e-5, "keyed engine vs trainer after shared-memory sync")
    keyed:stop()
  end, { timeout = 60 })
end)
