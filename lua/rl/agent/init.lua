--- rl.agent: multi-turn trajectories that never re-tokenize, environments and tools
--- as Lua (docs/agentic.md).
--
--   local env = rl.agent.tool_env { tools = rl.agent.tools.registry { rl.agent.tools.calculator() } }
--   local ro = rl.rollout.new { ..., custom_generate = rl.agent.generate_fn { env = env, max_turns = 8 } }
--
-- Each turn is one rl.rollout generate call (one /generate with input_ids = the
-- sample's tokens so far); its output ids and log-probs are appended verbatim;
-- the environment's observation is rendered by the chat template for that turn
-- alone, tokenized once and appended with loss mask 0 (rl.agent.trajectory).
local json = require "rl.json"
local trace = require "rl.trace"
local sample_mod = require "rl.sample"
local T = require "rl.agent.trajectory"

local M = {}
local Agent = {}
Agent.__index = Agent
M.Agent = Agent

local OPTS = { env = "table", max_turns = "number", max_total_tokens = "number", max_turn_tokens = "number",
               observation_role = "string", reward_reduce = "string", template_opts = "table", tokenizer = "table",
               on_turn_length = "string" }

--- An agent: opts env (an environment table, see docs/agentic.md), max_turns (8),
--- max_total_tokens (prompt + the rollout's rollout_max_response_len), max_turn_tokens
--- (the rollout's rollout_max_response_len), observation_role ("tool"), reward_reduce
--- ("last" | "sum"), template_opts (extra apply_chat_template options, e.g. tools),
--- on_turn_length ("end": a turn cut at max_turn_tokens ends the trajectory, reason
--- length; "continue": the cut turn goes to the environment like any other),
--- tokenizer (default: the rollout's).
function M.new(opts)
  if type(opts) ~= "table" then error("rl.agent.new: bad argument #1 'opts' (table expected, got " .. type(opts) .. ")", 2) end
  for k, v in pairs(opts) do
    if not OPTS[k] then error(("rl.agent.new: bad argument 'opts.%s' (unknown option)"):format(tostring(k)), 2) end
    if type(v) ~= OPTS[k] then
      error(("rl.agent.new: bad argument 'opts.%s' (%s expected, got %s)"):format(k, OPTS[k], type(v)), 2)
    end
  end
  if not opts.env then error("rl.agent.new: bad argument 'opts.env' (an environment table expected, got nil)", 2) end
  if type(opts.env.step) ~= "function" and type(opts.env.new) ~= "function" then
    error("rl.agent.new: bad argument 'opts.env' (an environment needs a step method, or new(sample) making one; "
      .. "see docs/agentic.md)", 2)
  end
  local otl = opts.on_turn_length or "end"
  if otl ~= "end" and otl ~= "continue" then
    error("rl.agent.new: bad argument 'opts.on_turn_length' ('end' or 'continue' expected, got '" .. otl .. "')", 2)
  end
  local rr = opts.reward_reduce or "last"
  if rr ~= "last" and rr ~= "sum" then
    error("rl.agent.new: bad argument 'opts.reward_reduce' ('last' or 'sum' expected, got '" .. rr .. "')", 2)
  end
  local self = setmetatable({ env = opts.env, max_turns = opts.max_turns or 8, max_total_tokens = opts.max_total_tokens,
    max_turn_tokens = opts.max_turn_tokens, observation_role = opts.observation_role or "tool", reward_reduce = rr,
    template_opts = opts.template_opts, tokenizer = opts.tokenizer, on_turn_length = otl }, Agent)
  self.instances = setmetatable({}, { __mode = "k" })   -- sample -> its environment instance
  return self
end

--- A function for rl.rollout.new{custom_generate = ...} running agent `opts` (or an Agent).
function M.generate_fn(opts)
  local a = getmetatable(opts) == Agent and opts or M.new(opts)
  return function(ro, sample, params, evaluation) return a:generate(ro, sample, params, evaluation) end
end

-- The environment instance of a trajectory.
local function instance(self, sample)
  local inst = self.instances[sample]
  if inst then return inst, false end
  local env = self.env
  if type(env.new) == "function" then inst = env.new(sample) else inst = setmetatable({}, { __index = env }) end
  self.instances[sample] = inst
  return inst, true
end

-- An observation as messages (or {ids=...}); nil for none.
local function as_messages(self, obs)
  if obs == nil or obs == json.null or obs == "" then return nil end
  if type(obs) == "string" then return { { role = self.observation_role, content = obs } } end
  if type(obs) ~= "table" then
    error("rl.agent: an environment returned a " .. type(obs) .. " observation (nil, a string, a message, "
      .. "a list of messages or {ids = {...}} expected)", 0)
  end
  if obs.ids then return obs end
  if obs.role then return { obs } end
  if #obs == 0 then return nil end
  for i, m in ipairs(obs) do
    if type(m) == "string" then obs[i] = { role = self.observation_role, content = m }
    elseif type(m) ~= "table" or type(m.role) ~= "string" then
      error(("rl.agent: observation message %d has no role"):format(i), 0)
    end
  end
  return obs
end

local function tok_of(self, ro)
  local tok = self.tokenizer or ro.tokenizer
  if not tok then
    error("rl.agent: observations need a tokenizer (rl.rollout.new{tokenizer = ...} or rl.agent.new{tokenizer = ...})", 0)
  end
  return tok
end

-- The observation's ids (chat template for this turn, tokenized once).
function Agent:observation_ids(ro, sample, msgs)
  if msgs.ids then return self:check_env_ids(ro, sample, msgs.ids, "step"), nil end
  local tok = tok_of(self, ro)
  local last = sample.tokens[#sample.tokens]
  local ids, text = T.observation_ids(tok, msgs, last, self:template(ro))
  if not ids then error("rl.agent: " .. tostring(text), 0) end
  return ids, text
end

-- Ends the trajectory and closes its environment, unless an aborted trajectory will be
-- resumed (keep: the rollout's partial_rollout); without partial rollout the rollout
-- drops an aborted sample, so its environment (an HTTP server's session) is closed now.
local function finish(self, sample, reason, status, keep)
  T.finish(sample, reason)
  if status then sample.status = status end
  if not (reason == "aborted" and keep) then
    local inst = self.instances[sample]
    self.instances[sample] = nil
    if inst and type(inst.close) == "function" then
      local ok, err = pcall(inst.close, inst)
      if not ok then require("rl.log").warn("rl.agent: closing the environment: " .. tostring(err)) end
    end
  end
  return sample
end

-- Ids an environment gave ({ids = {...}}, from reset or a step), checked at the boundary:
-- a list of integers inside the tokenizer's vocabulary (else the sample fails here, with
-- env_error, rather than the whole training step later on an id the model does not have).
function Agent:check_env_ids(ro, sample, ids, what)
  local tok = self.tokenizer or ro.tokenizer
  local vocab = tok and tok.vocab_size
  local function bad(msg)
    finish(self, sample, "env_error")
    error(("rl.agent: the environment's %s observation: %s"):format(what, msg), 0)
  end
  if type(ids) ~= "table" then bad("ids must be a list of token ids, got " .. type(ids)) end
  local n = #ids
  for k in pairs(ids) do
    if type(k) ~= "number" or k < 1 or k > n or k % 1 ~= 0 then bad("ids must be a list of token ids (not a mapping)") end
  end
  for i = 1, n do
    local id = ids[i]
    if type(id) ~= "number" or id ~= id or id % 1 ~= 0 or id < 0 or (vocab and id >= vocab) then
      local shown = type(id) == "number" and ("%.17g"):format(id) or (type(id) == "string" and ("%q"):format(id:sub(1, 40)))
        or type(id)
      bad(("ids[%d] = %s is not a token id of the vocabulary (integers 0..%s)"):format(i, shown,
        vocab and tostring(vocab - 1) or "n-1"))
    end
  end
  return ids
end

-- Calls the environment in a span; an error ends the trajectory (env_error) and fails the sample.
function Agent:env_call(sample, name, attrs, fn)
  local ver = self.env.version and self.env.version()
  if ver then attrs = attrs or {}; attrs.env_version = ver end
  local r = { pcall(trace.span, sample, name, attrs, fn) }
  if not r[1] then
    finish(self, sample, "env_error")
    error(r[2], 0)
  end
  return unpack(r, 2, 4)
end

-- The reset observation goes into the prompt before it is tokenized: messages are added
-- to a message-list prompt; a string prompt gets a string observation appended as text;
-- {ids = ...} is appended after the prompt's ids.
function Agent:add_to_prompt(ro, sample, obs)
  if obs == nil or obs == json.null or obs == "" then return end
  if type(obs) == "table" and obs.ids then sample._reset_ids = self:check_env_ids(ro, sample, obs.ids, "reset"); return end
  if #sample.tokens > 0 then
    error("rl.agent: the environment's first observation cannot join a prompt that is already tokenized "
      .. "(return {ids = {...}} from reset, or give the prompt as text or messages)", 0)
  end
  if type(sample.prompt) == "table" then
    local msgs = as_messages(self, obs)
    local p = {}
    for i, m in ipairs(sample.prompt) do p[i] = m end
    for _, m in ipairs(msgs) do p[#p + 1] = m end
    sample.prompt = p
  elseif type(obs) == "string" then
    sample.prompt = tostring(sample.prompt) .. obs
  else
    error("rl.agent: the environment's first observation is messages but the prompt is text "
      .. "(give the prompt as a message list, or return a string from reset)", 0)
  end
end

-- The chat-template options of the prompt and observations: template_opts, else the
-- tool environment's tool schemas (Qwen's template lists them in the system turn).
function Agent:template(ro)
  if self.template_opts then return self.template_opts end
  local reg = self.env.tools
  if type(reg) == "table" and type(reg.schemas) == "function" then
    if not self._tool_template or self._tool_template_n ~= #reg.order then   -- (tools added later)
      self._tool_template, self._tool_template_n = { tools = reg:schemas() }, #reg.order
    end
    return self._tool_template
  end
end

function Agent:tokenize(ro, sample)
  if #sample.tokens == 0 then
    local topts = self:template(ro)
    if type(sample.prompt) == "table" and topts then
      local o = { add_generation_prompt = true, tokenize = true }
      for k, v in pairs(topts) do o[k] = v end
      local ids, err = tok_of(self, ro):apply_chat_template(sample.prompt, o)
      if not ids then error("rl.agent: the prompt's chat template: " .. tostring(err), 0) end
      sample.tokens = json.array(ids)
    else
      if self.tokenizer and not ro.tokenizer then ro.tokenizer = self.tokenizer end
      ro:tokenize_prompt(sample)
    end
  end
  local extra = rawget(sample, "_reset_ids")
  if extra then
    for _, id in ipairs(extra) do sample.tokens[#sample.tokens + 1] = id end
    sample._reset_ids = nil
  end
end

--- Runs (or resumes) one trajectory for rl.rollout: turns until the environment says done
--- or a limit ends it. Returns the sample.
function Agent:generate(ro, sample, params, evaluation)
  local tr = T.of(sample)
  if tr and tr.end_reason ~= json.null and tr.end_reason ~= "aborted" then return sample end
  local env, fresh = instance(self, sample)
  if not tr then
    if not fresh and sample.response_length > 0 then error("rl.agent: sample has a response but no trajectory", 0) end
    local obs = self:env_call(sample, "env_reset", nil, function() if env.reset then return env:reset(sample) end end)
    self:add_to_prompt(ro, sample, obs)
    self:tokenize(ro, sample)
    tr = T.begin(sample)
  elseif fresh and not self.env.resumable then
    -- (an HTTP environment keeps its state in its server, keyed by metadata.env_session: resumable)
    error("rl.agent: the environment of this trajectory is gone (resumed in another process?); it cannot go on", 0)
  end
  local max_turn = self.max_turn_tokens or ro.rollout_max_response_len
  local limit_total = self.max_total_tokens or (tr.prompt_length + ro.rollout_max_response_len)
  while true do
    -- the rollout's abort (the step has enough groups): stop between turns too; with
    -- partial_rollout the trajectory resumes next step from here
    if ro.aborted then return finish(self, sample, "aborted", sample_mod.ABORTED, ro.partial_rollout) end
    local open = T.open_turn(tr)
    local k = #tr.turns + (open and 0 or 1)
    if not open and k > self.max_turns then return finish(self, sample, "max_turns", sample_mod.TRUNCATED) end
    local left_total = limit_total - #sample.tokens
    local done_in_turn = open and open.output_length or 0
    local budget = math.min(max_turn - done_in_turn, left_total)
    if budget <= 0 then
      return finish(self, sample, left_total <= 0 and "max_total_tokens" or "length", sample_mod.TRUNCATED)
    end
    local turn = trace.span(sample, "turn", { turn = k }, function(span)
      local p = {}
      for key, v in pairs(params) do p[key] = v end
      p.max_new_tokens = budget
      local before = #sample.tokens
      ro:generate_call(sample, p, function(ids, lps, meta, text) T.append_output(sample, ids, lps, meta, text) end)
      local t = tr.turns[#tr.turns]
      span:set("output_tokens", #sample.tokens - before)
      span:set("finish_reason", t.finish_reason)
      return t
    end)
    if sample.status == sample_mod.ABORTED then return finish(self, sample, "aborted", nil, ro.partial_rollout) end
    if turn.finish_reason == "length" and (self.on_turn_length == "end" or #sample.tokens >= limit_total) then
      local reason = #sample.tokens >= limit_total and "max_total_tokens" or "length"
      T.close_output(sample)
      return finish(self, sample, reason, sample_mod.TRUNCATED)
    end
    T.close_output(sample)
    local ids = { unpack(sample.tokens, turn.output_start, turn.output_start + turn.output_length - 1) }
    local action = { text = tok_of(self, ro):decode(ids), ids = ids,
                     turn = k, finish_reason = turn.finish_reason, sample = sample, record = turn }
    local obs, reward, done = self:env_call(sample, "env_step", { turn = k }, function(span)
      local o, r, d = env:step(action)
      if r ~= nil then span:set("reward", r) end
      span:set("done", d and true or false)
      return o, r, d
    end)
    if reward ~= nil and reward ~= json.null then
      turn.reward = reward
      if self.reward_reduce == "sum" and type(sample.reward) == "number" and type(reward) == "number" then
        sample.reward = sample.reward + reward
      else
        sample.reward = reward
      end
    end
    local msgs = as_messages(self, obs)
    if msgs and not done then
      local ids, otext = self:observation_ids(ro, sample, msgs)
      if #sample.tokens + #ids > limit_total then
        turn.dropped_observation = #ids
        return finish(self, sample, "max_total_tokens", sample_mod.TRUNCATED)
      end
      T.append_observation(sample, ids, msgs, otext)
    end
    sample.status = sample_mod.COMPLETED
    if done then return finish(self, sample, "done", sample_mod.COMPLETED) end
    -- no observation and not done: the next turn continues right after the model's turn
  end
end

--- An environment that runs the turn's tool calls (rl.agent.env.tool_env).
function M.tool_env(opts) return require("rl.agent.env").tool_env(opts) end
--- A hot-reloadable environment module (rl.agent.env.watch).
function M.watch_env(name) return require("rl.agent.env").watch(name) end
--- An environment in another process, over HTTP (rl.agent.http_env.new).
function M.http_env(opts) return require("rl.agent.http_env").new(opts) end

return require("rl._lazy")(M, { trajectory = "rl.agent.trajectory", tools = "rl.agent.tools",
  toolcall = "rl.agent.toolcall", calc = "rl.agent.calc", env = "rl.agent.env", metrics = "rl.agent.metrics" })
