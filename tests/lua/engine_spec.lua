-- rl.engine: the native engine from Lua, in this process (thread mode) and as a
-- child `rlhost engine` (process mode). Both take and return SGLang's /generate shapes.
local rl = require "rl"

local STORIES = test_data("models/stories260K")

local function reference()
  local f = assert(io.open(STORIES .. "/reference_outputs.json"))
  local ref = rl.json.decode(f:read("*a"))
  f:close()
  return ref
end

local GREEDY = { temperature = 0, max_new_tokens = 6, ignore_eos = true }

describe("rl.engine thread mode", function()
  it("generates the reference greedy tokens in process, with meta_info", function()
    local eng = assert(rl.engine.start { model = STORIES, threads = 1, port = 0 })
    local ref = reference()
    local out = assert(eng:generate { input_ids = { 1 }, sampling_params = GREEDY, return_logprob = true })
    for i = 1, 6 do eq(out.output_ids[i], ref.greedy.ids[i + 1]) end
    eq(out.meta_info.finish_reason.type, "length")
    eq(out.meta_info.completion_tokens, 6)
    eq(#out.meta_info.output_token_logprobs, 6)
    ok(out.meta_info.output_token_logprobs[1][1] <= 0)
    ok(type(out.text) == "string")
    -- the HTTP server of the same engine answers too
    ok(eng.url:match("^http://127%.0%.0%.1:%d+$"), eng.url)
    local info = assert(rl.http.json(rl.http.get(eng.url .. "/get_model_info")))
    eq(info.model_path, STORIES)
    local st = assert(eng:stats())
    ok(st.generation_tokens_total >= 6)
    eq(st.num_running, 0)
    eng:stop()
    eng:stop()  -- idempotent
  end, { timeout = 120 })

  it("runs batches and many concurrent tasks", function()
    local eng = assert(rl.engine.start { model = STORIES, threads = 1, serve = false })
    eq(eng.url, nil)
    local outs = assert(eng:generate { text = { "Once upon a time", "The dog" }, sampling_params = GREEDY })
    eq(#outs, 2)
    local tasks = {}
    for i = 1, 8 do
      tasks[i] = rl.spawn(function()
        return assert(eng:generate { input_ids = { 1 }, sampling_params = { max_new_tokens = 4, sampling_seed = i } })
      end)
    end
    for _, r in ipairs(rl.wait_all(tasks)) do eq(r.meta_info.completion_tokens, 4) end
    eng:stop()
  end, { timeout = 120 })

  it("returns nil, err for bad requests and raises on misuse", function()
    local eng = assert(rl.engine.start { model = STORIES, threads = 1, serve = false })
    local out, err = eng:generate { input_ids = { 1 }, sampling_params = { temprature = 1 } }
    eq(out, nil)
    ok(err:find("temprature", 1, true), err)
    out, err = eng:generate { input_ids = {} }
    eq(out, nil)
    ok(err:find("input_ids", 1, true), err)
    raises(function() eng:generate("hi") end, "bad argument #1 'req' (table expected, got string)")
    raises(function() rl.engine.start { model = STORIES, mode = "fork" } end, "opts.mode")
    raises(function() rl.engine.start { model = STORIES, prot = 1 } end,
      "rl.engine.start: bad argument 'opts.prot' (unknown option; did you mean 'port'?)")
    raises(function() rl.engine.start {} end, "rl.engine.start: bad argument 'opts.model' (string expected, got nil)")
    raises(function() rl.engine.start { model = STORIES, port = 70000 } end,
      "rl.engine.start: bad argument 'opts.port' (integer 0-65535 expected, got 70000)")
    raises(function() rl.engine.start { model = STORIES, max_running_requests = 0 } end,
      "rl.engine.start: bad argument 'opts.max_running_requests' (integer >= 1 expected, got 0)")
    raises(function() rl.engine.start { model = STORIES, threads = "2" } end,
      "rl.engine.start: bad argument 'opts.threads' (integer expected, got '2')")
    raises(function() rl.engine.launch { model = STORIES, dtype = "fp8" } end,
      "rl.engine.launch: bad argument 'opts.dtype' ('auto', 'float32', 'bfloat16', 'float16' expected, got 'fp8')")
    -- still serving
    assert(eng:generate { input_ids = { 1 }, sampling_params = GREEDY })
    eng:stop()
    raises(function() eng:generate { input_ids = { 1 } } end, "rl.engine.Engine:generate: the engine was stopped")
  end, { timeout = 120 })

  it("declares its options once: rl.engine.options' defaults are the native engine's", function()
    local options = require "rl.engine.options"
    local cxx = rl.json.decode(rl.engine._native().defaults())
    local n = 0
    for _, o in ipairs(options.NATIVE) do
      if cxx[o.name] ~= nil then
        eq(o.default, cxx[o.name], o.name)
        n = n + 1
      end
    end
    eq(n, 29)   -- every engine and server option with a C++ default
    -- a process engine's child gets the flags of the options given, nothing else
    eq(options.argv { model = "m", mode = "process", threads = 2, enable_prefix_cache = false,
                      disable_cuda_graph = true, cuda_graph_max_bs = 8, ready_timeout = 9 },
      { "--threads=2", "--disable-prefix-cache", "--cuda-graph-max-bs=8", "--disable-cuda-graph" })
    -- `rlhost engine`'s flags come from the same list, with the command line's defaults
    local spec = options.cli_spec {}
    local by = {}
    for _, f in ipairs(spec) do by[f.name] = f end
    eq({ by.port.default, by.device.default, by.disable_prefix_cache.default, by.mode, by.model.required },
       { 30000, "cpu", false, nil, true })
    -- the LuaLS stub lists exactly the declared options (native and vLLM)
    local stub = read_file(assert(package.searchpath("rl._meta.engine", package.path)))
    local block = assert(stub:match("%-%-%-@class rl%.engine%.StartOptions\n(.-)\n\n"))
    local listed, declared = {}, {}
    for name in block:gmatch("%-%-%-@field ([%w_]+)") do listed[#listed + 1] = name end
    for _, list in ipairs { options.NATIVE, options.VLLM } do
      for _, o in ipairs(list) do declared[o.name] = true end
    end
    local names = {}
    for name in pairs(declared) do names[#names + 1] = name end
    table.sort(names)
    table.sort(listed)
    eq(listed, names)
  end)

  it("fails with nil, err for a missing model", function()
    local eng, err = rl.engine.start { model = "/nonexistent/model/dir" }
    eq(eng, nil)
    ok(err:find("/nonexistent/model/dir", 1, true), err)
  end)

  it("cancelling a waiting task aborts its request", function()
    local eng = assert(rl.engine.start { model = STORIES, threads = 1, serve = false })
    local before = eng:stats().requests_aborted
    local t = rl.spawn(function()
      return eng:generate { input_ids = { 1 }, sampling_params = { max_new_tokens = 510, ignore_eos = true } }
    end)
    local deadline = rl.now() + 30
    while eng:stats().num_running == 0 and rl.now() < deadline do rl.sleep(0.02) end
    eq(eng:stats().num_running, 1)
    t:cancel()
    deadline = rl.now() + 30
    while eng:stats().num_running > 0 and rl.now() < deadline do rl.sleep(0.02) end
    eq(eng:stats().num_running, 0)
    eq(eng:stats().requests_aborted, before + 1)  -- aborted, not run to its end
    eng:stop()
  end, { timeout = 120 })

  it("flushes the cache and updates weights from disk without blocking the loop", function()
    local eng = assert(rl.engine.start { model = STORIES, threads = 1, serve = false })
    eq(eng:flush_cache(), true)
    local r = assert(eng:update_weights_from_disk(STORIES, "step-1"))
    eq(r.weight_version, "step-1")
    local out = assert(eng:generate { input_ids = { 1 }, sampling_params = GREEDY })
    eq(out.meta_info.weight_version, "step-1")
    local bad, err = eng:update_weights_from_disk("/nonexistent/ckpt")
    eq(bad, nil)
    ok(err:find("/nonexistent/ckpt", 1, true), err)
    eng:stop()
  end, { timeout = 120 })

  it("stop_within: a stopped engine at once; a stalled scheduler is abandoned at the deadline", function()
    local eng = assert(rl.engine.start { model = STORIES, threads = 1, port = 0 })
    eq(eng:stop_within(30), true)
    eq(eng:stop_within(30), true)   -- idempotent
    local stuck = assert(rl.engine.start { model = STORIES, threads = 1, port = 0 })
    local url = stuck.url
    local body = rl.json.encode { input_ids = { 1 }, sampling_params = { max_new_tokens = 500, ignore_eos = true } }
    local waiting = rl.spawn(function()
      return { rl.http.request { method = "POST", url = url .. "/generate", body = body, timeout = 60 } }
    end)
    local deadline = rl.now() + 30
    while stuck:stats().num_running == 0 and rl.now() < deadline do rl.sleep(0.02) end
    stuck:stall(3600)
    local t0 = rl.now()
    rl.sleep(0.3)
    -- its HTTP server still answers; the scheduler does not step
    eq(rl.http.get(url .. "/health", { timeout = 10 }).status, 200)
    local before = stuck:stats().steps
    rl.sleep(0.3)
    eq(stuck:stats().steps, before)
    local okk, err = stuck:stop_within(1)
    eq(okk, false)
    ok(err:find("did not stop within 1 s: abandoned", 1, true), err)
    -- a guard against a hang (stop_within(1) returns after ~1 s), not a speed check
    ok(rl.now() - t0 < 30, "stop_within returned at its deadline")
    -- the server closed its connections: the waiting request ended, well before its timeout
    local r = waiting:wait()
    ok(r[1] == nil or r[1].status ~= 200, tostring(r[2]))
    ok(rl.now() - t0 < 30, "the request ended when the engine was abandoned")  -- its timeout is 60 s
    ok(not pcall(stuck.stall, stuck, 1), "a stopped engine cannot be stalled")
  end, { timeout = 120 })
end)

describe("rl.engine process mode", function()
  it("spawns rlhost engine, generates over HTTP and stops it", function()
    local eng = assert(rl.engine.start { model = STORIES, mode = "process", threads = 1 })
    ok(eng.url:match("^http://127%.0%.0%.1:%d+$"), eng.url)
    local ref = reference()
    local out = assert(eng:generate { input_ids = { 1 }, sampling_params = GREEDY })
    for i = 1, 6 do eq(out.output_ids[i], ref.greedy.ids[i + 1]) end
    local st = assert(eng:stats())
    ok(st.generation_tokens_total >= 6)
    local bad, err = eng:generate { input_ids = { 1 }, sampling_params = { top_p = 7 } }
    eq(bad, nil)
    ok(err:find("HTTP 400", 1, true) and err:find("top_p", 1, true), err)
    eq(eng:flush_cache(), true)
    local pid = eng.pid
    eng:stop()
    eq(eng.pid, nil)
    ok(not rl.process.signal_pid(pid, 0), "the child is gone")
    -- stop_within: SIGKILL, reaped within the deadline (a stopped process too)
    local eng2 = assert(rl.engine.start { model = STORIES, mode = "process", threads = 1 })
    local pid2 = eng2.pid
    rl.process.signal_pid(pid2, 19)   -- SIGSTOP
    eq(eng2:stop_within(10), true)
    eq(eng2.pid, nil)
    ok(not rl.process.signal_pid(pid2, 0), "the child is gone")
  end, { timeout = 180 })

  it("pins a process engine, every thread of it, to opts.cpus", function()
    local last = rl.process.cpus():match("(%d+)$")   -- the last CPU this machine lets us use
    local eng = assert(rl.engine.start { model = STORIES, mode = "process", threads = 2, cpus = last })
    assert(eng:generate { input_ids = { 1 }, sampling_params = GREEDY })   -- its pools have started
    local n = 0
    for tid in io.popen("ls /proc/" .. eng.pid .. "/task"):lines() do
      local f = io.open(("/proc/%d/task/%s/status"):format(eng.pid, tid))
      if f then
        local st = f:read("*a")
        f:close()
        eq(st:match("Cpus_allowed_list:%s*(%S+)"), last, "thread " .. tid)
        n = n + 1
      end
    end
    ok(n >= 3, n .. " threads")
    eng:stop()
    -- this process pinned (a recipe's --trainer-cpus): an engine without a list of its own
    -- gets the CPUs the process had before, not the pinned ones
    local all = rl.process.cpus()
    rl.process.set_cpus(last)
    local eng2 = assert(rl.engine.start { model = STORIES, mode = "process", threads = 1 })
    local f = assert(io.open("/proc/" .. eng2.pid .. "/status"))
    local st = f:read("*a")
    f:close()
    eng2:stop()
    rl.process.set_cpus(all)
    eq(st:match("Cpus_allowed_list:%s*(%S+)"), all)
    -- a thread engine shares this process: cpus is refused, naming the way
    local okc, err = pcall(rl.engine.start, { model = STORIES, cpus = last })
    eq(okc, false)
    ok(tostring(err):find("opts.cpus", 1, true) and tostring(err):find("process", 1, true), err)
  end, { timeout = 180 })

  it("runs a process engine, every thread of it, at opts.nice", function()
    local function nice_of(pid, tid)   -- field 19 of /proc/PID/task/TID/stat (after "pid (comm) ")
      local f = io.open(("/proc/%d/task/%s/stat"):format(pid, tid))
      if not f then return nil end
      local st = f:read("*a")
      f:close()
      local fields = {}
      for w in st:match("%) (.*)$"):gmatch("%S+") do fields[#fields + 1] = w end
      return tonumber(fields[17])
    end
    local eng = assert(rl.engine.start { model = STORIES, mode = "process", threads = 2, nice = 19 })
    assert(eng:generate { input_ids = { 1 }, sampling_params = GREEDY })   -- its pools have started
    local n = 0
    for tid in io.popen("ls /proc/" .. eng.pid .. "/task"):lines() do
      local v = nice_of(eng.pid, tid)
      if v then
        eq(v, 19, "thread " .. tid)
        n = n + 1
      end
    end
    ok(n >= 3, n .. " threads")
    eng:stop()
    eq(nice_of(rl.process.pid(), rl.process.pid()), 0, "this process keeps its priority")
    -- out of range, or a thread engine (which shares this process's priority): refused, naming it
    local okr, err = pcall(rl.engine.start, { model = STORIES, mode = "process", nice = -5 })
    eq(okr, false)
    ok(tostring(err):find("opts.nice", 1, true), err)
    local okt, terr = pcall(rl.engine.start, { model = STORIES, nice = 10 })
    eq(okt, false)
    ok(tostring(terr):find("opts.nice", 1, true) and tostring(terr):find("process", 1, true), terr)
  end, { timeout = 180 })

  it("reports a child that cannot start, with its log", function()
    local eng, err = rl.engine.start { model = "/nonexistent/model/dir", mode = "process" }
    eq(eng, nil)
    ok(err:find("exited", 1, true) and err:find("/nonexistent/model/dir", 1, true), err)
  end, { timeout = 120 })
end)
