--- rl.sample: a rollout sample with slime's fields (slime/utils/types.py), as a
--- plain Lua table with methods — field access costs what a table access costs.
--
--   local s = rl.sample.new { prompt = "1+1?", label = "2", group_index = 0, index = 0 }
--   s:append_response(tokens, logprobs, { meta_info = meta, text = out.text })
--   local d = s:to_dict()            -- plain table (JSON / dump ready); status as its string
--   local s2 = rl.sample.from_dict(d)
local json = require "rl.json"

local M = {}
local Sample = {}
Sample.__index = Sample
M.Sample = Sample

M.PENDING, M.COMPLETED, M.TRUNCATED, M.ABORTED, M.FAILED = "pending", "completed", "truncated", "aborted", "failed"
local STATUSES = { pending = true, completed = true, truncated = true, aborted = true, failed = true }

-- Declared fields and their defaults (nil = None). Tables are fresh per sample.
local FIELDS = {
  { "group_index" }, { "index" }, { "rollout_id" }, { "prompt", "" }, { "tokens", json.array() },
  { "multimodal_inputs" }, { "multimodal_train_inputs" }, { "multimodal_train_input_id" },
  { "apply_chat_template_kwargs", {} }, { "response", "" }, { "response_length", 0 }, { "label" }, { "reward" },
  { "loss_mask" }, { "weight_versions", json.array() }, { "rollout_log_probs" }, { "rollout_top_p_token_ids" },
  { "rollout_top_p_token_offsets" }, { "rollout_routed_experts" }, { "remove_sample", false },
  { "teacher_log_probs" }, { "status", "pending" }, { "metadata", {} }, { "generate_function_path" },
  { "custom_rm_path" }, { "train_metadata" }, { "session_id" }, { "non_generation_time", 0.0 },
  { "spec_info", { spec_accept_token_num = 0, spec_draft_token_num = 0, spec_verify_ct = 0, completion_token_num = 0 } },
  { "prefix_cache_info", { cached_tokens = 0, total_prompt_tokens = 0 } },
  -- rlhost: the weights each response token was sampled under, as spans
  -- {first response token (0-based), version}; a weight swap mid-request adds a span.
  { "weight_version_spans", json.array() },
}
M.fields = {}
for i, f in ipairs(FIELDS) do M.fields[i] = f[1] end
local DECLARED = {}
for _, f in ipairs(FIELDS) do DECLARED[f[1]] = true end

local function copy(v)
  if type(v) ~= "table" or v == json.null then return v end
  local out = {}
  for k, x in pairs(v) do out[k] = copy(x) end
  return json.is_array(v) and json.array(out) or out
end

--- A new sample: slime's defaults, overridden by `fields`.
function M.new(fields)
  local s = {}
  for _, f in ipairs(FIELDS) do
    if f[2] ~= nil then s[f[1]] = copy(f[2]) end
  end
  if fields then
    if type(fields) ~= "table" then error("rl.sample.new: bad argument #1 'fields' (table expected)", 2) end
    for k, v in pairs(fields) do s[k] = v end
  end
  if not STATUSES[s.status] then
    error("rl.sample.new: status '" .. tostring(s.status) .. "' is not one of pending, completed, truncated, aborted, failed", 2)
  end
  return setmetatable(s, Sample)
end

--- A deep copy (what slime's deepcopy of a prompt sample per n_samples_per_prompt does).
function Sample:clone()
  json.materialize()  -- deferred trace events (rl.trace) become tables first
  return setmetatable(copy(self), Sample)
end

--- Response tokens that count for the loss: sum(loss_mask), or response_length.
function Sample:effective_response_length()
  if not self.loss_mask then return self.response_length end
  local n = 0
  for _, m in ipairs(self.loss_mask) do n = n + m end
  return n
end

function Sample:prefix_cache_hit_rate()
  local p = self.prefix_cache_info
  return p.total_prompt_tokens > 0 and p.cached_tokens / p.total_prompt_tokens or 0
end

local FINISH_STATUS = { length = M.TRUNCATED, abort = M.ABORTED, stop = M.COMPLETED }

--- Appends generated tokens (slime's append_response_tokens). opts:
---   trainable (true): false gives the tokens loss_mask 0 and log-prob 0 (tool output, ...)
---   meta_info: the engine's meta_info; with a finish_reason it sets status, appends
---     weight_version, and adds cached/prompt tokens and speculative counts
---   text: appended to response
function Sample:append_response(tokens, logprobs, opts)
  opts = opts or {}
  local trainable = opts.trainable ~= false
  if trainable and logprobs == nil and #tokens > 0 then
    error("rl.Sample:append_response: trainable tokens need their log-probs", 2)
  end
  if logprobs and #logprobs ~= #tokens then
    error(("rl.Sample:append_response: %d tokens but %d log-probs"):format(#tokens, #logprobs), 2)
  end
  local prev = self.response_length
  if not self.loss_mask then
    self.loss_mask = json.array()
    for i = 1, prev do self.loss_mask[i] = 1 end
  end
  if not self.rollout_log_probs then
    self.rollout_log_probs = json.array()
    for i = 1, prev do self.rollout_log_probs[i] = 0.0 end
  end
  for i, t in ipairs(tokens) do
    self.tokens[#self.tokens + 1] = t
    self.loss_mask[#self.loss_mask + 1] = trainable and 1 or 0
    self.rollout_log_probs[#self.rollout_log_probs + 1] = trainable and logprobs[i] or 0.0
  end
  self.response_length = prev + #tokens
  if opts.text then self.response = self.response .. opts.text end
  local meta = opts.meta_info
  if meta and meta.finish_reason ~= nil and meta.finish_reason ~= json.null then
    local spec = self.spec_info
    for _, k in ipairs { "spec_accept_token_num", "spec_draft_token_num", "spec_verify_ct" } do
      if type(meta[k]) == "number" then spec[k] = spec[k] + meta[k] end
    end
    if type(meta.spec_verify_ct) == "number" then
      spec.completion_token_num = spec.completion_token_num + (meta.completion_tokens or 0)
    end
    local pc = self.prefix_cache_info
    pc.cached_tokens = pc.cached_tokens + (tonumber(meta.cached_tokens) or 0)
    pc.total_prompt_tokens = pc.total_prompt_tokens + (tonumber(meta.prompt_tokens) or 0)
    -- logprob_digest: the engine's proof that these log-probs are a trainer's own (same
    -- weights, temperature and kernels; docs/trainer.md). Kept only while every request
    -- of the sample reported the same one.
    local digest = type(meta.logprob_digest) == "string" and meta.logprob_digest or nil
    if #self.weight_versions == 0 then self.logprob_digest = digest
    elseif self.logprob_digest ~= digest then self.logprob_digest = nil end
    if meta.weight_version ~= nil then self.weight_versions[#self.weight_versions + 1] = tostring(meta.weight_version) end
    self:add_version_spans(meta, #tokens)
    local fr = meta.finish_reason
    local kind = type(fr) == "table" and fr.type or fr
    self.status = FINISH_STATUS[kind] or self.status
  end
  if #self.loss_mask ~= self.response_length or #self.rollout_log_probs ~= self.response_length then
    error("rl.Sample:append_response: loss_mask / rollout_log_probs lengths disagree with response_length", 2)
  end
end

-- The request's spans (offsets into its own output) moved to response coordinates:
-- its output ends at response_length and is meta.completion_tokens long (or, without
-- that count, the n tokens of this call).
function Sample:add_version_spans(meta, n)
  local spans, out = meta.weight_version_spans, self.weight_version_spans
  if type(spans) ~= "table" then
    if meta.weight_version == nil or meta.weight_version == json.null then return end
    spans = { { 0, meta.weight_version } }
  end
  local first = self.response_length - (tonumber(meta.completion_tokens) or n)
  for _, sp in ipairs(spans) do
    local at, v = first + sp[1], tostring(sp[2])
    if not (out[#out] and out[#out][2] == v) then out[#out + 1] = json.array { at, v } end
  end
end

--- One weight version per response token (from weight_version_spans); false before
--- the first span (tokens appended without a meta_info).
function Sample:token_weight_versions()
  local out, spans = {}, self.weight_version_spans
  for i = 1, self.response_length do
    local v = false
    for _, sp in ipairs(spans) do
      if sp[1] <= i - 1 then v = sp[2] else break end
    end
    out[i] = v
  end
  return out
end

--- A plain table of every field (status as its string), for JSON and dumps.
function Sample:to_dict()
  json.materialize()  -- deferred trace events (rl.trace) become tables first
  local d = {}
  for k, v in pairs(self) do d[k] = copy(v) end
  return d
end

--- A sample from a dict (slime's to_dict or ours): missing declared fields take
--- their defaults, unknown keys are kept as attributes (as slime's setattr).
function M.from_dict(d)
  if type(d) ~= "table" then error("rl.sample.from_dict: bad argument #1 'd' (table expected, got " .. type(d) .. ")", 2) end
  local fields = {}
  for k, v in pairs(d) do
    if v ~= json.null then fields[k] = copy(v) end
  end
  if fields.status ~= nil and not STATUSES[fields.status] then
    error("rl.sample.from_dict: status '" .. tostring(fields.status) ..
      "' is not one of pending, completed, truncated, aborted, failed", 2)
  end
  for _, k in ipairs { "spec_info", "prefix_cache_info" } do
    if fields[k] ~= nil then
      local base = M.new()[k]
      for kk, vv in pairs(fields[k]) do base[kk] = vv end
      fields[k] = base
    end
  end
  return M.new(fields)
end

function Sample:__tostring()
  return ("rl.Sample(group %s, index %s, %s, %d response tokens)"):format(tostring(self.group_index),
    tostring(self.index), self.status, self.response_length)
end

M.is_declared = function(name) return DECLARED[name] == true end

return M
