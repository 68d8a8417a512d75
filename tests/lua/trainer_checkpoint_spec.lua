-- rl.trainer checkpoints: a resumed run draws the same next batches (rl.data's
-- state() travels in `extra`) and computes the same losses and weights as one
-- that never stopped; a save killed part-way (SIGKILL in a child rlhost, paused
-- by the test-only RLHOST_CHECKPOINT_TEST_PAUSE hook) leaves the previous
-- checkpoint loadable; bad checkpoints are nil, err naming the file.
local rl = require "rl"
local read, write = read_file, write_file  -- spec.lua helpers

local TINY = {
  architectures = { "LlamaForCausalLM" }, model_type = "llama", vocab_size = 300, hidden_size = 32,
  intermediate_size = 48, num_hidden_layers = 2, num_attention_heads = 4, num_key_value_heads = 2,
  max_position_embeddings = 64, rms_norm_eps = 1e-6,
}
local PROMPTS = { "two plus two", "seven times six", "half of ten", "nine minus one", "three squared" }
local OPTIONS = { loss = { advantage_estimator = "grpo", entropy_coef = 0.01 },
                  optimizer = { lr = 2e-2, lr_decay_style = "cosine", lr_decay_iters = 6, lr_warmup_iters = 1,
                                weight_decay = 0.1 },
                  micro_batch_size = 2 }

local function exists(path) return os.rename(path, path) ~= nil end

local function ls(dir)
  local out = {}
  local p = io.popen("ls -1 '" .. dir .. "' 2>/dev/null")
  for line in p:lines() do out[#out + 1] = line end
  p:close()
  table.sort(out)
  return out
end

local function data_source(dir)
  local path = dir .. "/prompts.jsonl"
  local lines = {}
  for i, p in ipairs(PROMPTS) do lines[i] = rl.json.encode { input = p, label = tostring(i) } end
  write(path, table.concat(lines, "\n") .. "\n")
  return rl.data.load(path, { shuffle = true, seed = 3 })
end

-- A train batch from the source's next groups: prompt bytes, then a response made
-- from the sample's index (so different draws give different batches), reward ±1.
local function next_batch(ds)
  local b = { tokens = {}, response_lengths = {}, rewards = {}, loss_masks = {} }
  for _, group in ipairs(ds:get_samples(2, 2)) do
    for _, s in ipairs(group) do
      local t = { s.prompt:byte(1, -1) }
      for j = 1, 3 do t[#t + 1] = 256 + (s.index * 7 + j) % 40 end
      local i = #b.tokens + 1
      b.tokens[i], b.response_lengths[i], b.rewards[i] = t, 3, (s.index % 2 == 0) and 1 or -1
      b.loss_masks[i] = { 1, 1, 1 }
    end
  end
  return b
end

local function new_trainer(model_dir)
  local o = { model = model_dir }
  for k, v in pairs(OPTIONS) do o[k] = v end
  return rl.trainer.new(o)
end

describe("rl.trainer checkpoints", function()
  it("resume exactly: the same next batches, losses and weights as an uninterrupted run", function()
    local work = tmpdir()
    os.execute("mkdir -p '" .. work .. "'")
    local model_dir = assert(rl.model.init { config = TINY, seed = 11, dir = work .. "/init" })
    local ds = data_source(work)
    local tr = new_trainer(model_dir)
    for _ = 1, 2 do assert(tr:train(next_batch(ds))) end
    local root = work .. "/ckpt"
    local saved = assert(tr:save(root, { extra = { data = ds:state(), rollout_id = 1 } }))
    eq(saved.path, root .. "/iter_0000002")
    eq(saved.iteration, 2)
    eq(read(root .. "/latest_checkpointed_iteration.txt"), "2\n")
    eq(ls(root), { "iter_0000002", "latest_checkpointed_iteration.txt" })
    eq(ls(saved.path), { "config.json", "model.safetensors", "optimizer.pt", "tokenizer.json",
                          "tokenizer_config.json", "trainer_state.json" })
    local st = rl.json.decode(read(saved.path .. "/trainer_state.json"))
    eq(st.step, 2)
    eq(st.options.lr, 2e-2)
    eq(st.sources.model, model_dir)
    ok(type(st.rng.cpu.state) == "string" and #st.rng.cpu.state > 100, "CPU generator state saved")

    -- the uninterrupted run goes on for two more steps (crossing into epoch 1 of the data)
    local lr_next = tr:lr()
    local want = {}
    for i = 1, 2 do
      local b = next_batch(ds)
      local m = assert(tr:train(b))
      want[i] = { tokens = b.tokens, loss = m["train/loss"], grad_norm = m["train/grad_norm"], lr = m["train/lr"] }
    end
    eq(ds.epoch_id, 1)

    -- a fresh process's view: a new data source and rl.trainer.load
    local ds2 = data_source(work)
    local tr2, extra = assert(rl.trainer.load(root))
    eq(extra.rollout_id, 1)
    ds2:load_state(extra.data)
    eq(tr2:step(), 2)
    eq(tr2:lr(), lr_next)
    for i = 1, 2 do
      local b = next_batch(ds2)
      eq(b.tokens, want[i].tokens, "batch " .. i .. " after resume")
      local m = assert(tr2:train(b))
      ok(math.abs(m["train/loss"] - want[i].loss) <= 1e-7,
        ("step %d loss %.17g vs uninterrupted %.17g"):format(i + 2, m["train/loss"], want[i].loss))
      eq(m["train/grad_norm"], want[i].grad_norm)
      eq(m["train/lr"], want[i].lr)
      eq(m["train/step"], i + 2)
    end
    -- final weights: byte-identical safetensors
    assert(tr:save_model(work .. "/a"))
    assert(tr2:save_model(work .. "/b"))
    ok(read(work .. "/a/model.safetensors") == read(work .. "/b/model.safetensors"), "final weights identical")

    -- tr:load into an existing trainer (the model of the checkpoint's shape) works too
    local tr3 = new_trainer(model_dir)
    local extra3, st3 = assert(tr3:load(saved.path))
    eq(extra3.rollout_id, 1)
    eq(st3.iteration, 2)
    eq(tr3:step(), 2)
    os.execute("rm -rf '" .. work .. "'")
  end, { timeout = 180 })

  it("a save killed part-way leaves the previous checkpoint, never a half one, as latest", function()
    local work = tmpdir()
    os.execute("mkdir -p '" .. work .. "'")
    local model_dir = assert(rl.model.init { config = TINY, seed = 12, dir = work .. "/init" })
    local ds = data_source(work)
    local tr = new_trainer(model_dir)
    assert(tr:train(next_batch(ds)))
    local root = work .. "/ckpt"
    assert(tr:save(root))
    local proc = require("rl._core").process   -- spawn / kill / reap: children die with us

    -- A child rlhost resumes, trains a step and saves, paused at `stage` by the
    -- test hook; it is SIGKILLed once `marker(pid)` exists.
    local function killed_save(stage, iteration, marker)
      local code = ([[
        local tr = assert(rl.trainer.load(%q))
        assert(tr:train { tokens = { { 5, 6, 7, 8 } }, response_lengths = { 2 }, rewards = { 1 },
                          loss_masks = { { 1, 1 } } })
        assert(tr:save(%q, { iteration = %d }))
        print("save finished")
      ]]):format(root, root, iteration)
      local log = work .. "/child-" .. stage .. ".log"
      local pid = assert(proc.spawn({ "/usr/bin/env", "RLHOST_CHECKPOINT_TEST_PAUSE=" .. stage .. ":120",
                                      rl.process.self(), "--no-control", "-e", code }, { log = log }))
      local deadline = rl.now() + 90
      while not exists(marker(pid)) do
        local status = proc.reap(pid)
        if status then error("child exited (" .. tostring(status) .. ") before the pause: " .. (read(log) or "")) end
        if rl.now() > deadline then
          proc.kill(pid, 9)
          error("child never reached the pause: " .. (read(log) or ""))
        end
        rl.sleep(0.05)
      end
      print(("  child %d paused at %s after %.2f s"):format(pid, stage, rl.now() - deadline + 90))
      ok(proc.kill(pid, 9), "SIGKILL delivered")
      while not proc.reap(pid) do rl.sleep(0.02) end
      ok(not (read(log) or ""):find("save finished", 1, true), "the save did not finish")
      return pid
    end

    -- 1. killed while writing a new iteration: the half directory is never latest
    local pid = killed_save("files", 2,
      function(p) return root .. "/iter_0000002.tmp-" .. p .. "/model.safetensors" end)
    local half = root .. "/iter_0000002.tmp-" .. pid
    ok(exists(half) and not exists(half .. "/optimizer.pt"), "the half-written directory is there")
    eq(read(root .. "/latest_checkpointed_iteration.txt"), "1\n")
    local back = assert(rl.trainer.load(root))
    eq(back:step(), 1)
    local _, err = rl.trainer.load(half)
    ok(err and err:find("not a checkpoint", 1, true), err)

    -- 2. killed between moving the old iter_0000001 aside and renaming the new one in
    local pid2 = killed_save("swap", 1, function(p) return root .. "/iter_0000001.old-" .. p end)
    ok(not exists(root .. "/iter_0000001"), "killed inside the swap window")
    local aside = assert(rl.trainer.load(root))  -- finds the previous copy under its aside name
    eq(aside:step(), 1)
    eq(aside.checkpoint.path, root .. "/iter_0000001.old-" .. pid2)

    -- the next save cleans up after both: the aside copy returns, temp dirs go
    assert(back:train(next_batch(ds)))
    assert(back:save(root, { iteration = 3 }))
    eq(ls(root), { "iter_0000001", "iter_0000003", "latest_checkpointed_iteration.txt" })
    eq(assert(rl.trainer.load(root .. "/iter_0000001")):step(), 1)
    -- saving an existing iteration again replaces it
    assert(back:save(root, { iteration = 1 }))
    eq(ls(root), { "iter_0000001", "iter_0000003", "latest_checkpointed_iteration.txt" })
    eq(assert(rl.trainer.load(root)):step(), 2)
    os.execute("rm -rf '" .. work .. "'")
  end, { timeout = 240 })

  it("bad checkpoints are nil, err naming the file", function()
    local work = tmpdir()
    os.execute("mkdir -p '" .. work .. "/empty'")
    local model_dir = assert(rl.model.init { config = TINY, seed = 13, dir = work .. "/init" })
    local tr = new_trainer(model_dir)
    assert(tr:train(next_batch(data_source(work))))
    local root = work .. "/ckpt"
    local dir = assert(tr:save(root)).path

    local function fails(path, pattern, opts)
      local t, err = rl.trainer.load(path, opts)
      eq(t, nil)
      ok(type(err) == "string" and err:find(pattern, 1, true), ("expected '%s' in: %s"):format(pattern, tostring(err)))
      return err
    end
    ok(fails(work .. "/nope", "no such checkpoint directory"):find("hint:", 1, true))
    fails(work .. "/empty", "not a checkpoint")

    -- a truncated optimizer.pt: caught by the sizes in trainer_state.json ...
    os.execute(("cp -r '%s' '%s/trunc'"):format(dir, work))
    local opt = read(work .. "/trunc/optimizer.pt")
    local half = math.floor(#opt / 2)
    write(work .. "/trunc/optimizer.pt", opt:sub(1, half))
    fails(work .. "/trunc", "optimizer.pt: " .. half .. " bytes")
    -- ... by the checksums when the sizes were rewritten to match ...
    local st = rl.json.decode(read(work .. "/trunc/trainer_state.json"))
    st.files["optimizer.pt"] = half
    write(work .. "/trunc/trainer_state.json", rl.json.encode(st))
    local err = fails(work .. "/trunc", "optimizer.pt: its bytes changed since the save")
    -- ... and by the archive reader in a checkpoint without checksums (written before them)
    st.checksums = nil
    write(work .. "/trunc/trainer_state.json", rl.json.encode(st))
    err = fails(work .. "/trunc", "cannot read the optimizer state")
    ok(err:find("optimizer.pt", 1, true) and err:find("hint:", 1, true), err)

    -- a changed byte, same size (bit rot, a bad copy): caught by the checksum, naming the file
    os.execute(("cp -r '%s' '%s/flip'"):format(dir, work))
    local w = read(work .. "/flip/model.safetensors")
    local at = #w - 3   -- inside the last tensor's data
    write(work .. "/flip/model.safetensors", w:sub(1, at - 1) .. string.char((w:byte(at) + 1) % 256) .. w:sub(at + 1))
    err = fails(work .. "/flip", "model.safetensors: its bytes changed since the save")
    ok(err:find("crc32:", 1, true) and err:find("hint:", 1, true), err)
    eq(rl.json.decode(read(dir .. "/trainer_state.json")).checksums["model.safetensors"]:match("^crc32:%x+$") ~= nil, true)

    -- damaged trainer_state.json, a bad pointer, a pointer to a missing iteration
    os.execute(("cp -r '%s' '%s/badjson'"):format(dir, work))
    write(work .. "/badjson/trainer_state.json", '{"format": "rlhost-trainer-checkpoint", "step"')
    fails(work .. "/badjson", "trainer_state.json: not valid JSON")
    write(root .. "/latest_checkpointed_iteration.txt", "abc\n")
    fails(root, "'abc' is not an iteration number")
    write(root .. "/latest_checkpointed_iteration.txt", "7\n")
    fails(root, "iter_0000007: missing or incomplete")
    write(root .. "/latest_checkpointed_iteration.txt", "1\n")

    -- a checkpoint of another model shape
    local wide = {}
    for k, v in pairs(TINY) do wide[k] = v end
    wide.hidden_size = 48
    local other_dir = assert(rl.model.init { config = wide, seed = 1, dir = work .. "/wide" })
    fails(root, "the checkpoint is for another model: hidden_size 32, the trainer's model has 48",
      { model = other_dir })
    local other = new_trainer(other_dir)
    local extra, lerr = other:load(root)
    eq(extra, nil)
    ok(lerr:find("config.json: the checkpoint is for another model", 1, true), lerr)
    eq(other:step(), 0, "a failed load changes nothing")

    -- misuse raises
    raises(function() tr:save(nil) end, "bad argument #1 'dir'")
    raises(function() tr:save(root, { extr = {} }) end, "unknown option 'extr'")
    raises(function() tr:save(root, { extra = { f = print } }) end, "opts.extra cannot be written as JSON")
    raises(function() rl.trainer.load(root, { loss = { eps_clp = 1 } }) end, "did you mean 'eps_clip'")
    os.execute("rm -rf '" .. work .. "'")
  end, { timeout = 120 })
end)
