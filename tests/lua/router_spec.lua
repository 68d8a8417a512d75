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

  it("bad options raise, naming the option and the choices", function()
    raises(function() rl.router.start { policy = "fastest" } end, "opts.policy")
    raises(function() rl.router.start { policy = "fastest" } end, "cache_aware")
    raises(function() rl.router.start { wokers = {} } end, "unknown option 'opts.wokers'")
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
