local rl = require "rl"
local json = rl.json

local function roundtrip(v) return json.decode(json.encode(v)) end

describe("rl.json round trips", function()
  it("scalars", function()
    for _, v in ipairs { 0, 1, -1, 42, 0.5, -2.25, 1e-6, 1 / 3, 2 ^ 53, 1e300, -1e-300, "", "x", true, false } do
      eq(roundtrip(v), v, tostring(v))
    end
  end)

  it("numbers use the shortest text that reads back exactly", function()
    eq(json.encode(0.1), "0.1")
    eq(json.encode(1e-6), "1e-06")
    eq(json.encode(3), "3")
    eq(json.encode(-0.5), "-0.5")
    eq(json.encode(1e15), "1e+15")
    eq(json.encode(123456789012345), "123456789012345")
    eq(tonumber(json.encode(1 / 3)), 1 / 3)
    eq(json.decode("1E3"), 1000)
    eq(json.decode("-0.25e-2"), -0.0025)
  end)

  it("nested arrays and objects", function()
    local v = { a = { 1, 2, { b = "c", d = { true, false } } }, e = { f = { g = {} } }, h = "i" }
    local back = roundtrip(v)
    eq(back.a, v.a)
    eq(back.h, "i")
    eq(json.encode(back.e.f.g), "{}", "an empty table is an object")
    eq(roundtrip({ { { { { "deep" } } } } }), { { { { { "deep" } } } } })
  end)

  it("decodes a document", function()
    local v = json.decode('{"id": 7, "tags": ["a", "b"], "meta": {"ok": true, "score": -1.5}, "none": null}')
    eq(v.id, 7)
    eq(v.tags, { "a", "b" })
    eq(v.meta, { ok = true, score = -1.5 })
    eq(v.none, json.null)
  end)

  it("top-level scalars decode", function()
    eq(json.decode("3"), 3)
    eq(json.decode('"s"'), "s")
    eq(json.decode("true"), true)
    eq(json.decode(" false "), false)
  end)

  it("numeric keys of a non-array table become strings", function()
    eq(json.decode(json.encode({ [2] = "b", [5] = "e" })), { ["2"] = "b", ["5"] = "e" })
    eq(json.encode({ a = 1, [1] = 2 }, { sort_keys = true }), '{"1":2,"a":1}')
  end)
end)

describe("rl.json null and arrays", function()
  it("null is the rl.json.null sentinel both ways", function()
    eq(json.decode("null"), json.null)
    eq(json.encode(json.null), "null")
    eq(json.encode(nil), "null")
    eq(json.encode({ json.null, 2 }), "[null,2]")
    eq(json.decode("[null,1]")[1], json.null)
    eq(json.decode('{"a":null}').a, json.null)
    ok(json.null ~= nil)
  end)

  it("[] and {} stay apart, through rl.json.array", function()
    eq(json.encode({}), "{}")
    eq(json.encode(json.array()), "[]")
    eq(json.encode(json.array({})), "[]")
    eq(json.encode({ list = json.array(), obj = {} }, { sort_keys = true }), '{"list":[],"obj":{}}')
    local t = json.decode("[]")
    ok(json.is_array(t), "a decoded [] is marked")
    eq(json.encode(t), "[]")
    eq(json.encode(json.decode('{"a":[],"b":{}}'), { sort_keys = true }), '{"a":[],"b":{}}')
    ok(not json.is_array({}))
    ok(not json.is_array("x"))
  end)

  it("rl.json.array marks and returns the same table", function()
    local t = { 1, 2 }
    eq(json.array(t), t)
    ok(json.is_array(t))
    eq(json.encode(t), "[1,2]")
  end)

  it("decoded arrays are plain Lua sequences", function()
    local t = json.decode("[10,20,30]")
    eq(#t, 3)
    eq(t[2], 20)
    local sum = 0
    for _, v in ipairs(t) do sum = sum + v end
    eq(sum, 60)
  end)
end)

describe("rl.json strings", function()
  it("escapes quotes, backslashes and control characters", function()
    eq(json.encode('a"b\\c'), '"a\\"b\\\\c"')
    eq(json.encode("\n\r\t\b\f"), '"\\n\\r\\t\\b\\f"')
    eq(json.encode("\0\1\31"), '"\\u0000\\u0001\\u001f"')
    eq(json.encode("a/b"), '"a/b"')
    eq(roundtrip("line1\nline2\t\0end"), "line1\nline2\t\0end")
  end)

  it("keeps UTF-8 as is and decodes \\u escapes, surrogate pairs included", function()
    eq(json.encode("é 中文 😀"), '"é 中文 😀"')
    eq(roundtrip("é 中文 😀"), "é 中文 😀")
    eq(json.decode('"\\u00e9\\u4e2d"'), "é中")
    eq(json.decode('"\\ud83d\\ude00"'), "😀")
    eq(json.decode('"\\/\\"\\\\"'), '/"\\')
  end)

  it("rejects invalid UTF-8 when encoding, naming the path", function()
    raises(function() json.encode("\255") end, "invalid UTF-8 in string at $")
    raises(function() json.encode({ a = { "ok", "bad\192\128" } }) end, "invalid UTF-8 in string at $.a[2]")
    raises(function() json.encode({ ["k\255"] = 1 }) end, "invalid UTF-8 in string at $")
    for _, s in ipairs {
      "\195",                -- truncated 2-byte sequence
      "\224\128\128",        -- overlong 3-byte form
      "\237\160\128",        -- UTF-16 surrogate
      "\244\144\128\128",    -- above U+10FFFF
      "\255\128\128\128",    -- not a lead byte
      "\226\130",            -- truncated 3-byte sequence
    } do
      raises(function() json.encode(s) end, "invalid UTF-8")
    end
    eq(json.encode("\244\143\191\191"), '"\244\143\191\191"', "U+10FFFF is fine")
  end)

  it("rejects invalid UTF-8 when decoding", function()
    local v, err = json.decode('"\255"')
    eq(v, nil)
    ok(err:find("UTF-8", 1, true), err)
  end)
end)

describe("rl.json encode errors", function()
  it("rejects NaN and infinities with the path", function()
    raises(function() json.encode(0 / 0) end, "cannot encode NaN at $")
    raises(function() json.encode({ x = { 1, 1 / 0 } }) end, "cannot encode infinity at $.x[2]")
    raises(function() json.encode({ -1 / 0 }) end, "cannot encode infinity at $[1]")
  end)

  it("rejects functions and other non-JSON values with the path", function()
    raises(function() json.encode({ a = { 1, print } }) end,
      "rl.json.encode: bad argument #1 'value' (cannot encode a function at $.a[2])")
    raises(function() json.encode(coroutine.create(print)) end, "cannot encode a thread at $")
    raises(function() json.encode({ u = io.stdout }) end, "cannot encode a userdata at $.u")
    raises(function() json.encode({ [true] = 1 }) end, "table key of type boolean (keys must be strings)")
  end)

  it("rejects cycles, naming where the table recurs", function()
    local t = {}
    t.self = t
    raises(function() json.encode(t) end, "cycle: a table contains itself at $.self")
    local a = { list = {} }
    a.list[1] = { back = a }
    raises(function() json.encode(a) end, "cycle: a table contains itself at $.list[1].back")
  end)

  it("refuses tables nested deeper than 128 levels without overflowing the C stack", function()
    local deep = {}
    local t = deep
    for _ = 1, 100000 do
      t[1] = {}
      t = t[1]
    end
    local okc, err = pcall(json.encode, deep)
    eq(okc, false)
    ok(tostring(err):find("nested deeper than 128 levels", 1, true), err)
    local fine = {}
    t = fine
    for _ = 1, 100 do
      t.x = {}
      t = t.x
    end
    ok(#json.encode(fine) > 100, "100 levels encode")
  end)

  it("a table shared twice is not a cycle", function()
    local shared = { 1 }
    eq(json.encode({ shared, shared, { shared } }), "[[1],[1],[[1]]]")
  end)

  it("rejects bad options", function()
    raises(function() json.encode({}, { indent = "x" }) end, "opts.indent")
    raises(function() json.encode({}, 3) end, "rl.json.encode: bad argument #2 'opts'")
  end)
end)

describe("rl.json decode errors", function()
  it("returns nil and a message with line and column", function()
    local v, err = json.decode('{"a": 1,\n  "b": tru\n}')
    eq(v, nil)
    ok(err:find("^rl%.json%.decode: "), err)
    ok(err:find("line 2, column", 1, true) or err:find("line 3, column", 1, true), err)
    v, err = json.decode("[1, 2")
    eq(v, nil)
    ok(err:find("line 1, column 6", 1, true), err)
  end)

  it("rejects trailing garbage, trailing commas and empty input", function()
    for _, text in ipairs { "[1] x", '{"a":1,}', "", "   ", "[1,]", "{a:1}", "'s'", "nul" } do
      local v, err = json.decode(text)
      eq(v, nil, text)
      ok(type(err) == "string" and err:find("rl.json.decode", 1, true), text)
    end
  end)

  it("rejects nesting deeper than 128 levels, naming where", function()
    local v, err = json.decode(("["):rep(300) .. ("]"):rep(300))
    eq(v, nil)
    ok(err:find("nested deeper than 128 levels", 1, true), err)
    eq(#json.decode(("["):rep(100) .. ("]"):rep(100)), 1, "100 levels are fine")
    v, err = json.decode('{"ok": 1, "deep": ' .. ("["):rep(80000) .. ("]"):rep(80000) .. "}")
    eq(v, nil)
    ok(err:find("in field 'deep[0][0][0][0][0]... (128 levels)'", 1, true), err)
    ok(#err < 400, "the message stays short: " .. #err)
  end)

  it("quotes bad input short and printable", function()
    local v, err = json.decode('["' .. ("x"):rep(100000) .. "\255")
    eq(v, nil)
    ok(err:find("UTF-8", 1, true), err)
    ok(#err < 600, "the message stays short: " .. #err)
    ok(not err:find("\255", 1, true), "no raw bad byte in the message")
  end)

  it("a non-string argument is misuse and raises", function()
    raises(function() json.decode(5) end, "rl.json.decode: bad argument #1 'text' (string expected, got number)")
  end)
end)

describe("rl.json formatting", function()
  it("indent pretty-prints", function()
    eq(json.encode({ a = { 1, 2 } }, { indent = 2 }), '{\n  "a": [\n    1,\n    2\n  ]\n}')
    eq(json.encode({ 1, { x = 1 } }, { indent = 1 }), '[\n 1,\n {\n  "x": 1\n }\n]')
    eq(json.encode({}, { indent = 2 }), "{}")
    eq(json.encode(json.array(), { indent = 2 }), "[]")
  end)

  it("compact by default", function()
    eq(json.encode({ a = { 1, 2 } }), '{"a":[1,2]}')
  end)

  it("sort_keys orders object keys, at every level", function()
    local v = { zeta = 1, alpha = { d = 1, c = 2 }, mid = 3 }
    eq(json.encode(v, { sort_keys = true }), '{"alpha":{"c":2,"d":1},"mid":3,"zeta":1}')
    eq(json.encode(v, { sort_keys = true, indent = 2 }),
      '{\n  "alpha": {\n    "c": 2,\n    "d": 1\n  },\n  "mid": 3,\n  "zeta": 1\n}')
  end)

  it("decode(encode(v, pretty)) == v", function()
    local v = { a = { 1, 2, { b = "x\ny" } }, c = false }
    eq(json.decode(json.encode(v, { indent = 4, sort_keys = true })), v)
  end)

  it("valid_utf8 repairs what encode would refuse, and keeps valid text as it is", function()
    eq(rl.json.valid_utf8("a\xE2\x88\x91"), "a\xE2\x88\x91")
    local fixed = rl.json.valid_utf8("cut \xE2\x88 here \xFF")
    eq(fixed, "cut \xEF\xBF\xBD here \xEF\xBF\xBD")
    eq(rl.json.decode(rl.json.encode(fixed)), fixed)
    raises(function() rl.json.valid_utf8(nil) end, "rl.json.valid_utf8: bad argument #1 's'")
  end)
end)
