-- The GRPO recipe's own functions (recipes/grpo_gsm8k.lua, above rl.reload.inline): read
-- as a reload reads them, and held to the library's numbers and verdicts.
local rl = require "rl"
local sample = require "rl.sample"

local here = debug.getinfo(1, "S").source:match("^@(.*)/[^/]*$") or "."
local RECIPE = here .. "/../../recipes/grpo_gsm8k.lua"

local function group(gi, rewards)
  local g = {}
  for i, r in ipairs(rewards) do
    g[i] = sample.new { group_index = gi, index = gi * 100 + i - 1, reward = r, status = "completed" }
    rl.trace.bind(g[i])
  end
  return g
end

describe("recipes/grpo_gsm8k.lua", function()
  local edit = assert(rl.reload.inline_parts(RECIPE))

  it("edit.normalize gives the library's numbers to the bit, for every estimator", function()
    local rng = rl.pyrandom.new(7)
    local estimators = { "grpo", "gspo", "cispo", "reinforce_plus_plus", "reinforce_plus_plus_baseline" }
    for trial = 1, 200 do
      local n = 1 + trial % 9
      local rs = {}
      for i = 1, n do rs[i] = trial % 3 == 0 and rng:randbelow(2) or rng:random() * 4 - 1 end
      for _, est in ipairs(estimators) do
        local mine, lib = edit.normalize(rs, est), rl.rewards.normalize_group(rs, est)
        eq(#mine, n)
        for i = 1, n do
          if mine[i] ~= lib[i] then error(("%s, rewards %s: value %d is %.17g, the library's %.17g"):format(
            est, rl.json.encode(rs), i, mine[i], lib[i])) end
        end
      end
    end
  end)

  it("edit.filter keeps what rl.rollout.filters.nonzero_std keeps, and traces its verdict", function()
    for _, rs in ipairs { { 1, 0, 1, 1 }, { 1, 1, 1, 1 }, { 0, 0, 0, 0 }, { 0.5, 0.5 }, { 1 } } do
      local g = group(3, rs)
      local mine, lib = edit.filter({}, g), rl.rollout.filters.nonzero_std({}, g)
      eq(mine, lib)
      for _, s in ipairs(g) do
        local ends = {}
        for _, e in ipairs(s.trace.events) do
          if e.name == "dynamic_filter" then ends[#ends + 1] = e end
        end
        eq(#ends, 2, "a span: start and end")
        eq(ends[2].type, "span_end")
        eq(ends[2].attrs.keep, lib.keep)
        eq(ends[2].attrs.reason, lib.reason)
      end
    end
  end)

  it("is under 100 lines and shows the five steps", function()
    local text = assert(require("rl._fs").read_file(RECIPE))
    local _, lines = text:gsub("\n", "")
    ok(lines < 100, lines .. " lines")
    for _, step in ipairs { "job:rollout_step(", "job:train_data(", "job:train(", "job:sync()", "job:log_step()" } do
      ok(text:find(step, 1, true), step)
    end
  end)
end)

describe("rl.recipe job:train_data (slime's batch and reward flags)", function()
  local Job = require("rl.recipe.job").Job
  local function samples(gi, rewards)
    local g = {}
    for i, r in ipairs(rewards) do
      g[i] = sample.new { group_index = gi, index = gi * 100 + i - 1, reward = r, status = "completed",
                          tokens = { 1, 2, 3 }, response_length = 1, prompt = "p" }
    end
    return g
  end
  local function job(flags)
    local opt = { advantage_estimator = "grpo", global_batch_size = 3 }
    for k, v in pairs(flags or {}) do opt[k] = v end
    return setmetatable({ opt = opt, world_size = 1, step_metrics = {} }, Job)
  end
  local groups = { samples(0, { 1, 0, 0, 1 }), samples(1, { 3, 1, 1, 3 }) }

  it("normalises per group, with and without the std; raw rewards on request", function()
    local b = job():train_data(groups)
    eq(b.size, 6, "trimmed to a multiple of --global-batch-size 3")
    ok(math.abs(b.rewards[1] - 0.5 / (math.sqrt(1 / 3) + 1e-6)) < 1e-9, b.rewards[1])
    local nostd = job { disable_grpo_std_normalization = true }:train_data(groups)
    eq({ nostd.rewards[1], nostd.rewards[2], nostd.rewards[5] }, { 0.5, -0.5, 1 })
    local raw = job { disable_rewards_normalization = true }:train_data(groups)
    eq({ raw.rewards[1], raw.rewards[5] }, { 1, 3 })
    eq(job { disable_rollout_trim_samples = true }:train_data(groups).size, 8)
    eq(job { use_dynamic_global_batch_size = true }:train_data(groups).size, 8, "one step of everything")
  end)
end)
