-- Time limits that hold whatever Lua code runs (bindings/interrupt.hpp): busy loops
-- compiled by the JIT (which runs no hooks), loops that catch the interruption,
-- loops inside coroutines; and the code around a guard keeps running undisturbed.
-- The JIT stays on throughout: these loops are hot and compiled.
local rl = require "rl"
local task = require "rl.task"
local rewards = require "rl.rewards"
local core = require "rl._core"

-- A loop the JIT compiles: no calls, no allocation, one line per statement.
local function spin()
  local i = 0
  while true do
    i = i + 1
  end
end

-- The same inside pcall, again and again: the interruption is caught, the loop goes on.
local function spin_catching()
  while true do
    pcall(spin)
  end
end

local function spin_in_coroutine()
  local co = coroutine.wrap(function() spin() end)
  co()
end

describe("rl.task.run_limited", function()
  it("the host is installed with the JIT's line checks", function()
    local st = core.interrupt.stats()
    ok(st.installed, "installed")
    ok(st.jit_checks, "LuaJIT's profiler runs in line mode")
    ok(jit.status(), "the JIT is on")
  end)

  for _, case in ipairs { { "a compiled busy loop", spin }, { "a loop that catches the interruption", spin_catching },
                          { "a busy loop in a coroutine", spin_in_coroutine } } do
    it("interrupts " .. case[1] .. " at its deadline", function()
      local t0 = rl.now()
      local okk, err, outcome = task.run_limited("busy", 0.3, case[2])
      local took = rl.now() - t0
      eq(okk, false)
      eq(outcome, "timeout")
      ok(err.interrupted, "interrupted while busy, not cancelled at a wait")
      ok(tostring(err.traceback):find("interrupt_spec.lua", 1, true), err.traceback)
      ok(took < 30, ("returned after %.2f s"):format(took))
    end)
  end

  it("cancels one that waits, and says it was waiting", function()
    local okk, err, outcome = task.run_limited("wait", 0.2, function() rl.sleep(30) end)
    eq(okk, false)
    eq(outcome, "timeout")
    ok(not err.interrupted, "cancelled at its wait")
  end)

  it("returns results and errors of code within its limit", function()
    local okk, a, b = task.run_limited("quick", 5, function(x) return x + 1, "y" end, 1)
    eq({ okk, a, b }, { true, 2, "y" })
    local okk2, err, outcome, raw = task.run_limited("bad", 5, function() error("boom") end)
    eq({ okk2, outcome }, { false, "error" })
    ok(err:find("boom", 1, true) and err:find("stack traceback", 1, true), err)
    ok(tostring(raw):find("boom", 1, true), tostring(raw))
  end)

  it("leaves the code after it alone: the caller's own loops run to the end", function()
    local okk = task.run_limited("busy", 0.2, spin)
    eq(okk, false)
    local n, t0 = 0, rl.now()
    while rl.now() - t0 < 0.5 do n = n + 1 end   -- hot, compiled, outside any guard
    ok(n > 0)
    rl.sleep(0.1)   -- and the scheduler too
  end)

  it("interrupts a busy reward whatever the JIT did (rl.rewards.evaluate)", function()
    local r, outcome, err, info = rewards.evaluate(function() spin() end, {}, { timeout = 0.3 })
    eq(r, nil)
    eq(outcome, "timeout")
    ok(info and info.busy, "busy")
    ok(err:find("interrupt_spec.lua", 1, true) and err:find("timed out after 0.3 s", 1, true), err)
  end)

  it("bounds a tool that spins (rl.agent.tools.bounded)", function()
    local okk, msg, outcome = require("rl.agent.tools").bounded(0.3, spin)
    eq({ okk, outcome }, { false, "timeout" })
    eq(msg, "timed out after 0.3 s")
  end)
end)

describe("rl.task.limit", function()
  it("interrupts busy code in the calling task and lets the caller go on", function()
    local err = raises(function() task.limit(0.3, spin) end)
    ok(task.is_cancelled(err) and err.reason == "time limit", tostring(err))
    local x = 0
    for i = 1, 1e6 do x = x + i end   -- the guard is gone
    ok(x > 0)
  end)

  it("names the hook in call_hook's error", function()
    local err = raises(function() task.call_hook("the dynamic filter", 0.3, spin) end)
    ok(tostring(err):find("the dynamic filter (", 1, true) and tostring(err):find("interrupt_spec.lua", 1, true),
      tostring(err))
  end)

  it("keeps the outer deadline of nested limits and waits as usual inside", function()
    local t0 = rl.now()
    local err = raises(function()
      task.limit(0.3, function()
        task.limit(60, function() rl.sleep(0.05); spin() end)
      end)
    end)
    ok(task.is_cancelled(err), tostring(err))
    ok(rl.now() - t0 < 30)
  end)

  it("runs without a limit of its own (only a stopping run interrupts it)", function()
    eq(task.limit(nil, function(a) return a * 2 end, 21), 42)
  end)
end)
