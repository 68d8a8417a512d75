--- rl.tinker.checkpoint_ops: what the SDK's RestClient changes on a checkpoint —
--- set_checkpoint_ttl_from_tinker_path (its expiry: rl.tinker.expiry deletes it then),
--- publish_ / unpublish_checkpoint_from_tinker_path (its `public` flag) — and
--- copy_weights (its files copied to a new training run). The expiry and the flag are
--- kept in the checkpoint's metadata on disk (rl.tinker.checkpoints.set_meta).
---
--- One key holder owns every checkpoint, so publishing changes who may read nothing:
--- the flag is kept and listed, as the SDK's Checkpoint.public.
---
--- M.routes: {method, path pattern, handler(server, req, body, captures...)} each, for
--- rl.tinker's dispatch; a handler returns {status, body}.
local json = require "rl.json"
local checkpoints = require "rl.tinker.checkpoints"
local log = require "rl.log"

local M = {}

--- Tinker's bounds on a time to live: 1 hour (the server's min_checkpoint_ttl lowers
--- it) to 10 years (3650 days).
M.MIN_TTL = 3600
M.MAX_TTL = 3650 * 86400

local COPY_KEYS_KEPT = 1024   -- idempotency keys of copies remembered, per server

local function reply(status, body) return { status = status, body = body } end
local function not_found(msg) return reply(404, { error = msg, category = "user" }) end
local function user_error(msg) error("user: " .. msg, 0) end

-- The checkpoint <kind>/<name> of run `run` ({dir, run, id, path}), or nil and the 404
-- to answer; a user error when the ids are not a checkpoint's.
local function checkpoint(srv, run, kind, name)
  local id = tostring(kind) .. "/" .. tostring(name)
  local cdir, why, msg = checkpoints.locate(srv.training.dir, run, id)
  if cdir and srv.expiry:expired(cdir) then cdir, why, msg = nil, "missing", ("no checkpoint tinker://%s/%s"):format(run, id) end
  if not cdir then
    if why == "bad" then user_error(msg) end
    return nil, not_found(msg)
  end
  return { dir = cdir, run = run, id = id, path = ("tinker://%s/%s"):format(run, id) }
end

-- ttl_seconds of a body: seconds, or false for "never" (JSON null); a user error naming
-- the bounds otherwise.
local function ttl_of(srv, v, what)
  if v == nil or v == json.null then return false end
  local lo = srv.opts.min_checkpoint_ttl or M.MIN_TTL
  if type(v) ~= "number" or v % 1 ~= 0 or v < lo or v > M.MAX_TTL then
    user_error(("%s ttl_seconds=%s: seconds from now, a whole number in [%d, %d] (1 hour to 10 years%s), or null "
      .. "for no expiry"):format(what, json.encode(v), lo, M.MAX_TTL,
        lo ~= M.MIN_TTL and "; this server's --min-checkpoint-ttl is " .. lo or "; --min-checkpoint-ttl lowers the floor"))
  end
  return v
end

local function set_meta(c, changes)
  local m, err = checkpoints.set_meta(c.dir, changes)
  if not m then error("writing the metadata of " .. c.path .. ": " .. tostring(err), 0) end
  return m
end

local function set_ttl(srv, req, body, run, kind, name)
  local c, missing = checkpoint(srv, run, kind, name)
  if not c then return missing end
  if body.ttl_seconds == nil then
    user_error("set_checkpoint_ttl needs ttl_seconds (seconds from now, or null to remove the expiry)")
  end
  local ttl = ttl_of(srv, body.ttl_seconds, "set_checkpoint_ttl")
  c.expires_at = set_meta(c, { expires_at = ttl and os.time() + ttl or false }).expires_at
  srv.expiry:note(c)
  log.info("tinker: checkpoint %s %s", c.path,
    c.expires_at and ("expires at " .. checkpoints.iso_time(c.expires_at)) or "no longer expires")
  return reply(200, {})
end

local function set_public(public)
  return function(srv, req, body, run, kind, name)
    local c, missing = checkpoint(srv, run, kind, name)
    if not c then return missing end
    -- Tinker answers 409 here, which the SDK retries for 5 minutes: a 400 says it at once
    if checkpoints.meta(c.dir).public == public then
      user_error(("%s is already %s"):format(c.path, public and "public" or "private"))
    end
    set_meta(c, { public = public })
    log.info("tinker: checkpoint %s %s", c.path, public and "published" or "unpublished")
    return reply(200, {})
  end
end

-- The training run a copy goes to: the session's model_seq_id slot, or a new run.
local function copy_run(srv, body)
  if body.session_id ~= nil then
    local s = srv.sessions:peek(body.session_id)
    if not s then user_error("copy_weights: session_id '" .. tostring(body.session_id) .. "' is not a live session") end
    local seq = body.model_seq_id
    if type(seq) ~= "number" or seq < 0 or seq % 1 ~= 0 then
      user_error("copy_weights: model_seq_id (a whole number >= 0) must come with session_id")
    end
    local run = ("%s:train:%d"):format(s.id, seq)
    if srv.training:run(run) then
      user_error(("copy_weights: %s is a live training client; a copy's run cannot be trained on (another model_seq_id)")
        :format(run))
    end
    return run
  end
  if type(body.destination_project_id) ~= "string" or body.destination_project_id == "" then
    user_error("copy_weights needs destination_project_id (any name: one key holder owns every project here), "
      .. "or session_id and model_seq_id")
  end
  return "copy-" .. require("rl.tinker.keys").random_hex(8)
end

local copies = setmetatable({}, { __mode = "k" })   -- server → {keys = {key → path}, order, next}

local function copy_weights(srv, req, body)
  local key = req.headers["x-idempotency-key"]
  local seen = copies[srv] or { keys = {}, order = {}, next = 1 }
  copies[srv] = seen
  if key and seen.keys[key] then return reply(200, { tinker_path = seen.keys[key] }) end   -- a retry
  if type(body.source_path) ~= "string" then user_error("copy_weights needs source_path (a tinker://... path)") end
  local run, kind, name = body.source_path:match("^tinker://([^/]+)/([^/]+)/([^/]+)$")
  if not run then
    user_error("copy_weights: source_path '" .. body.source_path .. "' is not a tinker://<run>/<weights|sampler_weights>/<name> path")
  end
  local src, missing = checkpoint(srv, run, kind, name)
  if not src then return missing end
  local ttl = ttl_of(srv, body.ttl_seconds, "copy_weights")
  local dst_run = copy_run(srv, body)
  local path, why, msg = checkpoints.copy(srv.training.dir, src.dir, dst_run, kind, name)
  if not path then
    if why == "failed" then error(msg, 0) end
    user_error("copy_weights: " .. msg)
  end
  local c = checkpoint(srv, dst_run, kind, name)
  if ttl then
    c.expires_at = set_meta(c, { expires_at = os.time() + ttl }).expires_at
    srv.expiry:note(c)
  end
  if key then
    local old = seen.order[seen.next]
    if old then seen.keys[old] = nil end
    seen.order[seen.next], seen.keys[key] = key, path
    seen.next = seen.next % COPY_KEYS_KEPT + 1
  end
  log.info("tinker: copied %s to %s", src.path, path)
  return reply(200, { tinker_path = path })
end

M.routes = {
  { "PUT", "^/api/v1/training_runs/([^/]+)/checkpoints/([^/]+)/([^/]+)/ttl$", set_ttl },
  { "POST", "^/api/v1/training_runs/([^/]+)/checkpoints/([^/]+)/([^/]+)/publish$", set_public(true) },
  { "DELETE", "^/api/v1/training_runs/([^/]+)/checkpoints/([^/]+)/([^/]+)/publish$", set_public(false) },
  { "POST", "^/api/v1/copy_weights$", copy_weights },
}

return M
