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
--- Sessions end when finished or after session_timeout seconds without a heartbeat
--- (rl.tinker.sessions); the RestClient's runs, checkpoints and sessions are rl.tinker.rest,
--- checkpoint TTLs, publishing and copies rl.tinker.checkpoint_ops (expiry: rl.tinker.expiry).
local http = require "rl.http"
local json = require "rl.json"
local log = require "rl.log"

local M = {}
local Server = {}
Server.__index = Server

local SDK_MIN = "0.25"

--- Seconds without a heartbeat before a session expires: six of the SDK's 10 s beats.
M.SESSION_TIMEOUT = 60

-- An error the client caused: raised inside work, it becomes a RequestFailed with
-- category "user"; raised in a handler, a 400.
local function user_error(msg) error("user: " .. msg, 0) end
M.user_error = user_error

local function reply(status, body) return { status = status, body = body } end

-- ---- sessions ------------------------------------------------------------------------

-- The live session `id` (a sign of life); a user error naming why there is none.
function Server:_session(id)
  local s, state, why = self.sessions:get(id)
  if s then return s end
  if state == "ended" then user_error("session_id '" .. tostring(id) .. "' has ended (" .. why .. "); start a new ServiceClient") end
  user_error("unknown session_id '" .. tostring(id) .. "' (create one with /api/v1/create_session)")
end

-- A session ended (finished by its client, or expired): its training clients go (their
-- adapters and optimiser state; saved checkpoints stay), and its samplers.
function Server:_release(s, why)
  for _, m in ipairs(s.models) do self.training:drop(m) end
  local samplers = self.sampling:drop_session(s)
  log.info("tinker: session %s %s: released %d training client(s), %d sampler(s)", s.id, why, #s.models, samplers)
end

-- ---- routes --------------------------------------------------------------------------

-- A save replaced what was at its path: a sampler on that path loads the new weights,
-- and the expiry is what the checkpoint's metadata says (a save keeps it).
function Server:_saved(r)
  local dir = self.training:resolve_path(r.path)
  self.sampling:forget(dir)
  local run, id = r.path:match("^tinker://([^/]+)/(.+)$")
  self.expiry:note({ dir = dir, run = run, id = id, path = r.path,
                     expires_at = require("rl.tinker.checkpoints").meta(dir).expires_at })
  return r
end

local ROUTES = {}

ROUTES["/api/v1/healthz"] = function() return reply(200, { status = "ok" }) end

ROUTES["/api/v1/client/config"] = function(self)
  -- the SDK's feature flags: the API key traded for short-lived JWTs (rl.tinker.tokens;
  -- whoami reads them) unless jwt_auth is off, plain bodies, client-side custom losses,
  -- one retrieve_future poll per request
  return reply(200, {
    pjwt_auth_enabled = self.tokens ~= nil, credential_default_source = "api_key", proto_compress_fwdbwd = false,
    custom_loss_server_side = false, sample_use_retrieve_futures = false, sample_join_sampling_session = false,
    use_pyqwest_transport = self.opts.pyqwest ~= false,
  })
end

ROUTES["/api/v1/client/dynamic_config"] = function()
  return reply(200, { refresh_interval_sec = 300, sample_cancel_enabled = false })
end

-- The API key for a JWT (only the key itself may ask: a token cannot prolong itself).
ROUTES["/api/v1/auth/token"] = function(self, req)
  if not self.tokens then
    return reply(404, { error = "JWT auth is off on this server (--no-jwt-auth): send the API key itself",
                        category = "user" })
  end
  if self:_authorised(req) ~= "key" then
    return reply(401, { error = "auth/token takes the API key (tml-...), not a token", category = "user" })
  end
  return reply(200, { jwt = self.tokens:issue() })
end

ROUTES["/api/v1/create_session"] = function(self, req, body)
  local s = self.sessions:create(body)
  log.info("tinker: session %s from SDK %s", s.id, tostring(body.sdk_version))
  return reply(200, { type = "create_session", session_id = s.id })
end

ROUTES["/api/v1/session_heartbeat"] = function(self, req, body)
  local s, state, why = self.sessions:get(body.session_id)
  if not s and state == "ended" then   -- 410: the SDK stops its heartbeat loop
    return reply(410, { error = "session '" .. tostring(body.session_id) .. "' has ended (" .. why .. ")", category = "user" })
  end
  if not s then self:_session(body.session_id) end
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
  return self:_future(function()
    self:_session(session.id)   -- it may have ended since: a client made now would never be released
    return { body = self.training:create(session, body) }
  end, { what = "create_model", key = req.headers["x-idempotency-key"] })
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
  return self:_future(function() return { body = self:_saved(self.training:save(c, body, "weights")) } end,
    { what = "save_weights", lane = body.model_id, seq = body.seq_id, key = req.headers["x-idempotency-key"] })
end

ROUTES["/api/v1/save_weights_for_sampler"] = function(self, req, body)
  local c = self.training:client(body.model_id)
  return self:_future(function()
    local r = self:_saved(self.training:save(c, body, "sampler_weights"))
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

-- Paths with ids in them: {method, pattern, handler(self, req, body, ids...)}.
local PATTERNS = {
  { "GET", "^/api/v1/samplers/([^/]+)$", function(self, req, body, id)
      return reply(200, self.sampling:describe(id))
    end },
  { "POST", "^/api/v1/sessions/([^/]+)/finish$", function(self, req, body, id)
      local s, state = self.sessions:peek(id)
      if not s and state ~= "ended" then self:_session(id) end   -- unknown: say so
      local reason = type(body.reason) == "table" and tostring(body.reason.type) or "no reason"
      self.sessions:finish(id, "finished (" .. reason .. ")")     -- a second finish changes nothing
      return reply(200, {})
    end },
}
for _, m in ipairs({ "rl.tinker.rest", "rl.tinker.checkpoint_ops" }) do
  for _, r in ipairs(require(m).routes) do PATTERNS[#PATTERNS + 1] = r end
end

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
  if require("rl.tinker.keys").matches(key, self.keys) then return "key" end
  if self.tokens and self.tokens:valid(key) then return "token" end
  return false, key
end

local function unescape(s) return (s:gsub("%%(%x%x)", function(h) return string.char(tonumber(h, 16)) end)) end

-- The route of a request: its handler and the ids in its path (percent-decoded).
local function route_of(req)
  if ROUTES[req.path] then return ROUTES[req.path], {} end
  for _, p in ipairs(PATTERNS) do
    if p[1] == req.method then
      local caps = { req.path:match(p[2]) }
      if caps[1] then
        for i, c in ipairs(caps) do caps[i] = unescape(c) end
        return p[3], caps
      end
    end
  end
end

function Server:_handle(req)
  local route, captures = route_of(req)
  if not route then
    return reply(404, { error = ("%s %s is not served by rlhost tinker (docs/tinker.md lists what is)")
      :format(req.method, req.path), category = "user" })
  end
  local authorised, sent = true, nil
  if req.path ~= "/api/v1/healthz" then authorised, sent = self:_authorised(req) end
  if not authorised then
    if self.tokens and type(sent) == "string" and sent:sub(1, 4) ~= "tml-" then
      -- not a key: a token that expired or an earlier server issued; the SDK trades its key again
      return { status = 401, headers = { ["www-authenticate"] = 'Bearer error="invalid_token"' },
               body = { error = "unknown or expired token (trade the API key for a new one at /api/v1/auth/token)",
                        category = "user" } }
    end
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
  local ok, res = pcall(route, self, req, body, unpack(captures))
  if ok then return res end
  local msg = tostring(res)
  if msg:match("^user: ") then return reply(400, { error = msg:sub(7), category = "user" }) end
  log.warn("tinker: %s %s failed: %s", req.method, req.path, msg)
  return reply(500, { error = msg, category = "server" })
end

--- Starts the server. opts: base_models (name → model directory, or a list of
--- directories named by their paths), api_keys (list; each must start with "tml-"),
--- checkpoint_dir, host (127.0.0.1), port (0: a free one), poll (seconds a
--- retrieve_future waits before try_again, 20), session_timeout (seconds without a
--- heartbeat before a session expires and its clients are released, 60; 0: never; the
--- SDK beats every 10 s), min_checkpoint_ttl (the shortest ttl_seconds a client may set,
--- 3600 as Tinker), jwt_auth (false: clients send the API key itself, and whoami is
--- not served; default true), token_lifetime (seconds a JWT lives, 3600), engine
--- (rl.engine.start options for the samplers), threads (LibTorch threads of the trainer).
--- → server {url, stop()} | nil, err.
function M.serve(opts)
  opts = opts or {}
  local keys = {}
  for _, k in ipairs(opts.api_keys or {}) do
    if type(k) ~= "string" or k:sub(1, 4) ~= "tml-" or #k < 12 then
      error("rl.tinker.serve: bad api key (the SDK only sends keys of the form tml-<at least 8 characters>)", 2)
    end
    keys[#keys + 1] = k
  end
  if #keys == 0 then error("rl.tinker.serve: opts.api_keys is empty (give at least one tml-... key)", 2) end
  local self = setmetatable({ opts = opts, keys = keys }, Server)
  self.sessions = require("rl.tinker.sessions").new {
    timeout = opts.session_timeout == nil and M.SESSION_TIMEOUT or opts.session_timeout,
    on_end = function(s, why) self:_release(s, why) end }
  self.futures = require("rl.tinker.futures").new { poll = opts.poll }
  if opts.jwt_auth ~= false then self.tokens = require("rl.tinker.tokens").new { lifetime = opts.token_lifetime } end
  self.training = require("rl.tinker.training").new(opts)
  self.sampling = require("rl.tinker.sampling").new(opts, self.training)
  self.expiry = require("rl.tinker.expiry").new {
    dir = self.training.dir, on_delete = function(cdir) self.sampling:forget(cdir) end }
  self.training:use_expiry(self.expiry)
  local srv, err = http.serve { host = opts.host, port = opts.port or 0, allow_remote = opts.allow_remote,
                                event_driven = true, handler = function(req) return self:_handle(req) end }
  if not srv then return nil, err end
  self.http, self.url = srv, srv:url()
  self.sessions:start()
  self.expiry:start()
  return self
end

function Server:stop()
  self.sessions:stop()
  self.expiry:stop()
  self.http:stop()
  self.sampling:stop()
end

return M
