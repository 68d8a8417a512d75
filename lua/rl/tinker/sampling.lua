--- rl.tinker.sampling: the Tinker API's sampling clients. One rl.engine per base model
--- (thread mode, started on first use) serves every sampler of that base; a sampler
--- on saved weights (a tinker://.../sampler_weights/... path) samples under that
--- adapter, loaded into the engine by name (SGLang's lora_path), so several adapters and
--- the base share one decode batch. Log-probs come from the same kernels as the
--- trainer's: a sampled sequence's log-probs equal a forward of the same tokens, bit for bit.
local json = require "rl.json"
local log = require "rl.log"

local M = {}
local Sampling = {}
Sampling.__index = Sampling

local function user_error(msg) error("user: " .. msg, 0) end

function M.new(opts, training)
  return setmetatable({ opts = opts, training = training, sessions = {}, engines = {}, loaded = {}, next = 0 },
    Sampling)
end

-- The base's engine, started on first use.
function Sampling:_engine(base)
  local e = self.engines[base.name]
  if e then return e end
  local eo = { model = base.dir, mode = "thread", serve = false, dtype = "float32" }
  for k, v in pairs(self.opts.engine or {}) do eo[k] = v end
  local eng, err = require("rl.engine").start(eo)
  if not eng then error("starting the sampler engine of " .. base.name .. ": " .. tostring(err), 0) end
  self.engines[base.name] = eng
  return eng
end

-- A sampler on {base_model | model_path}: {base, adapter_dir, model_path}.
local function new_sampler(self, body)
  local base, adapter_dir
  if body.model_path then
    local dir, owner = self.training:resolve_path(body.model_path)
    adapter_dir = dir
    local cfg = json.decode(require("rl._fs").read_file(dir .. "/adapter_config.json"))
    base = self.training:_base(body.base_model or (owner and owner.base.name) or cfg.base_model_name_or_path)
  elseif body.base_model then
    base = self.training:_base(body.base_model)
  else
    user_error("a sampling session needs base_model or model_path")
  end
  return { base = base, adapter_dir = adapter_dir, model_path = body.model_path }
end

--- create_sampling_session {base_model | model_path} → sampling_session_id; the
--- session (rl.tinker.sessions) owns it.
function Sampling:create(session, body)
  local s = new_sampler(self, body)
  self.next = self.next + 1
  s.id = ("sampler-%d-%s"):format(self.next, require("rl.tinker.keys").random_hex(4))
  s.session_id = session.id
  self.sessions[s.id] = s
  session.samplers[#session.samplers + 1] = s.id
  return s.id
end

--- Forgets the samplers of an ended session. → how many there were.
function Sampling:drop_session(session)
  local n = 0
  for _, id in ipairs(session.samplers) do
    if self.sessions[id] then
      self.sessions[id] = nil
      n = n + 1
    end
  end
  return n
end

--- The checkpoint in `dir` was replaced or deleted: the engine loads it afresh when a
--- sampler next needs it (and unloads the old adapter now, unless requests still use it).
function Sampling:forget(dir)
  local name = self.loaded[dir]
  if not name then return end
  self.loaded[dir] = nil
  for _, eng in pairs(self.engines) do pcall(eng.unload_lora, eng, name) end   -- the base's engine has it
end

--- GET /api/v1/samplers/<id>: what the SDK asks of a sampler it did not name the base of.
function Sampling:describe(id)
  local s = self.sessions[id]
  if not s then user_error("unknown sampler '" .. tostring(id) .. "'") end
  return { sampler_id = id, base_model = s.base.name, model_path = s.model_path or json.null }
end

--- The sampling session a sample request names (sampling_session_id, or an ad-hoc one
--- from base_model / model_path).
function Sampling:resolve(body)
  if body.sampling_session_id then
    local s = self.sessions[body.sampling_session_id]
    if not s then user_error("unknown sampling_session_id '" .. tostring(body.sampling_session_id) .. "'") end
    return s
  end
  return new_sampler(self, body)   -- an ad-hoc sampler: nothing to keep
end

-- The adapter's name in the engine (loaded once per checkpoint directory).
function Sampling:_adapter(eng, s)
  if not s.adapter_dir then return nil end
  local name = self.loaded[s.adapter_dir]
  if name then return name end
  local f = io.open(s.adapter_dir .. "/adapter_config.json", "r")
  if not f then user_error(s.model_path .. " was deleted (delete_checkpoint, or its TTL ran out); save the weights again") end
  f:close()
  name = s.model_path:gsub("^tinker://", ""):gsub("[^%w%-_.]", "_")
  local ok, err = eng:load_lora(name, s.adapter_dir)
  if not ok then error("loading " .. s.model_path .. " into the sampler: " .. tostring(err), 0) end
  self.loaded[s.adapter_dir] = name
  return name
end

local function tokens_of(prompt)
  local ids = {}
  for _, ch in ipairs(prompt and prompt.chunks or {}) do
    if ch.type ~= nil and ch.type ~= "encoded_text" then
      user_error("prompt chunk of type '" .. tostring(ch.type) .. "': only encoded_text is served")
    end
    for _, t in ipairs(ch.tokens or {}) do ids[#ids + 1] = t end
  end
  if #ids == 0 then user_error("prompt has no tokens") end
  return ids
end

-- Tinker's SamplingParams → SGLang's sampling_params.
local function sglang_params(p, n)
  p = p or {}
  local sp = { max_new_tokens = p.max_tokens or 128, temperature = p.temperature or 1, top_k = p.top_k or -1,
               top_p = p.top_p or 1, n = n }
  if p.seed ~= nil then sp.sampling_seed = p.seed end
  local stop = p.stop
  if type(stop) == "string" then
    sp.stop = { stop }
  elseif type(stop) == "table" then
    if #stop == 0 and next(stop) == nil and stop ~= json.null then
      sp.ignore_eos = true   -- [] disables every stop token, EOS included
    elseif type(stop[1]) == "number" then
      sp.stop_token_ids = stop
    else
      sp.stop = stop
    end
  end
  return sp
end

-- A top-k count of the request (topk_prompt_logprobs, topk_sample_logprobs): 0 when absent.
local function topk_count(body, name)
  local k = body[name]
  if k == nil or k == json.null then return 0 end
  if type(k) ~= "number" or k < 0 or k % 1 ~= 0 then
    user_error(name .. " must be a non-negative integer, got " .. tostring(k))
  end
  return k
end

-- The engine's top-log-prob rows (SGLang's: per position a list of {logprob, id, text},
-- or null) → Tinker's TopkLogprobs, a rows × k matrix, flat; empty cells and rows hold
-- the SDK's sentinel (token 0, log-prob -99999), which it reads back as None.
local MASK_LOGPROB = -99999.0
local function topk_matrix(rows, n, k)
  local ids, lps = {}, {}
  for i = 1, n do
    local row = rows and rows[i]
    if type(row) ~= "table" then row = nil end
    for j = 1, k do
      local e = row and row[j]
      ids[#ids + 1] = type(e) == "table" and e[2] or 0
      lps[#lps + 1] = type(e) == "table" and e[1] or MASK_LOGPROB
    end
  end
  return { k = k, token_ids = ids, logprobs = lps }
end

--- sample → {body = SampleResponse bytes}
function Sampling:sample(s, body)
  local n = body.num_samples or 1
  local k_prompt, k_sample = topk_count(body, "topk_prompt_logprobs"), topk_count(body, "topk_sample_logprobs")
  local k_top = math.max(k_prompt, k_sample)
  local want_prompt = body.prompt_logprobs == true
  local ids = tokens_of(body.prompt)
  -- prompt_logprobs_last_n: only the last N positions are scored (the engine's
  -- logprob_start_len), the earlier ones are null, the top-k rows likewise
  local start = 0
  local last_n = body.prompt_logprobs_last_n
  if last_n ~= nil and last_n ~= json.null then
    if not want_prompt then user_error("prompt_logprobs_last_n applies to prompt logprobs: set prompt_logprobs") end
    if type(last_n) ~= "number" or last_n % 1 ~= 0 or last_n < 1 or last_n > #ids - 1 then
      user_error(("prompt_logprobs_last_n must be an integer in [1, %d] (the prompt's length - 1), got %s")
        :format(#ids - 1, tostring(last_n)))
    end
    start = #ids - last_n - 1
  end
  local eng = self:_engine(s.base)
  local lora = self:_adapter(eng, s)
  local sp = sglang_params(body.sampling_params, nil)
  local reqs = {}
  for i = 1, n do
    local p = {}
    for k, v in pairs(sp) do p[k] = v end
    if p.sampling_seed then p.sampling_seed = p.sampling_seed + i - 1 end
    reqs[i] = { input_ids = ids, sampling_params = p, return_logprob = true, lora_path = lora,
                logprob_start_len = (want_prompt or k_prompt > 0) and start or nil,
                top_logprobs_num = k_top > 0 and k_top or nil }
  end
  local tasks = {}
  for i, r in ipairs(reqs) do
    tasks[i] = require("rl.task").spawn(function()
      local out, err = eng:generate(r)
      if not out then error(err, 0) end
      return out
    end)
  end
  local outs = require("rl.task").wait_all(tasks)
  local seqs = {}
  local prompt_logprobs, topk_prompt
  for i, out in ipairs(outs) do
    local mi = out.meta_info or {}
    local toks, lps = {}, {}
    for j, e in ipairs(mi.output_token_logprobs or {}) do
      lps[j] = e[1]
      toks[j] = e[2]
    end
    if #toks == 0 and out.output_ids then toks = out.output_ids end
    local reason = (mi.finish_reason or {}).type == "length" and "length" or "stop"
    seqs[i] = { tokens = toks, logprobs = lps, stop_reason = reason }
    if k_sample > 0 then seqs[i].topk = topk_matrix(mi.output_top_logprobs, #toks, k_sample) end
    if i == 1 and want_prompt and mi.input_token_logprobs then
      prompt_logprobs = {}
      for j = 1, start do prompt_logprobs[j] = json.null end
      for j, e in ipairs(mi.input_token_logprobs) do prompt_logprobs[start + j] = e[1] == nil and json.null or e[1] end
    end
    if i == 1 and k_prompt > 0 then
      local rows = {}
      for j, row in ipairs(mi.input_top_logprobs or {}) do rows[start + j] = row end
      topk_prompt = topk_matrix(rows, #ids, k_prompt)
    end
  end
  local bytes = require("rl.tinker_wire").encode_sample_response {
    sequences = seqs, prompt_logprobs = prompt_logprobs, topk_prompt_logprobs = topk_prompt }
  return { body = bytes, content_type = "application/x-protobuf" }
end

function Sampling:stop()
  for name, e in pairs(self.engines) do
    local ok, err = pcall(e.stop, e)
    if not ok then log.warn("tinker: stopping the sampler of %s: %s", name, tostring(err)) end
  end
  self.engines = {}
end

return M
