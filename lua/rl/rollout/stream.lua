--- rl.rollout.stream: continuous generation for fully asynchronous RL. A producer task
--- keeps `capacity` groups admitted (drawn, generating, done or taken by a step that has
--- not synced yet); each finished group passes the dynamic filter as in a rollout step;
--- a step takes its batch with take(). A group's version is the engines' at its
--- admission (set_version after each weight sync): no token of it is older.
--
--   local st = rl.rollout.stream.new(rollout, { capacity = B * (K + 1), max_staleness = K, policy = "drop" })
--   st:start()
--   local groups, extra = st:take(step, B)      -- waits while fewer than B are eligible
--   ... train ...; sync ...; st:set_version(v)   -- the step's groups free their places
--
-- Policies for a group older than max_staleness versions when a step takes it: "drop"
-- (counted, its place refilled), "keep" (trained anyway, counted), "wait" (steps take
-- groups strictly in admission order and wait for the oldest: with capacity B × (K+1)
-- no group is ever over K; the trainer waits, the engines do not).
local task = require "rl.task"

local M = {}
local Stream = {}
Stream.__index = Stream

M.POLICIES = { drop = true, keep = true, wait = true }

local function budget_mod() return require "rl.rollout.budget" end
local function filters() return require "rl.rollout.filters" end
local function loop() return require "rl.rollout.loop" end
local function now() return require("rl._core").loop.now() end

--- opts: capacity (groups, >= 1), max_staleness (versions, >= 0), policy (drop | keep |
--- wait), data (default: the rollout's), version (the engines' version index now; 0).
function M.new(rollout, opts)
  opts = opts or {}
  local cap, k = opts.capacity, opts.max_staleness
  if type(cap) ~= "number" or cap < 1 or cap ~= math.floor(cap) then
    error("rl.rollout.stream.new: opts.capacity: a positive integer expected, got " .. tostring(cap), 2)
  end
  if type(k) ~= "number" or k < 0 or k ~= math.floor(k) then
    error("rl.rollout.stream.new: opts.max_staleness: a non-negative integer expected, got " .. tostring(k), 2)
  end
  if not M.POLICIES[opts.policy or "drop"] then
    error("rl.rollout.stream.new: opts.policy: drop, keep or wait expected, got " .. tostring(opts.policy), 2)
  end
  local ds = opts.data or rollout.data
  if not ds then error("rl.rollout.stream.new: no data source (rl.rollout.new{data = ...} or opts.data)", 2) end
  return setmetatable({
    ro = rollout, data = ds, capacity = cap, max_staleness = k, policy = opts.policy or "drop",
    version = opts.version or 0,
    seq = 0,            -- admissions so far (a group's place in admission order)
    held = {},          -- admitted groups not released: entry = {seq, version, group, fresh, state}
    done = task.queue(),  -- finished groups (and wake-ups, a stop) as they come back
    room = task.queue(),  -- a token per freed place: the producer waits on it
    tasks = {},
    engine_idle = 0, idle_since = now(), busy_groups = 0,
    counters = { dropped_stale = 0, drawn = 0 },
  }, Stream)
end

-- ---- the producer ---------------------------------------------------------------------

local function clone_group(g)
  local c = {}
  for i, s in ipairs(g) do c[i] = s:clone() end
  return c
end

function Stream:_admit()
  local ro = self.ro
  local g = self.data:get_samples(1, ro.n_samples_per_prompt)[1]
  -- the step expected to take it (the one that does sets its own id at take)
  for _, smp in ipairs(g) do smp.rollout_id = self.next_id end
  self.seq = self.seq + 1
  local e = { seq = self.seq, version = self.version, group = g, fresh = clone_group(g), state = "running" }
  self.held[#self.held + 1] = e
  self.counters.drawn = self.counters.drawn + 1
  if self.busy_groups == 0 and self.idle_since then
    self.engine_idle = self.engine_idle + (now() - self.idle_since)
    self.idle_since = nil
  end
  self.busy_groups = self.busy_groups + 1
  local t
  t = task.spawn_named("group", function()
    local ok, r = pcall(ro.generate_and_rm_group, ro, g, self.params, false)
    self.tasks[t] = nil
    self.busy_groups = self.busy_groups - 1
    if self.busy_groups == 0 then self.idle_since = now() end
    if not ok and task.is_cancelled(r) then
      if r.reason == "stopping" then self.done:push({ stopping = r }) end
      return
    end
    self.done:push(e)
    if not ok then error(r, 0) end
  end)
  t.quiet = true
  self.tasks[t] = true
end

--- Starts generating for steps from `rollout_id` on (default 0): the producer admits
--- groups while fewer than `capacity` are held.
function Stream:start(rollout_id)
  if self.producer then error("rl.rollout.stream: already started", 2) end
  self.next_id = rollout_id or 0
  local ro = self.ro
  ro.aborted = false
  ro:reset_counters()
  ro._done = self.done            -- a reward that spins its whole limit wakes take()
  self.params = ro:sampling_params()
  self.producer = task.spawn_named("stream producer", function()
    while true do
      while #self.held < self.capacity do self:_admit() end
      self.room:pop()
    end
  end)
  self.producer.quiet = true
end

local function remove(list, e)
  for i = #list, 1, -1 do if list[i] == e then table.remove(list, i) return end end
end

-- Frees an entry's place (dropped, filtered, or trained and synced).
function Stream:_release(e)
  remove(self.held, e)
  self.room:push(true)
end

-- ---- the consumer ---------------------------------------------------------------------

--- The engines now run weights of version index `v` (one more per sync): the groups of
--- the steps that took theirs are trained into them, and free their places.
function Stream:set_version(v)
  self.version = v
  local freed = {}
  for _, e in ipairs(self.held) do if e.state == "taken" then freed[#freed + 1] = e end end
  for _, e in ipairs(freed) do self:_release(e) end
end

--- Versions between a group's admission and the weights a step would train it with now.
function Stream:staleness(e) return self.version - e.version end

-- A finished group back from generation: budgets, the dynamic filter.
function Stream:_arrived(e, budget, rollout_id)
  local ro = self.ro
  budget:add_group(e.group)
  local why = budget:exceeded(ro.counters.busy_timeouts, ro.counters.last_busy)
  if why then self:_fail(budget, rollout_id, why) end
  local out = filters().call(ro.dynamic_filter, ro, e.group)
  if filters().should_drop(out, 0, 1) then
    local reason = out.reason or "filtered"
    ro.counters.drops[reason] = (ro.counters.drops[reason] or 0) + 1
    self:_release(e)
    return
  end
  e.state = "ready"
end

function Stream:_fail(budget, rollout_id, why, hint)
  self:stop("rollout failed")
  error(budget:failure(rollout_id, why, hint), 0)
end

-- The entries a step takes now under the policy, or nil to wait for more.
function Stream:_select(n)
  local ready, k = {}, self.max_staleness
  if self.policy == "wait" then   -- strictly the oldest n held: wait for any still running
    for _, e in ipairs(self.held) do
      if e.state ~= "taken" then
        if e.state ~= "ready" then return nil end
        ready[#ready + 1] = e
        if #ready == n then return ready end
      end
    end
    return nil
  end
  local dropped = {}
  for _, e in ipairs(self.held) do
    if e.state == "ready" then
      if self:staleness(e) > k and self.policy == "drop" then
        dropped[#dropped + 1] = e
      else
        ready[#ready + 1] = e
        if #ready == n then break end
      end
    end
  end
  for _, e in ipairs(dropped) do
    self.counters.dropped_stale = self.counters.dropped_stale + 1
    self:_release(e)
  end
  return #ready == n and ready or nil
end

--- The batch of step `rollout_id`: n groups (sorted by sample index) once n are eligible
--- under the policy, and the step's metrics (rollout/ as a rollout step's, plus
--- async/dropped_stale_groups, async/kept_stale_groups). Fails as a rollout step does
--- when the failure budgets or --over-sampling-limit run out.
function Stream:take(rollout_id, n)
  local ro = self.ro
  local budget = budget_mod().new(ro)
  local drawn0 = self.drawn_at_take or 0   -- the prompts drawn since the last step took its groups
  local max_draw = ro.over_sampling_limit and ro.over_sampling_limit > 0
    and math.max(ro.over_sampling_limit * n, n) or math.huge
  local batch = self:_select(n)
  while not batch do
    if self.counters.drawn - drawn0 > max_draw then
      self:_fail(budget, rollout_id, ("%d prompts drawn for this step (--over-sampling-limit %g × %d groups) and "
        .. "fewer than %d kept (dynamic filter drops: %s; over-stale groups dropped: %d)"):format(
          self.counters.drawn - drawn0, ro.over_sampling_limit, n, n, loop().filter_drops(ro),
          self.counters.dropped_stale), loop().FILTER_HINT)
    end
    local e = self.done:pop()
    if e.stopping then error(e.stopping, 0) end
    if e.wake then
      local why = budget:exceeded(ro.counters.busy_timeouts, ro.counters.last_busy)
      if why then self:_fail(budget, rollout_id, why) end
    elseif e.state == "running" then
      self:_arrived(e, budget, rollout_id)
    end
    batch = self:_select(n)
  end
  local groups, stale_kept = {}, 0
  for i, e in ipairs(batch) do
    e.state = "taken"
    groups[i] = e.group
    for _, s in ipairs(e.group) do s.rollout_id = rollout_id end
    if self:staleness(e) > self.max_staleness then stale_kept = stale_kept + 1 end
  end
  table.sort(groups, loop().by_first_index)
  if ro.sample_filter then ro.sample_filter(ro, groups) end
  local extra = loop().step_metrics(ro, rollout_id, budget, self.counters.drawn - drawn0)
  extra["async/dropped_stale_groups"] = self.counters.dropped_stale
  extra["async/kept_stale_groups"] = stale_kept
  extra["async/groups_held"] = #self.held
  self.counters.dropped_stale = 0
  self.drawn_at_take = self.counters.drawn
  self.next_id = rollout_id + 1
  ro:reset_counters()
  loop().dump_groups(ro, rollout_id, groups)
  return groups, extra
end

--- Seconds no group was generating since the last call (engine idle time).
function Stream:idle_time()
  local t = now()
  local idle = self.engine_idle + (self.idle_since and (t - self.idle_since) or 0)
  self.engine_idle = 0
  if self.idle_since then self.idle_since = t end
  return idle
end

--- The data source's state with every held group not trained put back first (fresh
--- copies of its prompts, in admission order): a checkpoint written now resumes with
--- them, none lost and none trained twice. trained: the groups taken by the step in
--- flight are trained (they are not put back).
function Stream:data_state(trained)
  local st = self.data:state()
  local back = {}
  for _, e in ipairs(self.held) do
    if not (trained and e.state == "taken") then
      local dg = {}
      for j, s in ipairs(e.fresh) do dg[j] = s:to_dict() end
      back[#back + 1] = dg
    end
  end
  for _, dg in ipairs(st.buffer or {}) do back[#back + 1] = dg end
  st.buffer = #back > 0 and back or nil
  return st
end

--- Stops the producer and cancels every group in flight.
function Stream:stop(reason)
  if self.producer and not self.producer:done() then self.producer:cancel(reason or "stopping") end
  local left = {}
  for t in pairs(self.tasks) do left[#left + 1] = t end
  for _, t in ipairs(left) do t:cancel(reason or "stopping") end
  self.tasks = {}
  if self.ro._done == self.done then self.ro._done = nil end
end

M.Stream = Stream
return M
