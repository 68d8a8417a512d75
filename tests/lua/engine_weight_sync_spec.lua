-- rl.weight_sync: the engine side (receivers: what an engine can take, the version it
-- serves), the sender over a weight source other than the trainer (an rl.model), a
-- disk sync through a directory whose path has spaces and quotes, an "http" push (buckets
-- and row slices, engines concurrently) equal to a disk push, keep_going with one
-- engine gone and the per-engine guard. The trainer's memory, shm and c10d paths are
-- trainer_spec.lua and trainer_dist_spec.lua.
local rl = require "rl"
local ws = require "rl.weight_sync"

local STORIES = test_data("models/stories260K")
local GREEDY = { temperature = 0, max_new_tokens = 8, ignore_eos = true }

local function greedy_ids(eng)
  local out = assert(eng:generate { input_ids = { 1, 403 }, sampling_params = GREEDY })
  return out.output_ids
end

-- A second model directory: random weights, stories260K's tokenizer.
local function other_model()
  local cfg = rl.json.decode(read_file(STORIES .. "/config.json"))
  return assert(rl.model.init { config = cfg, seed = 11, tokenizer = STORIES })
end

local function entries(dir)
  local p = io.popen("ls -A " .. rl.process.quote(dir))
  local out = {}
  for line in p:read("*a"):gmatch("[^\n]+") do out[#out + 1] = line end
  p:close()
  table.sort(out)
  return out
end

describe("rl.weight_sync receivers", function()
  it("say what each engine can take and report the version it serves", function()
    local served = assert(rl.engine.start { model = STORIES, threads = 1 })
    local quiet = assert(rl.engine.start { model = STORIES, threads = 1, serve = false })
    local ok_run, err = pcall(function()
      eq(served:weight_receiver():methods(), { "memory", "shm", "disk", "distributed", "http" })
      eq(quiet:weight_receiver():methods(), { "memory", "disk" })   -- no server: no shm, no c10d, no http
      eq(ws.receiver(served.url):methods(), { "shm", "disk", "distributed", "http" })
      eq(ws.receiver { url = served.url, api_key = "k" }:methods(), { "shm", "disk", "distributed", "http" })
      eq(ws.receiver { update_weights_from_disk = function() end }:methods(), { "disk" })
      local none, why = ws.receiver(42)
      eq({ none, why }, { nil, "neither an rl.engine nor has update_weights_from_disk" })
      -- the version: from the engine object, or from its server's /get_model_info
      eq(served:weight_receiver():version(), "default")
      eq(ws.receiver(served.url):version(), "default")
      -- receive by files through the server, then the report from both sides agrees
      local dir = other_model()
      local r = assert(ws.receiver(served.url):receive_disk(dir, "f1"))
      eq(r.weight_version, "f1")
      eq({ served:weight_receiver():version(), served:stats().weight_version }, { "f1", "f1" })
    end)
    served:stop()
    quiet:stop()
    if not ok_run then error(err, 0) end
  end, { timeout = 60 })
end)

describe("rl.weight_sync senders", function()
  it("push any weight source: an rl.model's weights reach a thread and a process engine by files", function()
    local thread = assert(rl.engine.start { model = STORIES, threads = 1, serve = false })
    local proc = assert(rl.engine.start { model = STORIES, threads = 1, mode = "process" })
    local ok_run, err = pcall(function()
      local before = greedy_ids(thread)
      eq(greedy_ids(proc), before)
      local m = assert(rl.model.load(other_model()))
      local saved = 0
      local tx = ws.sender { save = function(_, dir) saved = saved + 1; return m:save(dir) end }
      local r = assert(tx:push({ thread, proc }, { version = "m1", method = "disk" }))
      eq({ r.methods, r.versions, r.weight_version }, { { "disk", "disk" }, { "m1", "m1" }, "m1" })
      eq(saved, 1)   -- one directory for every engine of the push
      local after = greedy_ids(thread)
      ok(after[1] ~= before[1] or after[2] ~= before[2], "the other model answers differently")
      eq(greedy_ids(proc), after)
      eq(proc:weight_receiver():version(), "m1")
      -- auto takes what both sides can do: this source has no copy_to_engine (memory) nor
      -- write_shm, so files; asking for shm is misuse
      r = assert(tx:push({ thread, proc }, { version = "m2" }))
      eq({ r.methods, r.versions }, { { "disk", "disk" }, { "m2", "m2" } })
      raises(function() tx:push({ proc }, { version = "m3", method = "shm" }) end,
        "rl.weight_sync.Sender:push: the weight source cannot send by 'shm' (it has no write_shm)")
    end)
    thread:stop()
    proc:stop()
    if not ok_run then error(err, 0) end
  end, { timeout = 120 })

  it("http: buckets POSTed to a process and a thread engine at once answer as a disk push of the same weights", function()
    local proc = assert(rl.engine.start { model = STORIES, threads = 1, mode = "process" })
    local thread = assert(rl.engine.start { model = STORIES, threads = 1 })
    local ok_run, err = pcall(function()
      local function answer(eng)
        local out = assert(eng:generate { input_ids = { 1, 403 }, sampling_params = GREEDY, return_logprob = true })
        local lps = {}
        for i, x in ipairs(out.meta_info.output_token_logprobs) do lps[i] = x[1] end
        return { ids = out.output_ids, logprobs = lps, version = out.meta_info.weight_version }
      end
      local before = answer(proc)
      local m = assert(rl.model.load(other_model()))
      local saved = 0
      local tx = ws.sender { save = function(_, dir) saved = saved + 1; return m:save(dir) end }
      -- 16 KiB buckets: many requests per engine, the 128 KiB embedding in row slices
      local r = assert(tx:push({ proc, thread }, { version = "h1", method = "http", bucket_bytes = 16384 }))
      eq({ r.methods, r.versions, r.weight_version, saved }, { { "http", "http" }, { "h1", "h1" }, "h1", 1 })
      local by_http = answer(proc)
      eq(by_http.version, "h1")
      ok(by_http.ids[1] ~= before.ids[1] or by_http.ids[2] ~= before.ids[2], "the other model answers differently")
      eq(answer(thread), by_http)
      r = assert(tx:push({ proc }, { version = "h1", method = "disk" }))
      eq(r.methods, { "disk" })
      eq(answer(proc), by_http)   -- tokens and log-probs bit for bit
      -- one bucket (the default 64 MiB) does the same
      assert(tx:push({ proc }, { version = "h2", method = "http" }))
      local one = answer(proc)
      eq({ one.ids, one.logprobs, one.version }, { by_http.ids, by_http.logprobs, "h2" })
      -- an engine that refuses (wrong token): the push fails naming it; nothing installed there
      local bad = ws.receiver { url = proc.url, api_key = "not-the-token" }
      local s, serr = tx:push({ thread, bad }, { version = "h3", method = "http" })
      ok(s == nil and serr:find("engine 2 (" .. proc.url .. ")", 1, true) and serr:find("HTTP 401", 1, true), serr)
      eq(proc:weight_receiver():version(), "h2")
      local big, berr = tx:push({ proc }, { version = "x", method = "http", bucket_bytes = 2 ^ 30 })
      ok(big == nil and berr:find("bucket_bytes 1073741824 is over", 1, true), berr)
      raises(function() tx:push({ {} }, { version = "x", method = "http" }) end, "engines[1] has no url (method 'http'")
      raises(function() ws.sender({}):push({ proc }, { version = "x", method = "http" }) end,
        "the weight source cannot send by 'http' (it has no save)")
    end)
    proc:stop()
    thread:stop()
    if not ok_run then error(err, 0) end
  end, { timeout = 120 })

  it("the disk path removes its directory even under a path with spaces and quotes, and nothing else", function()
    local base = tmpdir(true)
    local weird = base .. [[/it's a "tmp" dir]]
    assert(os.execute("mkdir -p " .. rl.process.quote(weird)))
    -- what a mis-quoted `rm -rf` of "<weird>/rlhost-weights-..." would hit first
    for _, decoy in ipairs { base .. "/it", base .. "/a", weird .. "/keep" } do
      assert(os.execute("mkdir -p " .. rl.process.quote(decoy)))
    end
    local eng = assert(rl.engine.start { model = STORIES, threads = 1, serve = false })
    local tr = rl.trainer.new { model = STORIES, optimizer = { lr = 1e-2 } }
    assert(tr:train { tokens = { { 1, 400, 401, 402 } }, response_lengths = { 2 }, rewards = { 1 },
                      loss_masks = { { 1, 1 } } })
    local s, err = tr:sync(eng, { method = "disk", tmp_dir = weird, version = "q'1 \"x\"" })
    eng:stop()
    ok(s, err)
    eq(s.methods, { "disk" })
    eq(s.weight_version, "q'1 \"x\"")
    eq(entries(weird), { "keep" })                  -- the weights' directory is gone
    eq(entries(base), { "a", "it", [[it's a "tmp" dir]] })   -- and nothing beside it
  end, { timeout = 60 })

  it("keep_going: an engine that is gone costs only itself; the guard runs around each engine", function()
    local a = assert(rl.engine.start { model = STORIES, threads = 1 })
    local b = assert(rl.engine.start { model = STORIES, threads = 1 })
    local tr = rl.trainer.new { model = STORIES }
    local ok_run, err = pcall(function()
      local gone = "http://127.0.0.1:9"
      local seen = {}
      local r = assert(tr:sync({ a, gone, b }, { version = "g1", method = "shm", timeout = 5, keep_going = true,
        guard = function(i, rx)
          seen[#seen + 1] = "start " .. i .. " " .. rx.url
          return function() seen[#seen + 1] = "end " .. i end
        end }))
      eq(r.versions, { "g1", false, "g1" })
      eq(r.methods, { "shm", "shm", "shm" })
      ok(r.errors[2]:find("init_weights_shm", 1, true) and r.errors[2]:find("127.0.0.1:9", 1, true), r.errors[2])
      eq(seen, { "start 1 " .. a.url, "end 1", "start 2 " .. gone, "end 2", "start 3 " .. b.url, "end 3" })
      eq({ a:stats().weight_version, b:stats().weight_version }, { "g1", "g1" })
      -- without keep_going the first failure ends the sync, naming the engine
      local s, serr = tr:sync({ gone, a }, { version = "g2", method = "shm", timeout = 5 })
      ok(s == nil and serr:find("sync to engine 1 failed: init_weights_shm", 1, true), serr)
      eq(a:stats().weight_version, "g1")
    end)
    a:stop()
    b:stop()
    if not ok_run then error(err, 0) end
  end, { timeout = 60 })

  it("names misuse", function()
    local tr = rl.trainer.new { model = STORIES }
    raises(function() tr:sync({ 42 }) end, "rl.trainer.Trainer:sync: engines[1] is neither an rl.engine")
    raises(function() tr:sync({ {} }, { method = "shm" }) end, "engines[1] has no url")
    raises(function() tr:sync({ "http://x" }, { method = "memory" }) end, "bad argument 'opts.method'")
    raises(function() tr:sync({ "http://x" }, { methd = "disk" }) end, "bad argument 'opts.methd' (unknown option")
    raises(function() ws.sender(nil) end, "rl.weight_sync.sender: bad argument #1 'source'")
  end)
end)
