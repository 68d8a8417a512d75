-- tools/trace_timeline.lua and rl.timeline: the viewer cache (slime's schema v1, the
-- values slime's own viewer writes for the dumps in tests/data/trace_timeline),
-- reconstruction rules (pairing, open spans, unmatched ends, lanes, PD lanes), cache
-- reuse vs --rebuild, the Chrome-trace file, and errors for bad input. The page
-- itself is tested in a browser: tests/browser/test_trace_timeline.py.
local rl = require "rl"
local json = rl.json

local bin = os.getenv("RLHOST_BIN") or "build/rlhost"
local src = os.getenv("RLHOST_SOURCE_DIR") or "."
local tool = src .. "/tools/trace_timeline.lua"

local function tmpdir()
  local d = os.tmpname()
  os.remove(d)
  assert(os.execute("mkdir -p '" .. d .. "'") == 0)
  return d
end

local function read(path)
  local f = assert(io.open(path, "rb"))
  local s = f:read("*a")
  f:close()
  return s
end

-- Runs the tool; returns its output (stdout + stderr) and exit status.
local function run_tool(args)
  local p = io.popen(("'%s' --no-control '%s' %s 2>&1; echo \"rc=$?\""):format(bin, tool, args))
  local out = p:read("*a")
  p:close()
  local rc = tonumber(out:match("rc=(%d+)%s*$"))
  return out:gsub("rc=%d+%s*$", ""), rc
end

-- Samples traced with the real rl.trace API and the rollout's own trace attrs
-- (rl.rollout.generate_trace_attrs), with or without PD timings in meta_info.
local function traced_samples(n, pd)
  local out = {}
  for i = 0, n - 1 do
    local s = rl.sample.new { prompt = "q" .. i, label = tostring(i), group_index = math.floor(i / 2), index = i }
    s.metadata = { source = "gsm8k" }
    rl.trace.span(s, "generate_and_rm", nil, function()
      rl.trace.event(s, "request_enqueue", { n = i })
      rl.trace.span(s, "sglang_generate", { max_new_tokens = 8 }, function(span)
        local meta = { prompt_tokens = 5, completion_tokens = 3, e2e_latency = 0.02, queue_time = 0.001,
                       prefill_time = 0.004, decode_time = 0.015, finish_reason = { type = "stop" }, id = "r" .. i }
        if pd then
          meta.pd_prefill_forward_duration, meta.pd_prefill_bootstrap_duration = 0.004, 0.001
          meta.pd_decode_forward_duration, meta.pd_decode_transfer_duration = 0.012, 0.002
          meta.pd_transfer_speed_gb_s = 9.5
        end
        span:update(rl.rollout.generate_trace_attrs(meta, { elapsed = 0.021, worker = "w0" }))
      end)
      rl.trace.span(s, "reward_model", nil, function(span) span:set("reward", 1) end)
    end)
    s.reward, s.status = 1, "completed"
    out[#out + 1] = s
  end
  return out
end

-- rlhost's cache text as slime's json.dump would write the same values: rows joined
-- without the newline, '<' unescaped, and without rlhost's two extra header keys.
local function as_slime_bytes(cache)
  local s = cache:gsub(",\n{", ",{"):gsub("\n$", "")
  s = s:gsub(',"dump_sample_count":%d+,"pd_row_count":%d+', "", 1)
  s = s:gsub("(\\*)\\u003c", function(bs) if #bs % 2 == 0 then return bs .. "<" end end)
  return s
end

local function first_difference(a, b)
  local n = math.min(#a, #b)
  for i = 1, n do
    if a:byte(i) ~= b:byte(i) then
      return ("byte %d:\n  rlhost: %s\n  slime:  %s"):format(i, a:sub(math.max(1, i - 160), i + 80),
        b:sub(math.max(1, i - 160), i + 80))
    end
  end
  return ("lengths %d (rlhost) and %d (slime)"):format(#a, #b)
end

local function build(path, opts)
  local res, err = rl.timeline.build(path, opts)
  assert(res, err)
  return res, assert(json.decode(res.cache))
end

local function items_named(row, name)
  local out = {}
  for _, it in ipairs(row.items) do if it.name == name then out[#out + 1] = it end end
  return out
end

describe("trace timeline", function()
  -- Dumps written by torch.save with each shape the viewer must survive, and the caches
  -- slime's tools/trace_timeline_viewer.py wrote for them (make_dumps.py / make_expected.py).
  for _, name in ipairs { "sources", "rounding", "malformed", "untraced", "bare_list", "slime_like" } do
    it("writes the cache slime's viewer writes: " .. name .. ".pt", function()
      local dir = src .. "/tests/data/trace_timeline/"
      local want = rl.gzip.read_file(dir .. name .. ".cache.json") or assert(rl.gzip.read_file(dir .. name .. ".cache.json.gz"))
      local res, err = rl.timeline.build(dir .. name .. ".pt", { pt_path = "dump.pt", generated_at = 0 })
      assert(res, err)
      local got = as_slime_bytes(res.cache)
      ok(got == want, name .. ".pt: the cache differs from slime's at " .. first_difference(got, want))
    end)
  end

  it("generate spans name the weights a response was sampled under", function()
    local a = rl.rollout.generate_trace_attrs({ weight_version = "3", weight_version_spans = { { 0, "3" } } })
    eq(a.weight_version, "3")
    eq(a.weight_version_spans, nil)   -- one version: said once
    a = rl.rollout.generate_trace_attrs({ weight_version = "4", weight_version_spans = { { 0, "3" }, { 17, "4" } } })
    eq(a.weight_version, "4")
    eq(a.weight_version_spans, "0:3,17:4")   -- swapped mid-response: where each began
  end)

  it("counts rows as slime does and keeps the dump's total beside it", function()
    local dir = src .. "/tests/data/trace_timeline/"
    local res = assert(rl.timeline.build(dir .. "malformed.pt"))
    local c = json.decode(res.cache)
    eq(res.sample_count, 18)   -- samples in the dump
    eq(res.rows, 9)            -- with trace events
    eq(c.sample_count, 9)      -- slime's sample_count: rows
    eq(c.dump_sample_count, 18)
    local untraced = assert(rl.timeline.build(dir .. "untraced.pt"))
    local u = json.decode(untraced.cache)
    eq(untraced.rows, 0)
    eq(u.sample_count, 0)
    eq(u.global_start, json.null)
  end)

  it("ends an open span whose ancestors form a cycle (where slime's walk never returns)", function()
    local dir = tmpdir()
    local carrier = { trace_id = "c", attempt = 0, events = {
      { type = "span_start", name = "a", ts = 1, span_id = "a", parent_span_id = "b" },
      { type = "span_start", name = "b", ts = 2, span_id = "b", parent_span_id = "a" },
    } }
    local pt = assert(rl.dump.save(dir .. "/cycle.pt", 0, { { index = 0, trace = carrier } }))
    local _, c = build(pt)
    local a, b = items_named(c.rows[1], "a")[1], items_named(c.rows[1], "b")[1]
    eq({ a.state, a.display_end_ts, a.attrs.end_attrs.clipped_by, a.lane }, { "open_span", 2, "row_end", 2 })
    eq({ b.state, b.display_end_ts, b.attrs.end_attrs.clipped_by, b.lane }, { "open_span", 2, "self", 1 })
  end)

  it("prints its usage line once (rlhost tools/trace_timeline.lua --help)", function()
    local out, rc = run_tool("--help")
    eq(rc, 0, out)
    ok(out:find("^usage: rlhost " .. tool:gsub("%p", "%%%0") .. " %[options%] PATH%.pt"), out)
    ok(not out:find("rlhost rlhost", 1, true), out)
  end)

  it("writes the cache in slime's schema (version 1)", function()
    local dir = tmpdir()
    local pt = assert(rl.dump.save(dir .. "/rollout_{rollout_id}.pt", 3, traced_samples(4, false)))
    local res, c = build(pt, { pt_path = pt, generated_at = 123.5 })
    eq(res.sample_count, 4)
    eq(res.rows, 4)
    eq(c.cache_version, 1)
    eq(c.pt_path, pt)
    eq(c.generated_at, 123.5)
    eq(c.sample_count, 4)
    ok(c.global_start <= c.global_end)
    eq(#c.rows, 4)
    for i, r in ipairs(c.rows) do
      eq(r.row_id, i - 1)
      eq(r.sample_index, i - 1)
      eq(r.group_index, math.floor((i - 1) / 2))
      eq(r.source, "gsm8k")
      eq(r.status, "completed")
      eq(r.label, tostring(i - 1))
      eq(r.reward, 1)
      eq(#r.trace_id, 32)
      eq(r.attempt, 0)
      near(r.duration, r["end"] - r.start, 1e-5)
      eq(r.item_count, #r.items)
      eq(r.closed_span_count + r.open_span_count + r.point_event_count + r.orphan_count, r.item_count)
      for _, k in ipairs { "lane_count", "total_response_length", "max_response_length" } do ok(r[k] ~= nil, k) end
      for _, it in ipairs(r.items) do
        for _, k in ipairs { "type", "state", "name", "attempt", "lane", "depth", "attrs", "parent_span_id", "parent_span_name" } do
          ok(it[k] ~= nil, "item field " .. k)
        end
        if it.type == "span" then
          ok(it.start_ts and it.display_end_ts and it.span_id, "span times")
          ok(it.attrs.start_attrs and it.attrs.end_attrs, "span attrs")
        else
          ok(it.ts, "event ts")
        end
      end
      -- generate_and_rm (0) ⊃ sglang_generate (1) ⊃ engine_prefill (2); the event sits under its span
      eq(items_named(r, "generate_and_rm")[1].lane, 0)
      eq(items_named(r, "sglang_generate")[1].lane, 1)
      eq(items_named(r, "sglang_generate")[1].parent_span_name, "generate_and_rm")
      eq(items_named(r, "engine_prefill")[1].lane, 2)
      eq(items_named(r, "request_enqueue")[1].lane, 1)
      eq(items_named(r, "request_enqueue")[1].type, "event")
      eq(items_named(r, "sglang_generate")[1].attrs.end_attrs.completion_tokens, 3)
    end
  end)

  it("rebuilds open spans, unmatched ends and inferred parents", function()
    local dir = tmpdir()
    local function ev(t, name, ts, id, parent, attrs)
      return { type = t, name = name, ts = ts, span_id = id, parent_span_id = parent, attrs = attrs, attempt = 0 }
    end
    local carrier = { version = 1, trace_id = ("a"):rep(32), sample_id = 0, group_id = 0, attempt = 0, events = {
      ev("span_start", "outer", 10, "o"),
      ev("span_start", "inner", 11, "i"),          -- parent inferred from the open stack
      ev("span_start", "stuck", 12, "s", "i"),     -- never ends: clipped by the sibling below
      ev("span_start", "next", 13, "n", "i"),
      ev("span_end", "next", 14, "n"),
      ev("span_end", "inner", 15, "i", nil, { ok = true }),
      ev("span_end", "ghost", 16, "g"),            -- no start
      ev("event", "mark", 16.5, nil, nil, { k = "v" }),
      { type = "event", name = "no ts" },          -- skipped
      ev("span_end", "outer", 17, "o"),
    } }
    local pt = assert(rl.dump.save(dir .. "/x.pt", 0, { { index = 7, trace = carrier } }))
    local _, c = build(pt)
    local r = c.rows[1]
    eq(r.sample_index, 7)
    eq(r.item_count, 6)
    eq({ r.closed_span_count, r.open_span_count, r.point_event_count, r.orphan_count }, { 3, 1, 1, 1 })
    local stuck = items_named(r, "stuck")[1]
    eq(stuck.state, "open_span")
    eq(stuck.end_ts, json.null)
    eq(stuck.display_end_ts, 13)
    eq(stuck.attrs.end_attrs.clipped_by, "next_sibling_start")
    eq(stuck.lane, 2)
    local inner = items_named(r, "inner")[1]
    eq(inner.parent_span_id, "o")
    eq(inner.attrs.end_attrs.ok, true)
    eq(items_named(r, "ghost")[1].state, "orphan_end")
    -- the innermost span still open in file order is its parent (stuck never ended)
    eq(items_named(r, "mark")[1].parent_span_name, "stuck")
    eq(items_named(r, "mark")[1].lane, 3)
    eq(r.start, 10)
    eq(r["end"], 17)
    eq(r.lane_count, 4)
  end)

  it("adds [P]/[D] lanes for PD timings and none without", function()
    local dir = tmpdir()
    local pd = assert(rl.dump.save(dir .. "/pd.pt", 0, traced_samples(2, true)))
    local plain = assert(rl.dump.save(dir .. "/plain.pt", 0, traced_samples(2, false)))
    local res, c = build(pd)
    eq(res.pd_rows, 2)
    local r = c.rows[1]
    local p, d = items_named(r, "sglang_generate [P]")[1], items_named(r, "sglang_generate [D]")[1]
    ok(p and d, "virtual lanes")
    eq(p.attrs.end_attrs.timeline_pd_virtual_role, "prefill")
    eq(p.attrs.end_attrs.pd_prefill_forward_duration, 0.004)
    eq(d.attrs.end_attrs.timeline_pd_parent_name, "sglang_generate")
    eq(d.span_id, items_named(r, "sglang_generate")[1].span_id .. ":pd:decode")
    eq(d.lane, p.lane + 1)
    eq(r.lane_count, d.lane + 1)
    ok(#items_named(r, "sglang_pd_prefill_forward") == 1, "PD child spans from _trace_children")
    eq(#items_named(r, "sglang_pd_prefill [P]"), 0)  -- sglang_pd_* spans never get lanes
    local res2, c2 = build(plain)
    eq(res2.pd_rows, 0)
    for _, it in ipairs(c2.rows[1].items) do ok(not it.name:find("%[[PD]%]"), "no PD lane in a plain dump: " .. it.name) end
  end)

  it("reuses a fresh cache, rebuilds on --rebuild and when the dump is newer", function()
    local dir = tmpdir()
    local pt = assert(rl.dump.save(dir .. "/r.pt", 0, traced_samples(3, false)))
    local out, rc = run_tool("'" .. pt .. "' --no-serve")
    eq(rc, 0, out)
    ok(out:find("cache: " .. dir .. "/r.trace_timeline_cache.json (built", 1, true), out)
    ok(out:find("html: " .. dir .. "/r.trace_timeline_viewer.html", 1, true), out)
    ok(out:find("samples: 3", 1, true), out)
    local first = json.decode(read(dir .. "/r.trace_timeline_cache.json")).generated_at
    out, rc = run_tool("'" .. pt .. "' --no-serve")
    eq(rc, 0, out)
    ok(out:find("(reused)", 1, true), out)
    ok(out:find("samples: 3", 1, true), out)
    eq(json.decode(read(dir .. "/r.trace_timeline_cache.json")).generated_at, first)
    rl.sleep(0.02)
    out, rc = run_tool("'" .. pt .. "' --no-serve --rebuild")
    eq(rc, 0, out)
    ok(out:find("(built", 1, true), out)
    ok(json.decode(read(dir .. "/r.trace_timeline_cache.json")).generated_at > first)
    rl.sleep(0.02)
    assert(rl.dump.save(dir .. "/r.pt", 0, traced_samples(5, false)))  -- the dump changed
    out = run_tool("'" .. pt .. "' --no-serve")
    ok(out:find("(built", 1, true) and out:find("samples: 5", 1, true), out)
    local html = read(dir .. "/r.trace_timeline_viewer.html")
    ok(html:find('"cache_version":1', 1, true), "cache inlined into the page")
    ok(not html:find("__TIMELINE_CACHE__", 1, true) and not html:find("<script src=", 1, true), "self-contained")
  end)

  it("splits the page's data into the first rows and the rest", function()
    local dir = tmpdir()
    local pt = assert(rl.dump.save(dir .. "/s.pt", 0, traced_samples(5, false)))
    local res = assert(rl.timeline.build(pt, { cache_path = dir .. "/s.json" }))
    eq(res.cache, nil)  -- written from C++, not handed to Lua
    ok(rl.timeline.page(dir .. "/s.json", dir .. "/s.html", "<a>", "<b>", "<c>", 2))
    local html = read(dir .. "/s.html")
    local first, rest = html:match("^<a>(.*)<b>(.*)<c>$")
    local c1, c2 = assert(json.decode(first)), assert(json.decode(rest))
    eq(#c1.rows, 2)
    eq(c1.sample_count, 5)
    eq(#c2, 3)
    eq(c2[1].row_id, 2)
    ok(rl.timeline.page(dir .. "/s.json", dir .. "/all.html", "<a>", "<b>", "<c>", 10))
    first, rest = read(dir .. "/all.html"):match("^<a>(.*)<b>(.*)<c>$")
    eq(#json.decode(first).rows, 5)
    eq(rest, "[]")
    local none, err = rl.timeline.page(dir .. "/missing.json", dir .. "/x.html", "", "", "")
    eq(none, nil)
    ok(err:find("missing.json", 1, true), err)
  end)

  it("writes a Chrome trace with --format perfetto", function()
    local dir = tmpdir()
    local pt = assert(rl.dump.save(dir .. "/p.pt", 0, traced_samples(3, true)))
    local out, rc = run_tool("'" .. pt .. "' --no-serve --format perfetto")
    eq(rc, 0, out)
    ok(out:find("perfetto: " .. dir .. "/p.perfetto.json", 1, true), out)
    local t = assert(json.decode(read(dir .. "/p.perfetto.json")))
    local threads, spans, instants = {}, 0, 0
    for _, e in ipairs(t.traceEvents) do
      ok(e.ph and e.pid and e.tid ~= nil and e.name, "event fields")
      if e.ph == "M" and e.name == "thread_name" then threads[e.tid] = e.args.name end
      if e.ph == "X" then
        spans = spans + 1
        ok(e.ts >= 0 and e.dur >= 0, "X times")
        ok(threads[e.tid], "span on a named track")
      elseif e.ph == "i" then
        instants = instants + 1
        eq(e.s, "t")
      end
    end
    local n = 0
    for _, name in pairs(threads) do n = n + 1; ok(name:find("^#%d+ gsm8k$"), name) end
    eq(n, 3)
    ok(spans >= 3 * 8 and instants >= 3 * 2, ("spans %d, instants %d"):format(spans, instants))
  end)

  it("fails clearly on bad input", function()
    local dir = tmpdir()
    local function bad(args, want)
      local out, rc = run_tool(args)
      ok(rc ~= 0, "non-zero exit for " .. args)
      ok(out:find(want, 1, true), "expected '" .. want .. "' in: " .. out)
      ok(out:find("hint:", 1, true), "a hint in: " .. out)
      ok(not out:find("traceback", 1, true), "no traceback in: " .. out)
    end
    bad("'" .. dir .. "/missing.pt' --no-serve", "pt file not found: " .. dir .. "/missing.pt")
    local f = assert(io.open(dir .. "/junk.pt", "wb")); f:write("not a torch file"); f:close()
    bad("'" .. dir .. "/junk.pt' --no-serve", dir .. "/junk.pt")
    assert(rl.dump.save(dir .. "/dict.pt", 0, {}))
    f = assert(io.open(dir .. "/other.pt", "wb")); f:write(rl.dump.encode({ weights = { 1, 2 } })); f:close()
    bad("'" .. dir .. "/other.pt' --no-serve", "not a debug rollout dump")
    assert(rl.dump.save(dir .. "/untraced.pt", 0, { { index = 0, prompt = "p" }, { index = 1 } }))
    bad("'" .. dir .. "/untraced.pt' --no-serve", "no traces")
    local _, rc = run_tool("--no-serve")
    ok(rc ~= 0, "missing PATH is a usage error")
  end)
end)
