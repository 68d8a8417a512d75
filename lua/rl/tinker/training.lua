--- rl.tinker.training: the Tinker API's training clients. Each is a LoRA adapter over a
--- base model that all clients of that base share, frozen, with its own AdamW state
--- (trainer/stepwise.hpp through bindings/torch_stepwise.cpp). Calls on one base run one
--- at a time (they share its weights); calls on one client in its seq_id order
--- (rl.tinker.futures' lanes).
---
--- Checkpoints: tinker://<model_id>/weights/<name> (save_weights: adapter + optimizer
--- state) and tinker://<model_id>/sampler_weights/<name> (the adapter alone), stored as
--- PEFT directories under checkpoint_dir/<model_id>/<kind>/<name>.
local json = require "rl.json"
local task = require "rl.task"
local log = require "rl.log"

local M = {}
local Training = {}
Training.__index = Training

local function user_error(msg) error("user: " .. msg, 0) end
local function native() return require("rl.torch")._stepwise end

-- LoraConfig's switches → PEFT target modules (train_unembed: the lm_head too).
local ATTN = { "q_proj", "k_proj", "v_proj", "o_proj" }
local MLP = { "gate_proj", "up_proj", "down_proj" }

local function targets_of(lc)
  local t = {}
  if lc.train_attn ~= false then for _, n in ipairs(ATTN) do t[#t + 1] = n end end
  if lc.train_mlp ~= false then for _, n in ipairs(MLP) do t[#t + 1] = n end end
  if lc.train_unembed ~= false then t[#t + 1] = "lm_head" end
  if #t == 0 then user_error("lora_config trains nothing (train_attn, train_mlp and train_unembed all false)") end
  return t
end

--- opts: base_models (name → directory, or a list of directories), checkpoint_dir,
--- max_rank (default 128), alpha (LoRA alpha; default = rank, as Tinker: scale 1... see docs).
function M.new(opts)
  local bases, names = {}, {}
  local list = opts.base_models or {}
  for k, v in pairs(list) do
    local name, dir = k, v
    if type(k) == "number" then name = v end
    if type(dir) ~= "string" then error("rl.tinker.serve: opts.base_models: a model directory expected for " .. tostring(name), 3) end
    bases[name] = { name = name, dir = dir, lock = task.semaphore(1), load_lock = task.semaphore(1) }
    names[#names + 1] = name
  end
  if #names == 0 then error("rl.tinker.serve: opts.base_models is empty (give at least one model directory)", 3) end
  table.sort(names)
  local dir = opts.checkpoint_dir or (os.getenv("HOME") or "/tmp") .. "/.cache/rlhost/tinker"
  return setmetatable({ bases = bases, names = names, clients = {}, next = 0, dir = dir,
                        max_rank = opts.max_rank or 128, alpha = opts.lora_alpha }, Training)
end

function Training:base_names() return self.names end

--- Checkpoints past their time to live (rl.tinker.expiry) are gone for loads and saves.
function Training:use_expiry(expiry) self.expiry = expiry end

-- The base's model, loaded on first use (float32 on the CPU: exact kernels), on a helper
-- thread: the server keeps answering meanwhile; a second caller waits for the first load.
function Training:_model(base)
  if base.model then return base.model end
  base.load_lock:acquire()
  local ok, err = pcall(function()
    if base.model then return end
    local m, lerr = require("rl.model").load_async(base.dir, { dtype = "float32" })
    if not m then error("loading base model " .. base.name .. ": " .. tostring(lerr), 0) end
    base.config = json.decode(assert(require("rl._fs").read_file(base.dir .. "/config.json")))
    base.model = m
  end)
  base.load_lock:release()
  if not ok then error(err, 0) end
  return base.model
end

function Training:context_length(name)
  local base = self.bases[name]
  local cfg = base.config or json.decode(require("rl._fs").read_file(base.dir .. "/config.json") or "{}")
  return cfg.max_position_embeddings
end

function Training:_base(name)
  local b = self.bases[name]
  if not b then
    user_error(("base_model '%s' is not served here (served: %s)"):format(tostring(name), table.concat(self.names, ", ")))
  end
  return b
end

--- The training client of a model_id (a user error when unknown); notes the call's time.
function Training:client(id)
  local c = self.clients[id]
  if not c then user_error("unknown model_id '" .. tostring(id) .. "' (create one with create_lora_training_client)") end
  c.last = os.time()
  return c
end

local function run_of(c)
  return { id = c.id, base = c.base.name, rank = c.lora.rank, session_id = c.session_id, created = c.created,
           last = c.last, user_metadata = c.user_metadata, train_mlp = c.lora.train_mlp ~= false,
           train_attn = c.lora.train_attn ~= false }
end

--- The live training clients as training runs: {id, base, rank, session_id, created,
--- last (seconds since the epoch), user_metadata, train_mlp, train_attn} each.
function Training:runs()
  local list = {}
  for _, c in pairs(self.clients) do list[#list + 1] = run_of(c) end
  return list
end

--- The live training client `id` as a run (see runs()), or nil.
function Training:run(id)
  local c = self.clients[id]
  return c and run_of(c)
end

-- The SDK derives a model's id itself for create_training_client_from_state: the
-- session, "train", and the session's counter of training clients (model_seq_id).
local function new_client(self, session, base, lora, seq, user_metadata)
  local rank = lora.rank
  if type(rank) ~= "number" or rank < 1 or rank > self.max_rank or rank % 1 ~= 0 then
    user_error(("lora_config.rank must be an integer in [1, %d], got %s"):format(self.max_rank, tostring(rank)))
  end
  local model = self:_model(base)
  self.next = self.next + 1
  local id = ("%s:train:%d"):format(session.id, seq or (1000000 + self.next))
  if self.clients[id] then user_error("model_seq_id " .. tostring(seq) .. " of this session is taken by " .. id) end
  local spec = { rank = rank, alpha = self.alpha or 32, seed = lora.seed or self.next, targets = targets_of(lora) }
  local h = native().new(require("rl.model").handle(model), json.encode(spec))
  local c = { id = id, base = base, h = h, lora = lora, spec = spec, session_id = session.id, saved = 0,
              created = os.time(), last = os.time(), user_metadata = user_metadata }
  self.clients[id] = c
  session.models[#session.models + 1] = id
  log.info("tinker: training client %s on %s (LoRA rank %d, alpha %g, %s)", id, base.name, rank, spec.alpha,
    table.concat(spec.targets, " "))
  return c
end

--- create_model → {model_id}
function Training:create(session, body)
  local base = self:_base(body.base_model)
  if not body.lora_config then user_error("create_model without lora_config: rlhost serves LoRA training clients only") end
  local oc = body.optimizer_config
  if oc and oc.type and oc.type ~= "adamw" then user_error("optimizer_config.type '" .. oc.type .. "': only adamw is served") end
  local c = new_client(self, session, base, body.lora_config, body.model_seq_id, body.user_metadata)
  return { type = "create_model", model_id = c.id }
end

--- Forgets a training client (its session finished): its adapter and optimiser state go
--- with the handle; saved checkpoints stay.
function Training:drop(id)
  if self.clients[id] then
    log.info("tinker: training client %s released", id)
    self.clients[id] = nil
  end
end

function Training:info(id)
  local c = self:client(id)
  local cfg = c.base.config or {}
  return { type = "get_info", model_id = c.id, is_lora = true, lora_rank = c.lora.rank,
           model_data = { arch = (cfg.architectures or {})[1], model_name = c.base.name, tokenizer_id = c.base.dir } }
end

-- Runs fn while holding the client's base (one call per base at a time).
local function on_base(c, fn)
  c.base.lock:acquire()
  local ok, r, e = pcall(fn)
  c.base.lock:release()
  if not ok then error(r, 0) end
  return r, e
end

local function await(op, what)
  local r, err = task.await_json(op, what)
  if not r then error(err, 0) end
  return r
end

--- forward / forward_backward (fb: rl.tinker_wire's decoded request) → the result
--- entry {body = ForwardBackwardOutput bytes}.
function Training:forward_backward(c, fb)
  local config = {}
  for k, v in pairs(fb.loss_fn_config or {}) do
    if type(v) ~= "number" then user_error("loss_fn_config['" .. k .. "'] must be a number for " .. fb.loss_fn) end
    config[k] = v
  end
  local ok, op = pcall(c.h.forward_backward, c.h, fb.data, fb.loss_fn, config, fb.forward_only)
  if not ok then user_error(tostring(op):gsub("^.-bad argument[^(]*%((.*)%)$", "%1")) end
  local r = on_base(c, function() return await(op, "rl.tinker forward_backward") end)
  local outputs = {}
  for i, lp in ipairs(r.logprobs) do
    outputs[i] = { logprobs = lp, elementwise_loss = r.elementwise_loss[i] }
  end
  local bytes = require("rl.tinker_wire").encode_forward_backward_output {
    loss_fn_output_type = "ArrayRecord", loss_fn_outputs = outputs, metrics = r.metrics }
  return { body = bytes, content_type = "application/x-protobuf" }
end

--- optim_step → OptimStepResponse
function Training:optim_step(c, body)
  local p = body.adam_params or body.optim_params
  if type(p) ~= "table" then
    if body.optimizer_params then user_error("optimizer_params: only AdamParams are served") end
    user_error("optim_step without adam_params")
  end
  local r = on_base(c, function() return await(c.h:optim_step(json.encode(p)), "rl.tinker optim_step") end)
  return { type = "optim_step", metrics = { grad_norm = r.grad_norm, learning_rate = r.learning_rate } }
end

local function valid_name(name)
  return type(name) == "string" and name:match("^[%w%._%-]+$") ~= nil and name ~= "." and name ~= ".."
end

--- save_weights (kind "weights": adapter + optimizer) / save_weights_for_sampler (kind
--- "sampler_weights": the adapter) → {path = tinker://...}
function Training:save(c, body, kind)
  c.saved = c.saved + 1
  local name = body.path or ("%06d"):format(c.saved)
  if not valid_name(name) then user_error("path '" .. tostring(name) .. "': letters, digits, '.', '_' and '-' only") end
  local dir = table.concat({ self.dir, c.id, kind, name }, "/")
  if self.expiry then self.expiry:expired(dir) end   -- an expired one goes first: this save is new
  local f = io.open(dir .. "/adapter_config.json", "r")
  if f then
    f:close()
    if not body.overwrite and kind == "weights" then
      user_error("tinker://" .. c.id .. "/" .. kind .. "/" .. name .. " exists (pass overwrite=True to replace it)")
    end
  end
  on_base(c, function()
    return await(c.h:save(dir, kind == "weights", c.base.name), "rl.tinker save")
  end)
  return { type = kind == "weights" and "save_weights" or "save_weights_for_sampler",
           path = "tinker://" .. c.id .. "/" .. kind .. "/" .. name }
end

--- The local directory and owning client of a tinker:// path (a user error when unknown).
function Training:resolve_path(path)
  local id, kind, name = tostring(path):match("^tinker://([^/]+)/([%w_]+)/([^/]+)$")   -- the id may hold ':'
  if not id or not require("rl.tinker.checkpoints").valid_run_id(id) or (kind ~= "weights" and kind ~= "sampler_weights")
      or not valid_name(name) then
    user_error("path '" .. tostring(path) .. "' is not a tinker://<model_id>/weights|sampler_weights/<name> path")
  end
  local dir = table.concat({ self.dir, id, kind, name }, "/")
  local f = io.open(dir .. "/adapter_config.json", "r")
  if not f then user_error("no checkpoint at " .. path) end
  f:close()
  if self.expiry and self.expiry:expired(dir) then user_error("no checkpoint at " .. path) end
  return dir, self.clients[id], kind
end

--- A new training client from a saved checkpoint (load_weights with session_id).
function Training:create_from_checkpoint(session, body)
  local dir, owner = self:resolve_path(body.path)
  local cfg = json.decode(require("rl._fs").read_file(dir .. "/adapter_config.json"))
  local base = self:_base(body.base_model or (owner and owner.base.name) or cfg.base_model_name_or_path)
  local lora = owner and owner.lora or { rank = cfg.r }
  return new_client(self, session, base, lora, body.model_seq_id)
end

--- load_weights → {path}
function Training:load(c, body)
  local dir = self:resolve_path(body.path)
  on_base(c, function() return await(c.h:load(dir, body.optimizer == true), "rl.tinker load") end)
  return { type = "load_weights", path = body.path }
end

return M
