-- rl.dump: torch.save-format dumps from Lua: paths, round trips with traces,
-- lists vs dicts, subsampling, and errors (nil, err for bad files; raises for
-- misuse). Python's view of the same files: tests/e2e/test_dump_pickle.py.
local rl = require "rl"
local json = rl.json
local dump = rl.dump
local read, write = read_file, write_file  -- spec.lua helpers

-- n samples in groups of `per` with a traced span each.
local function make_samples(n, per)
  local out = {}
  for i = 0, n - 1 do
    local s = rl.sample.new { prompt = "q" .. i, label = tostring(i), group_index = math.floor(i / per), index = i }
    rl.trace.span(s, "generate_and_rm", { k = i }, function(span)
      s:append_response({ 10 + i, 11 }, { -0.5, 0 }, { text = "a\u{e9}", meta_info = { finish_reason = { type = "stop" } } })
      span:set("reward", 1)
    end)
    s.reward = 1
    s.status = "completed"
    out[#out + 1] = s
  end
  return out
end

describe("rl.dump", function()
  it("formats paths as slime does", function()
    eq(dump.path("d/rollout_{rollout_id}.pt", 3), "d/rollout_3.pt")
    eq(dump.path("d/rollout_{rollout_id}.pt", 3, { eval = true }), "d/rollout_eval_3.pt")
    eq(dump.path("d/{{x}}_{rollout_id}.pt", 0), "d/{x}_0.pt")
    raises(function() dump.path("d/{step}.pt", 1) end, "unknown field {step}")
    raises(function() dump.path("d/{rollout_id}.pt", 1.5) end, "bad argument #2 'rollout_id'")
  end)

  it("saves samples with traces and loads them back as rl.Sample", function()
    local dir = tmpdir()
    local samples = make_samples(4, 2)
    local path = assert(dump.save(dir .. "/sub/rollout_{rollout_id}.pt", 7, samples))
    eq(path, dir .. "/sub/rollout_7.pt")
    eq(read(path):sub(1, 4), "PK\3\4")
    local d = assert(dump.load(dir .. "/sub/rollout_{rollout_id}.pt", { rollout_id = 7 }))
    eq(d.rollout_id, 7)
    eq(#d.samples, 4)
    for i, s in ipairs(d.samples) do
      local want = samples[i]
      eq(getmetatable(s), rl.sample.Sample)
      eq(s.prompt, want.prompt)
      eq(s.response, "a\u{e9}")
      eq(s.tokens, want.tokens)
      eq(s.rollout_log_probs, { -0.5, 0 })
      eq(s.status, "completed")
      eq(s.reward, 1)
      eq(s.trace.trace_id, want.trace.trace_id)
      eq(#s.trace.events, 2)
      local start, stop = s.trace.events[1], s.trace.events[2]
      eq(start.type, "span_start")
      eq(start.attrs.k, i - 1)
      eq(stop.attrs.reward, 1)
      eq(start.ts, want.trace.events[1].ts)
      eq(stop.span_id, start.span_id)
      ok(json.is_array(s.trace.events))
      ok(json.is_array(s.weight_versions), "an empty list stays a list")
      ok(not json.is_array(s.metadata), "an empty dict stays a dict")
    end
    os.execute("rm -rf " .. dir)
  end)

  it("keeps None, nested lists, big ints, bytes and shared tables", function()
    local shared = { x = 1 }
    local v = { a = json.null, b = { { 1, { 2, json.array() } }, {} }, c = 2 ^ 53, d = -2 ^ 40, e = 0.1,
                f = "\255\0raw", g = { shared, shared }, h = { [1] = "one", [3] = "three" }, t = true }
    local back = assert(dump.decode(dump.encode(v)))
    eq(back.a, json.null)
    eq(back.b, { { 1, { 2, {} } }, {} })
    ok(json.is_array(back.b[1][2][2]))
    ok(not json.is_array(back.b[2]), "{} without the array mark is a dict")
    eq(back.c, 2 ^ 53)
    eq(back.d, -2 ^ 40)
    eq(back.e, 0.1)
    eq(back.f, "\255\0raw")
    eq(back.g, { { x = 1 }, { x = 1 } })
    eq(back.h, { [1] = "one", [3] = "three" })
    eq(back.t, true)
  end)

  it("writes eval dumps flattened over datasets", function()
    local dir = tmpdir()
    local path = assert(dump.save(dir .. "/r_{rollout_id}.pt", 2, {
      gsm8k = { samples = make_samples(2, 1) }, math = { samples = make_samples(1, 1) } }, { eval = true }))
    eq(path, dir .. "/r_eval_2.pt")
    local d = assert(dump.load(path, { raw = true }))
    eq(#d.samples, 3)
    eq(d.samples[1].prompt, "q0")
    eq(d.samples[3].prompt, "q0")
    eq(getmetatable(d.samples[1]), nil, "raw: plain dicts")
    os.execute("rm -rf " .. dir)
  end)

  it("subsamples as slime (head and tail rows) or by random whole groups", function()
    local dir = tmpdir()
    local path = assert(dump.save(dir .. "/r.pt", 0, make_samples(10, 2)))
    local function indices(d)
      local out = {}
      for i, s in ipairs(d.samples) do out[i] = s.index end
      return out
    end
    eq(indices(assert(dump.load(path, { subsample = 0.5 }))), { 0, 1, 7, 8, 9 })
    eq(indices(assert(dump.load(path, { subsample = 0.3 }))), { 0, 8, 9 })
    eq(indices(assert(dump.load(path, { subsample = 0.01 }))), { 0, 1, 2, 3, 4, 5, 6, 7, 8, 9 },
      "k = int(n * ratio) = 0 keeps every row, as slime's data[:0] + data[-0:]")
    eq(indices(assert(dump.load(path, { subsample = 1 }))), { 0, 1, 2, 3, 4, 5, 6, 7, 8, 9 })
    local a = indices(assert(dump.load(path, { subsample = 0.4, seed = 1 })))
    eq(#a, 4, "two of five groups")
    for i = 1, #a, 2 do eq(a[i + 1], a[i] + 1, "whole groups") end
    eq(indices(assert(dump.load(path, { subsample = 0.4, seed = 1 }))), a, "the seed fixes the choice")
    raises(function() dump.load(path, { subsample = 0 }) end, "subsample must be a number in (0, 1]")
    raises(function() dump.load(path, { subsample = 1.5 }) end, "subsample must be a number in (0, 1]")
    os.execute("rm -rf " .. dir)
  end)

  it("returns nil, err for missing, corrupt and non-dump files", function()
    local dir = tmpdir()
    os.execute("mkdir -p " .. dir)
    local d, err = dump.load(dir .. "/nope.pt")
    eq(d, nil)
    ok(err:find("nope.pt: no such file", 1, true), err)
    write(dir .. "/text.pt", "hello")
    d, err = dump.load(dir .. "/text.pt")
    ok(d == nil and err:find("not a torch file", 1, true), err)
    local good = dump.encode({ rollout_id = 1, samples = json.array() })
    write(dir .. "/cut.pt", good:sub(1, #good - 30))
    d, err = dump.load(dir .. "/cut.pt")
    ok(d == nil and err:find("cut.pt", 1, true), err)
    local bad = good:gsub("samples", "sampleZ", 1)  -- inside data.pkl: the CRC no longer matches
    write(dir .. "/crc.pt", bad)
    d, err = dump.load(dir .. "/crc.pt")
    ok(d == nil and err:find("fails its CRC check", 1, true), err)
    write(dir .. "/plain.pt", dump.encode({ x = 1 }))
    d, err = dump.load(dir .. "/plain.pt")
    ok(d == nil and err:find("not a rollout dump", 1, true), err)
    write(dir .. "/status.pt", dump.encode({ samples = { { status = "weird" } } }))
    d, err = dump.load(dir .. "/status.pt")
    ok(d == nil and err:find("samples[0]", 1, true) and err:find("weird", 1, true), err)
    d, err = dump.decode("\128\2\255.")
    ok(d == nil and err:find("unknown or unsupported pickle opcode 0xff", 1, true), err)
    os.execute("rm -rf " .. dir)
  end)

  it("raises for values that cannot be saved", function()
    local dir = tmpdir()
    local s = rl.sample.new { index = 0 }
    s.metadata.f = print
    raises(function() dump.save(dir .. "/x.pt", 0, { s }) end, "rl.dump.save: cannot save a function at $.samples[1].metadata.f")
    local cyc = {}
    cyc.self = cyc
    raises(function() dump.encode(cyc) end, "a table contains itself at $.self")
    raises(function() dump.encode({ [true] = 1, [{}] = 2 }) end, "a table key of type table")
    raises(function() dump.save(dir .. "/x.pt", 0, "nope") end, "bad argument #3 'samples'")
  end)
end)
