--- rl.tinker: a self-hosted server of the Tinker API (Thinking Machines' training API),
--- which the official `tinker` SDK and `tinker-cookbook` use unmodified through
--- TINKER_BASE_URL (docs/tinker.md).
---
---   local srv = assert(rl.tinker.serve {
---     base_models = { ["/models/qwen3-0.6b"] = "/models/qwen3-0.6b" },   -- name → model directory
---     api_keys = { "tml-..." },            -- what clients send as X-API-Key
---     checkpoint_dir = "/var/lib/tinker",  -- tinker:// paths live here
---   })
---   print(srv.url)
---
--- Training clients are LoRA adapters over a shared frozen base (rl.tinker.training);
--- sampling runs on an rl.engine per base model, each request under its adapter
--- (rl.tinker.sampling). Work answers with a request id at once and runs in a task;
--- clients long-poll /api/v1/retrieve_future (rl.tinker.futures). The server runs on
--- the event loop (rl.http.serve{event_driven}), so held polls cost no threads.
local http = require "rl.http"
local json = require "rl.json"
local log = require "rl.log"

local M = {}
local Server = {}
Server.__index = Server

local SDK_MIN = "0.25"

local function now() return require("rl._core").loop.now() end

-- An error the client caused: raised inside work, it becomes a RequestFailed with
-- category "user"; raised in a handler, a 400.
local function user_error(msg) error("user: " .. msg, 0) end
M.user_error = user_error

local function reply(status, body) return { status = status, body = body } end

-- ---- sessions ------------------------------------------------------------------------

local function new_id(prefix)
  return ("%s-%08x%08x"):format(prefix, math.random(0, 0x7fffffff), math.random(0, 0x7fffffff))
end

function Server:_session(id)
  local s = self.sessions[id]
  if not s then user_error("unknown session_id '" .. tostring(id) .. "' (create one with /api/v1/create_session)") end
  s.seen = now()
  return s
end

-- A client closed its session: its training clients go (their adapters and optimiser state).
function Server:_finish(id, reason)
  local s = self:_session(id)
  for _, m in ipairs(s.models) do self.training:drop(m) end
  self.sessions[id] = nil
  log.info("tinker: session %s finished (%s)", id, type(reason) == "table" and tostring(reason.type) or "no reason")
end

-- ---- routes --------------------------------------------------------------------------

local ROUTES = {}

ROUTES["/api/v1/healthz"] = function() return reply(200, { status = "ok" }) end

ROUTES["/api/v1/client/config"] = function(self)
  -- the SDK's feature flags: API keys (no JWT exchange), plain bodies, client-side custom
  -- losses, one retrieve_future poll per request
  return reply(200, {
    pjwt_auth_enabled = false, credential_default_source = "api_key", proto_compress_fwdbwd = false,
    custom_loss_server_side = false, sample_use_retrieve_futures = false, sample_join_sampling_session = false,
    use_pyqwest_transport = self.opts.pyqwest ~= false,
  })
end

ROUTES["/api/v1/client/dynamic_config"] = function()
  return reply(200, { refresh_interval_sec = 300, sample_cancel_enabled = false })
end

ROUTES["/api/v1/create_session"] = function(self, req, body)
  local id = new_id("session")
  self.sessions[id] = { id = id, created = now(), seen = now(), tags = body.tags, user_metadata = body.user_metadata,
                        sdk_version = body.sdk_version, models = {} }
  log.info("tinker: session %s from SDK %s", id, tostring(body.sdk_version))
  return reply(200, { type = "create_session", session_id = id })
end

ROUTES["/api/v1/session_heartbeat"] = function(self, req, body)
  self:_session(body.session_id)
  return reply(200, { type = "session_heartbeat" })
end

ROUTES["/api/v1/get_server_capabilities"] = function(self)
  local models = {}
  for _, name in ipairs(self.training:base_names()) do
    models[#models + 1] = { model_name = name, trainable = true, sampleable = true,
                            max_context_length = self.training:context_length(name) }
  end
  return reply(200, { supported_models = json.array(models) })
end

ROUTES["/api/v1/create_model"] = function(self, req, body)
  local session = self:_session(body.session_id)
  return self:_future(function() return { body = self.training:create(session, body) } end,
    { what = "create_model", key = req.headers["x-idempotency-key"] })
end

ROUTES["/api/v1/get_info"] = function(self, req, body)
  return reply(200, self.training:info(body.model_id))
end

ROUTES["/api/v1/forward_backward"] = function(self, req)
  local fb, err = require("rl.tinker_wire").decode_forward_backward(req.body)
  if not fb then user_error(err) end
  local c = self.training:client(fb.model_id)
  return self:_future(function() return self.training:forward_backward(c, fb) end,
    { what = fb.forward_only and "forward" or "forward_backward", lane = fb.model_id, seq = fb.seq_id,
      key = req.headers["x-idempotency-key"] })
end

ROUTES["/api/v1/optim_step"] = function(self, req, body)
  local c = self.training:client(body.model_id)
  return self:_future(function() return { body = self.training:optim_step(c, body) } end,
    { what = "optim_step", lane = body.model_id, seq = body.seq_id, key = req.headers["x-idempotency-key"] })
end

ROUTES["/api/v1/save_weights"] = function(self, req, body)
  local c = self.training:client(body.model_id)
  return self:_future(function() return { body = self.training:save(c, body, "weights") } end,
    { what = "save_weights", lane = body.model_id, seq = body.seq_id, key = req.headers["x-idempotency-key"] })
end

ROUTES["/api/v1/save_weights_for_sampler"] = function(self, req, body)
  local c = self.training:client(body.model_id)
  return self:_future(function()
    local r = self.training:save(c, body, "sampler_weights")
    if body.sampling_session_seq_id then   -- an ephemeral sampler: a sampling session on these weights
      r.sampling_session_id = self.sampling:create(self:_session(c.session_id), {
        sampling_session_seq_id = body.sampling_session_seq_id, model_path = r.path })
      r.path = nil
    end
    return { body = r }
  end, { what = "save_weights_for_sampler", lane = body.model_id, seq = body.seq_id,
         key = req.headers["x-idempotency-key"] })
end

ROUTES["/api/v1/load_weights"] = function(self, req, body)
  local c
  if body.model_id then
    c = self.training:client(body.model_id)
  else   -- a new training client from a checkpoint (create_training_client_from_state)
    local session = self:_session(body.session_id)
    c = self.training:create_from_checkpoint(session, body)
  end
  return self:_future(function() return { body = self.training:load(c, body) } end,
    { what = "load_weights", lane = c.id, seq = body.seq_id, key = req.headers["x-idempotency-key"] })
end

ROUTES["/api/v1/create_sampling_session"] = function(self, req, body)
  local session = self:_session(body.session_id)
  return reply(200, { type = "create_sampling_session", sampling_session_id = self.sampling:create(session, body) })
end

ROUTES["/api/v1/asample"] = function(self, req, body)
  local s = self.sampling:resolve(body)
  local n = body.num_samples or 1
  if type(n) ~= "number" or n < 1 or n > 128 or n % 1 ~= 0 then user_error("num_samples must be an integer in 1..128") end
  local r = self:_future(function() return self.sampling:sample(s, body) end,
    { what = "sample", key = req.headers["x-idempotency-key"] })
  local ids = {}   -- one per sample: the SDK stamps them onto the sequences, in order
  for i = 1, n do ids[i] = r.body.request_id .. ":" .. (i - 1) end
  r.body.sample_sequence_ids = ids
  return r
end

ROUTES["/api/v1/retrieve_future"] = function(self, req, body)
  local e = self.futures:wait(body.request_id)
  if not e then
    return reply(404, { error = "unknown request_id '" .. tostring(body.request_id) .. "' (expired or never made)",
                        category = "user" })
  end
  if e.state ~= "done" then
    return reply(200, { type = "try_again", request_id = e.id, queue_state = "active" })
  end
  local r = e.result
  if r.error then return reply(200, { error = r.error, category = r.category }) end
  if type(r.body) == "string" then
    return { status = 200, headers = { ["content-type"] = r.content_type or "application/x-protobuf" }, body = r.body }
  end
  return reply(200, r.body)
end

ROUTES["/api/v1/cancel_future"] = function() return reply(200, {}) end

-- Paths with an id in them: pattern → handler(self, req, body, id).
local PATTERNS = {
  { "^/api/v1/samplers/([^/]+)$", function(self, req, body, id)
      return reply(200, self.sampling:describe(id))
    end },
  { "^/api/v1/sessions/([^/]+)/finish$", function(self, req, body, id)
      self:_finish(id, body.reason)
      return reply(200, {})
    end },
}

ROUTES["/api/v1/telemetry"] = function() return reply(200, { status = "accepted" }) end

-- ---- dispatch ------------------------------------------------------------------------

function Server:_future(fn, opts)
  local id = self.futures:submit(fn, opts)
  return reply(200, { request_id = id })
end

function Server:_authorised(req)
  local key = req.headers["x-api-key"]
  if not key then
    local auth = req.headers["authorization"] or ""
    key = auth:match("^[Bb]earer%s+(.+)$")
  end
  return key ~= nil and self.keys[key] == true
end

function Server:_handle(req)
  local route = ROUTES[req.path]
  local capture
  if not route then
    for _, p in ipairs(PATTERNS) do
      capture = req.path:match(p[1])
      if capture then route = p[2] break end
    end
  end
  if not route then
    return reply(404, { error = ("%s %s is not served by rlhost tinker (docs/tinker.md lists what is)")
      :format(req.method, req.path), category = "user" })
  end
  if req.path ~= "/api/v1/healthz" and not self:_authorised(req) then
    return reply(401, { error = "missing or wrong API key (send X-API-Key: the key this server was started with, "
      .. "tml-...; the SDK reads TINKER_API_KEY)", category = "user" })
  end
  local body = {}
  local ctype = req.headers["content-type"] or ""
  if req.body ~= "" and ctype:find("json", 1, true) then
    local ok, v = pcall(json.decode, req.body)
    if not ok or type(v) ~= "table" then
      return reply(400, { error = "the body is not a JSON object", category = "user" })
    end
    body = v
  end
  local ok, res = pcall(route, self, req, body, capture)
  if ok then return res end
  local msg = tostring(res)
  if msg:match("^user: ") then return reply(400, { error = msg:sub(7), category = "user" }) end
  log.warn("tinker: %s %s failed: %s", req.method, req.path, msg)
  return reply(500, { error = msg, category = "server" })
end

--- Starts the server. opts: base_models (name → model directory, or a list of
--- directories named by their paths), api_keys (list; each must start with "tml-"),
--- checkpoint_dir, host (127.0.0.1), port (0: a free one), poll (seconds a
--- retrieve_future waits before try_again, 20), engine (rl.engine.start options for the
--- samplers), threads (LibTorch threads of the trainer). → server {url, stop()} | nil, err.
function M.serve(opts)
  opts = opts or {}
  local keys = {}
  for _, k in ipairs(opts.api_keys or {}) do
    if type(k) ~= "string" or k:sub(1, 4) ~= "tml-" or #k < 12 then
      error("rl.tinker.serve: bad api key (the SDK only sends keys of the form tml-<at least 8 characters>)", 2)
    end
    keys[k] = true
  end
  if next(keys) == nil then error("rl.tinker.serve: opts.api_keys is empty (give at least one tml-... key)", 2) end
  local self = setmetatable({ opts = opts, keys = keys, sessions = {} }, Server)
  self.futures = require("rl.tinker.futures").new { poll = opts.poll }
  self.training = require("rl.tinker.training").new(opts)
  self.sampling = require("rl.tinker.sampling").new(opts, self.training)
  local srv, err = http.serve { host = opts.host, port = opts.port or 0, allow_remote = opts.allow_remote,
                                event_driven = true, handler = function(req) return self:_handle(req) end }
  if not srv then return nil, err end
  self.http, self.url = srv, srv:url()
  return self
end

function Server:stop()
  self.http:stop()
  self.sampling:stop()
end

return M
