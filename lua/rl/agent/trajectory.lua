--- rl.agent.trajectory: one token buffer per multi-turn trajectory, kept on an
--- rl.sample (tokens, loss_mask, rollout_log_probs) with its structure in
--- sample.metadata.trajectory. Nothing here decodes and re-encodes a trajectory:
--- engine output ids are appended verbatim, observations are rendered by the chat
--- template for their own turn and tokenized once. See docs/agentic.md.
--
--   local T = rl.agent.trajectory
--   T.begin(sample)                                   -- after the prompt is tokenized
--   T.append_output(sample, ids, logprobs, meta, text) -- one /generate call
--   local ids = T.observation_ids(tok, messages, last_id)
--   T.append_observation(sample, ids, messages)
--   assert(T.check(sample))
local json = require "rl.json"

local M = {}

--- The trajectory record of a sample (creating it: the prompt is what the buffer holds now).
function M.begin(sample)
  local md = sample.metadata
  if type(md) ~= "table" or md == json.null then md = {}; sample.metadata = md end
  local tr = md.trajectory
  if type(tr) ~= "table" then
    tr = { prompt_length = #sample.tokens - sample.response_length, turns = json.array(), end_reason = json.null }
    md.trajectory = tr
  end
  return tr
end

--- The record of a sample, or nil when it has none.
function M.of(sample)
  local md = sample.metadata
  local tr = type(md) == "table" and md.trajectory
  return type(tr) == "table" and tr or nil
end

--- The last turn when its output is still open (generated into, no observation and no
--- end yet: an aborted turn that a partial rollout resumes), else nil.
function M.open_turn(tr)
  local t = tr.turns[#tr.turns]
  if t and t.open then return t end
end

--- Appends one /generate call's output (ids and log-probs verbatim) to the current turn,
--- opening a new turn when none is open. meta: the engine's meta_info.
function M.append_output(sample, ids, logprobs, meta, text)
  local tr = M.begin(sample)
  local t = M.open_turn(tr)
  if not t then
    t = { output_start = #sample.tokens + 1, output_length = 0, segments = json.array(), open = true,
          tool_calls = 0, tool_errors = 0 }
    tr.turns[#tr.turns + 1] = t
  end
  sample:append_response(ids, logprobs, { meta_info = meta, text = text })
  t.output_length = t.output_length + #ids
  local wv = meta and meta.weight_version
  t.segments[#t.segments + 1] = { length = #ids, weight_version = wv ~= nil and tostring(wv) or json.null }
  local fr = meta and meta.finish_reason
  if type(fr) == "table" and fr ~= json.null then fr = fr.type end
  t.finish_reason = fr or json.null
  return t
end

--- Closes the open turn's output (the environment has seen it).
function M.close_output(sample)
  local t = M.open_turn(M.begin(sample))
  if t then t.open = nil end
  return t
end

--- The ids of an observation's messages as the chat template renders them after an
--- assistant turn, with the generation prompt for the next one: rendered for this turn
--- alone (a fixed conversation with and without the messages), tokenized once.
--- last_id: the turn's last token; when the template's end-of-turn text after the
--- assistant content starts with that token's text (the model's own <|im_end|>), it is
--- not repeated. template_opts: extra apply_chat_template options (tools, ...).
function M.observation_ids(tok, messages, last_id, template_opts)
  local mark = "\1agent-turn\1"
  local base = { { role = "user", content = "q" }, { role = "assistant", content = mark } }
  local o = {}
  for k, v in pairs(template_opts or {}) do o[k] = v end
  o.add_generation_prompt = false
  local before, err = tok:apply_chat_template(base, o)
  if not before then return nil, err end
  local full = {}
  for i, m in ipairs(base) do full[i] = m end
  for _, m in ipairs(messages) do full[#full + 1] = m end
  o.add_generation_prompt = true
  local after, err2 = tok:apply_chat_template(full, o)
  if not after then return nil, err2 end
  local at = before:find(mark, 1, true)
  if not at or after:sub(1, at + #mark - 1) ~= before:sub(1, at + #mark - 1) then
    return nil, "rl.agent.trajectory: the chat template renders earlier turns differently once a message follows "
      .. "(cannot render the observation turn alone)"
  end
  local text = after:sub(at + #mark)
  local eot = last_id and tok:id_to_token(last_id)
  if eot and #eot > 1 and text:sub(1, #eot) == eot then text = text:sub(#eot + 1) end
  return tok:encode(text, { add_special_tokens = false }), text
end

--- Appends an observation's ids (loss mask 0, log-prob 0) after the last turn.
function M.append_observation(sample, ids, messages, text)
  local tr = M.begin(sample)
  local t = tr.turns[#tr.turns]
  if not t then error("rl.agent.trajectory.append_observation: no turn to observe (an observation before the "
    .. "first turn belongs in the prompt)", 2) end
  t.open = nil
  t.observation_start = #sample.tokens + 1
  t.observation_length = #ids
  t.observation = messages or json.null
  if text then t.observation_text = text end
  sample:append_response(ids, nil, { trainable = false })
end

--- Ends the trajectory with `reason` (done, max_turns, max_total_tokens, length, aborted, env_error).
function M.finish(sample, reason)
  local tr = M.begin(sample)
  local t = tr.turns[#tr.turns]
  if t and reason ~= "aborted" then t.open = nil end
  tr.end_reason = reason
end

--- Checks the buffer against the record: turn boundaries tile the response, the loss
--- mask is 1 on every output token and 0 on every observation token. Returns true or
--- false, the first mismatch. (remove_sample / mask_offpolicy zero whole samples: pass
--- opts.masked_outputs = true to accept outputs masked 0.)
function M.check(sample, opts)
  local tr = M.of(sample)
  if not tr then return false, "no trajectory record" end
  local pos = tr.prompt_length + 1
  local lm, P = sample.loss_mask, tr.prompt_length
  for k, t in ipairs(tr.turns) do
    if t.output_start ~= pos then return false, ("turn %d output starts at %d, expected %d"):format(k, t.output_start, pos) end
    local seg = 0
    for _, s in ipairs(t.segments) do seg = seg + s.length end
    if seg ~= t.output_length then return false, ("turn %d: segments hold %d tokens, output %d"):format(k, seg, t.output_length) end
    for i = pos, pos + t.output_length - 1 do
      local m = lm[i - P]
      if m ~= 1 and not (opts and opts.masked_outputs and m == 0) then
        return false, ("turn %d: output token %d has loss mask %s"):format(k, i, tostring(m))
      end
    end
    pos = pos + t.output_length
    if t.observation_start then
      if t.observation_start ~= pos then return false, ("turn %d observation starts at %d, expected %d"):format(k, t.observation_start, pos) end
      for i = pos, pos + t.observation_length - 1 do
        if lm[i - P] ~= 0 then return false, ("turn %d: observation token %d has loss mask %s"):format(k, i, tostring(lm[i - P])) end
      end
      pos = pos + t.observation_length
    end
  end
  if pos ~= #sample.tokens + 1 then return false, ("turns cover %d tokens of %d"):format(pos - 1, #sample.tokens) end
  if #lm ~= sample.response_length then return false, "loss_mask length differs from response_length" end
  return true
end

--- One weight version per response token: the version of the /generate call that
--- produced it, false on observation tokens.
function M.token_weight_versions(sample)
  local tr = M.of(sample)
  local out = {}
  if not tr then return out end
  for _, t in ipairs(tr.turns) do
    for _, s in ipairs(t.segments) do
      local v = s.weight_version ~= json.null and s.weight_version or false
      for _ = 1, s.length do out[#out + 1] = v end
    end
    for _ = 1, t.observation_length or 0 do out[#out + 1] = false end
  end
  return out
end

return M
