-- tools/profile_rollout.lua and tools/analyze_profile.lua against fake workers
-- (rl.http.serve) behind a real router, and synthetic SGLang-shaped traces.
-- The tools run as child processes (rl.process.run), as a user runs them.
local rl = require "rl"
local write = write_file  -- spec.lua helpers

local SRC = os.getenv("RLHOST_SOURCE_DIR") or "."
local BIN = os.getenv("RLHOST_BIN") or rl.process.self()
local gen = dofile(SRC .. "/tests/lua/support/chrome_trace.lua")

local function tool(name, ...)
  local code, out = rl.process.run({ BIN, "--no-control", SRC .. "/tools/" .. name .. ".lua", ... }, { timeout = 60 })
  assert(code, out)
  return code, out
end

-- A fake engine: records /start_profile and /stop_profile bodies; `fail` answers 500.
-- `vllm`: answers as vLLM does (/v1/models owned_by "vllm", an empty 200, 409 while a
-- session is open) so that the body vLLM gets is checked where vLLM is not installed
-- (tests/vllm/test_vllm_profile.py runs the real one).
local function fake_worker(fail, vllm)
  local w = { bodies = {} }
  w.srv = assert(rl.http.serve {
    port = 0,
    handler = function(req)
      if req.path == "/health" then return "ok" end
      if req.path == "/v1/models" and vllm then return { status = 200, body = { data = { { id = "m", owned_by = "vllm" } } } } end
      if (req.path == "/start_profile" or req.path == "/stop_profile") and vllm then
        w.bodies[#w.bodies + 1] = { path = req.path, body = rl.json.decode(req.body) }
        if req.path == "/start_profile" and w.open then
          return { status = 409, body = { error = { message = "A profiling session is already active." } } }
        end
        w.open = req.path == "/start_profile"
        return { status = 200, body = "" }
      end
      if req.path == "/start_profile" or req.path == "/stop_profile" then
        w.bodies[#w.bodies + 1] = { path = req.path, body = rl.json.decode(req.body) }
        if fail then return { status = 500, body = { error = { message = "profiler exploded" } } } end
        return { status = 200, body = { success = true, message = req.path == "/start_profile" and "Start profiling." or "Stop profiling." } }
      end
      return { status = 404, body = "no" }
    end,
  })
  w.url = w.srv:url()
  return w
end

describe("profile_rollout", function()
  it("starts and stops every worker of the router with SGLang's body; a failing worker is reported", function()
    local a, b, bad = fake_worker(), fake_worker(), fake_worker(true)
    local router = assert(rl.router.start { workers = { a.url, b.url, bad.url }, policy = "round_robin" })
    local code, out = tool("profile_rollout", "--router-url", router.url, "--action", "start", "--num-steps", "4",
      "--output-dir", "/tmp/x_prof", "--activities", "CPU", "GPU", "--with-stack", "--record-shapes")
    eq(code, 0, out)
    ok(out:find("3 workers: 2 ok, 1 failed", 1, true), out)
    ok(out:find("profiler exploded", 1, true), out)
    ok(out:find(bad.url, 1, true) and out:find("FAIL 500", 1, true), out)
    for _, w in ipairs { a, b, bad } do
      eq(#w.bodies, 1)
      local body = w.bodies[1].body
      eq(w.bodies[1].path, "/start_profile")
      eq(body.output_dir, "/tmp/x_prof")
      eq(body.num_steps, 4)
      eq(body.activities, { "CPU", "GPU" })
      eq(body.with_stack, true)
      eq(body.record_shapes, true)
      eq(body.profile_by_stage, false)
    end
    code, out = tool("profile_rollout", "--router-url", router.url, "--action", "stop")
    eq(code, 0, out)
    eq(a.bodies[2].path, "/stop_profile")
    eq(a.bodies[2].body, {})
    -- per-worker directories
    code, out = tool("profile_rollout", "--worker-urls", a.url, "--per-worker-dirs", "--output-dir", "/tmp/p")
    eq(code, 0, out)
    ok(a.bodies[3].body.output_dir:match("^/tmp/p/127%.0%.0%.1_%d+$"), a.bodies[3].body.output_dir)
    router:stop()
    for _, w in ipairs { a, b, bad } do w.srv:stop() end
  end, { timeout = 120 })

  it("gives vLLM workers vLLM's body (max_iterations, profile_prefix) next to SGLang-shaped ones", function()
    local v, sg = fake_worker(false, true), fake_worker()
    local router = assert(rl.router.start { workers = { v.url, sg.url }, policy = "round_robin" })
    local code, out = tool("profile_rollout", "--router-url", router.url, "--num-steps", "4", "--per-worker-dirs")
    eq(code, 0, out)
    ok(out:find("vLLM: started for 4 iterations", 1, true), out)
    ok(out:find("(vLLM: its torch_profiler_dir)", 1, true), out)
    local want_prefix = v.url:gsub("^http://", ""):gsub(":", "_")
    eq(v.bodies[1].body, { max_iterations = 4, profile_prefix = want_prefix })
    eq(sg.bodies[1].body.num_steps, 4)
    code, out = tool("profile_rollout", "--worker-urls", v.url, "--num-steps", "0")
    eq(code, 1, out)
    ok(out:find("FAIL 409", 1, true) and out:find("run --action stop, then start again", 1, true), out)
    eq(v.bodies[2].body, {})
    code, out = tool("profile_rollout", "--worker-urls", v.url, "--action", "stop")
    eq(code, 0, out)
    ok(out:find("vLLM: stopped", 1, true), out)
    -- --engine sglang overrides the detection
    code, out = tool("profile_rollout", "--worker-urls", v.url, "--engine", "sglang")
    eq(code, 0, out)
    eq(v.bodies[4].body.output_dir, "/tmp/sglang_profile")
    router:stop()
    v.srv:stop()
    sg.srv:stop()
  end, { timeout = 120 })

  it("exits 1 with a hint when no worker succeeds, none is registered, or the router is unreachable", function()
    local bad = fake_worker(true)
    local code, out = tool("profile_rollout", "--worker-urls", bad.url)
    eq(code, 1, out)
    ok(out:find("1 worker: 0 ok, 1 failed", 1, true), out)
    bad.srv:stop()

    local empty = assert(rl.router.start { workers = {} })
    code, out = tool("profile_rollout", "--router-url", empty.url)
    eq(code, 1, out)
    ok(out:find("lists no workers", 1, true), out)
    empty:stop()

    code, out = tool("profile_rollout", "--router-url", "http://127.0.0.1:1")
    eq(code, 1, out)
    ok(out:find("--router-url http://127.0.0.1:1: cannot reach the router", 1, true), out)
    ok(out:find("hint", 1, true), out)

    code, out = tool("profile_rollout", "--action", "start")
    eq(code, 2, out)
    ok(out:find("--router-url", 1, true), out)
  end, { timeout = 120 })
end)

describe("analyze_profile", function()
  local dir
  before_each(function()
    dir = tmpdir(true)
    write(dir .. "/1700000000.1-TP-0.trace.json.gz", rl.gzip.compress(rl.json.encode(gen.trace { rank = 0, extra_gap = 500 })))
    write(dir .. "/1700000000.1-TP-1.trace.json", rl.json.encode(gen.trace { rank = 1, extra_gap = 2000 }))
  end)

  it("finds categories, busy/idle and the biggest gap with its cause (library)", function()
    local files = assert(rl.profile.find_traces(dir))
    eq(#files, 2)
    local tr = assert(rl.profile.load(files[1]))
    eq(tr.rank, 0)
    local r = assert(rl.profile.analyze(tr, { top_n = 3 }))
    local want = gen.expected { extra_gap = 500 }
    eq(r.mode, "gpu")
    near(r.busy, want.busy, 1e-6)
    near(r.span, want.span, 1e-6)
    near(r.util, want.util, 1e-9)
    eq(r.categories[1].name, "gemm")
    near(r.categories[1].time, 5 * 400, 1e-6)
    local by = {}
    for _, c in ipairs(r.categories) do by[c.name] = c.time end
    for _, k in ipairs(gen.KERNELS) do near(by[k[5]], 5 * (k[2] - k[1]), 1e-6, k[5]) end
    eq(#r.top_ops, 3)
    near(r.gaps[1].len, want.biggest_gap, 1e-6)
    eq(r.gaps[1].cause, "sampler::sample")
    eq(r.gaps[2].cause, "scheduler: recv_requests")
    eq(r.lanes[1].name, "7")
  end)

  it("prints the report and a cross-rank table with a spread warning (tool)", function()
    local code, out = tool("analyze_profile", "--profile-dir", dir, "--all-ranks", "--top-n", "5", "--json", dir .. "/r.out")
    eq(code, 0, out)
    ok(out:find("cross-rank summary", 1, true), out)
    ok(out:find("utilisation differs by", 1, true), out)
    ok(out:find("sampler::sample [cpu_op]", 1, true), out)
    ok(out:find("nvjet_tst", 1, true), out)
    local f = assert(io.open(dir .. "/r.out"))
    local rep = rl.json.decode(f:read("*a"))
    f:close()
    eq(#rep, 2)
    eq(rep[2].rank, 1)
    code, out = tool("analyze_profile", "--profile-dir", dir, "--rank", "1")
    eq(code, 0, out)
    ok(out:find("TP-1.trace.json  (rank 1", 1, true), out)
    ok(not out:find("TP-0", 1, true), out)
    code, out = tool("analyze_profile", "--profile-dir", dir, "--rank", "5")
    eq(code, 1, out)
    ok(out:find("ranks found: 0, 1", 1, true), out)
  end, { timeout = 120 })

  it("reads vLLM's step annotations and names the innermost Python frame of a gap", function()
    local function x(name, cat, ts, dur, tid) return { ph = "X", name = name, cat = cat, ts = ts, dur = dur, pid = 1, tid = tid or 1 } end
    local ev = {
      x("execute_context_2(12)_generation_0(0)", "user_annotation", 0, 100),
      x("_C::onednn_mm", "cpu_op", 10, 80),
      x("threading.py(1002): _bootstrap", "python_function", 0, 1000, 2),
      x("selectors.py(415): select", "python_function", 85, 330, 2),
      x("execute_context_0(0)_generation_2(2)", "user_annotation", 400, 50),
      x("vllm::unified_attention_with_output", "cpu_op", 405, 40),
      x("execute_context_0(0)_generation_2(2)", "user_annotation", 500, 70),
      x("aten::silu", "cpu_op", 505, 60),
    }
    local r = assert(rl.profile.analyze({ path = "vllm", events = ev }))
    eq(r.mode, "cpu")
    eq(r.categories[1].name, "gemm")
    eq(#r.steps, 2)
    eq({ r.steps[1].kind, r.steps[1].count, r.steps[1].tokens, r.steps[1].mean_batch }, { "prefill", 1, 12, 2 })
    eq({ r.steps[2].kind, r.steps[2].count, r.steps[2].total, r.steps[2].max }, { "decode", 2, 120, 70 })
    near(r.gaps[1].len, 315, 1e-9)
    eq(r.gaps[1].cause, "selectors.py(415): select")  -- not the thread's bootstrap frame around it
    eq(rl.profile.rank_of("/d/127.0.0.1_8000_rank0.1795675864735858711.pt.trace.json.gz"), 0)
  end)

  it("names the argument or file on bad input", function()
    local empty = tmpdir(true)
    local code, out = tool("analyze_profile", "--profile-dir", empty)
    eq(code, 1, out)
    ok(out:find("--profile-dir '" .. empty .. "' holds no trace files", 1, true), out)
    code, out = tool("analyze_profile", "--profile-dir", empty .. "/nope")
    eq(code, 1, out)
    ok(out:find("is not a directory", 1, true), out)

    write(empty .. "/bad-TP-0.trace.json", '{"traceEvents": [1, 2')
    code, out = tool("analyze_profile", "--profile-dir", empty)
    eq(code, 1, out)
    ok(out:find(empty .. "/bad-TP-0.trace.json: not a Chrome trace", 1, true), out)
    write(empty .. "/bad-TP-0.trace.json", rl.gzip.compress("{}"):sub(1, 12))
    local tr, err = rl.profile.load(empty .. "/bad-TP-0.trace.json")
    eq(tr, nil)
    ok(err:find("bad-TP-0.trace.json: gzip: truncated", 1, true), err)
    write(empty .. "/bad-TP-0.trace.json", '{"other": 1}')
    tr, err = rl.profile.load(empty .. "/bad-TP-0.trace.json")
    ok(err:find("no 'traceEvents' list", 1, true), err)
    write(empty .. "/bad-TP-0.trace.json", '[{"rank": 0, "util": 0.5}]')
    tr, err = rl.profile.load(empty .. "/bad-TP-0.trace.json")
    ok(err:find("items are not trace events", 1, true), err)
    write(empty .. "/bad-TP-0.trace.json", '{"traceEvents": [{"ph": "M", "name": "x"}]}')
    local r
    r, err = rl.profile.analyze(assert(rl.profile.load(empty .. "/bad-TP-0.trace.json")))
    eq(r, nil)
    ok(err:find("no kernel or cpu_op events", 1, true), err)
  end, { timeout = 120 })
end)
