-- rl.process: children that never block the event loop (waits run on its timers), the
-- pid helpers process-mode engines and routers use, the one shell-quoting helper, and
-- _core.process naming its errors rl.process.*.
local rl = require "rl"
local core = require "rl._core"

describe("rl.process", function()
  it("waits on the event loop's timers: other tasks run while a child is stopped", function()
    -- a child that ignores SIGTERM: stop_pid waits `grace` seconds, then SIGKILL
    local pid = assert(core.process.spawn { "/bin/sh", "-c", "trap '' TERM; while :; do sleep 1; done" })
    local ticks, done = 0, false
    local ticker = rl.spawn(function()
      while not done do ticks = ticks + 1; rl.sleep(0.01) end
    end)
    eq(rl.process.wait_pid(pid, 0.2), nil)          -- still running: nil at the timeout
    local code = rl.process.stop_pid(pid, 0.5)
    done = true
    ticker:wait()
    eq(code, 128 + 9)                                -- SIGKILLed after the grace
    ok(ticks > 1, "the other task ran while we waited (" .. ticks .. " ticks)")
    eq(rl.process.signal_pid(pid, 0), false)         -- gone
    -- one that takes SIGTERM exits with it
    local p = assert(rl.process.spawn { "sleep", "30" })
    eq(p:stop(5), 128 + 15)
    eq(p.code, 128 + 15)
  end, { timeout = 30 })

  it("pins the whole process to a CPU list: its threads, and children started after", function()
    local all = rl.process.cpus()
    local last = all:match("(%d+)$")
    eq(rl.process.set_cpus(last), last)
    eq(rl.process.cpus(), last)
    eq(rl.process.unpinned_cpus(), all)   -- what a process engine gets back
    for tid in io.popen("ls /proc/" .. rl.process.pid() .. "/task"):lines() do
      local f = io.open("/proc/" .. rl.process.pid() .. "/task/" .. tid .. "/status")
      if f then
        eq(f:read("*a"):match("Cpus_allowed_list:%s*(%S+)"), last, "thread " .. tid)
        f:close()
      end
    end
    local code, out = rl.process.run({ "/bin/sh", "-c", "grep Cpus_allowed_list /proc/self/status" }, { timeout = 10 })
    eq(code, 0)
    ok(out:find("Cpus_allowed_list:%s*" .. last .. "\n"), out)
    eq(rl.process.set_cpus(all), all)   -- a narrowed set widens again
    eq(rl.process.cpus(), all)
    -- errors name the list, the CPU or the range
    local okc, err = pcall(rl.process.set_cpus, "3-1")
    ok(not okc and err:find("'list'", 1, true) and err:find("descending", 1, true), err)
    okc, err = pcall(rl.process.set_cpus, "100000")
    ok(not okc and err:find("100000", 1, true), err)
    okc, err = pcall(rl.process.set_cpus, "1,a")
    ok(not okc and err:find("'a'", 1, true), err)
    okc, err = pcall(rl.process.set_cpus, 1023)
    ok(not okc and err:find("does not exist", 1, true), err)
    eq(rl.process.cpus(), all)   -- unchanged by the failures
  end, { timeout = 30 })

  it("quotes a word so that a shell reads it back unchanged", function()
    for _, s in ipairs { "plain", "/dev/shm/rlhost-weights-1", "a b", "it's", [[say "hi" $HOME `x` \ ;]], "",
                         "--flag=1,2" } do
      local p = io.popen("printf %s " .. rl.process.quote(s))
      eq(p:read("*a"), s)
      p:close()
    end
    eq(rl.process.quote("/dev/shm/x-1"), "/dev/shm/x-1")   -- plainly safe: as is
    eq(rl.process.quote("it's"), [['it'\''s']])
  end)

  it("names its errors rl.process.*", function()
    raises(function() core.process.spawn {} end, "rl.process.spawn: bad argument #1 'argv' (non-empty list expected)")
    raises(function() core.process.kill("x") end, "rl.process.kill: bad argument #1 'pid'")
    raises(function() rl.process.spawn {} end, "rl.process.spawn: bad argument #1 'argv'")
  end)
end)
