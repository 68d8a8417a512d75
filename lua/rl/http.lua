--- rl.http: a non-blocking HTTP client and small servers on the host's event loop.
--
--   local resp, err = rl.http.get("http://127.0.0.1:30000/health", { timeout = 5 })
--   local resp = rl.http.post(url, { text = "hi" })            -- a table body is sent as JSON
--   local out = rl.http.json(rl.http.post(url, payload))      -- decoded body, or nil, err
--   rl.http.request{ method = "POST", url = url, body = s, on_event = function(ev) ... end }
--
--   local srv = rl.http.serve{ port = 0, handler = function(req) return { status = 200, body = "ok" } end }
--   print(srv:url()); srv:stop()
--
-- Requests wait inside the calling task (it yields; other tasks run). Transport
-- failures (refused, timeout, bad URL) return `nil, err`; HTTP 4xx/5xx are
-- ordinary responses. Misuse (bad options) raises. See docs/http.md.
local core = require "rl._core"
local task = require "rl.task"
local json = require "rl.json"

local chttp = core.http
local M = {}

local function check_table(v, fname, name)
  if type(v) ~= "table" then
    error(("%s: bad argument #1 '%s' (table expected, got %s)"):format(fname, name, type(v)), 3)
  end
end

-- Waits for the op's events: streamed chunks go to the callbacks (in this
-- task, so they may yield), then the final response or error.
local function wait_response(op, on_chunk, on_event, parser)
  while true do
    local kind, a = task.op_next(op, "rl.http.request")
    if kind == "chunk" then
      if on_chunk then on_chunk(a) end
      if parser then
        for _, ev in ipairs(parser:feed(a)) do on_event(ev) end
      end
    elseif kind == "done" then
      if parser then parser:finish() end
      return a
    else
      return nil, a
    end
  end
end

-- Requests in flight, by op: {method, url, started, task}.
local pending = {}

--- The requests in flight now, oldest first: {method, url, started (rl.now()), task}
--- each (rl.watchdog's report).
function M.in_flight()
  local list = {}
  for _, p in pairs(pending) do list[#list + 1] = p end
  table.sort(list, function(a, b) return a.started < b.started end)
  return list
end

--- Sends one request and waits for the whole response.
---@param opts rl.http.RequestOpts
---@return rl.http.Response|nil resp, string|nil err
function M.request(opts)
  check_table(opts, "rl.http.request", "opts")
  task.need_task("rl.http.request")
  local op = chttp.request(opts)  -- validates every option, naming the bad one
  task.op_open(op)
  local on_event = opts.on_event
  local parser = on_event and chttp.sse_parser() or nil
  pending[op] = { method = opts.method or "GET", url = opts.url, started = require("rl._core").loop.now(),
                     task = task.current() }
  local ok, resp, err = pcall(wait_response, op, opts.on_chunk, on_event, parser)
  pending[op] = nil
  task.op_close(op)  -- cancels the transfer if we leave early (error, cancellation)
  if not ok then error(resp, 0) end
  return resp, err
end

local function with(opts, fields)
  local o = {}
  if opts ~= nil then
    check_table(opts, "rl.http", "opts")
    for k, v in pairs(opts) do o[k] = v end
  end
  for k, v in pairs(fields) do o[k] = v end
  return o
end

local function has_header(headers, name)
  for k in pairs(headers or {}) do
    if type(k) == "string" and k:lower() == name then return true end
  end
  return false
end

--- GET `url`.
function M.get(url, opts)
  local o = with(opts, { url = url })
  o.method = o.method or "GET"
  return M.request(o)
end

--- POST `body` to `url`; a table body is JSON-encoded (content-type application/json).
function M.post(url, body, opts)
  local o = with(opts, { url = url })
  o.method = o.method or "POST"
  if type(body) == "table" then
    o.body = json.encode(body)
    if not has_header(o.headers, "content-type") then
      local h = {}
      for k, v in pairs(o.headers or {}) do h[k] = v end
      h["content-type"] = "application/json"
      o.headers = h
    end
  else
    o.body = body
  end
  return M.request(o)
end

--- Decodes a response's JSON body. Passes `nil, err` through, so
--- `rl.http.json(rl.http.get(url))` works.
function M.json(resp, err)
  if resp == nil then return nil, err end
  if type(resp) ~= "table" or type(resp.body) ~= "string" then
    error("rl.http.json: bad argument #1 'resp' (response table expected, got " .. type(resp) .. ")", 2)
  end
  local v, derr = json.decode(resp.body)
  if derr then return nil, ("rl.http.json: HTTP %s body is not JSON: %s"):format(tostring(resp.status), derr) end
  return v
end

--- Client counters: submitted, started, finished, cancelled, connections_opened, queued, active.
M.stats = chttp.stats
--- Client defaults: {max_per_host=, max_connections=, timeout=, connect_timeout=, use_env_proxy=}.
M.configure = chttp.configure
--- An incremental server-sent-events parser: p:feed(bytes) -> {events}; p:finish().
M.sse_parser = chttp.sse_parser

-- ---- servers ------------------------------------------------------------------------

local Server = {}
Server.__index = Server

local function unescape(s)
  s = s:gsub("+", " ")
  return (s:gsub("%%(%x%x)", function(h) return string.char(tonumber(h, 16)) end))
end

local function parse_query(q)
  local params = {}
  for pair in q:gmatch("[^&]+") do
    local k, v = pair:match("^([^=]*)=?(.*)$")
    params[unescape(k)] = unescape(v)
  end
  return params
end

local function on_error(e)
  if task.is_cancelled(e) then return e end
  return debug.traceback(tostring(e), 2)
end

-- The handler's return value as (status, headers, body), or nil, problem.
local function normalise(res)
  if type(res) == "string" then return 200, { ["content-type"] = "text/plain; charset=utf-8" }, res end
  if type(res) ~= "table" then return nil, "handler returned " .. type(res) .. " (a response table or string expected)" end
  local status = res.status or 200
  if type(status) ~= "number" or status ~= math.floor(status) or status < 100 or status > 999 then
    return nil, "handler returned a bad status: " .. tostring(status)
  end
  local headers, body = res.headers or {}, res.body or ""
  if type(headers) ~= "table" then return nil, "handler returned headers of type " .. type(headers) end
  if type(body) == "table" then
    body = json.encode(body)
    if not has_header(headers, "content-type") then
      local h = { ["content-type"] = "application/json" }
      for k, v in pairs(headers) do h[k] = v end
      headers = h
    end
  elseif type(body) ~= "string" then
    return nil, "handler returned a body of type " .. type(body)
  end
  return status, headers, body
end

local function run_handler(self, id, req)
  req.params = parse_query(req.query)
  local ok, res = xpcall(self._handler, on_error, req)
  if not ok and task.is_cancelled(res) then
    chttp.respond(id, 503, nil, "request cancelled\n")
    error(res, 0)
  end
  local status, headers, body
  if ok then
    status, headers, body = normalise(res)
    if status then
      local rok, rerr = pcall(chttp.respond, id, status, headers, body)
      if rok then return end
      res = rerr
    else
      res = headers
    end
  end
  core.log.write("error", nil, 0, ("rl.http.serve %s: handler failed for %s %s: %s")
    :format(self._url, req.method, req.path, tostring(res)))
  chttp.respond(id, 500, { ["content-type"] = "text/plain; charset=utf-8" }, "internal server error (see the server log)\n")
end

-- One task per server: receives requests and runs each handler in its own task.
local function accept_loop(self)
  local op = self._srv:op()
  task.op_open(op)
  -- Only now does the server accept, so no request arrives before op_open.
  if not self._srv:start() then  -- stopped before it ever ran
    task.op_close(op)
    return
  end
  while true do
    local kind, id, req = task.op_next(op, "rl.http.serve")
    if kind ~= "request" then break end  -- "closed": stop() was called
    task.spawn_named("http handler", run_handler, self, id, req)
  end
  task.op_close(op)
end

--- Starts a server; each request runs `handler(req)` in its own task.
---@param opts rl.http.ServeOpts
---@return rl.http.Server|nil server, string|nil err
function M.serve(opts)
  check_table(opts, "rl.http.serve", "opts")
  local srv, err = chttp.serve(opts)  -- validates options; binds now so the port is known
  if not srv then return nil, err end
  local self = setmetatable({ _srv = srv, _handler = opts.handler, _url = srv:url() }, Server)
  if opts.handler then
    self._task = task.spawn_named("http.serve " .. self._url, accept_loop, self)
  else
    srv:start()  -- static files only: nothing to hand to Lua
  end
  return self
end

function Server:port() return self._srv:port() end
function Server:url() return self._url end
--- Stops accepting; requests still waiting for a handler get 503.
function Server:stop()
  self._stopped = true
  self._srv:stop()
end
--- Waits until the server is stopped (for recipes that only serve).
function Server:wait()
  if self._task then return self._task:wait() end
  while not self._stopped do task.sleep(0.1) end  -- static files only: no accept task to wait for
end
function Server:__tostring() return "rl.http.Server(" .. self._url .. ")" end

return M
