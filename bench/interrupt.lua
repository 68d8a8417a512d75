-- What interruptible user code costs (bindings/interrupt.hpp): the same Lua workloads
-- with LuaJIT's line checks in compiled traces (what rlhost runs with, so a busy
-- reward can be stopped) and without (the peer: plain LuaJIT), best of `passes` each,
-- in one run; then the cost of a guard around a call (rl.task.limit) and of a reward
-- run in a task of its own with a time limit (rl.rewards.evaluate).
--   rlhost bench/interrupt.lua [GSM8K_JSONL] [passes=5]
local core = require "rl._core"
local task = require "rl.task"
local gsm8k = require "rl.rewards.gsm8k"
local path = arg[1] or (rl.script:match("^(.*)/bench/") or ".") .. "/build/test-data/gsm8k/test.jsonl"
local passes = tonumber(arg[2]) or 5

local rows = {}
for line in io.lines(path) do rows[#rows + 1] = rl.json.decode(line) end

local workloads = {
  -- numbers and function calls: Python's Mersenne Twister, shuffling 200k ints
  { "pyrandom shuffle 200k", function()
    local x = {}
    for i = 1, 200000 do x[i] = i end
    rl.pyrandom.new(42):shuffle(x)
    return x[1]
  end },
  -- strings: the GSM8K grader on every answer of the file, 100 times
  { "gsm8k reward x100", function()
    local right = 0
    for _ = 1, 100 do
      for _, r in ipairs(rows) do right = right + gsm8k.score(r.answer, r.answer) end
    end
    return right
  end },
  -- a multi-line numeric loop: primes below 2M by a sieve
  { "sieve 2M", function()
    local n, comp, count = 2000000, {}, 0
    for i = 2, n do
      if not comp[i] then
        count = count + 1
        for j = i * i, n, i do
          comp[j] = true
        end
      end
    end
    return count
  end },
}

local function best_of(fn)
  local best = math.huge
  for _ = 1, passes do
    collectgarbage()
    local t0 = os.clock()
    fn()
    best = math.min(best, os.clock() - t0)
  end
  return best
end

print(("interrupt bench: %d passes, best of; LuaJIT %s"):format(passes, jit.version))
for _, w in ipairs(workloads) do
  core.interrupt.jit_checks(false)   -- plain LuaJIT (the traces are flushed)
  local off = best_of(w[2])
  core.interrupt.jit_checks(true)    -- rlhost's default: traces check the flag at line changes
  local on = best_of(w[2])
  print(("RESULT what=%q checks_off_s=%.4f checks_on_s=%.4f ratio=%.3f"):format(w[1], off, on, on / off))
end

-- A guard around a call, and a reward in a task of its own (spawn, wait, timer).
local n = 200000
local function f(x) return x + 1 end
local t0 = os.clock()
for i = 1, n do f(i) end
local direct = (os.clock() - t0) / n
t0 = os.clock()
for i = 1, n do task.limit(30, f, i) end
local limited = (os.clock() - t0) / n
print(("RESULT what=\"limit() around a call\" ns_per_call=%.0f direct_ns=%.1f"):format(limited * 1e9, direct * 1e9))
local m = 20000
local t1 = rl.now()
for _ = 1, m do rl.rewards.evaluate(function() return 1 end, {}, { timeout = 30 }) end
print(("RESULT what=\"rewards.evaluate (task + time limit)\" us_per_call=%.1f"):format((rl.now() - t1) / m * 1e6))
