-- rlhost side of bench/trace_reward.sh: span open+close cost, GSM8K reward
-- throughput, and slime's math / deepscaler graders (rl.rewards.math,
-- rl.rewards.deepscaler) on boxed answers, printed as RESULT lines.
--   rlhost bench/trace_reward.lua GSM8K_JSONL [spans=200000] [passes=5]
local path = assert(arg[1], "usage: rlhost bench/trace_reward.lua GSM8K_JSONL [spans] [passes]")
local n_spans = tonumber(arg[2]) or 200000
local passes = tonumber(arg[3]) or 5
local trace, sample = rl.trace, rl.sample
local gsm8k = require "rl.rewards.gsm8k"

-- Spans: one sample, a span with a start attr and an end attr, nested in an outer span.
-- rl.trace keeps events as native rows until read, so the first read of
-- s.trace.events (building slime's records) is timed too, separately.
local s = sample.new { index = 0, group_index = 0 }
local best, best_read = math.huge, math.huge
for _ = 1, 3 do
  s.trace = nil
  collectgarbage()
  local t0 = os.clock()
  trace.span(s, "outer", nil, function()
    for i = 1, n_spans do
      local sp = trace.start(s, "inner", { i = i })
      sp:set("ok", true)
      sp:finish()
    end
  end)
  local t1 = os.clock()
  assert(#s.trace.events == 2 * n_spans + 2)
  best = math.min(best, (t1 - t0) / n_spans)
  best_read = math.min(best_read, (os.clock() - t1) / n_spans)
end
print(("RESULT impl=lua what=span_read ns_per_span=%.1f"):format(best_read * 1e9))
print(("RESULT impl=lua what=span ns_per_span=%.1f"):format(best * 1e9))

-- Rewards: every GSM8K answer graded against its own label, and a boxed variant.
local rows = {}
for line in io.lines(path) do
  local r = rl.json.decode(line)
  rows[#rows + 1] = r
  rows[#rows + 1] = { answer = "So the total is \\boxed{" .. (gsm8k.target(r.answer) + 1) .. "}.", label = r.answer }
end
local bestr = math.huge
local right = 0
for _ = 1, passes do
  right = 0
  local t0 = os.clock()
  for _, r in ipairs(rows) do right = right + gsm8k.score(r.answer, r.label or r.answer) end
  bestr = math.min(bestr, os.clock() - t0)
end
print(("RESULT impl=lua what=reward rows=%d right=%d per_s=%.0f"):format(#rows, right, #rows / bestr))

-- slime's graders: each GSM8K answer boxed, right and off by one (the wrong ones
-- run every rule: both normalisations, tuples, the integer checks).
local mathr, deepscaler = require "rl.rewards.math", require "rl.rewards.deepscaler"
local boxed = {}
for line in io.lines(path) do
  local t = gsm8k.target(rl.json.decode(line).answer)
  local n = ("%.0f"):format(t)
  boxed[#boxed + 1] = { "So the total is \\boxed{" .. n .. "}.", n }
  boxed[#boxed + 1] = { "So the total is \\boxed{" .. ("%.0f"):format(t + 1) .. "}.", n }
end
for _, g in ipairs { { "math", mathr.score, "" }, { "deepscaler", deepscaler.score, "<think>...</think>" } } do
  local best_g, right_g = math.huge, 0
  for _ = 1, passes do
    right_g = 0
    local t0 = os.clock()
    for _, r in ipairs(boxed) do right_g = right_g + g[2](g[3] .. r[1], r[2]) end
    best_g = math.min(best_g, os.clock() - t0)
  end
  print(("RESULT impl=lua what=%s rows=%d right=%d per_s=%.0f"):format(g[1], #boxed, right_g, #boxed / best_g))
end
