-- rl.reload (hot reload of recipe modules) and rl.progress (progress bars).
local rl = require "rl"

local dir = os.tmpname()
os.remove(dir)
os.execute("mkdir -p '" .. dir .. "/rewards'")
package.path = dir .. "/?.lua;" .. package.path
local path = dir .. "/rewards/live_reward.lua"

local function write(text)
  local f = assert(io.open(path, "w"))
  f:write(text)
  f:close()
end

describe("rl.reload", function()
  it("loads now, reloads a changed file, keeps the old version on errors", function()
    write("return { reward = function(s) return 1 end }\n")
    local w = rl.reload.watch("rewards.live_reward")
    eq(rl.reload.watch("rewards.live_reward"), w, "watching twice gives the same watch")
    local fn = w:fn("reward")
    eq(fn({}), 1)
    eq(w.version, 1)
    eq(#w.hash, 16)
    eq(package.loaded["rewards.live_reward"], w.module)
    eq(w:check(), false, "an unchanged file")

    write("return { reward = function(s) return 2 end }\n")
    eq(rl.reload.check(), { "rewards.live_reward" })
    eq(fn({}), 2, "the same function now calls the new version")
    eq(w.version, 2)
    local good_hash = w.hash

    write("return { reward = function(s) return 3 end\n")   -- syntax error
    local r, err = w:check()
    eq(r, nil)
    ok(err:find("live_reward.lua:2:", 1, true), err)        -- file:line
    ok(err:find("keeping version 2", 1, true), err)
    eq(fn({}), 2, "the previous version keeps running")
    eq(w.hash, good_hash)
    eq(w:check(), false, "the same broken text is reported once")

    write("error('boom at load')\n")                        -- a load-time error
    r, err = w:check()
    eq(r, nil)
    ok(err:find("live_reward.lua:1: boom at load", 1, true), err)
    eq(fn({}), 2)

    write("return { reward = function(s) return 4 end }\n")
    eq(w:check(), true)
    eq(fn({}), 4)
    eq(w.version, 3)
    ok(w.hash ~= good_hash)
  end)

  it("puts the hashes into metrics and trace attrs", function()
    local w = rl.reload.watch("rewards.live_reward")
    local m = rl.reload.metrics()
    eq(m["reload/rewards.live_reward/version"], w.version)
    eq(m["reload/rewards.live_reward/hash"], tonumber(w.hash:sub(1, 12), 16))
    eq(rl.reload.trace_attrs()["module.rewards.live_reward"], w.hash)
    eq(rl.reload.hash(""), "cbf29ce484222325")                  -- FNV-1a 64 offset basis
    eq(rl.reload.hash("a"), "af63dc4c8601ec8c")                 -- known FNV-1a 64 value
  end)

  it("names a missing module and a missing function", function()
    raises(function() rl.reload.watch("rewards.nope") end, "module 'rewards.nope' not found")
    raises(function() rl.reload.watch("rewards.nope") end, "hint: reloadable modules")
    raises(function() rl.reload.watch(3) end, "bad argument #1 'name'")
    local w = rl.reload.watch("rewards.live_reward")
    raises(function() w:fn("score")({}) end, "has no function 'score'")
  end)
end)

describe("rl.reload.inline", function()
  local rpath = dir .. "/inline_recipe.lua"
  -- A recipe-shaped file: parts, the inline call, then a "loop" that must never run on reload.
  local function recipe(body, loop)
    local f = assert(io.open(rpath, "w"))
    f:write("local edit = {}\n" .. body .. "\nlocal w = rl.reload.inline(edit)\n"
      .. "INLINE_LOOP_RUNS = (INLINE_LOOP_RUNS or 0) + 1\n" .. (loop or "") .. "\nreturn w\n")
    f:close()
  end

  it("reloads a recipe's own functions, never runs what follows the call", function()
    recipe("function edit.f(x) return x + 1 end")
    INLINE_LOOP_RUNS = 0
    local w = dofile(rpath)
    eq(INLINE_LOOP_RUNS, 1)
    eq(w.name, "inline_recipe")
    eq(w.inline, true)
    local f = w:fn("f")
    eq(f(1), 2)
    eq(dofile(rpath), w, "the same file twice: the same watch")
    INLINE_LOOP_RUNS = 0

    recipe("function edit.f(x) return x + 10 end")
    eq(w:check(), true)
    eq(f(1), 11, "the new version, through the same function")
    eq(w.version, 2)
    eq(INLINE_LOOP_RUNS, 0, "the reload stopped at rl.reload.inline")
    local h2 = w.hash

    recipe("function edit.f(x) return x + 10 end", "print('a changed loop')")
    eq(w:check(), false, "an edit below the call is no new version")
    eq(w.version, 2)
    eq(w.hash, h2)

    recipe("function edit.f(x) return x + 20 end end")            -- syntax error
    local r, err = w:check()
    eq(r, nil)
    ok(err:find("inline_recipe.lua:2:", 1, true), err)
    eq(f(1), 11, "the previous version keeps running")

    recipe("function edit.f(x) return x + 30 end\nerror('boom above the call')")
    r, err = w:check()
    eq(r, nil)
    ok(err:find("inline_recipe.lua:3: boom above the call", 1, true), err)
    eq(INLINE_LOOP_RUNS, 0)

    local f2 = assert(io.open(rpath, "w"))                           -- the call removed
    f2:write("local edit = {}\nfunction edit.f(x) return 0 end\nINLINE_LOOP_RUNS = 99\n")
    f2:close()
    r, err = w:check()
    eq(r, nil)
    ok(err:find("does not call rl.reload.inline(", 1, true), err)
    eq(INLINE_LOOP_RUNS, 0, "a file without the call is not run")
    eq(f(1), 11)

    f2 = assert(io.open(rpath, "w"))                                 -- the call commented out
    f2:write("local edit = {}\n-- local w = rl.reload.inline(edit)\nINLINE_LOOP_RUNS = 99\n")
    f2:close()
    r, err = w:check()
    ok(err:find("does not call rl.reload.inline(", 1, true), err)
    f2 = assert(io.open(rpath, "w"))                                 -- the call not reached: setup refuses
    f2:write("local edit = {}\nif false then rl.reload.inline(edit) end\nrl.recipe.setup({})\nINLINE_LOOP_RUNS = 99\n")
    f2:close()
    r, err = w:check()
    ok(err:find("rl.recipe.setup: called while rl.reload re-reads", 1, true), err)
    eq(rl.reload.loading(), nil)
    eq(INLINE_LOOP_RUNS, 0)
    eq(f(1), 11)

    recipe("function edit.f(x) return x + 40 end")
    eq(w:check(), true)
    eq(f(1), 41)
    eq(w.version, 3)
    eq(rl.reload.metrics()["reload/inline_recipe/version"], 3)
    eq(rl.reload.trace_attrs()["module.inline_recipe"], w.hash)
    eq(INLINE_LOOP_RUNS, 0)
  end)

  it("reads a file's parts as a reload does, and checks its argument", function()
    recipe("function edit.g() return 'g' end")
    INLINE_LOOP_RUNS = 0
    local parts = assert(rl.reload.inline_parts(rpath))
    eq(parts.g(), "g")
    eq(INLINE_LOOP_RUNS, 0)
    local _, err = rl.reload.inline_parts(dir .. "/nope.lua")
    ok(err ~= nil)
    raises(function() rl.reload.inline("edit") end, "bad argument #1 'parts'")
    raises(function() loadstring("rl.reload.inline({})")() end, "not from a file")
  end)
end)

describe("rl.progress", function()
  it("renders counts, percentage, rates and ETA", function()
    local lines = {}
    local bar = rl.progress.new { label = "rollout", total = 8, unit = "samples", width = 8, mode = "tty",
                                  out = function(l) lines[#lines + 1] = l end }
    bar:add(4, { tokens = 100 })
    ok(lines[1]:find("rollout   4/8 [####----]  50%", 1, true), lines[1])
    ok(lines[1]:find("tok/s", 1, true) and lines[1]:find("samples/s", 1, true), lines[1])
    ok(lines[1]:find("ETA", 1, true), lines[1])
    bar:add(4)                                  -- within 0.1 s: not redrawn
    eq(#lines, 1)
    bar:finish()
    eq(#lines, 2)
    ok(lines[2]:find("8/8 [########] 100%", 1, true), lines[2])
    ok(lines[2]:find(" in ", 1, true), lines[2])
    bar:finish()
    eq(#lines, 2, "finish is idempotent")
  end)

  it("plain-lines mode prints nothing for short work; unknown totals count up", function()
    local lines = {}
    local bar = rl.progress.new { label = "x", total = 3, mode = "lines", interval = 10,
                                  out = function(l) lines[#lines + 1] = l end }
    bar:add(1)
    eq(#lines, 0)
    local open = rl.progress.new { label = "train", unit = "micro", mode = "tty",
                                   out = function(l) lines[#lines + 1] = l end }
    open:add(3)
    ok(lines[1]:find("train     3 micro", 1, true), lines[1])
    raises(function() rl.progress.new { total = -1 } end, "bad option 'total'")
  end)
end)

describe("rl._fs", function()
  it("reads and writes whole files, nil, err naming the path on failure", function()
    local fs = require "rl._fs"
    local dir = tmpdir(true)
    eq(fs.write_file(dir .. "/a.bin", "x\0y\n"), true)
    eq(fs.read_file(dir .. "/a.bin"), "x\0y\n")
    local s, err = fs.read_file(dir .. "/missing")
    eq(s, nil)
    ok(err:find(dir .. "/missing", 1, true), err)
    local w, werr = fs.write_file(dir .. "/no/such/dir/f", "x")
    eq(w, nil)
    ok(werr:find("no/such/dir", 1, true), werr)
    os.execute("rm -rf " .. dir)
  end)
end)
