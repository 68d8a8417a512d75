-- rl.gzip: in-memory gzip through zlib, checked against the gzip command.
local rl = require "rl"
local read, write = read_file, write_file  -- spec.lua helpers

local function tmp() return os.tmpname() end

describe("rl.gzip", function()
  it("round-trips text and binary, empty and large", function()
    local big = {}
    for i = 1, 200000 do big[i] = tostring(i * 7919 % 1000) end
    for _, s in ipairs { "", "hello", ("\0\1\2\255"):rep(1000), table.concat(big, ",") } do
      local gz = rl.gzip.compress(s)
      ok(rl.gzip.is_gzip(gz))
      eq(rl.gzip.decompress(gz), s)
    end
    ok(#rl.gzip.compress(("a"):rep(100000), 9) < 1000)
    eq(rl.gzip.decompress(rl.gzip.compress("x", 0)), "x")
  end)

  it("reads what gzip(1) writes, several members joined, and gzip(1) reads ours", function()
    local a, b = tmp(), tmp()
    write(a, "first member\n")
    write(b, "second member\n")
    local code = os.execute("gzip -c '" .. a .. "' > '" .. a .. ".gz' && gzip -c '" .. b .. "' >> '" .. a .. ".gz'")
    eq(code, 0)
    eq(rl.gzip.decompress(read(a .. ".gz")), "first member\nsecond member\n")
    eq(rl.gzip.read_file(a .. ".gz"), "first member\nsecond member\n")
    eq(rl.gzip.read_file(a), "first member\n")  -- not gzip: as is
    write(b .. ".gz", rl.gzip.compress("ours\n"))
    local p = io.popen("gzip -dc '" .. b .. ".gz'")
    eq(p:read("*a"), "ours\n")
    p:close()
    for _, f in ipairs { a, b, a .. ".gz", b .. ".gz" } do os.remove(f) end
  end)

  it("returns nil, err for corrupt, truncated, oversized input; raises on misuse", function()
    local gz = rl.gzip.compress(("abc"):rep(1000))
    local out, err = rl.gzip.decompress(gz:sub(1, #gz - 10))
    eq(out, nil)
    ok(err:find("truncated", 1, true), err)
    out, err = rl.gzip.decompress("not gzip at all")
    eq(out, nil)
    ok(err:find("corrupt", 1, true), err)
    out, err = rl.gzip.decompress("")
    ok(err:find("empty input", 1, true), err)
    out, err = rl.gzip.decompress(gz, 100)
    ok(err:find("larger than 100 bytes", 1, true), err)
    out, err = rl.gzip.read_file("/nonexistent/x.gz")
    eq(out, nil)
    ok(err:find("/nonexistent/x.gz", 1, true), err)
    raises(function() rl.gzip.decompress(42) end, "rl.gzip.decompress: bad argument #1 'bytes'")
    raises(function() rl.gzip.compress("x", 12) end, "rl.gzip.compress: bad argument #2 'level'")
    raises(function() rl.gzip.read_file(nil) end, "rl.gzip.read_file: bad argument #1 'path'")
  end)
end)
