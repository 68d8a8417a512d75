--- rl.rollout.metrics: the per-step rollout metrics of slime
--- (slime/observability/rollout_metrics.py), computed from samples and their
--- traces, with slime's names — and what its docs promise where its code lost it:
--- perf/request/count and perf/request/profiled_count, and the perf/prefill/*,
--- perf/decode/*_duration keys (from the flat pd_* attrs of sglang_generate).
local json = require "rl.json"

local M = {}

--- {mean, median, max, min} (rl.metrics.statistics), or nil for an empty list.
function M.statistics(values)
  if #values == 0 then return nil end
  return require("rl.metrics").statistics(values)
end

local function add_stats(out, prefix, values)
  local st = M.statistics(values)
  if st then
    for k, v in pairs(st) do out[prefix .. "/" .. k] = v end
  end
end

local function flatten(samples, out)
  out = out or {}
  for _, s in ipairs(samples) do
    if type(s) == "table" and s[1] ~= nil and getmetatable(s) == nil and s.index == nil then flatten(s, out)
    else out[#out + 1] = s end
  end
  return out
end
M.flatten = flatten

local function effective_len(s)
  if s.effective_response_length then return s:effective_response_length() end
  if type(s.loss_mask) ~= "table" or s.loss_mask == json.null then return s.response_length or 0 end
  local n = 0
  for _, m in ipairs(s.loss_mask) do n = n + m end
  return n
end

local function reward_of(s, key)
  local r = s.reward
  if type(r) == "table" and r ~= json.null then r = key and r[key] end
  return type(r) == "number" and r or nil
end

-- str(round(x, 1)) as Python writes it: the double's exact value rounded half to even
-- (round(0.25, 1) is 0.2, round(0.35, 1) is 0.3 since 0.35 is below it), which the C
-- library's printf does too (LuaJIT's own string.format rounds a tie up: 0.3).
local ffi = require "ffi"
pcall(ffi.cdef, "int snprintf(char *s, size_t n, const char *format, ...);")
local round_buf = ffi.new("char[64]")
local function round1(x)
  if x ~= x then return "nan" end
  if x == math.huge then return "inf" elseif x == -math.huge then return "-inf" end
  ffi.C.snprintf(round_buf, 64, "%.1f", ffi.new("double", x))   -- (from 1e16 on Python's repr has an exponent:
  return ffi.string(round_buf)                                   --  no reward is that large)
end
M.round1 = round1

local ZLIB_FRAMING = 12   -- a gzip member (10 + 8 bytes) minus a zlib stream's (2 + 4) around the same deflate data

-- slime's has_repetition: a response longer than 10000 characters whose last 10000
-- compress (zlib, level 9) more than 10×: a model stuck in a loop.
local function utf8_tail(s, n)   -- the last n code points of s (and whether s has more)
  local count, i = 0, #s
  while i >= 1 do
    local b = s:byte(i)
    if b < 0x80 or b >= 0xC0 then
      count = count + 1
      if count == n then return s:sub(i), i > 1 end
    end
    i = i - 1
  end
  return s, false
end
function M.has_repetition(text)
  if type(text) ~= "string" or #text <= 10000 then return false end
  local tail, longer = utf8_tail(text, 10000)
  if not longer then return false end
  local z = #require("rl.gzip").compress(tail, 9) - ZLIB_FRAMING
  return #tail / z > 10
end

--- slime's compute_metrics_from_samples (keys without the rollout/ prefix).
--- opts: reward_key, estimator (no zero_std counts for "ppo"), log_reward_category.
function M.from_samples(samples, opts)
  opts = opts or {}
  samples = flatten(samples)
  local out = {}
  local lens, truncated, cached, prompt_tok = {}, 0, 0, 0
  local spec_rate, spec_len = {}, {}
  local scored, raw_sum, categories = 0, 0, {}
  for i, s in ipairs(samples) do
    lens[i] = effective_len(s)
    if s.status == "truncated" then truncated = truncated + 1 end
    local pc = s.prefix_cache_info
    if type(pc) == "table" then
      cached = cached + (tonumber(pc.cached_tokens) or 0)
      prompt_tok = prompt_tok + (tonumber(pc.total_prompt_tokens) or 0)
    end
    local sp = s.spec_info
    if type(sp) == "table" and (tonumber(sp.spec_verify_ct) or 0) > 0 then
      if (tonumber(sp.spec_draft_token_num) or 0) > 0 then spec_rate[#spec_rate + 1] = sp.spec_accept_token_num / sp.spec_draft_token_num end
      spec_len[#spec_len + 1] = sp.completion_token_num / sp.spec_verify_ct
    end
    local r = reward_of(s, opts.reward_key)
    if r then scored, raw_sum = scored + 1, raw_sum + r end
    if opts.log_reward_category and type(s.reward) == "table" then
      local c = tostring(s.reward[opts.log_reward_category])
      categories[c] = (categories[c] or 0) + 1
    end
  end
  add_stats(out, "response_len", lens)
  if opts.estimator ~= "ppo" then
    local groups, order = {}, {}
    for _, s in ipairs(samples) do
      local r = reward_of(s, opts.reward_key)
      if r and s.group_index ~= nil then
        local g = groups[s.group_index]
        if not g then g = {}; groups[s.group_index] = g; order[#order + 1] = s.group_index end
        g[#g + 1] = r
      end
    end
    for _, gi in ipairs(order) do
      local g, same = groups[gi], true
      for _, r in ipairs(groups[gi]) do if r ~= g[1] then same = false end end
      if same then
        local k = "zero_std/count_" .. round1(g[1])
        out[k] = (out[k] or 0) + 1
      end
    end
  end
  if #spec_rate > 0 then
    local a, b = 0, 0
    for _, v in ipairs(spec_rate) do a = a + v end
    for _, v in ipairs(spec_len) do b = b + v end
    out.spec_accept_rate, out.spec_accept_length = a / #spec_rate, b / math.max(#spec_len, 1)
  end
  out.prefix_cache_hit_rate = prompt_tok > 0 and cached / prompt_tok or 0
  out.avg_cached_tokens_per_sample = #samples > 0 and cached / #samples or 0
  for c, n in pairs(categories) do out["error_cat/" .. c] = n / #samples end
  local reps = 0
  for _, s in ipairs(samples) do if M.has_repetition(s.response) then reps = reps + 1 end end
  out.repetition_frac = #samples > 0 and reps / #samples or 0
  out.truncated_ratio = #samples > 0 and truncated / #samples or 0
  if scored > 0 then out.raw_reward = raw_sum / scored end
  out.scored_ratio = #samples > 0 and scored / #samples or 0
  -- multi-turn trajectories (rl.agent): turns/*, tool_calls/*, tool_errors/*, tool/<name>/*, agent_end/*
  for k, v in pairs(require("rl.agent.metrics").from_samples(samples)) do out[k] = v end
  return out
end

-- perf/ keys read from each sample's sglang_generate span_end attrs.
local REQUEST_METRICS = {
  { "request/e2e_latency", "e2e_latency" }, { "request/queue_time", "queue_time" },
  { "decode/throughput", "decode_throughput" },
  { "prefill/bootstrap_queue_duration", "pd_prefill_bootstrap_queue_duration" },
  { "prefill/bootstrap_duration", "pd_prefill_bootstrap_duration" },
  { "prefill/alloc_wait_duration", "pd_prefill_alloc_wait_duration" },
  { "prefill/forward_duration", "pd_prefill_forward_duration" },
  { "prefill/transfer_queue_duration", "pd_prefill_transfer_queue_duration" },
  { "prefill/transfer_speed_gb_s", "pd_transfer_speed_gb_s" },
  { "prefill/transfer_total_mb", "pd_transfer_total_mb" },
  { "prefill/retry_count", "pd_prefill_retry_count" },
  { "decode/prealloc_duration", "pd_decode_prealloc_duration" },
  { "decode/bootstrap_duration", "pd_decode_bootstrap_duration" },
  { "decode/alloc_wait_duration", "pd_decode_alloc_wait_duration" },
  { "decode/transfer_duration", "pd_decode_transfer_duration" },
  { "decode/forward_duration", "pd_decode_forward_duration" },
  -- rlhost's engine and router (not in slime)
  { "request/prefill_time", "prefill_time" }, { "request/decode_time", "decode_time" },
  { "request/router_overhead", "router_overhead_s" },
}
M.REQUEST_METRICS = REQUEST_METRICS
local GENERATE_SPANS = { sglang_generate = true, sglang_generate_stream = true, vllm_generate = true }

local function finite(v) return type(v) == "number" and v == v and v ~= math.huge and v ~= -math.huge end

--- slime's compute_perf_metrics_from_samples (keys without the perf/ prefix).
--- opts: rollout_num_gpus (engines × GPUs; tokens_per_gpu_per_sec when set).
function M.perf_from_samples(samples, rollout_time, opts)
  opts = opts or {}
  samples = flatten(samples)
  local out = { rollout_time = rollout_time }
  local ngt, any_ngt = {}, false
  for i, s in ipairs(samples) do
    ngt[i] = tonumber(s.non_generation_time) or 0
    if ngt[i] > 0 then any_ngt = true end
  end
  if any_ngt then add_stats(out, "non_generation_time", ngt) end
  for _, key in ipairs { "", "effective_" } do
    local lens, sum, maxlen = {}, 0, 0
    for i, s in ipairs(samples) do
      lens[i] = key == "" and (s.response_length or 0) or effective_len(s)
      sum = sum + lens[i]
      if lens[i] > maxlen then maxlen = lens[i] end
    end
    if #samples > 0 and rollout_time and rollout_time > 0 then
      if opts.rollout_num_gpus then out[key .. "tokens_per_gpu_per_sec"] = sum / rollout_time / opts.rollout_num_gpus end
      out["longest_" .. key .. "sample_tokens_per_sec"] = maxlen / rollout_time
      if any_ngt then
        local t, c = 0, 0
        for i = 1, #samples do if lens[i] == maxlen then t, c = t + ngt[i], c + 1 end end
        local longest_ngt = t / c
        out["longest_" .. key .. "sample_non_generation_time"] = longest_ngt
        out["longest_" .. key .. "sample_tokens_per_sec_without_non_generation"] = maxlen / (rollout_time - longest_ngt)
      end
    end
  end
  local values, requests, profiled = {}, 0, 0
  for _, s in ipairs(samples) do
    local tr = s.trace
    if type(tr) == "table" and type(tr.events) == "table" then
      for _, ev in ipairs(tr.events) do
        if ev.type == "span_end" and (ev.name == "sglang_generate" or ev.name == "vllm_generate") then
          requests = requests + 1
          local attrs, any = type(ev.attrs) == "table" and ev.attrs or {}, false
          for _, m in ipairs(REQUEST_METRICS) do
            local v = attrs[m[2]]
            if finite(v) then
              values[m[1]] = values[m[1]] or {}
              table.insert(values[m[1]], v)
              any = true
            end
          end
          if any then profiled = profiled + 1 end
        end
      end
    end
  end
  for _, m in ipairs(REQUEST_METRICS) do
    if values[m[1]] then add_stats(out, m[1], values[m[1]]) end
  end
  out["request/count"], out["request/profiled_count"] = requests, profiled
  return out
end

local function prefixed(out, prefix, t)
  for k, v in pairs(t) do out[prefix .. k] = v end
  return out
end

--- The whole rollout/ + perf/ dict of one step (slime's log_rollout_data),
--- merged with the rollout's own counters (dynamic filter drops, reward outcomes)
--- and rollout/step.
function M.rollout_metrics(rollout_id, samples, rollout_time, extra, opts)
  local out = {}
  for k, v in pairs(extra or {}) do out[k] = v end
  prefixed(out, "rollout/", M.from_samples(samples, opts))
  prefixed(out, "perf/", M.perf_from_samples(samples, rollout_time, opts))
  if opts and opts.log_passrate and opts.n_samples_per_prompt then   -- slime's passrate/pass@k of the step's groups
    for k, v in pairs(M.passrate(samples, opts.n_samples_per_prompt, opts.reward_key)) do out["passrate/" .. k] = v end
  end
  out["rollout/step"] = opts and opts.step or rollout_id
  return out
end

--- pass@k for k = 1, 2, 4, ... <= n over the groups of n samples (by group_index; a
--- group of another size is left out): {["pass@1"] = ..., ...}.
function M.passrate(samples, n, reward_key)
  local groups, order = {}, {}
  for _, s in ipairs(flatten(samples)) do
    local g = s.group_index
    if g ~= nil then
      if not groups[g] then groups[g] = {}; order[#order + 1] = g end
      local r = reward_of(s, reward_key)
      table.insert(groups[g], r or 0)
    end
  end
  local flat = {}
  for _, g in ipairs(order) do
    if #groups[g] == n then for _, r in ipairs(groups[g]) do flat[#flat + 1] = r end end
  end
  local out, k = {}, 1
  if #flat == 0 then return out end
  while k <= n do
    out["pass@" .. k] = M.pass_at_k(flat, n, k)
    k = k * 2
  end
  return out
end

local function choose(n, k)
  if k < 0 or k > n then return 0 end
  local r = 1
  for i = 1, k do r = r * (n - k + i) / i end
  return r
end

--- pass@k = mean over prompts of 1 − C(n−c, k) / C(n, k), c = rewards equal to 1
--- (the unbiased estimator of the Codex paper, as slime). rewards is a flat list
--- of n rewards per prompt, prompt by prompt.
function M.pass_at_k(rewards, n, k)
  local total, prompts = 0, 0
  for start = 1, #rewards - n + 1, n do
    local c = 0
    for i = start, start + n - 1 do if rewards[i] == 1 then c = c + 1 end end
    total = total + (1 - choose(n - c, k) / choose(n, k))
    prompts = prompts + 1
  end
  return prompts > 0 and total / prompts or 0
end

--- slime's log_eval_rollout_data: eval/<name> (mean reward), eval/<name>/<sample
--- metrics>, eval/<name>-truncated_ratio, eval/<name>-pass@k for k = 1, 2, 4, … ≤ n,
--- and eval/step.
function M.eval_metrics(results, rollout_id, opts)
  local out = { ["eval/step"] = rollout_id }
  for name, r in pairs(results) do
    local sum, c, truncated = 0, 0, 0
    local vals = {}
    for i, v in ipairs(r.rewards) do
      if type(v) == "number" then sum, c = sum + v, c + 1; vals[i] = v else vals[i] = 0 end
      if r.truncated[i] then truncated = truncated + 1 end
    end
    out["eval/" .. name] = c > 0 and sum / c or 0
    prefixed(out, "eval/" .. name .. "/", M.from_samples(r.samples or {}, opts))
    out["eval/" .. name .. "-truncated_ratio"] = #r.rewards > 0 and truncated / #r.rewards or 0
    local n = r.n_samples_per_prompt or 1
    local k = (opts and opts.log_passrate == false) and n + 1 or 1   -- --log-passrate (on unless turned off)
    while k <= n do
      out["eval/" .. name .. "-pass@" .. k] = M.pass_at_k(vals, n, k)
      k = k * 2
    end
  end
  return out
end

return M
