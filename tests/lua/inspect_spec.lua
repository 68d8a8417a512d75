local rl = require "rl"
local fmt = rl.inspect.format

describe("rl.inspect.format", function()
  it("formats scalars", function()
    eq(fmt(nil), "nil")
    eq(fmt(true), "true")
    eq(fmt(42), "42")
    eq(fmt(-3), "-3")
    eq(fmt(1.5), "1.5")
    eq(fmt(0.1), "0.1")
    eq(fmt(1e300), "1e+300")
    eq(fmt(math.huge), "math.huge")
    eq(fmt(-math.huge), "-math.huge")
    eq(fmt(0 / 0), "0/0")
    eq(tonumber(fmt(1 / 3)), 1 / 3, "every digit that matters is kept")
  end)

  it("quotes strings with escapes", function()
    eq(fmt("hi"), '"hi"')
    eq(fmt('say "x"\n'), '"say \\"x\\"\\n"')
    eq(fmt("a\\b\tc\r"), '"a\\\\b\\tc\\r"')
    eq(fmt("\0" .. "1"), '"\\0001"', "three-digit escapes never merge with a digit")
    eq(loadstring("return " .. fmt("x\1y\127\n"))(), "x\1y\127\n", "the text is valid Lua")
  end)

  it("prints short tables on one line with sorted keys", function()
    eq(fmt({}), "{}")
    eq(fmt({ 1, 2, 3 }), "{1, 2, 3}")
    eq(fmt({ b = 2, a = 1, c = "x" }), '{a = 1, b = 2, c = "x"}')
    eq(fmt({ 10, 20, z = true, [5] = "five" }), '{10, 20, [5] = "five", z = true}')
    eq(fmt({ ["not an id"] = 1, ["end"] = 2, ok_id = 3 }), '{["end"] = 2, ["not an id"] = 1, ok_id = 3}')
    eq(fmt({ [true] = 1, [1.5] = 2, s = 3 }), "{[1.5] = 2, s = 3, [true] = 1}", "numbers, strings, then the rest")
  end)

  it("breaks long tables into indented lines", function()
    local t = { name = string.rep("n", 40), nested = { value = string.rep("v", 40) } }
    eq(fmt(t), '{\n  name = "' .. string.rep("n", 40) .. '",\n  nested = {value = "'
      .. string.rep("v", 40) .. '"}\n}')
  end)

  it("keeps long arrays compact, several items per line", function()
    local a = {}
    for i = 1, 40 do a[i] = i * 1000 end
    local s = fmt(a)
    local lines = select(2, s:gsub("\n", "\n")) + 1
    ok(lines > 2 and lines < 10, "wrapped into a few lines, got " .. lines .. ":\n" .. s)
    ok(s:find("^{\n  1000, 2000, 3000,"), s)
    ok(s:find("40000\n}$"), s)
  end)

  it("limits depth", function()
    local t = { a = { b = { c = { d = 1 } } } }
    eq(fmt(t), "{a = {b = {c = {...}}}}")
    eq(fmt(t, { depth = 1 }), "{a = {...}}")
    eq(fmt(t, { depth = 0 }), "{...}")
    eq(fmt({ a = {} }, { depth = 1 }), "{a = {}}", "empty tables are shown even at the limit")
  end)

  it("limits items per table", function()
    local a = {}
    for i = 1, 10 do a[i] = i end
    eq(fmt(a, { max_items = 3 }), "{1, 2, 3, ... (7 more)}")
    eq(fmt({ a = 1, b = 2, c = 3 }, { max_items = 2 }), "{a = 1, b = 2, ... (1 more)}")
  end)

  it("shows cycles as <cycle> and shared tables in full", function()
    local t = { name = "root" }
    t.self = t
    eq(fmt(t), '{name = "root", self = <cycle>}')
    local shared = { 1 }
    eq(fmt({ a = shared, b = shared }), "{a = {1}, b = {1}}")
    local a, b = {}, {}
    a.b, b.a = b, a
    eq(fmt(a), "{b = {a = <cycle>}}")
  end)

  it("shows json.null and decoded JSON", function()
    eq(fmt(rl.json.null), "json.null")
    eq(fmt(rl.json.decode('{"a": null, "b": [1, 2], "c": []}')), "{a = json.null, b = {1, 2}, c = {}}")
  end)

  it("uses __tostring unless raw", function()
    local obj = setmetatable({ x = 1 }, { __tostring = function() return "Obj(1)" end })
    eq(fmt(obj), "Obj(1)")
    eq(fmt({ obj }), "{Obj(1)}")
    eq(fmt(obj, { raw = true }), "{x = 1}")
    local t = rl.spawn(function() end)
    t:wait()
    ok(fmt(t):find("^rl.Task%("), fmt(t))
  end)

  it("formats functions, threads and userdata readably", function()
    ok(fmt(print):find("^<function: builtin>$"), fmt(print))
    local f = function() end
    ok(fmt(f):find("^<function .*inspect_spec.lua:%d+>$"), fmt(f))
    ok(fmt(coroutine.create(f)):find("^<thread: "), "thread")
    ok(fmt(io.stdout):find("file"), fmt(io.stdout))
  end)

  it("is callable and validates options", function()
    eq(rl.inspect({ 1 }), "{1}")
    raises(function() fmt(1, { dpeth = 2 }) end, "unknown option 'dpeth'")
    raises(function() fmt(1, { depth = "2" }) end, "option 'depth' must be a number")
    raises(function() fmt(1, 5) end, "bad argument #2 'opts'")
  end)
end)

describe("rl.repl (REPL helpers)", function()
  local repl = require "rl.repl"

  it("compiles expressions to return their values", function()
    local fn = repl.compile("1 + 1, 'x'")
    local a, b = fn()
    eq(a, 2); eq(b, "x")
    fn = repl.compile("x_from_repl_spec = 5")
    fn()
    eq(x_from_repl_spec, 5)
    x_from_repl_spec = nil
  end)

  it("tells unfinished chunks from wrong ones", function()
    ok(repl.is_incomplete("function f()"))
    ok(repl.is_incomplete("for i = 1, 3 do"))
    ok(repl.is_incomplete("x = [[long"))
    ok(repl.is_incomplete("f("))
    ok(repl.is_incomplete("t = {1,"))
    ok(not repl.is_incomplete("x = = 1"))
    ok(not repl.is_incomplete("return 1"))
    ok(not repl.is_incomplete("end"))
    local fn, err, incomplete = repl.compile("x = = 1", "=attach")
    eq(fn, nil); eq(incomplete, false)
    ok(err:find("^attach:1:"), err)
  end)

  it("runs a chunk as a task, capturing print, with globals shared", function()
    local t, cap = repl.spawn("print('a', 1) shared_by_repl = 7 rl.sleep(0) return shared_by_repl * 2",
      { capture = true, chunkname = "=attach" })
    pcall(t.wait, t)
    local reply = repl.result(t, cap)
    eq(reply, { ok = true, values = { "14" }, output = "a\t1\n" })
    eq(shared_by_repl, 7)
    shared_by_repl = nil
  end)

  it("reports errors with a trimmed traceback", function()
    local t, cap = repl.spawn("local function g() error('bad') end g()", { capture = true, chunkname = "=attach" })
    pcall(t.wait, t)
    local reply = repl.result(t, cap)
    eq(reply.ok, false)
    ok(reply.error:find("^attach:1: bad\nstack traceback:\n"), reply.error)
    ok(reply.error:find("in function 'g'", 1, true), reply.error)
    ok(not reply.error:find("rl/task.lua", 1, true), "scheduler frames trimmed: " .. reply.error)
  end)

  it("reports cancellation as the reason", function()
    local t, cap = repl.spawn("rl.sleep(10)", { capture = true })
    rl.sleep(0)
    t:cancel("interrupted")
    pcall(t.wait, t)
    eq(repl.result(t, cap), { ok = false, error = "interrupted", output = "" })
  end)
end)
