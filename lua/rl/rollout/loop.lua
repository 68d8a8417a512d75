--- rl.rollout.loop: the rollout step of rl.rollout: over-sampling with dynamic filters
--- (slime's generate_rollout_async), abort until the engines are idle, partial
--- rollout, and the eval pass. Each function takes the Rollout first; rl.rollout
--- makes them its methods (ro:generate_rollout(...) is loop.generate_rollout(ro, ...)).
local json = require "rl.json"
local task = require "rl.task"
local sample_mod = require "rl.sample"
local log = require "rl.log"

local M = {}

local function copy(t)
  local o = {}
  for k, v in pairs(t) do o[k] = v end
  return o
end

local filters = function() return require "rl.rollout.filters" end
local budget_mod = function() return require "rl.rollout.budget" end

local function first_index(group)
  local s = group[1]
  while type(s) == "table" and s[1] ~= nil do s = s[1] end
  return s and s.index or math.huge
end
local function by_first_index(a, b) return first_index(a) < first_index(b) end
M.by_first_index = by_first_index   -- table.sort's order of groups (rl.rollout.stream too)

--- The dynamic filter's drops so far ("zero_std_0.0 3, filtered 1", or "none").
function M.filter_drops(self)
  local drops = {}
  for reason, c in pairs(self.counters.drops) do drops[#drops + 1] = ("%s %d"):format(reason, c) end
  table.sort(drops)
  return #drops > 0 and table.concat(drops, ", ") or "none"
end

M.FILTER_HINT = "do all rewards of a group come out equal? check the reward function, or turn the filter off "
  .. "(--dynamic-sampling-filter none)"

--- A step's rollout/ counts (slime's keys, and rlhost's failure budget's): the filter's
--- drops, reward outcomes, generation failures, failed samples, prompts drawn.
function M.step_metrics(self, rollout_id, budget, drawn)
  local metrics = { ["rollout/rollout_id"] = rollout_id }
  for reason, c in pairs(self.counters.drops) do metrics["rollout/dynamic_filter/drop_" .. reason] = c end
  for outcome, c in pairs(self.counters.reward) do metrics["rollout/reward/" .. outcome] = c end
  metrics["rollout/generate_failed"] = self.counters.failed
  metrics["rollout/failed_samples"] = budget.failed
  metrics["rollout/drawn_groups"] = drawn
  if self.counters.busy_timeouts > 0 then metrics["rollout/reward/busy_timeout"] = self.counters.busy_timeouts end
  return metrics
end

--- With --save-debug-rollout-data: the step's groups, flat, to its dump.
function M.dump_groups(self, rollout_id, groups)
  if not self.save_debug_rollout_data then return end
  local flat = {}
  for _, g in ipairs(groups) do for _, smp in ipairs(g) do flat[#flat + 1] = smp end end
  self:save_dump(rollout_id, flat)
end

-- Groups of the dumped samples, by group_index in order of first appearance.
local function regroup(samples)
  local groups, by = {}, {}
  for _, s in ipairs(samples) do
    local g = by[s.group_index or s.index]
    if not g then g = {}; by[s.group_index or s.index] = g; groups[#groups + 1] = g end
    g[#g + 1] = s
  end
  return groups
end

--- Replays a step from --load-debug-rollout-data (no engines): the dumped groups.
function M.load_dump(self, rollout_id, evaluation)
  local d, err = require("rl.dump").load(self.load_debug_rollout_data, { rollout_id = rollout_id, eval = evaluation,
    subsample = self.load_debug_rollout_data_subsample or nil })
  if not d then error("rl.rollout: --load-debug-rollout-data: " .. tostring(err), 0) end
  return regroup(d.samples)
end

-- --save-debug-rollout-data: the step's samples (with traces) as a .pt dump.
function M.save_dump(self, rollout_id, samples, evaluation)
  if not self.save_debug_rollout_data then return end
  local path, err = require("rl.dump").save(self.save_debug_rollout_data, rollout_id, samples, { eval = evaluation })
  if not path then log.error("rl.rollout: debug dump not written: " .. tostring(err)) end
  self.last_dump = path
  return path
end

--- One rollout step: groups until rollout_batch_size groups pass the dynamic
--- filter, over-sampling over_sampling_batch_size prompts at a time; then the
--- leftovers are aborted (and with partial_rollout put back into the data).
--- Returns groups (sorted by index), metrics ({["rollout/dynamic_filter/drop_<reason>"],
--- ["rollout/reward/<outcome>"], ...}) and the aborted groups.
function M.generate_rollout(self, rollout_id, opts)
  opts = opts or {}
  if self.load_debug_rollout_data then
    local groups = self:load_dump(rollout_id)
    self.last_rollout_time = 0
    return groups, { ["rollout/rollout_id"] = rollout_id, ["rollout/replayed"] = 1 }, {}
  end
  local ds = opts.data or self.data
  if not ds then error("rl.rollout: generate_rollout needs a data source (rl.rollout.new{data = rl.data.load(...)})", 2) end
  local t0 = require("rl._core").loop.now()
  self.aborted = false
  self.rollout_id = rollout_id
  self:reset_counters()
  local params = self:sampling_params()
  local target, n = self.rollout_batch_size, self.n_samples_per_prompt
  local done = task.queue()
  self._done = done
  self._pending = {}
  local remaining = 0
  local data, all_data = {}, {}
  local function submit(groups)
    for _, g in ipairs(groups) do
      for _, s in ipairs(g) do s.rollout_id = s.rollout_id or rollout_id end
      remaining = remaining + 1
      local t
      t = task.spawn_named("group", function()
        local ok, r = pcall(self.generate_and_rm_group, self, g, params, false)
        self._pending[t] = nil
        -- the run stops (its grace is over: the host interrupted a reward): so does the step
        if not ok and task.is_cancelled(r) and r.reason == "stopping" then done:push({ stopping = r })
        else done:push(ok and r or g) end
        if not ok then error(r, 0) end
      end)
      t.quiet = true
      self._pending[t] = true
    end
  end
  -- Failure budgets (rl.rollout.budget): slime would loop on for ever.
  local budget = budget_mod().new(self)
  local max_draw = self.over_sampling_limit and self.over_sampling_limit > 0
    and math.max(self.over_sampling_limit * target, target) or math.huge
  local drawn = 0
  self.drawn_groups = 0
  local function fail(why, hint)
    self:cancel_pending()
    local f = budget:failure(rollout_id, why, hint)
    f.groups = all_data
    error(f, 0)
  end
  while #data < target do
    while remaining < target and drawn < max_draw do
      local k = math.min(self.over_sampling_batch_size, max_draw - drawn)
      submit(ds:get_samples(k, n))
      drawn = drawn + k
      self.drawn_groups = drawn
    end
    if remaining - #data <= 0 then   -- nothing in flight and the batch is not full
      fail(("%d prompts drawn (--over-sampling-limit %g × --rollout-batch-size %d) and only %d of %d groups kept "
        .. "(dynamic filter drops: %s)"):format(drawn, self.over_sampling_limit, target, #data, target,
        M.filter_drops(self)), M.FILTER_HINT)
    end
    local group = done:pop()
    if group.stopping then error(group.stopping, 0) end
    if not group.wake then   -- a wake-up: a reward spun for its whole limit (the budget counts those now)
      all_data[#all_data + 1] = group
      budget:add_group(group)
    end
    local why = budget:exceeded(self.counters.busy_timeouts, self.counters.last_busy)
    if why then fail(why) end
    if not group.wake then
      local out = filters().call(self.dynamic_filter, self, group)
      if filters().should_drop(out, remaining, target) then
        local reason = out.reason or "filtered"
        self.counters.drops[reason] = (self.counters.drops[reason] or 0) + 1
        remaining = remaining - 1
      elseif #data < target then
        data[#data + 1] = group
      end
    end
  end
  self._done = nil
  self.last_budget = budget
  local aborted = self:abort(rollout_id, done)
  table.sort(data, by_first_index)
  table.sort(all_data, by_first_index)
  if self.sample_filter then self.sample_filter(self, data) end
  if self.all_samples_process then self.all_samples_process(self, all_data, ds) end
  if self.partial_rollout and #aborted > 0 and ds.add_samples then ds:add_samples(aborted) end
  local metrics = M.step_metrics(self, rollout_id, budget, drawn)
  metrics["rollout/aborted_groups"] = #aborted
  self.last_rollout_time = require("rl._core").loop.now() - t0
  M.dump_groups(self, rollout_id, data)
  return data, metrics, aborted
end

-- The engines behind the rollout's URL: the router's /workers, or the URL itself.
function M.worker_urls(self)
  if self.engine then return {} end
  local http = require "rl.http"
  local resp = http.get(self.url .. "/workers", { timeout = 10 })
  if resp and resp.status == 200 then
    local body = json.decode(resp.body)
    local urls = {}
    local list = type(body) == "table" and (body.workers or body.urls or body) or {}
    for _, w in ipairs(list) do urls[#urls + 1] = type(w) == "table" and w.url or w end
    return urls
  end
  return { self.url }
end

-- SGLang's /v1/loads: the number of requests a server still holds.
local function request_count(body)
  if type(body) ~= "table" then return nil end
  for _, k in ipairs { "num_reqs", "num_total_reqs", "total_reqs" } do
    if tonumber(body[k]) then return tonumber(body[k]) end
  end
  if tonumber(body.num_running_reqs) or tonumber(body.num_waiting_reqs) then
    return (tonumber(body.num_running_reqs) or 0) + (tonumber(body.num_waiting_reqs) or 0)
  end
  if type(body.loads) == "table" then
    local total
    for _, l in ipairs(body.loads) do
      local c = request_count(l)
      if c then total = (total or 0) + c end
    end
    return total
  end
end
M.request_count = request_count

-- Waits on `idle()` (true when the engine holds nothing more to abort) after `sweep()`
-- (an abort; false: give up): polled 20 ms apart, doubling to 250 ms, and swept again
-- every abort_retry_interval while requests remain (ones still on their way when the
-- last sweep ran), for at most 100 intervals. An engine takes an abort between two
-- steps, so it is idle milliseconds later: waiting a whole interval before the first
-- look (3 s) cost every step that aborted its over-sampled groups as much.
local function abort_until_idle(self, sweep, idle)
  local interval = math.max(tonumber(self.abort_retry_interval) or 3, 0.02)
  local give_up = rl.now() + 100 * interval
  repeat
    if not sweep() then return end
    local again, delay = rl.now() + interval, 0.02
    repeat
      if idle() then return end
      task.sleep(delay)
      delay = math.min(delay * 2, 0.25)
    until rl.now() >= again
  until rl.now() >= give_up
end

-- SGLang's abort_request {abort_all}, until /v1/loads counts no request.
local function abort_sglang(self, url)
  local http = require "rl.http"
  abort_until_idle(self, function()
    local r, err = http.request { method = "POST", url = url .. "/abort_request", timeout = 10,
                                  body = json.encode { abort_all = true },
                                  headers = require("rl.engine").control_headers() }
    if not r then log.warn(("rl.rollout: abort on %s: %s"):format(url, err)) end
    return r ~= nil
  end, function()
    local lr = http.get(url .. "/v1/loads?include=core", { timeout = 10 })
    local count = lr and lr.status == 200 and request_count(json.decode(lr.body))
    return not count or count == 0
  end)
end

-- vLLM's /abort_requests (every request in flight), until a sweep finds none (vime).
local function abort_vllm(self, url)
  local http = require "rl.http"
  local found = 0
  local function sweep()
    local r, err = http.request { method = "POST", url = url .. "/abort_requests", timeout = 10, body = "{}",
                                  headers = { ["content-type"] = "application/json" } }
    if not r or r.status ~= 200 then
      log.warn(("rl.rollout: abort on %s: %s"):format(url, r and ("HTTP " .. r.status) or err))
      return false
    end
    local body = json.decode(r.body)
    found = type(body) == "table" and tonumber(body.aborted) or 0
    return true
  end
  -- idle once a sweep aborted nothing: each look is a sweep of its own
  abort_until_idle(self, sweep, function() return found == 0 or (sweep() and found == 0) end)
end

--- Cancels the step's groups still in flight (their requests and rewards) without
--- asking the engines for anything: for a step that fails or a run that stops.
function M.cancel_pending(self, reason)
  self.aborted = true
  local left = {}
  for t in pairs(self._pending or {}) do left[#left + 1] = t end
  for _, t in ipairs(left) do t:cancel(reason or "rollout stopped") end
  self._pending = {}
  return #left
end

--- Aborts every request on every engine until each reports none (slime's
--- abort_servers_until_idle), lets the pending groups finish, and returns them;
--- with partial_rollout their samples remember start_rollout_id.
function M.abort(self, rollout_id, done)
  self.aborted = true
  if self.engine then
    self.engine:abort()
  elseif self.url then   -- (a rollout with its own generate step may have no engine at all)
    for _, url in ipairs(self:worker_urls()) do
      if self.backend == "vllm" then abort_vllm(self, url) else abort_sglang(self, url) end
    end
  end
  local left = {}
  for t in pairs(self._pending or {}) do left[#left + 1] = t end
  for _, t in ipairs(left) do pcall(t.wait, t) end
  self._pending = {}
  local aborted = {}
  while done and done:size() > 0 do
    local g = done:pop()
    if not g.stopping and not g.wake then
      if self.partial_rollout then
        for _, s in ipairs(g) do
          if s.response_length > 0 and s.metadata.start_rollout_id == nil then s.metadata.start_rollout_id = rollout_id end
        end
      end
      aborted[#aborted + 1] = g
    end
  end
  return aborted
end

--- The eval pass (slime's eval_rollout): every prompt of each eval dataset ×
--- n_samples_per_eval_prompt. eval_datasets = {{name, data, n_samples_per_eval_prompt,
--- temperature, top_p, top_k, max_response_len, reward}, ...}. Returns
--- {name = {rewards, truncated, samples}} and the eval metrics (eval/<name>, pass@k).
function M.eval(self, rollout_id, datasets)
  datasets = datasets or self.eval_datasets
  if type(datasets) ~= "table" then error("rl.rollout: eval needs eval_datasets", 2) end
  self.aborted = false
  local results = {}
  for _, d in ipairs(datasets) do
    local name = d.name or "eval"
    local params = self:sampling_params {
      temperature = d.temperature or self.rollout_temperature, top_p = d.top_p or self.rollout_top_p,
      top_k = d.top_k or self.rollout_top_k, max_new_tokens = d.max_response_len or self.rollout_max_response_len,
    }
    local nps = d.n_samples_per_eval_prompt or 1
    local tasks, samples = {}, {}
    local prompts = d.data.prompts or d.data
    -- a dataset's own reward scores the eval's samples only (not through self.reward: a
    -- fully asynchronous rollout keeps scoring training groups meanwhile)
    self._eval_reward = d.reward and (type(d.reward) == "string" and require("rl.rewards").get(d.reward) or d.reward)
    local index = 0
    for gi, base in ipairs(prompts) do
      for j = 1, nps do
        local s = base:clone()
        s.group_index, s.index, s.rollout_id = gi - 1, index, rollout_id
        index = index + 1
        local p = params
        if self.deterministic then p = copy(params); p.sampling_seed = self.rollout_seed + j - 1 end
        samples[#samples + 1] = s
        tasks[#tasks + 1] = task.spawn_named("eval", function() return self:generate_and_rm(s, p, true) end)
      end
    end
    for i, t in ipairs(tasks) do
      local ok, r = pcall(t.wait, t)
      if ok and r then samples[i] = r end
    end
    self._eval_reward = nil
    local rs, tr = {}, {}
    for i, s in ipairs(samples) do
      rs[i] = require("rl.rewards").value(s, self.reward_key or nil) or json.null
      tr[i] = s.status == sample_mod.TRUNCATED
    end
    results[name] = { rewards = rs, truncated = tr, samples = samples, n_samples_per_prompt = nps }
  end
  return self:finish_eval(rollout_id, results)
end

--- An eval pass's results ({name = {rewards, truncated, samples, n_samples_per_prompt}},
--- the built-in's or an --eval-function-path hook's) dumped when asked → results, metrics.
function M.finish_eval(self, rollout_id, results)
  self:save_dump(rollout_id, results, true)
  return results, require("rl.rollout.metrics").eval_metrics(results, rollout_id, self.metric_options or nil)
end

return M
