--- rl.rollout: slime's default rollout (slime/rollout/sglang_rollout.py) in Lua.
--
--   local ro = rl.rollout.new { url = router.url, tokenizer = tok, data = ds,
--                               reward = "gsm8k", dynamic_filter = "nonzero_std",
--                               rollout_batch_size = 8, n_samples_per_prompt = 4 }
--   local groups, metrics = ro:generate_rollout(rollout_id)
--
-- Every step is a method: generate, generate_and_rm, generate_and_rm_group,
-- generate_rollout, abort, eval. A field of the same name given to new{}
-- replaces it (`generate = function(ro, sample, params) ... end`), so a recipe
-- swaps one step and keeps the rest. Each prompt group and each sample runs in its
-- own task (slime's asyncio tasks); traces nest generate_and_rm_group ⊃
-- generate_and_rm ⊃ sglang_generate (+ router and engine phases) / reward_model.
local json = require "rl.json"
local task = require "rl.task"
local trace = require "rl.trace"
local rewards = require "rl.rewards"
local sample_mod = require "rl.sample"
local log = require "rl.log"

local M = {}
local Rollout = {}
Rollout.__index = Rollout
M.Rollout = Rollout

-- Options and defaults (slime's flag names, snake_case).
local DEFAULTS = {
  rollout_batch_size = 32, n_samples_per_prompt = 8, over_sampling_batch_size = false,
  rollout_temperature = 1.0, rollout_top_p = 1.0, rollout_top_k = -1, rollout_max_response_len = 1024,
  rollout_stop = false, rollout_stop_token_ids = false, rollout_skip_special_tokens = false,
  rollout_seed = 42, deterministic = false, extra_sampling_params = false,
  concurrency = 512, num_engines = 1,
  reward = false, reward_key = false, reward_timeout = 30, group_rm = false, hook_timeout = 30,
  -- failure budgets of a step (rl.rollout.budget): share / count of failed samples, rewards
  -- busy for their whole time limit, prompts drawn per step (× rollout_batch_size)
  max_failed_share = 0.5, max_failed_samples = 0, max_busy_timeouts = 2, over_sampling_limit = 10,
  dynamic_filter = false, partial_rollout = false, mask_offpolicy_in_partial_rollout = false,
  retries = 60, retry_interval = 1.0, request_timeout = 3600, abort_retry_interval = 3.0,
  -- fn(err) after a failed request (5xx or transport): true when the engines were found
  -- gone and serve again (fault tolerance restarted them); the request is then tried again
  -- without counting it as a retry (rl.recipe.health's await_engines)
  on_engine_failure = false,
  sample_hooks = false, sample_filter = false, all_samples_process = false, custom_generate = false,
  eval_datasets = false, tokenizer = false, data = false, url = false, engine = false,
  -- "vllm": the engines behind url are vLLM servers (/v1/completions, /abort_requests;
  -- lua/rl/engine/vllm.lua translates); weight_version: what their samples report
  backend = "native", weight_version = false,
  -- LoRA: every request runs under the engines' adapter of this name (SGLang's lora_path)
  lora_path = false,
  save_debug_rollout_data = false, load_debug_rollout_data = false, load_debug_rollout_data_subsample = false,
  -- rl.rollout.metrics options of the eval pass (log_passrate, reward_key, ...)
  metric_options = false,
}
local STEPS = { generate = true, generate_and_rm = true, generate_and_rm_group = true, generate_rollout = true,
                abort = true, eval = true, group_reward = true }

--- A rollout over an engine or router. opts: url (router or engine base URL) or
--- engine (an rl.engine handle, called in process), tokenizer (to encode prompts
--- that have no tokens yet), data (an rl.data source), reward (a function or an
--- rl.rewards name), and slime's rollout options (see DEFAULTS / docs).
function M.new(opts)
  if type(opts) ~= "table" then error("rl.rollout.new: bad argument #1 'opts' (table expected)", 2) end
  local self = setmetatable({}, Rollout)
  for k, v in pairs(DEFAULTS) do self[k] = v end
  for k, v in pairs(opts) do
    if DEFAULTS[k] == nil and not STEPS[k] then
      local close
      for name in pairs(DEFAULTS) do
        if name:find(k, 1, true) or k:find(name, 1, true) then close = name end
      end
      error(("rl.rollout.new: unknown option '%s'%s"):format(k, close and ("; did you mean '" .. close .. "'?") or ""), 2)
    end
    self[k] = v
  end
  if not self.url and not self.engine and not opts.generate and not opts.custom_generate
     and not self.load_debug_rollout_data then
    error("rl.rollout.new: give 'url' (a router or engine) or 'engine' (an rl.engine handle)", 2)
  end
  if self.url then self.url = tostring(self.url):gsub("/+$", "") end
  if not self.over_sampling_batch_size then self.over_sampling_batch_size = self.rollout_batch_size end
  if self.over_sampling_batch_size < self.rollout_batch_size then
    error(("rl.rollout.new: over_sampling_batch_size (%d) must be >= rollout_batch_size (%d)"):format(
      self.over_sampling_batch_size, self.rollout_batch_size), 2)
  end
  if type(self.reward) == "string" then self.reward = rewards.get(self.reward) end
  if type(self.dynamic_filter) == "string" then self.dynamic_filter = require("rl.rollout.filters").get(self.dynamic_filter) end
  self.semaphore = task.semaphore(self.concurrency * self.num_engines)
  self.aborted = false
  self:reset_counters()
  return self
end

function Rollout:reset_counters()
  self.counters = { reward = { ok = 0, error = 0, timeout = 0, skip = 0 }, drops = {}, failed = 0, busy_timeouts = 0 }
end

--- slime's base sampling params (GenerateState), from the rollout options.
function Rollout:sampling_params(evaluation_overrides)
  local p = {
    temperature = self.rollout_temperature, top_p = self.rollout_top_p, top_k = self.rollout_top_k,
    max_new_tokens = self.rollout_max_response_len, skip_special_tokens = self.rollout_skip_special_tokens,
    no_stop_trim = true, spaces_between_special_tokens = false,
  }
  if self.rollout_stop then p.stop = self.rollout_stop end
  if self.rollout_stop_token_ids then p.stop_token_ids = self.rollout_stop_token_ids end
  for k, v in pairs(self.extra_sampling_params or {}) do p[k] = v end
  for k, v in pairs(evaluation_overrides or {}) do p[k] = v end
  return p
end

local function copy(t)
  local o = {}
  for k, v in pairs(t) do o[k] = v end
  return o
end

-- ---- one engine call ---------------------------------------------------------------------

-- Restarts of the engines one request waits for (on_engine_failure) before its failures
-- count as retries again: a request that kills its engine each time is not retried for good.
local MAX_RECOVERIES = 3

-- POST /generate with slime's retries (transport errors and 5xx; a 4xx is the
-- request's fault and fails at once). Returns the decoded body and {elapsed, worker}.
function Rollout:_post(req, routing_key)
  if self.engine then
    local t0 = require("rl._core").loop.now()
    local out, err = self.engine:generate(req)
    return out, err, { elapsed = require("rl._core").loop.now() - t0 }
  end
  local http = require "rl.http"
  local vllm = self.backend == "vllm" and require "rl.engine.vllm"
  local path, b = require("rl.engine.vllm").target(req, self.backend)
  if not path then return nil, b end
  local body = json.encode(b)
  local headers = { ["content-type"] = "application/json" }
  if routing_key then headers["x-smg-routing-key"] = tostring(routing_key) end
  local last
  local attempt, tries, recoveries = 0, 0, 0
  while true do
    attempt, tries = attempt + 1, tries + 1
    -- as many in flight to the router as the rollout's semaphore lets out (the HTTP
    -- client's default, 64 per host, would hold the rest back and halve the engine's batch)
    local resp, err = http.request { method = "POST", url = self.url .. path, body = body, headers = headers,
                                     timeout = self.request_timeout, max_per_host = self.concurrency * self.num_engines }
    if resp and resp.status == 200 then
      local out, derr = json.decode(resp.body)
      if not out then return nil, "POST " .. self.url .. path .. ": bad JSON: " .. tostring(derr) end
      if vllm then
        -- vLLM's completions carry no timings: the request's time as seen here is its e2e_latency
        -- (perf/request/e2e_latency, as SGLang's own on the native engine)
        out, derr = vllm.generate_response(out, self.weight_version or nil, resp.elapsed)
        if not out then return nil, "POST " .. self.url .. path .. ": " .. derr end
      end
      local h = resp.headers or {}
      return out, nil, { elapsed = resp.elapsed, worker = h["x-rlhost-worker"],
                         attempts = tries + (tonumber(h["x-rlhost-attempts"]) or 1) - 1, last_error = last }
    end
    last = resp and ("HTTP %d: %s"):format(resp.status, resp.body:sub(1, 300)) or err
    -- a 4xx is the request's fault, but for one: vLLM swaps an adapter by unloading and
    -- loading it (rl.engine.vllm's load_lora), and a request in between finds none
    local swapping = vllm and resp and resp.status == 404 and req.lora_path ~= nil
      and resp.body:find("does not exist", 1, true) ~= nil
    if resp and resp.status >= 400 and resp.status < 500 and (not swapping or attempt > 5) then break end
    if self.aborted then break end
    -- the engines may be gone (one engine, killed): wait for fault tolerance's restart
    -- rather than spend the retries on a router with no worker (a few times per request)
    if self.on_engine_failure and recoveries < MAX_RECOVERIES and self.on_engine_failure(last) then
      recoveries, attempt = recoveries + 1, attempt - 1
    else
      if attempt > self.retries then break end
      log.debug(("rl.rollout: POST %s%s failed (%s); retry %d of %d"):format(self.url, path, last, attempt, self.retries))
      task.sleep(self.retry_interval)
    end
  end
  return nil, ("POST %s%s: %s"):format(self.url or "engine", path, tostring(last))
end

-- End attrs of the sglang_generate span: slime's meta attrs (PD phases as child
-- spans and flat pd_* keys) plus what slime does not show — the router's pick and
-- the engine's queue/prefill/decode phases, laid out at the end of the request
-- (the engine's e2e_latency), after router and network time.
function M.generate_trace_attrs(meta, info)
  local attrs = trace.sglang_meta_attrs(meta)
  if type(meta) ~= "table" then return attrs end
  info = info or {}
  local kids = {}
  local e2e, elapsed = tonumber(meta.e2e_latency), tonumber(info.elapsed)
  local off = 0
  if e2e and elapsed and elapsed >= e2e then
    off = elapsed - e2e
    kids[#kids + 1] = { type = "span", name = "router", start_offset = 0, end_offset = off,
                        attrs = { worker = info.worker, overhead_s = off } }
    attrs.router_overhead_s = off
  end
  if info.worker then attrs.worker = info.worker end
  -- the weights it was sampled under: one version, or where each began when the engine
  -- swapped weights during the request ("0:3,17:4": tokens 0-16 under 3, 17- under 4)
  if meta.weight_version ~= nil and meta.weight_version ~= json.null then attrs.weight_version = tostring(meta.weight_version) end
  local spans = meta.weight_version_spans
  if type(spans) == "table" and #spans > 1 then
    local parts = {}
    for _, sp in ipairs(spans) do parts[#parts + 1] = tostring(sp[1]) .. ":" .. tostring(sp[2]) end
    attrs.weight_version_spans = table.concat(parts, ",")
  end
  for _, ph in ipairs { { "queue_time", "engine_queue" }, { "prefill_time", "engine_prefill" },
                        { "decode_time", "engine_decode" } } do
    local d = tonumber(meta[ph[1]])
    if d and d >= 0 and (ph[1] ~= "queue_time" or meta.prefill_time ~= nil) then
      kids[#kids + 1] = { type = "span", name = ph[2], start_offset = off, end_offset = off + d, attrs = { [ph[1]] = d } }
      off = off + d
    end
  end
  if meta.prefill_time ~= nil then attrs.prefill_time, attrs.decode_time = meta.prefill_time, meta.decode_time end
  if #kids > 0 then
    local all = attrs[trace.CHILDREN_KEY] or {}
    for _, k in ipairs(kids) do all[#all + 1] = k end
    attrs[trace.CHILDREN_KEY] = all
  end
  return attrs
end

--- Encodes a sample's prompt into sample.tokens (a message list through the chat
--- template with the generation prompt), once; a sample with tokens is left alone.
function Rollout:tokenize_prompt(sample)
  if #sample.tokens > 0 then return sample.tokens end
  if not self.tokenizer then
    error("rl.rollout: sample " .. tostring(sample.index) .. " has no tokens and the rollout has no tokenizer " ..
          "(give rl.rollout.new{tokenizer = rl.tokenizer.load(dir)})", 2)
  end
  local prompt = sample.prompt
  if type(prompt) == "table" then
    prompt = self.tokenizer:apply_chat_template(prompt, { add_generation_prompt = true })
  end
  sample.tokens = json.array(self.tokenizer:encode(prompt, { add_special_tokens = false }))
  return sample.tokens
end

--- One /generate call from the sample's tokens as they stand, with sampling params p
--- as given (traced sglang_generate). The output ids and log-probs go to
--- on_output(ids, logprobs, meta_info, text), by default sample:append_response.
function Rollout:generate_call(sample, p, on_output)
  local req = { input_ids = sample.tokens, sampling_params = p, return_logprob = true, lora_path = self.lora_path or nil }
  local span_name = self.backend == "vllm" and "vllm_generate" or "sglang_generate"   -- vime's name
  trace.span(sample, span_name, { max_new_tokens = p.max_new_tokens }, function(span)
    local out, err, info = self:_post(req, sample.session_id)
    if not out then error(err, 0) end
    require("rl.watchdog").progress("request")
    -- retried (by the router on another worker, or here): each retry is an attempt, as slime's trace_next_attempt
    for _ = 2, (info and info.attempts or 1) do
      trace.next_attempt(sample, { reason = "engine failed", worker = info.worker })
    end
    if out[1] ~= nil then out = out[1] end
    local meta = out.meta_info or {}
    span:update(M.generate_trace_attrs(meta, info))
    local toks, lps = {}, {}
    local items = meta.output_token_logprobs
    if type(items) == "table" and items ~= json.null then
      for i, it in ipairs(items) do toks[i], lps[i] = it[2], it[1] end
    elseif type(out.output_ids) == "table" then
      error("rl.rollout: the engine returned no output_token_logprobs (was return_logprob dropped?)", 0)
    end
    if #toks ~= (tonumber(meta.completion_tokens) or #toks) then
      log.debug(("rl.rollout: sample %s: %d log-probs for %s completion tokens"):format(
        tostring(sample.index), #toks, tostring(meta.completion_tokens)))
    end
    if on_output then on_output(toks, lps, meta, out.text or "")
    else sample:append_response(toks, lps, { meta_info = meta, text = out.text or "" }) end
  end)
  return sample
end

--- One /generate call for a pending or aborted (partial) sample: slime's generate().
function Rollout:generate(sample, params)
  if sample.status ~= sample_mod.PENDING and sample.status ~= sample_mod.ABORTED then
    error(("rl.rollout: generate on sample %s with status '%s' (pending or aborted expected)"):format(
      tostring(sample.index), tostring(sample.status)), 2)
  end
  self:tokenize_prompt(sample)
  local p = copy(params)
  p.max_new_tokens = (p.max_new_tokens or self.rollout_max_response_len) - sample.response_length
  if p.max_new_tokens <= 0 then
    sample.status = sample_mod.TRUNCATED
    return sample
  end
  return self:generate_call(sample, p)
end

-- ---- one sample, one group -----------------------------------------------------------------

-- Runs the reward on one sample (traced reward_model), counting the outcome.
function Rollout:_reward_one(sample, evaluation)
  local fn = sample.reward_function or (evaluation and self._eval_reward) or self.reward
  if not fn then return end
  local busy_budget = not evaluation and self.max_busy_timeouts and self.max_busy_timeouts > 0 and self.max_busy_timeouts
  if busy_budget then
    -- Rewards already queued when the step's busy budget ran out do not run (each would
    -- hold the loop for its whole limit before the step can fail).
    local f = fn
    fn = task.describe_as(function(s)
      if self.counters.busy_timeouts >= busy_budget then return nil end
      return f(s)
    end, function() return task.where(f) end)
  end
  -- a reward that held the event loop for its whole limit: counted at once, and the
  -- step's budget looks now
  local function on_busy(message)
    self.counters.busy_timeouts = self.counters.busy_timeouts + 1
    self.counters.last_busy = { sample = sample.index, error = message }
    if self._done and not evaluation then self._done:push({ wake = true }) end
  end
  trace.span(sample, "reward_model", nil, function(span)
    local r, outcome, err = rewards.evaluate(fn, sample, { timeout = self.reward_timeout, on_busy = on_busy })
    self.counters.reward[outcome] = (self.counters.reward[outcome] or 0) + 1
    span:set("outcome", outcome)
    if outcome == "ok" then
      sample.reward = r
      if type(r) == "number" then span:set("reward", r) end
    elseif outcome == "error" or outcome == "timeout" then
      sample.reward, sample.reward_error, sample.status = nil, err, sample_mod.FAILED
      sample.reward_outcome = outcome
      span:set("error_message", err)
      log.warn(("rl.rollout: reward of sample %s: %s: %s"):format(tostring(sample.index), outcome,
        tostring(err):match("^[^\n]*")))
    end
  end)
end

local function run_hooks(self, sample, evaluation)
  local hooks = self.sample_hooks
  if not hooks then return sample end
  if type(hooks) == "function" then hooks = { hooks } end
  for _, h in ipairs(hooks) do
    local r = task.call_hook("a sample hook", self.hook_timeout, h, self, sample, evaluation)
    if r ~= nil then sample = r end
  end
  return sample
end

--- slime's generate_and_rm: generate (unless done), sample hooks, reward.
function Rollout:generate_and_rm(sample, params, evaluation)
  return trace.span(sample, "generate_and_rm", nil, function()
    if self.partial_rollout and self.mask_offpolicy_in_partial_rollout and sample.response_length > 0 then
      local m = json.array()
      for i = 1, sample.response_length do m[i] = 0 end
      sample.loss_mask = m
    end
    if sample.status == sample_mod.COMPLETED or sample.status == sample_mod.TRUNCATED then return sample end
    if sample.status == sample_mod.ABORTED and sample.response_length > 0 then
      trace.next_attempt(sample, { resumed_tokens = sample.response_length })
    end
    self.semaphore:acquire()
    local ok, err = pcall(function()
      if self.aborted then
        sample.status = sample_mod.ABORTED
        return
      end
      local gen = sample.generate_function or self.custom_generate or self.generate
      local r = gen(self, sample, params, evaluation)
      if r ~= nil and r ~= sample then sample = r end
    end)
    self.semaphore:release()
    if not ok then
      if task.is_cancelled(err) then error(err, 0) end
      self.counters.failed = self.counters.failed + 1
      sample.status, sample.generate_error = sample_mod.FAILED, tostring(err)
      self.last_generate_error = sample.generate_error
      log.warn(("rl.rollout: generate of sample %s failed: %s"):format(tostring(sample.index), tostring(err)))
      return sample
    end
    sample = run_hooks(self, sample, evaluation)
    if self.group_rm and not evaluation then return sample end
    local list = sample[1] ~= nil and sample or { sample }
    for _, s in ipairs(list) do
      if s.status == sample_mod.ABORTED then return sample end
    end
    for _, s in ipairs(list) do
      if s.reward == nil and s.status ~= sample_mod.FAILED then self:_reward_one(s, evaluation) end
    end
    return sample
  end)
end

local function uuid_hex()
  return trace.new_id()
end

--- slime's generate_and_rm_group: one task per sample, then the group reward.
function Rollout:generate_and_rm_group(group, params, evaluation)
  return trace.span(group, "generate_and_rm_group", { group_size = #group }, function()
    if self.aborted then return group end
    local tasks = {}
    for i, s in ipairs(group) do
      if s.session_id == nil then s.session_id = uuid_hex() end
      local p = params
      if self.deterministic then
        p = copy(params)
        p.sampling_seed = self.rollout_seed + (i - 1)
      end
      tasks[i] = task.spawn_named("sample", function() return self:generate_and_rm(s, p, evaluation) end)
    end
    for i, t in ipairs(tasks) do
      local ok, r = pcall(t.wait, t)
      if ok and r ~= nil then group[i] = r end
      if not ok then
        -- the group is cancelled (a failed step, a stopping run): so are its samples
        if task.is_cancelled(r) then for _, o in ipairs(tasks) do o:cancel(r.reason) end end
        error(r, 0)
      end
    end
    if not self.aborted and self.group_rm and not evaluation then
      trace.span(group, "group_reward_model", nil, function() self:group_reward(group) end)
    end
    return group
  end)
end

--- The group reward (group_rm = true): group_rm may be a function(group) ->
--- rewards, else the per-sample reward runs on each sample.
function Rollout:group_reward(group)
  if type(self.group_rm) == "function" then
    local rs = task.call_hook("the group reward", self.reward_timeout, self.group_rm, group)
    for i, s in ipairs(group) do
      if s.reward == nil then s.reward = rs and rs[i] end
    end
    return
  end
  for _, s in ipairs(group) do
    if s.reward == nil and s.status ~= sample_mod.ABORTED and s.status ~= sample_mod.FAILED then self:_reward_one(s) end
  end
end

-- The rollout step, abort and eval (lua/rl/rollout/loop.lua), as methods.
local loop = require "rl.rollout.loop"
for _, name in ipairs { "load_dump", "save_dump", "generate_rollout", "worker_urls", "abort", "cancel_pending", "eval",
                        "finish_eval" } do
  Rollout[name] = loop[name]
end

return require("rl._lazy")(M, { filters = "rl.rollout.filters", metrics = "rl.rollout.metrics",
                               train_data = "rl.rollout.train_data", sleep = "rl.rollout.sleep",
                               stream = "rl.rollout.stream" })
