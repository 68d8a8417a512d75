local rl = require "rl"

describe("rl.spawn", function()
  it("runs a task and returns its values through wait", function()
    local t = rl.spawn(function(a, b) rl.sleep(0.01); return a + b, "x" end, 1, 2)
    local s, x = t:wait()
    eq(s, 3); eq(x, "x")
    eq(t.status, "done")
  end)

  it("starts tasks on the next loop iteration, in order", function()
    local order = {}
    local ts = {}
    for i = 1, 5 do ts[i] = rl.spawn(function() order[#order + 1] = i end) end
    eq(#order, 0)
    rl.wait_all(ts)
    eq(order, { 1, 2, 3, 4, 5 })
  end)

  it("an error fails that task only, with a traceback", function()
    local t = rl.spawn(function() error("boom") end)
    local err = raises(function() t:wait() end, "boom")
    eq(t.status, "failed")
    ok(t.traceback:find("stack traceback", 1, true), "traceback recorded")
    ok(tostring(err):find("task_spec.lua", 1, true), "error names the file")
  end)

  it("rejects a non-function", function()
    raises(function() rl.spawn(42) end, "rl.spawn: bad argument #1 'fn' (function expected, got number)")
  end)
end)

describe("rl.wait_all", function()
  it("returns first values in order and raises the first failure after all finish", function()
    local done = 0
    local ts = {
      rl.spawn(function() rl.sleep(0.02); done = done + 1; return "a" end),
      rl.spawn(function() error("second failed") end),
      rl.spawn(function() rl.sleep(0.03); done = done + 1; return "c" end),
    }
    raises(function() rl.wait_all(ts) end, "second failed")
    eq(done, 2, "the other tasks still ran to the end")
    eq(rl.wait_all({ ts[1], ts[3] }), { "a", "c" })
  end)
end)

describe("rl.sleep and timers", function()
  it("sleeps at least the requested time", function()
    -- a lower bound only: load can make a sleep longer, never shorter
    local t0 = rl.now()
    rl.sleep(0.05)
    ok(rl.now() - t0 >= 0.045)
  end)

  it("runs concurrent sleepers concurrently", function()
    -- Overlap shown by order, not by speed: every sleeper starts before any wakes.
    local events = {}
    local ts = {}
    for i = 1, 200 do
      ts[i] = rl.spawn(function()
        events[#events + 1] = "start"
        rl.sleep(0.05)
        events[#events + 1] = "wake"
      end)
    end
    rl.wait_all(ts)
    eq(#events, 400)
    for i = 1, 200 do eq(events[i], "start", "event " .. i) end
  end)

  it("rl.after and rl.every", function()
    local hits = 0
    local ev = rl.every(0.01, function() hits = hits + 1; if hits == 3 then return false end end)
    local af = rl.after(0.01, function(x) return x * 2 end, 21)
    eq(af:wait(), 42)
    ev:wait()
    eq(hits, 3)
  end)

  it("rejects bad durations", function()
    raises(function() rl.sleep(-1) end, "rl.sleep: bad argument #1 'seconds'")
    raises(function() rl.sleep("x") end, "non-negative number expected")
  end)
end)

describe("cancellation", function()
  it("cancels a sleeping task at its wait point", function()
    local reached = false
    rl.sleep(0.001)  -- let the runner's own timeout timer start first
    local ops_before = rl._core_stats().ops
    local t = rl.spawn(function() rl.sleep(10); reached = true end)
    rl.sleep(0.01)
    ok(t:cancel("stop"))
    raises(function() t:wait() end, "stop")
    eq(t.status, "cancelled"); eq(reached, false)
    eq(rl._core_stats().ops, ops_before, "the timer op was released")
  end)

  it("cancels a task that never started", function()
    local ran = false
    local t = rl.spawn(function() ran = true end)
    t:cancel()
    raises(function() t:wait() end, "cancelled")
    rl.sleep(0.01)
    eq(ran, false)
  end)
end)

describe("misuse", function()
  it("rl.sleep inside a plain coroutine is an error, not a hang", function()
    local co = coroutine.create(function() rl.sleep(0.01) end)
    local okk, err = coroutine.resume(co)
    eq(okk, false)
    ok(tostring(err):find("plain coroutine", 1, true), err)
  end)

  it("a task cannot wait for itself", function()
    local t
    t = rl.spawn(function() return t:wait() end)
    raises(function() t:wait() end, "cannot wait for itself")
  end)
end)
