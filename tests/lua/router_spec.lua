local rl = require "rl"

-- Workers are real HTTP servers in this process (rl.http.serve); the router
-- runs on its own thread (thread mode) or as a child rlhost (process mode).
local function worker(name)
  return assert(rl.http.serve {
    port = 0,
    handler = function(req)
      if req.path == "/health" then return "ok" end
      if req.path == "/metrics" then return "# HELP sglang:num_running_reqs r\n# TYPE sglang:num_running_reqs gauge\nsglang:num_running_reqs 0\n" end
      return { body = { worker = name, path = req.path } }
    end,
  })
end

-- A stalled engine: holds every request but /health (30 s at most) until released.
-- :hold(router_url) sends one /generate through the router and returns once this worker
-- holds it (the task answers the client's response).
local function stalled(name)
  local st = { released = false, held = 0 }
  local srv = assert(rl.http.serve { port = 0, handler = function(req)
    if req.path == "/health" then return "ok" end
    st.held = st.held + 1
    for _ = 1, 600 do
      if st.released then break end
      rl.sleep(0.05)
    end
    return { body = { worker = name, text = "late" } }
  end })
  function st:url() return srv:url() end
  function st:stop() srv:stop() end
  function st:release() self.released = true end
  function st:hold(router_url)
    local req = rl.spawn(function() return rl.http.post(router_url .. "/generate", { text = "x" }, { timeout = 60 }) end)
    for _ = 1, 200 do if self.held > 0 then break end rl.sleep(0.02) end
    eq(self.held, 1, name .. " holds the request")
    return req
  end
  return st
end

describe("rl.router", function()
  it("thread mode: routes, adds, removes, lists, stops", function()
    local w1, w2 = worker("w1"), worker("w2")
    local r = assert(rl.router.start { workers = { w1:url() }, policy = "round_robin", health_interval = 0.5 })
    eq(r.mode, "thread")
    ok(r.url:match("^http://127%.0%.0%.1:%d+$"))
    local out = rl.http.json(rl.http.post(r.url .. "/generate", { text = "hi" }))
    eq(out.worker, "w1")
    local added = assert(r:add(w2:url()))
    eq(added.url, w2:url())
    local dup, err = r:add(w2:url())
    eq(dup, nil)
    ok(err:find("already registered"))
    eq(added.status, "pending")     -- not probed yet: no traffic while a probed worker can take it
    eq(added.is_healthy, false)
    for _ = 1, 500 do
      local ws = r:workers()
      if ws[1].status ~= "pending" and ws[2].status ~= "pending" then break end
      rl.sleep(0.01)
    end
    local seen = {}
    for _ = 1, 4 do seen[rl.http.json(rl.http.post(r.url .. "/generate", { text = "x" })).worker] = true end
    ok(seen.w1 and seen.w2)
    local ws = r:workers()
    eq(#ws, 2)
    eq(ws[1].status, "healthy")
    eq(ws[1].is_healthy, true)
    eq(type(ws[1].load), "number")
    ok(r:metrics():find("rlhost_router_requests_total", 1, true))
    eq(r:remove(w1:url()), true)
    eq(r:remove(w1:url()), false)
    eq(#r:workers(), 1)
    r:stop()
    local resp = rl.http.get(r.url .. "/health", { timeout = 1 })
    eq(resp, nil, "stopped routers do not answer")
    w1:stop()
    w2:stop()
  end)

  it("declares its options once: rl.router.options' defaults are the C++ router's, and rlhost router's flags", function()
    local options = require "rl.router.options"
    local cxx = rl.json.decode(require("rl._core").router.defaults())
    local n = 0
    for _, o in ipairs(options.ROUTER) do
      if cxx[o.name] ~= nil then
        eq(o.default, cxx[o.name], o.name)
        n = n + 1
      end
    end
    eq(n, 26)   -- every option but workers, the PD lists and policies (nil: the policy) and the Lua-side ones
    local spec, by = options.cli_spec {}, {}
    for _, f in ipairs(spec) do by[f.name] = f end
    eq({ by.port.default, by.worker.type, by.worker.of, by.workers, by.mode, by.max_tree_chars.default },
       { 30000, "list", "string", nil, nil, 8388608 })
    -- a process-mode router's child gets a flag for every option given, in rlhost router's names
    eq(options.argv { workers = { "http://a:1", "http://b:2" }, allow_remote = false, max_retries = 1, mode = "process",
                      log_level = "debug" },
       { "--no-allow-remote", "--worker=http://a:1", "--worker=http://b:2", "--max-retries=1", "--log-level=debug" })
    -- the LuaLS stub lists exactly the declared options
    local stub = read_file(assert(package.searchpath("rl._meta.router", package.path)))
    local block = assert(stub:match("%-%-%-@class rl%.router%.StartOpts\n(.-)\n\n"))
    local listed, declared = {}, {}
    for name in block:gmatch("%-%-%-@field ([%w_]+)") do listed[#listed + 1] = name end
    for _, o in ipairs(options.ROUTER) do declared[#declared + 1] = o.name end
    table.sort(listed)
    table.sort(declared)
    eq(listed, declared)
  end)

  it("bad options raise, naming the option and the choices", function()
    raises(function() rl.router.start { policy = "fastest" } end, "opts.policy")
    raises(function() rl.router.start { policy = "fastest" } end, "cache_aware")
    raises(function() rl.router.start { wokers = {} } end,
      "rl.router.start: bad argument 'opts.wokers' (unknown option; did you mean 'workers'?)")
    raises(function() rl.router.start { max_retries = 1.5 } end,
      "rl.router.start: bad argument 'opts.max_retries' (integer expected, got 1.5)")
    raises(function() rl.router.start { workers = { 42 } } end,
      "rl.router.start: bad argument 'opts.workers[1]' (URL string expected, got number)")
    raises(function() rl.router.start { mode = "fork" } end, "opts.mode")
    raises(function() rl.router.start { workers = { "ftp://x" } } end, "bad worker URL")
    raises(function() rl.router.start { health_interval = -1 } end, "opts.health_interval")
  end)

  it("a busy port is nil, err", function()
    local r = assert(rl.router.start {})
    local r2, err = rl.router.start { port = r.port }
    eq(r2, nil)
    ok(err:find("cannot listen on 127.0.0.1:" .. r.port, 1, true))
    r:stop()
  end)

  it("PD mode: options, the bootstrap fields sent to both workers, the decode's answer merged", function()
    local options = require "rl.router.options"
    -- --prefill's words (URL [BOOTSTRAP_PORT], repeatable) and back
    eq(options.prefill_entries { "http://a:1", "8998", "http://b:2" },
       { { url = "http://a:1", bootstrap_port = 8998 }, "http://b:2" })
    eq(options.prefill_entries { "http://a:1", "none", "http://b:2", "9" }, { "http://a:1", { url = "http://b:2", bootstrap_port = 9 } })
    raises(function() options.prefill_entries { "8998" } end, "a bootstrap port must follow a URL")
    raises(function() options.prefill_entries { "http://a:1", "70000" } end, "must be 1-65535, got 70000")
    eq(options.argv { pd_disaggregation = true, prefill = { { url = "http://a:1", bootstrap_port = 8998 }, "http://b:2" },
                      decode = { "http://c:3" }, decode_policy = "round_robin" },
       { "--pd-disaggregation", "--prefill=http://a:1", "--prefill=8998", "--prefill=http://b:2", "--decode=http://c:3",
         "--decode-policy=round_robin" })
    raises(function() rl.router.start { prefill = { "http://a:1" } } end,
      "rl.router.start: bad argument 'opts.prefill' (needs PD mode: add pd_disaggregation = true (--pd-disaggregation))")
    raises(function() rl.router.start { decode_policy = "random" } end, "opts.decode_policy")
    raises(function() rl.router.start { pd_disaggregation = true, workers = { "http://a:1" } } end, "do not mix")
    raises(function() rl.router.start { pd_disaggregation = true, prefill = { { url = "http://a:1", bootstrap_port = 0 } } } end,
      "bad argument 'opts.prefill[1].bootstrap_port' (integer 1-65535 expected, got 0)")
    raises(function() rl.router.start { pd_disaggregation = true, prefill = { { url = "http://a:1", port = 1 } } } end,
      "opts.prefill[1].port")
    raises(function() rl.router.start { pd_disaggregation = true, decode = { 7 } } end, "opts.decode[1]")
    raises(function() rl.router.start { pd_disaggregation = true, prefill_policy = "fastest" } end, "opts.prefill_policy")

    local seen = {}
    local function pd_worker(role)
      return assert(rl.http.serve {
        port = 0,
        handler = function(req)
          if req.path == "/health" then return "ok" end
          if req.path == "/server_info" then return { body = { disaggregation_bootstrap_port = 18998 } } end
          local b = rl.json.decode(req.body)
          seen[role] = b
          local meta = role == "prefill" and { input_token_logprobs = { { -1.5, 1 } }, pd_prefill_ms = 2 }
                       or { input_token_logprobs = { { -2.5, 2 } }, output_token_logprobs = { { -0.5, 9 } } }
          return { body = { text = role, meta_info = meta } }
        end,
      })
    end
    local p, d = pd_worker("prefill"), pd_worker("decode")
    local r = assert(rl.router.start { pd_disaggregation = true, prefill = { p:url() }, decode = { d:url() },
                                       health_interval = 0.2 })
    local ready
    for _ = 1, 500 do
      local ws = r:workers()
      ready = #ws == 2 and ws[1].is_healthy and ws[2].is_healthy and ws[1].bootstrap_port == 18998
      if ready then break end
      rl.sleep(0.01)
    end
    ok(ready, "both healthy, the prefill's bootstrap port read from its /server_info")
    local ws = r:workers()
    eq({ ws[1].worker_type, ws[2].worker_type, ws[2].bootstrap_port }, { "prefill", "decode", nil })
    local out = rl.http.json(rl.http.post(r.url .. "/generate", { text = "hi", return_logprob = true }))
    eq(out.text, "decode")
    eq(out.meta_info.input_token_logprobs, { { -1.5, 1 }, { -2.5, 2 } })
    eq(out.meta_info.pd_prefill_ms, 2)
    eq(seen.prefill, seen.decode)
    eq(seen.prefill.bootstrap_host, "127.0.0.1")
    eq(seen.prefill.bootstrap_port, 18998)
    eq(type(seen.prefill.bootstrap_room), "number")
    -- the handle adds typed workers; a regular one is refused in PD mode
    local _, err = r:add("http://127.0.0.1:9")
    ok(err:find("PD mode", 1, true), err)
    local added = assert(r:add("http://127.0.0.1:9", { worker_type = "prefill", bootstrap_port = 9000 }))
    eq({ added.worker_type, added.bootstrap_port }, { "prefill", 9000 })
    raises(function() r:add("http://127.0.0.1:8", { worker_type = "both" }) end, "opts.worker_type")
    r:stop()
    -- process mode: the child gets --pd-disaggregation --prefill URL PORT --decode URL
    seen = {}
    local pr = assert(rl.router.start { mode = "process", pd_disaggregation = true, health_interval = 0.2,
                                        prefill = { { url = p:url(), bootstrap_port = 7777 } }, decode = { d:url() } })
    local pws
    for _ = 1, 500 do
      pws = pr:workers()
      if pws[1].is_healthy and pws[2].is_healthy then break end
      rl.sleep(0.01)
    end
    eq({ pws[1].worker_type, pws[1].bootstrap_port, pws[2].worker_type }, { "prefill", 7777, "decode" })
    out = rl.http.json(rl.http.post(pr.url .. "/generate", { text = { "a", "b" } }))
    eq(out.text, "decode")   -- the stub answers one object for the batch: passed through unmerged
    eq(seen.prefill.bootstrap_port, { 7777, 7777 })
    eq(#seen.decode.bootstrap_room, 2)
    assert(pr:add("http://127.0.0.1:9", { worker_type = "decode" }))
    eq(#pr:workers(), 3)
    pr:stop()
    -- a router without PD mode refuses prefill workers, with a hint
    local plain = assert(rl.router.start {})
    local none, e2 = plain:add("http://127.0.0.1:9", { worker_type = "decode" })
    eq(none, nil)
    ok(e2:find("--pd-disaggregation", 1, true), e2)
    plain:stop()
    p:stop()
    d:stop()
  end)

  it("a worker removed while it holds a request: the request goes to another worker", function()
    local w1 = stalled("w1")
    local w2 = worker("w2")
    local r = assert(rl.router.start { workers = { w1:url() }, policy = "round_robin", health_interval = 0.5 })
    local t0 = rl.now()
    local req = w1:hold(r.url)
    assert(r:add(w2:url()))
    eq(r:remove(w1:url()), true)
    local resp = assert(req:wait())
    eq(resp.status, 200)
    eq(rl.http.json(resp).worker, "w2")
    eq(resp.headers["x-rlhost-attempts"], "2")
    ok(rl.now() - t0 < 10, "answered by w2, not after w1's stall")
    w1:release()
    r:stop()
    w1:stop()
    w2:stop()
  end)

  it("a worker removed while it streams: the stream goes on while it sends, and is cut once it stops", function()
    -- stream_worker.py: a real process sending an event every 50 ms; SIGSTOP makes it a
    -- stalled worker that keeps its connection open
    local here = debug.getinfo(1, "S").source:match("^@(.*)/[^/]*$") or "."
    local function start_worker()
      local pf = os.tmpname()
      os.remove(pf)
      local proc = assert(rl.process.spawn { "python3", here .. "/support/stream_worker.py", pf })
      local url
      for _ = 1, 400 do
        url = read_file(pf)
        if url then break end
        rl.sleep(0.05)
      end
      os.remove(pf)
      return proc, assert(url, "stream worker up")
    end
    local function stream(router_url, count)
      local st = { events = 0, done = false }
      st.task = rl.spawn(function()
        local t0 = rl.now()
        local resp, err = rl.http.request { method = "POST", url = router_url .. "/generate", timeout = 60,
          body = rl.json.encode { text = "x", stream = true, count = count },
          headers = { ["content-type"] = "application/json" },
          on_chunk = function(b)
            local _, n = b:gsub("data: {", "")
            st.events = st.events + n
            if b:find("[DONE]", 1, true) then st.done = true end
          end }
        st.elapsed, st.resp, st.err = rl.now() - t0, resp, err
      end)
      for _ = 1, 400 do if st.events > 0 then break end rl.sleep(0.01) end
      ok(st.events > 0, "the stream started")
      return st
    end
    -- removed to scale down: its stream is read to the end
    local p1, u1 = start_worker()
    local r = assert(rl.router.start { workers = { u1 }, health_interval = 0.5 })
    local st = stream(r.url, 40)
    eq(r:remove(u1), true)
    st.task:wait()
    eq(st.done, true, "the whole stream: " .. tostring(st.err))
    eq(st.events, 40)
    -- stopped while it streams, then removed: the client's stream ends within the quiet
    -- limit (5 s), not at its 60 s timeout
    local p2, u2 = start_worker()
    assert(r:add(u2))
    for _ = 1, 200 do if r:workers()[1].status == "healthy" then break end rl.sleep(0.05) end
    st = stream(r.url, 100000)
    rl.process.signal_pid(p2.pid, 19)   -- SIGSTOP
    eq(r:remove(u2), true)
    st.task:wait()
    eq(st.done, false)
    ok(st.elapsed < 15, ("cut after %.1f s"):format(st.elapsed))
    rl.process.signal_pid(p2.pid, 18)   -- SIGCONT
    r:stop()
    p1:stop()
    p2:stop()
  end)

  it("PD mode: a side's worker removed while it holds a generation fails it at once, naming the worker", function()
    local p = worker("prefill")
    local d = stalled("decode")
    local r = assert(rl.router.start { pd_disaggregation = true, prefill = { { url = p:url(), bootstrap_port = 18998 } },
                                       decode = { d:url() }, health_interval = 0.5 })
    local t0 = rl.now()
    local req = d:hold(r.url)
    eq(r:remove(d:url()), true)
    local resp = assert(req:wait())
    eq(resp.status, 502)
    ok(resp.body:find("the decode worker " .. d:url() .. " left the router while it held the request", 1, true), resp.body)
    ok(rl.now() - t0 < 10, "failed at once, not after the decode worker's stall")
    d:release()
    r:stop()
    p:stop()
    d:stop()
  end)

  it("process mode: a child rlhost router with the same handle", function()
    local w1 = worker("w1")
    local r = assert(rl.router.start { mode = "process", workers = { w1:url() }, policy = "least_load" })
    eq(r.mode, "process")
    local out = rl.http.json(rl.http.post(r.url .. "/generate", { text = "hi" }))
    eq(out.worker, "w1")
    local w2 = worker("w2")
    assert(r:add(w2:url()))
    eq(#r:workers(), 2)
    eq(r:remove(w2:url()), true)
    eq(#r:workers(), 1)
    r:stop()
    eq(rl.http.get(r.url .. "/health", { timeout = 1 }), nil)
    w1:stop()
    w2:stop()
  end)
end)
