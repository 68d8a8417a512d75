--- rl.tinker.rest: what the SDK's RestClient asks about training runs, checkpoints and
--- sessions (tinker/lib/public_interfaces/rest_client.py): list_training_runs,
--- get_training_run[_by_tinker_path], list_checkpoints, list_user_checkpoints,
--- delete_checkpoint[_from_tinker_path], get_weights_info_by_tinker_path, list_sessions,
--- get_session (TTLs, publishing and copies: rl.tinker.checkpoint_ops). A training run is a training client (model_id), live or gone: what it
--- saved stays on disk (rl.tinker.checkpoints) until deleted.
---
--- M.routes: {method, path pattern, handler(server, req, body, captures...)} each, for
--- rl.tinker's dispatch; a handler returns {status, body}.
local json = require "rl.json"
local checkpoints = require "rl.tinker.checkpoints"

local M = {}

local OWNER = "local"   -- one API key, one owner: every run is the key holder's

local function reply(status, body) return { status = status, body = body } end
local function not_found(msg) return reply(404, { error = msg, category = "user" }) end
local function user_error(msg) error("user: " .. msg, 0) end

-- A non-negative integer query parameter (limit / offset), or its default.
local function int_param(req, name, default, max)
  local v = req.params[name]
  if v == nil or v == "" then return default end
  local n = tonumber(v)
  if not n or n < 0 or n % 1 ~= 0 or (max and n > max) then
    user_error(("%s=%s: a whole number >= 0%s expected"):format(name, v, max and (" and <= " .. max) or ""))
  end
  return n
end

local function scan(srv, run)
  local list, err = checkpoints.scan(srv.training.dir, run)
  if not list then error("listing checkpoints: " .. tostring(err), 0) end
  return srv.expiry:filter(list)   -- the expired ones go now
end

-- Only string values: the SDK's TrainingRun.user_metadata is dict[str, str].
local function string_map(t)
  if type(t) ~= "table" then return nil end
  local out, any = {}, false
  for k, v in pairs(t) do
    if type(k) == "string" and type(v) == "string" then out[k], any = v, true end
  end
  return any and out or nil
end

local function adapter_config(c)
  local text = require("rl._fs").read_file(c.dir .. "/adapter_config.json")
  local ok, cfg = pcall(json.decode, text or "")
  return ok and type(cfg) == "table" and cfg or {}
end

-- The SDK's TrainingRun of run `id` from its live client (or nil) and its checkpoints
-- (newest first); nil when neither exists.
local function training_run(id, live, cks)
  if not live and #cks == 0 then return nil end
  local last_ck, last_sampler
  for _, c in ipairs(cks) do
    if c.kind == "weights" and not last_ck then last_ck = c end
    if c.kind == "sampler_weights" and not last_sampler then last_sampler = c end
  end
  local base, rank = live and live.base, live and live.rank
  if not live then
    local cfg = adapter_config(cks[1])
    base, rank = cfg.base_model_name_or_path or "unknown", cfg.r
  end
  local last = math.max(live and live.last or 0, cks[1] and cks[1].time or 0)
  return { training_run_id = id, base_model = base, model_owner = OWNER, is_lora = true, corrupted = false,
           lora_rank = rank, last_request_time = checkpoints.iso_time(last),
           last_checkpoint = last_ck and checkpoints.json(last_ck) or nil,
           last_sampler_checkpoint = last_sampler and checkpoints.json(last_sampler) or nil,
           user_metadata = live and string_map(live.user_metadata) or nil }, last
end

local function get_training_run(srv, req, body, id)
  local run = training_run(id, srv.training:run(id), scan(srv, id))
  if not run then return not_found("no training run '" .. id .. "' (no live client of that model_id, no checkpoints)") end
  return reply(200, run)
end

local function list_training_runs(srv, req)
  local limit, offset = int_param(req, "limit", 20, 10000), int_param(req, "offset", 0)
  local by_run, ids = {}, {}
  for _, c in ipairs(scan(srv)) do
    if not by_run[c.run] then by_run[c.run] = {}; ids[#ids + 1] = c.run end
    table.insert(by_run[c.run], c)
  end
  local live = {}
  for _, r in ipairs(srv.training:runs()) do
    live[r.id] = r
    if not by_run[r.id] then by_run[r.id] = {}; ids[#ids + 1] = r.id end
  end
  local runs = {}
  for _, id in ipairs(ids) do
    local run, last = training_run(id, live[id], by_run[id])
    runs[#runs + 1] = { run = run, last = last }
  end
  table.sort(runs, function(a, b)   -- most recently used first
    if a.last ~= b.last then return a.last > b.last end
    return a.run.training_run_id < b.run.training_run_id
  end)
  local page = {}
  for i = offset + 1, math.min(offset + limit, #runs) do page[#page + 1] = runs[i].run end
  return reply(200, { training_runs = json.array(page), cursor = { offset = offset, limit = limit, total_count = #runs } })
end

local function list_checkpoints(srv, req, body, id)
  local cks = scan(srv, id)
  if #cks == 0 and not srv.training:run(id) then
    return not_found("no training run '" .. id .. "' (no live client of that model_id, no checkpoints)")
  end
  local list = {}
  for i, c in ipairs(cks) do list[i] = checkpoints.json(c) end
  return reply(200, { checkpoints = json.array(list) })
end

local function list_user_checkpoints(srv, req)
  local limit, offset = int_param(req, "limit", 100, 10000), int_param(req, "offset", 0)
  local cks = scan(srv)
  local page = {}
  for i = offset + 1, math.min(offset + limit, #cks) do page[#page + 1] = checkpoints.json(cks[i]) end
  return reply(200, { checkpoints = json.array(page), cursor = { offset = offset, limit = limit, total_count = #cks } })
end

local function delete_checkpoint(srv, req, body, id, kind, name)
  local dir, why, msg = checkpoints.delete(srv.training.dir, id, kind .. "/" .. name)
  if not dir then
    if why == "missing" then return not_found(msg) end
    if why == "bad" then user_error(msg) end
    error(msg, 0)
  end
  srv.sampling:forget(dir)
  srv.expiry:forget(dir)
  require("rl.log").info("tinker: deleted checkpoint tinker://%s/%s/%s", id, kind, name)
  return reply(200, {})
end

local function weights_info(srv, req, body)
  if type(body.tinker_path) ~= "string" then user_error("weights_info needs tinker_path (a tinker://... string)") end
  local dir, owner = srv.training:resolve_path(body.tinker_path)
  local cfg = adapter_config({ dir = dir })
  local targets = {}
  for _, t in ipairs(type(cfg.target_modules) == "table" and cfg.target_modules or {}) do targets[t] = true end
  return reply(200, { base_model = owner and owner.base.name or cfg.base_model_name_or_path, is_lora = true,
                      lora_rank = cfg.r, train_unembed = targets.lm_head == true, train_mlp = targets.gate_proj == true,
                      train_attn = targets.q_proj == true })
end

local function list_sessions(srv, req)
  local limit, offset = int_param(req, "limit", 20, 10000), int_param(req, "offset", 0)
  local ids, page = srv.sessions:list(), {}
  for i = offset + 1, math.min(offset + limit, #ids) do page[#page + 1] = ids[i] end
  return reply(200, { sessions = json.array(page) })
end

local function get_session(srv, req, body, id)
  local s, state, why = srv.sessions:peek(id)
  if not s then
    if state == "ended" then return not_found("session '" .. id .. "' has ended (" .. tostring(why) .. ")") end
    return not_found("unknown session '" .. id .. "'")
  end
  return reply(200, { training_run_ids = json.array(s.models), sampler_ids = json.array(s.samplers),
                      user_metadata = string_map(s.user_metadata) })
end

M.routes = {
  { "GET", "^/api/v1/training_runs$", list_training_runs },
  { "GET", "^/api/v1/training_runs/([^/]+)$", get_training_run },
  { "GET", "^/api/v1/training_runs/([^/]+)/checkpoints$", list_checkpoints },
  { "DELETE", "^/api/v1/training_runs/([^/]+)/checkpoints/([^/]+)/([^/]+)$", delete_checkpoint },
  { "GET", "^/api/v1/checkpoints$", list_user_checkpoints },
  { "POST", "^/api/v1/weights_info$", weights_info },
  { "GET", "^/api/v1/sessions$", list_sessions },
  { "GET", "^/api/v1/sessions/([^/]+)$", get_session },
}

return M
