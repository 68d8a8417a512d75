-- rl.rollout's failure budgets (rl.rollout.budget): a step whose samples mostly fail,
-- whose rewards spin, or whose filter keeps nothing fails with one error naming the
-- component and its last error, instead of sampling for ever; a few failures pass.
-- The rollout runs for real with a generate step of the test's (no engine).
local rl = require "rl"
local budget = require "rl.rollout.budget"
local sample_mod = require "rl.sample"

local dir = os.tmpname()
os.remove(dir)
os.execute("mkdir -p '" .. dir .. "'")
local data_path = dir .. "/prompts.jsonl"
do
  local f = assert(io.open(data_path, "w"))
  for i = 1, 200 do f:write(rl.json.encode { input = "question " .. i, label = tostring(i % 3) }, "\n") end
  f:close()
end

-- A rollout of `batch` prompts × 4 samples whose responses are "r<index>".
local function rollout(opts)
  local o = {
    data = rl.data.load(data_path, { label_key = "label" }), rollout_batch_size = 4, n_samples_per_prompt = 4,
    generate = function(_, s)
      s.response, s.response_length, s.status = "r" .. s.index, 1, sample_mod.COMPLETED
      return s
    end,
  }
  for k, v in pairs(opts) do o[k] = v end
  return rl.rollout.new(o)
end

local function failure_of(ro)
  local okk, err = pcall(ro.generate_rollout, ro, 3)
  eq(okk, false, "the step failed")
  ok(budget.is_failure(err), tostring(err))
  return err
end

describe("rl.rollout failure budgets", function()
  it("a reward failing on every sample fails the step, naming it and its last error", function()
    local ro = rollout { reward = function() error("grader down") end }
    local err = failure_of(ro)
    eq(err.component, "reward")
    ok(err.message:find("rollout step 3 failed: 12 of 12 finished samples failed, more than 50 % of the batch's 16",
      1, true), err.message)
    ok(err.message:find("failing: reward: 12 failed (12 errors, 0 time-outs, 0 busy)", 1, true), err.message)
    ok(err.message:find("rollout_budget_spec.lua:%d+: grader down"), err.message)
    ok(err.message:find("stack traceback", 1, true), err.message)
    ok(#err.groups >= 3, "the groups so far, for the dump")
  end)

  it("a reward failing on a tenth of the samples completes, the failures counted", function()
    local ro = rollout { reward = function(s) if s.index % 10 == 3 then error("flaky") end return s.index % 2 end }
    local groups, m = ro:generate_rollout(0)
    eq(#groups, 4)
    eq(m["rollout/failed_samples"], 2)   -- samples 3 and 13 of 0..15
    eq(m["rollout/reward/error"], 2)
  end)

  it("a count limit stops at the n-th failure", function()
    local ro = rollout { reward = function(s) if s.index < 3 then error("early") end return 1 end,
                         max_failed_samples = 3, max_failed_share = 1 }
    local err = failure_of(ro)
    ok(err.message:find("3 samples failed (--max-failed-samples 3)", 1, true), err.message)
  end)

  it("rewards that spin for their whole limit: two fail the step", function()
    local t0 = rl.now()
    local ro = rollout { reward = function() local i = 0 while true do i = i + 1 end end, reward_timeout = 0.2 }
    local err = failure_of(ro)
    ok(err.message:find("%d rewards ran Lua code for their whole time limit %(%-%-max%-busy%-timeouts 2"), err.message)
    ok(err.message:find("running Lua code the whole time: interrupted", 1, true), err.message)
    ok(rl.now() - t0 < 30, "ended at the limits")
  end)

  it("over-sampling is bounded: a filter that keeps nothing fails naming its drops", function()
    local ro = rollout { reward = function() return 1 end, dynamic_filter = "nonzero_std", over_sampling_limit = 3 }
    local err = failure_of(ro)
    ok(err.message:find("12 prompts drawn (--over-sampling-limit 3 × --rollout-batch-size 4) and only 0 of 4 groups "
      .. "kept (dynamic filter drops: zero_std_1.0 12)", 1, true), err.message)
    eq(ro.drawn_groups, 12)
  end)

  it("a filter that keeps enough within the limit completes", function()
    local ro = rollout { reward = function(s) return s.group_index % 2 == 0 and s.index % 2 or 1 end,
                         dynamic_filter = "nonzero_std", over_sampling_limit = 3, over_sampling_batch_size = 8 }
    local groups, m = ro:generate_rollout(0)
    eq(#groups, 4)
    ok(m["rollout/drawn_groups"] <= 12, m["rollout/drawn_groups"])
  end)
end)

describe("rl.progress past its total", function()
  it("shows no ETA rather than a negative one", function()
    local lines = {}
    local bar = rl.progress.new { label = "rollout", total = 4, unit = "samples", width = 4, mode = "tty",
                                  out = function(l) lines[#lines + 1] = l end }
    bar:add(145)
    ok(lines[1]:find("145/4", 1, true) and lines[1]:find("ETA ?", 1, true), lines[1])
    ok(not lines[1]:find("ETA -", 1, true), lines[1])
  end)
end)
