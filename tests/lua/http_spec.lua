-- rl.http: client against in-process rl.http.serve servers (127.0.0.1 only).
local rl = require "rl"
local ffi = require "ffi"
local bit = require "bit"

ffi.cdef [[
int socket(int domain, int type, int protocol);
int bind(int fd, const void* addr, unsigned int len);
int listen(int fd, int backlog);
int getsockname(int fd, void* addr, unsigned int* len);
int close(int fd);
struct rl_spec_sockaddr_in { unsigned short family; unsigned short port; unsigned int addr; char zero[8]; };
]]

-- A listening socket that never accepts: connects succeed (backlog), no answer ever comes.
local function silent_listener()
  local fd = ffi.C.socket(2, 1, 0)  -- AF_INET, SOCK_STREAM
  local sa = ffi.new("struct rl_spec_sockaddr_in")
  sa.family = 2
  sa.addr = 0x0100007F  -- 127.0.0.1 in network order (little-endian host)
  assert(ffi.C.bind(fd, sa, ffi.sizeof(sa)) == 0, "bind")
  assert(ffi.C.listen(fd, 64) == 0, "listen")
  local len = ffi.new("unsigned int[1]", ffi.sizeof(sa))
  ffi.C.getsockname(fd, sa, len)
  local port = bit.rshift(bit.bswap(sa.port), 16)
  return { port = port, url = ("http://127.0.0.1:%d/"):format(port), close = function() ffi.C.close(fd) end }
end

local function echo_server(extra)
  local opts = {
    handler = function(req)
      return {
        status = tonumber(req.params.status) or 200,
        headers = { ["X-Method"] = req.method, ["X-Path"] = req.path, ["X-Custom"] = req.headers["x-custom"] },
        body = rl.json.encode({ method = req.method, path = req.path, params = req.params, body = req.body,
                                ctype = req.headers["content-type"] or "" }),
      }
    end,
  }
  for k, v in pairs(extra or {}) do opts[k] = v end
  return assert(rl.http.serve(opts))
end

-- Counters once earlier tests' servers are collected and their last events ran.
local function baseline()
  rl.sleep(0.05)
  jit.flush()  -- a compiled trace may hold an earlier test's handle as a constant
  collectgarbage("collect")
  collectgarbage("collect")
  return rl._core_stats()
end

-- Waits (up to 10 s: a loaded CI machine) until ops and live C++ objects are back to
-- `base`; compiled traces, which may hold a handle as a constant, are flushed first.
local function settles_to(base)
  local s
  local t0 = rl.now()
  while rl.now() - t0 < 10 do
    jit.flush()
    collectgarbage("collect")
    s = rl._core_stats()
    if s.ops == base.ops and s.live_objects == base.live_objects then return true end
    rl.sleep(0.01)
  end
  error(("not back to baseline: ops %d (was %d), live_objects %d (was %d)")
    :format(s.ops, base.ops, s.live_objects, base.live_objects), 2)
end

describe("rl.http client and server", function()
  it("GET and POST round trip", function()
    local srv = echo_server()
    local r, err = rl.http.get(srv:url() .. "/a/b?x=1&y=two%20words", { headers = { ["X-Custom"] = "hello" } })
    ok(r, err)
    eq(r.status, 200)
    eq(r.headers["x-method"], "GET")
    eq(r.headers["x-custom"], "hello")
    ok(r.headers["content-length"], "headers are lowercase")
    ok(r.elapsed > 0 and r.timings.total >= r.timings.queued)
    local body = rl.http.json(r)
    eq(body.path, "/a/b")
    eq(body.params, { x = "1", y = "two words" })

    local p = assert(rl.http.post(srv:url() .. "/post", { n = 42, list = { 1, 2 } }))
    local pb = rl.http.json(p)
    eq(pb.method, "POST")
    eq(pb.ctype, "application/json")
    eq(rl.json.decode(pb.body), { n = 42, list = { 1, 2 } })

    local raw = assert(rl.http.post(srv:url() .. "/raw", "a\0b", { headers = { ["content-type"] = "x/y" } }))
    eq(rl.http.json(raw).body, "a\0b")
    local put = assert(rl.http.request { method = "PUT", url = srv:url() .. "/put", body = "z" })
    eq(rl.http.json(put).method, "PUT")
    -- A body without a content-type goes without one (not as a form: libcurl's default),
    -- so a threaded server takes more than its 8 KiB form limit.
    local big = assert(rl.http.post(srv:url() .. "/big", ("x"):rep(100000)))
    eq(big.status, 200)
    eq(rl.http.json(big).ctype, "")
    eq(#rl.http.json(big).body, 100000)
    srv:stop()
  end)

  it("4xx and 5xx are responses, not errors", function()
    local srv = echo_server()
    local r, err = rl.http.get(srv:url() .. "/?status=503")
    eq(err, nil)
    eq(r.status, 503)
    eq(rl.http.get(srv:url() .. "/?status=404").status, 404)
    srv:stop()
  end)

  it("handler results: strings, JSON tables, errors become 500 and are logged", function()
    local srv = assert(rl.http.serve { handler = function(req)
      if req.path == "/string" then return "plain" end
      if req.path == "/json" then return { body = { ok = true } } end
      if req.path == "/bad-status" then return { status = "x" } end
      error("handler exploded")
    end })
    local s = assert(rl.http.get(srv:url() .. "/string"))
    eq(s.body, "plain")
    ok(s.headers["content-type"]:find("text/plain", 1, true))
    local j = assert(rl.http.get(srv:url() .. "/json"))
    eq(j.headers["content-type"], "application/json")
    eq(rl.http.json(j), { ok = true })
    local e = assert(rl.http.get(srv:url() .. "/boom"))
    eq(e.status, 500)
    ok(not e.body:find("exploded", 1, true), "the error text stays in the log")
    eq(assert(rl.http.get(srv:url() .. "/bad-status")).status, 500)
    srv:stop()
  end)

  it("10,000 requests in flight from 10,000 tasks, each gets its own response", function()
    local srv = assert(rl.http.serve { handler = function(req) return req.params.i end })
    local before = rl.http.stats()
    local tasks = {}
    for i = 1, 10000 do
      tasks[i] = rl.spawn(function()
        local r, err = rl.http.get(srv:url() .. "/?i=" .. i, { timeout = 120 })
        if not r then error(err) end
        return r.body == tostring(i) and r.status == 200
      end)
    end
    local results = rl.wait_all(tasks)
    local mine = 0
    for i = 1, 10000 do if results[i] == true then mine = mine + 1 end end
    eq(mine, 10000)
    local after = rl.http.stats()
    eq(after.finished - before.finished, 10000)
    -- keep-alive: a few dozen connections for 10,000 requests
    ok(after.connections_opened - before.connections_opened <= 128,
       "connections opened: " .. (after.connections_opened - before.connections_opened))
    eq(after.active, 0)
    eq(after.queued, 0)
    srv:stop()
  end, { timeout = 240 })

  it("keep-alive reuses one connection for sequential requests", function()
    local srv = echo_server()
    local before = rl.http.stats().connections_opened
    for i = 1, 100 do assert(rl.http.get(srv:url() .. "/" .. i)) end
    eq(rl.http.stats().connections_opened - before, 1)
    srv:stop()
  end)

  it("the per-host limit is observed server-side", function()
    local now, max_seen = 0, 0
    local srv = assert(rl.http.serve { handler = function()
      now = now + 1
      if now > max_seen then max_seen = now end
      rl.sleep(0.02)
      now = now - 1
      return "ok"
    end })
    local tasks = {}
    for i = 1, 30 do
      tasks[i] = rl.spawn(function() return assert(rl.http.get(srv:url(), { max_per_host = 3 })).status end)
    end
    for _, s in ipairs(rl.wait_all(tasks)) do eq(s, 200) end
    ok(max_seen <= 3, "max concurrent handlers " .. max_seen)
    ok(max_seen >= 2, "requests did overlap: " .. max_seen)
    srv:stop()
  end)

  it("an unreachable URL fails quickly with nil, err", function()
    local srv = echo_server()
    local url = srv:url() .. "/"
    srv:stop()  -- the port is closed now
    local t0 = rl.now()
    local r, err = rl.http.get(url)
    eq(r, nil)
    ok(err:find("GET " .. url .. ": Couldn't connect to server", 1, true), err)
    ok(rl.now() - t0 < 30, "no hang")  -- a guard (the default timeout would wait far longer), not a speed check
  end)

  it("the timeout is enforced against a server that never answers", function()
    local silent = silent_listener()
    local t0 = rl.now()
    local r, err = rl.http.get(silent.url, { timeout = 0.2 })
    silent.close()
    eq(r, nil)
    ok(err:find("GET " .. silent.url .. ": timed out after 0.2 s", 1, true), err)
    ok(rl.now() - t0 < 30, "no hang")  -- a guard against a hang; the message above shows the 0.2 s timeout fired
  end)

  it("a slow handler gets 503 after the server's timeout", function()
    local srv = assert(rl.http.serve { timeout = 0.1, handler = function() rl.sleep(0.3); return "late" end })
    eq(assert(rl.http.get(srv:url())).status, 503)
    rl.sleep(0.3)  -- the late answer is dropped
    srv:stop()
  end)

  it("cancelling a task frees its in-flight request", function()
    local silent = silent_listener()
    local base = baseline()
    local t = rl.spawn(function() return rl.http.get(silent.url, { timeout = 60 }) end)
    rl.sleep(0.05)
    eq(rl.http.stats().active, 1)
    ok(rl._core_stats().live_objects > base.live_objects, "the request is counted while in flight")
    t:cancel("stop it")
    raises(function() t:wait() end, "stop it")
    eq(rl.http.stats().active, 0)
    settles_to(base)
    silent.close()
  end)

  it("streams chunks and server-sent events into the calling task", function()
    local sse = ": hello\n\nevent: token\nid: 1\ndata: {\"t\":\"a\"}\n\ndata: line1\ndata: line2\n\ndata: [DONE]\n\n"
    local srv = assert(rl.http.serve { handler = function()
      return { headers = { ["content-type"] = "text/event-stream" }, body = sse }
    end })
    local events, bytes = {}, {}
    local r = assert(rl.http.request {
      url = srv:url() .. "/stream",
      on_chunk = function(b) bytes[#bytes + 1] = b end,
      on_event = function(ev)
        rl.sleep(0)  -- callbacks run in the task and may yield
        events[#events + 1] = ev
      end,
    })
    eq(r.status, 200)
    eq(r.body, "", "streamed bodies are not kept")
    eq(table.concat(bytes), sse)
    eq(#events, 3)
    eq(events[1], { event = "token", id = "1", data = '{"t":"a"}' })
    eq(events[2], { event = "message", id = "1", data = "line1\nline2" })
    eq(events[3].data, "[DONE]")
    srv:stop()
  end)

  it("the SSE parser handles any chunking", function()
    local p = rl.http.sse_parser()
    local got = {}
    for c in ("data: a\r\n\r\nevent: e\rdata: b\r\r"):gmatch(".") do
      for _, ev in ipairs(p:feed(c)) do got[#got + 1] = ev end
    end
    eq(#got, 2)
    eq(got[1].data, "a")
    eq(got[2].event, "e")
  end)

  it("serves a static directory with MIME types", function()
    local dir = os.tmpname()
    os.remove(dir)
    os.execute("mkdir -p " .. dir)
    local f = assert(io.open(dir .. "/index.html", "w")); f:write("<p>hi</p>"); f:close()
    f = assert(io.open(dir .. "/app.js", "w")); f:write("x=1"); f:close()
    local srv = assert(rl.http.serve { static_dir = dir })
    local r = assert(rl.http.get(srv:url() .. "/"))
    eq(r.body, "<p>hi</p>")
    eq(r.headers["content-type"], "text/html; charset=utf-8")
    eq(assert(rl.http.get(srv:url() .. "/app.js")).headers["content-type"], "text/javascript; charset=utf-8")
    eq(assert(rl.http.get(srv:url() .. "/missing.css")).status, 404)
    local waiter = rl.spawn(function() srv:wait(); return "stopped" end)
    rl.sleep(0.01)
    srv:stop()
    eq(waiter:wait(), "stopped")
    os.execute("rm -rf " .. dir)
  end)

  it("a handler may itself make requests (a proxy, like the router)", function()
    local backend = echo_server()
    local proxy = assert(rl.http.serve { handler = function(req)
      local r, err = rl.http.get(backend:url() .. "/via" .. req.path)
      if not r then return { status = 502, body = err } end
      return { status = r.status, headers = { ["content-type"] = r.headers["content-type"] }, body = r.body }
    end })
    local tasks = {}
    for i = 1, 20 do tasks[i] = rl.spawn(function() return rl.http.json(rl.http.get(proxy:url() .. "/" .. i)).path end) end
    local paths = rl.wait_all(tasks)
    for i = 1, 20 do eq(paths[i], "/via/" .. i) end
    proxy:stop()
    backend:stop()
  end)

  it("an event-driven server holds more requests at once than a threaded one has threads", function()
    -- Every handler waits until all 300 requests have arrived: a server with a thread (or
    -- a connection slot) per request below 300 could never release them.
    local base = baseline()
    local arrived, n = 0, 300
    local left = nil
    local srv = echo_server({ event_driven = true, handler = function(req)
      if req.path == "/left" then
        rl.sleep(0.5)
        left = "answered late"
        return "late"
      end
      arrived = arrived + 1
      local t0 = rl.now()
      while arrived < n and rl.now() - t0 < 20 do rl.sleep(0.01) end
      return { status = arrived >= n and 200 or 504, body = { path = req.path } }
    end })
    local tasks = {}
    for i = 1, n do
      tasks[i] = rl.spawn(function()
        local r = assert(rl.http.post(srv:url() .. "/held/" .. i, "x", { max_per_host = n, timeout = 30 }))
        return r.status, rl.json.decode(r.body).path
      end)
    end
    for i, t in ipairs(tasks) do
      local status, path = t:wait()
      eq(status, 200)
      eq(path, "/held/" .. i)
    end
    -- a client that leaves before its answer: the late respond is dropped, nothing leaks
    local gone = rl.spawn(rl.http.get, srv:url() .. "/left", { timeout = 0.2 })
    local resp, err = gone:wait()
    eq(resp, nil)
    ok(tostring(err):find("imeout") or tostring(err):find("timed out"), err)
    while not left do rl.sleep(0.05) end  -- its handler's answer goes nowhere, quietly
    srv:stop()
    srv, tasks, gone = nil, nil, nil
    settles_to(base)
  end)

  it("an event-driven server answers requests that arrive before its accept task runs", function()
    local srv = echo_server({ event_driven = true })
    eq(rl.http.json(rl.http.get(srv:url() .. "/first")).path, "/first")
    srv:stop()
  end)

  it("servers and requests leave no ops or C++ objects behind", function()
    local base = baseline()
    local srv = echo_server()
    local tasks = {}
    for i = 1, 50 do tasks[i] = rl.spawn(rl.http.get, srv:url() .. "/" .. i) end
    rl.wait_all(tasks)
    ok(rl._core_stats().live_objects > base.live_objects, "the server is counted while alive")
    srv:stop()
    srv, tasks = nil, nil
    settles_to(base)
  end)
end)

describe("rl.http bodies the runtime made (rl.http.Body)", function()
  it("one body goes to several requests at once, byte for byte; a released one is refused", function()
    -- A weight bucket: stories260K's safetensors cut into 256 KiB buckets (_core.safetensors).
    local enc = require("rl._core").safetensors.encoder(test_data("models/stories260K"), 256 * 1024)
    local n, bytes = enc:count()
    ok(n >= 4 and bytes > 1e6, n)
    local kind, body, tensors = rl.task.await_op(enc:start(2), "spec")
    eq(kind, "done")
    ok(tensors >= 1)
    local size = body:size()
    ok(size > 200 * 1024 and size < 300 * 1024, size)
    local got = {}
    local srv = assert(rl.http.serve { handler = function(req)
      got[#got + 1] = req.body
      return { body = tostring(#req.body) }
    end })
    local done = 0
    for _ = 1, 3 do
      rl.task.spawn(function()
        local r = assert(rl.http.request { method = "POST", url = srv:url() .. "/", body = body,
                                           headers = { ["content-type"] = "application/octet-stream" } })
        eq(r.body, tostring(size))
        done = done + 1
      end)
    end
    local t0 = rl.now()
    while done < 3 and rl.now() - t0 < 20 do rl.sleep(0.01) end
    eq(done, 3)
    eq(got[1], got[2])
    eq(got[2], got[3])
    eq(#got[1], size)
    eq(got[1]:sub(9, 9), "{", "a safetensors file: an 8-byte length, then its JSON header")
    body:release()
    eq(body:size(), 0)
    raises(function() rl.http.request { method = "POST", url = srv:url() .. "/", body = body } end,
      "bad argument 'opts.body' (an rl.http.Body that was released)")
    enc:close()
    raises(function() enc:start(1) end, "this encoder is closed")
    raises(function() enc:start(1) end, "bad argument #1 'enc'")
    srv:stop()
  end)
end)

describe("rl.http misuse", function()
  it("bad options name the field", function()
    raises(function() rl.http.request { url = "http://127.0.0.1:1/", timeout = "x" } end,
      "rl.http.request: bad argument 'opts.timeout' (number expected, got string)")
    raises(function() rl.http.request { url = "http://127.0.0.1:1/", headers = 5 } end,
      "bad argument 'opts.headers' (table expected, got number)")
    raises(function() rl.http.request { url = "http://127.0.0.1:1/", headers = { a = {} } } end,
      "bad argument 'opts.headers.a' (string expected, got table)")
    raises(function() rl.http.request { url = "http://127.0.0.1:1/", headers = { a = "x\r\nb: y" } } end,
      "'opts.headers.a'")
    raises(function() rl.http.request {} end, "bad argument 'opts.url' (string expected, got nil)")
    raises(function() rl.http.request { url = "ftp://x/" } end, "http:// or https:// URL expected")
    raises(function() rl.http.request { url = "http://127.0.0.1:1/", method = "get" } end, "'opts.method'")
    raises(function() rl.http.request { url = "http://127.0.0.1:1/", max_per_host = 0 } end, "'opts.max_per_host'")
    raises(function() rl.http.request { url = "http://127.0.0.1:1/", on_chunk = 1 } end,
      "bad argument 'opts.on_chunk' (function expected, got number)")
    raises(function() rl.http.request("http://x") end, "rl.http.request: bad argument #1 'opts' (table expected")
    raises(function() rl.http.serve { handler = 1 } end, "'opts.handler' (function expected, got number)")
    raises(function() rl.http.serve { port = 70000, handler = print } end, "'opts.port'")
    raises(function() rl.http.serve { event_driven = true, threads = 4, handler = print } end,
      "bad argument 'opts.threads' (an event-driven server has no worker threads")
    raises(function() rl.http.serve { event_driven = true, static_dir = "/tmp" } end, "'opts.event_driven'")
  end)

  it("refuses to bind a non-loopback host without allow_remote", function()
    raises(function() rl.http.serve { host = "0.0.0.0", handler = print } end,
      "rl.http.serve: bad argument 'opts.host' ('0.0.0.0' is not a loopback address")
  end)

  it("a port in use is nil, err", function()
    local a = echo_server()
    local b, err = rl.http.serve { port = a:port(), handler = print }
    eq(b, nil)
    ok(err:find("cannot listen on 127.0.0.1:" .. a:port(), 1, true), err)
    a:stop()
  end)

  it("outside a task is a clear error", function()
    -- a plain coroutine (not an rl task) cannot wait: the shared task check says so
    local co = coroutine.create(function() return rl.http.get("http://127.0.0.1:1/") end)
    local okk, err = coroutine.resume(co)
    eq(okk, false)
    ok(tostring(err):find("rl.http.request: called from a plain coroutine, not an rl task", 1, true), err)
  end)
end)
