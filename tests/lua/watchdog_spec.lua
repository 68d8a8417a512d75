-- rl.watchdog (the hang report) and rl.recipe.faults' drill parser.
local rl = require "rl"

local function tmpdir()
  local p = assert(io.popen("mktemp -d"))
  local d = p:read("*l")
  p:close()
  return d
end

local function files(dir)
  local out = {}
  local p = io.popen("ls '" .. dir .. "'")
  for l in p:lines() do out[#out + 1] = l end
  p:close()
  return out
end

describe("rl.watchdog.text", function()
  it("lists each task with what it waits on, the sample it holds and its frames", function()
    local function stuck(sample) rl.sleep(30) return sample end
    local t = rl.spawn(stuck, { index = 7, group_index = 3, prompt = "p", status = "pending" })
    t.name = "stuck reward"
    rl.sleep(0.05)
    local text = rl.watchdog.text("spec")
    ok(text:find("rlhost hang report (spec)", 1, true), text)
    ok(text:find("task %d+ 'stuck reward' running waits on rl%.sleep for [%d.]+ s\n  holds sample 7 %(group 3, status pending%)"),
      text)
    ok(text:find("watchdog_spec.lua:%d+: in function"), "the task's own frame: " .. text)
    ok(not text:find("rl/task.lua:", 1, true), "no scheduler frames")
    t:cancel()
  end)

  it("names a task waiting on another task", function()
    local inner = rl.spawn(function() rl.sleep(30) end)
    inner.name = "inner"
    local outer = rl.spawn(function() inner:wait() end)
    outer.name = "outer"
    rl.sleep(0.05)
    local text = rl.watchdog.text()
    ok(text:find("'outer' running waits on task " .. inner.id .. " 'inner'", 1, true), text)
    inner:cancel(); outer:cancel()
  end)

  it("lists HTTP requests in flight with target and age", function()
    local srv = assert(rl.http.serve { handler = function() rl.sleep(30) return "late" end })
    local t = rl.spawn(function() return rl.http.get(srv:url() .. "/slow", { timeout = 60 }) end)
    rl.sleep(0.2)
    local text = rl.watchdog.text()
    ok(text:find("GET " .. srv:url() .. "/slow for [%d.]+ s %(task " .. t.id .. "%)"), text)
    t:cancel()
    rl.sleep(0.05)
    ok(not rl.watchdog.text():find("/slow for", 1, true), "gone once the request ends")
    srv:stop()
  end)
end)

describe("rl.watchdog.start", function()
  it("reports once per stall, to the log and a file, and again after progress", function()
    local dir = tmpdir()
    rl.watchdog.start { timeout = 0.2, dir = dir }
    rl.sleep(0.6)
    eq(#files(dir), 1)
    rl.sleep(0.3)
    eq(#files(dir), 1, "one report per stall")
    rl.watchdog.progress("spec")
    rl.sleep(0.6)
    eq(#files(dir), 2, "a new stall, a new report")
    rl.watchdog.stop()
    local f = io.open(dir .. "/" .. files(dir)[1])
    ok(f:read("*a"):find("hang report (no progress for 0.2 s)", 1, true))
    f:close()
    os.execute("rm -rf '" .. dir .. "'")
  end)

  it("is off with timeout 0", function()
    local dir = tmpdir()
    rl.watchdog.start { timeout = 0, dir = dir }
    rl.sleep(0.3)
    eq(#files(dir), 0)
    os.execute("rm -rf '" .. dir .. "'")
  end)
end)

describe("rl.recipe.faults.parse", function()
  local parse = require("rl.recipe.faults").parse
  it("reads ACTION:[GROUP:]ENGINE:STEP[:DELAY | :sync] items", function()
    eq(parse("kill:2:3,stop:1:0:0.5,stop:2:1:sync", 2), {
      { action = "kill", engine = 2, step = 3, delay = 1, at_sync = false, item = "kill:2:3" },
      { action = "stop", engine = 1, step = 0, delay = 0.5, at_sync = false, item = "stop:1:0:0.5" },
      { action = "stop", engine = 2, step = 1, delay = 1, at_sync = true, item = "stop:2:1:sync" } })
    eq(parse(nil, 2), {})
  end)
  local groups = { { name = "actor", engines = { {}, {} }, update_weights = true },
                   { name = "ref", engines = { {} }, update_weights = false } }
  it("targets any engine group by name, the policy's without one", function()
    eq(parse("kill:ref:1:2:0.5, stop:actor:2:1:sync,kill:2:0", groups), {
      { action = "kill", group = "ref", engine = 1, step = 2, delay = 0.5, at_sync = false, item = "kill:ref:1:2:0.5" },
      { action = "stop", group = "actor", engine = 2, step = 1, delay = 1, at_sync = true, item = "stop:actor:2:1:sync" },
      { action = "kill", engine = 2, step = 0, delay = 1, at_sync = false, item = "kill:2:0" } })
  end)
  it("names the bad item", function()
    raises(function() parse("crash:1:1", 2) end, "--fault-injection: bad item 'crash:1:1' (expected ACTION:[GROUP:]ENGINE:STEP")
    raises(function() parse("kill:3:1", 2) end, "--fault-injection kill:3:1: engine 3 is not one of 1..2 (--num-engines)")
    raises(function() parse("kill:judge:1:1", groups) end,
      "--fault-injection kill:judge:1:1: no engine group 'judge' (the job's groups: actor, ref;")
    raises(function() parse("kill:ref:2:1", groups) end,
      "--fault-injection kill:ref:2:1: engine 2 is not one of 1..1 (the engines of group 'ref')")
    raises(function() parse("kill:ref:x:1", groups) end, "--fault-injection: bad item 'kill:ref:x:1'")
    raises(function() parse("kill:ref:1:2:3:4", groups) end, "--fault-injection: bad item 'kill:ref:1:2:3:4'")
  end)
end)
