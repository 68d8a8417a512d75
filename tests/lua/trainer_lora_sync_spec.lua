-- A LoRA trainer's sync moves its adapter alone, by every weight-sync path: "memory" (a
-- copy into a thread engine), "shm" (the adapter's own two-buffer file:
-- /init_lora_shm + /update_lora_from_shm), "disk" (PEFT files, /load_lora_adapter) and
-- "distributed" (/update_lora_from_distributed over the c10d group). After each, the
-- engines answer under the adapter with the trainer's log-probs bit for bit, and the
-- base model they serve to requests that name no adapter never changes.
local rl = require "rl"

local STORIES = test_data("models/stories260K")
local NAME = "policy"

-- Samples from the engine (under the adapter when it has one): a train batch.
local function engine_batch(eng, n, lora)
  local b = { tokens = {}, response_lengths = {}, rewards = {}, loss_masks = {} }
  for i = 1, n do
    local out = assert(eng:generate { input_ids = { 1, 403 + i }, return_logprob = true, lora_path = lora,
      sampling_params = { temperature = 1.0, max_new_tokens = 10, sampling_seed = i, ignore_eos = true } })
    local toks, mask = { 1, 403 + i }, {}
    for j, it in ipairs(out.meta_info.output_token_logprobs) do toks[#toks + 1], mask[j] = it[2], 1 end
    b.tokens[i], b.response_lengths[i], b.rewards[i], b.loss_masks[i] = toks, #mask, (i % 2 == 0) and 1 or -1, mask
  end
  return b
end

-- Largest |engine − trainer| over 6 sampled tokens after sample 1, under the adapter.
local function gap(eng, tr, b)
  local out = assert(eng:generate { input_ids = b.tokens[1], return_logprob = true, lora_path = NAME,
    sampling_params = { temperature = 1.0, max_new_tokens = 6, sampling_seed = 7, ignore_eos = true } })
  local toks, mask, lps = {}, {}, {}
  for j, x in ipairs(b.tokens[1]) do toks[j] = x end
  for j, it in ipairs(out.meta_info.output_token_logprobs) do toks[#toks + 1], mask[j], lps[j] = it[2], 1, it[1] end
  local mine = tr:logprobs { tokens = { toks }, response_lengths = { #mask }, rewards = { 0 }, loss_masks = { mask } }
  local worst = 0
  for j, lp in ipairs(lps) do worst = math.max(worst, math.abs(mine[1][j] - lp)) end
  return worst
end

local function base_ids(eng)
  local out = assert(eng:generate { input_ids = { 1, 403 }, sampling_params = { temperature = 0, max_new_tokens = 8,
    ignore_eos = true } })
  return out.output_ids
end

-- The shared-memory files a process engine has mapped (the trainer unlinks a file once it
-- has mapped it too: /proc/PID/maps still names it).
local function shm_files(pid)
  local f = assert(io.open("/proc/" .. pid .. "/maps"))
  local seen, n = {}, 0
  for line in f:lines() do
    local path = line:match("(/dev/shm/rlhost%-weights%-%S+)")
    if path and not seen[path] then seen[path], n = true, n + 1 end
  end
  f:close()
  return n
end

local function lora_trainer()
  return rl.trainer.new { model = STORIES, optimizer = { lr = 2e-2 }, micro_batch_size = 4, device = "cpu",
    lora_rank = 4, lora_alpha = 8, target_modules = { "all-linear", "lm_head" } }
end

describe("rl.trainer LoRA sync", function()
  it("every path carries the adapter alone, and the engines then answer with the trainer's log-probs exactly", function()
    local thread = assert(rl.engine.start { model = STORIES, threads = 1, device = "cpu" })
    local proc = assert(rl.engine.start { model = STORIES, threads = 1, device = "cpu", mode = "process" })
    local ok_run, err = pcall(function()
      local tr = lora_trainer()
      local base = base_ids(thread)
      eq(base_ids(proc), base)
      local files0 = shm_files(proc.pid)
      local b = engine_batch(thread, 4)
      local rounds = {
        { opts = {}, methods = { "lora/memory", "lora/shm" } },                  -- auto
        { opts = {}, methods = { "lora/memory", "lora/shm" } },                  -- the other buffer
        { opts = { method = "disk" }, methods = { "lora/disk", "lora/disk" } },
        { opts = { method = "distributed", timeout = 30 }, methods = { "lora/distributed", "lora/distributed" } },
        { opts = { method = "distributed", timeout = 30 }, methods = { "lora/distributed", "lora/distributed" } },
        { opts = { method = "shm", version = "s9" }, methods = { "lora/shm", "lora/shm" } },
      }
      for round, r in ipairs(rounds) do
        assert(tr:train(b))
        if round > 1 then
          local before = gap(proc, tr, b)
          ok(before > 1e-4, ("round %d: training moved the adapter away from the engine's (%g)"):format(round, before))
        end
        local o = { version = r.opts.version or ("r" .. round) }
        for k, v in pairs(r.opts) do o[k] = v end
        local s, serr = tr:sync({ thread, proc }, o)
        ok(s, serr)
        eq(s.methods, r.methods)
        eq(s.versions, { o.version, o.version })
        for _, eng in ipairs { thread, proc } do eq(gap(eng, tr, b), 0) end   -- bit for bit under the adapter
        print(("round %d: %s in %.3f s"):format(round, table.concat(s.methods, ", "), s.seconds))
      end
      -- only the adapter moved: requests naming none get the base model, weight version unchanged
      eq(base_ids(thread), base)
      eq(base_ids(proc), base)
      eq(proc:stats().weight_version, "default")
      -- the process engine holds one shared file for the adapter; unloading it drops the
      -- file, and the next shm sync shares the adapter anew (the sender retries once)
      eq(shm_files(proc.pid), files0 + 1)
      assert(proc:unload_lora(NAME))
      eq(shm_files(proc.pid), files0)
      assert(tr:train(b))
      local s, serr = tr:sync(proc, { version = "again" })
      ok(s, serr)
      eq(s.methods, { "lora/shm" })
      eq(gap(proc, tr, b), 0)
      eq(shm_files(proc.pid), files0 + 1)
    end)
    thread:stop()
    proc:stop()
    if not ok_run then error(err, 0) end
  end, { timeout = 300 })

  it("a broadcast announcing more than the adapter holds is refused before it is received; the next sync forms a new group", function()
    local eng = assert(rl.engine.start { model = STORIES, threads = 1, device = "cpu", mode = "process" })
    local ok_run, err = pcall(function()
      local tr = lora_trainer()
      local b = engine_batch(eng, 2)
      assert(tr:train(b))
      local src = tr:weight_source()
      local meta = src.lora_meta
      src.lora_meta = function(self) local m = meta(self); m.r = 2; return m end   -- says r 2, sends r 4
      local tx = rl.weight_sync.sender(src)
      local s, serr = tx:push(eng, { version = "bad", method = "distributed", timeout = 5 })
      eq(s, nil)
      ok(tostring(serr):find("the tensors announced hold", 1, true), serr)
      tx:close()
      s, serr = tr:sync(eng, { version = "good", method = "distributed", timeout = 30 })
      ok(s, serr)
      eq(s.methods, { "lora/distributed" })
      eq(gap(eng, tr, b), 0)
    end)
    eng:stop()
    if not ok_run then error(err, 0) end
  end, { timeout = 120 })

  it("the engine names bad adapter sync requests", function()
    local eng = assert(rl.engine.start { model = STORIES, threads = 1, device = "cpu" })
    local ok_run, err = pcall(function()
      local function post(path, body, headers)
        local r = assert(rl.http.request { method = "POST", url = eng.url .. path, body = rl.json.encode(body),
          headers = headers or rl.engine.control_headers(), timeout = 10 })
        return r.status, r.body
      end
      local spec = { lora_name = "a", r = 4, lora_alpha = 8, target_modules = { "q_proj" } }
      -- they change what the engine serves: the admin token is wanted
      local st = post("/init_lora_shm", spec, { ["content-type"] = "application/json" })
      eq(st, 401)
      for _, case in ipairs {
        { { lora_name = "a", r = 0, lora_alpha = 8, target_modules = { "q_proj" } }, "'r' must be an integer >= 1" },
        { { lora_name = "a", r = 4, lora_alpha = -1, target_modules = { "q_proj" } }, "'lora_alpha' must be a number > 0" },
        { { lora_name = "a", r = 4, lora_alpha = 8, target_modules = {} }, "'target_modules' must be a non-empty list" },
        { { lora_name = "a", r = 4, lora_alpha = 8, target_modules = { "qkv" } }, "'qkv'" },
        { { r = 4, lora_alpha = 8, target_modules = { "q_proj" } }, "'lora_name' is required" },
        { { lora_name = "a", r = 65, lora_alpha = 8, target_modules = { "q_proj" } }, "above the model's hidden_size 64" },
      } do
        local s, body = post("/init_lora_shm", case[1])
        eq(s, 400)
        ok(body:find(case[2], 1, true), body)
      end
      local s, body = post("/init_lora_shm", spec)
      eq(s, 200)
      local layout = rl.json.decode(body)
      eq({ layout.active, layout.next_buffer, #layout.tensors }, { 0, 1, 5 * 2 })   -- 5 layers × q_proj's A and B
      s, body = post("/update_lora_from_shm", { lora_name = "a", id = "nope", buffer = 1 })
      eq(s, 400)
      ok(body:find("no shared adapter file 'nope'", 1, true) and body:find("init_lora_shm", 1, true), body)
      s, body = post("/update_lora_from_shm", { lora_name = "b", id = layout.id, buffer = 1 })
      eq(s, 400)
      ok(body:find("for 'b'", 1, true), body)
      -- a buffer nobody wrote holds zeros: a valid (identity) adapter, installed
      s, body = post("/update_lora_from_shm", { lora_name = "a", id = layout.id, buffer = 1, weight_version = "z" })
      eq(s, 200)
      eq(rl.json.decode(body).weight_version, "z")
      s, body = post("/update_lora_from_distributed", { lora_name = "a", r = 4, lora_alpha = 8,
        target_modules = { "q_proj" }, names = {}, dtypes = {}, shapes = {}, group_name = "none" })
      eq(s, 400)
      ok(body:find("no weight update group 'none'", 1, true), body)
      -- a trainer without an adapter has none to send
      eq(rl.trainer.new({ model = STORIES, device = "cpu" }):weight_source().lora_meta, nil)
      -- an engine with --max-lora-rank refuses a larger adapter before making room for it
      local small = assert(rl.engine.start { model = STORIES, threads = 1, device = "cpu", max_lora_rank = 2 })
      local st2 = assert(rl.http.request { method = "POST", url = small.url .. "/init_lora_shm",
        body = rl.json.encode(spec), headers = rl.engine.control_headers(), timeout = 10 })
      small:stop()
      eq(st2.status, 400)
      ok(st2.body:find("above the engine's max_lora_rank 2", 1, true), st2.body)
    end)
    eng:stop()
    if not ok_run then error(err, 0) end
  end, { timeout = 60 })
end)
