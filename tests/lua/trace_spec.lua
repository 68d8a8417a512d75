-- rl.trace: slime's carrier and event records, nesting across tasks, errors,
-- attempts, export/import, SGLang meta attrs with PD children.
local rl = require "rl"
local trace = rl.trace
local sample = require "rl.sample"

local function by_type(events, kind, name)
  local out = {}
  for _, ev in ipairs(events) do
    if ev.type == kind and (name == nil or ev.name == name) then out[#out + 1] = ev end
  end
  return out
end

describe("rl.trace", function()
  it("binds a carrier with slime's fields", function()
    local s = sample.new { index = 5, group_index = 2 }
    local h = trace.bind(s)
    eq(s.trace.version, 1)
    eq(#s.trace.trace_id, 32)
    ok(s.trace.trace_id:match("^%x+$"))
    eq(s.trace.sample_id, 5)
    eq(s.trace.group_id, 2)
    eq(s.trace.attempt, 0)
    eq(h.trace_id, s.trace.trace_id)
    eq(trace.bind(s).trace_id, h.trace_id, "rebinding keeps the carrier")
  end)

  it("nests spans, also into spawned tasks, and records events and end attrs", function()
    local s = sample.new { index = 0, group_index = 0 }
    local group = { s, sample.new { index = 1, group_index = 0 } }
    trace.span(group, "generate_and_rm_group", { group_size = 2 }, function()
      local tasks = {}
      for _, x in ipairs(group) do
        tasks[#tasks + 1] = rl.spawn(function()
          trace.span(x, "generate_and_rm", nil, function()
            trace.span(x, "sglang_generate", { max_new_tokens = 8 }, function(sp)
              rl.sleep(0.01)
              sp:update(trace.sglang_meta_attrs { id = "r1", prompt_tokens = 3, completion_tokens = 8,
                finish_reason = { type = "length" }, queue_time = 0.1, weight_version = "1" })
            end)
            trace.event(x, "reward_done", { reward = 1 })
          end)
        end)
      end
      rl.wait_all(tasks)
    end)
    local ev = s.trace.events
    local starts = by_type(ev, "span_start")
    eq(#starts, 3)
    eq(starts[1].name, "generate_and_rm_group")
    eq(starts[1].attrs, { group_size = 2 })
    eq(starts[1].parent_span_id, nil)
    eq(starts[2].parent_span_id, starts[1].span_id, "the spawned task inherits the parent span")
    eq(starts[3].parent_span_id, starts[2].span_id)
    local gen_end = by_type(ev, "span_end", "sglang_generate")[1]
    eq(gen_end.span_id, starts[3].span_id)
    eq(gen_end.parent_span_id, nil, "span_end never carries a parent")
    eq(gen_end.attrs.finish_reason, "length")
    eq(gen_end.attrs.sglang_request_id, "r1")
    eq(gen_end.attrs.prompt_tokens, 3)
    eq(gen_end.attrs.weight_version, nil, "only slime's meta keys")
    local evt = by_type(ev, "event", "reward_done")[1]
    eq(evt.parent_span_id, starts[2].span_id)
    ok(gen_end.ts >= starts[3].ts + 0.005)
    -- The other sample has its own trace with the same group span.
    local other = group[2].trace.events
    eq(other[1].name, "generate_and_rm_group")
    ok(other[1].trace_id ~= ev[1].trace_id)
    eq(other[1].ts, ev[1].ts, "one timestamp for all targets")
    -- Outside the span, the stack is empty again.
    trace.event(s, "after")
    eq(by_type(s.trace.events, "event", "after")[1].parent_span_id, nil)
  end)

  it("ends a failing span with error attrs and re-raises", function()
    local s = sample.new { index = 1 }
    raises(function() trace.span(s, "reward_model", nil, function() error("bad reward") end) end, "bad reward")
    local e = by_type(s.trace.events, "span_end", "reward_model")[1]
    eq(e.attrs.error_type, "LuaError")
    ok(e.attrs.error_message:find("bad reward"))
    trace.event(s, "later")
    eq(by_type(s.trace.events, "event", "later")[1].parent_span_id, nil, "stack restored after an error")
  end)

  it("counts attempts, exports and imports", function()
    local s = sample.new { index = 3 }
    trace.next_attempt(s, { reason = "partial rollout" })
    eq(s.trace.attempt, 1)
    local a = by_type(s.trace.events, "event", "attempt_start")[1]
    eq(a.attrs, { attempt = 1, reason = "partial rollout" })
    eq(a.attempt, 1)
    local payload
    trace.span(s, "outer", nil, function() payload = trace.export(trace.bind(s)) end)
    local remote = {}
    local h = trace.import(payload, remote)
    trace.span(h, "remote_work", nil, function() end)
    eq(remote.trace_id, s.trace.trace_id)
    eq(remote.events[1].parent_span_id, payload.parent_span_id)
    ok(payload.parent_span_id ~= nil)
  end)

  it("materialises PD phases as child spans relative to the span start", function()
    local s = sample.new { index = 0 }
    trace.span(s, "sglang_generate", nil, function(sp)
      sp:update(trace.sglang_meta_attrs { pd_prefill_forward_duration = 0.2, pd_prefill_bootstrap_duration = 0.1,
        pd_decode_forward_duration = 0.5, pd_transfer_total_mb = 12 })
    end)
    local ev = s.trace.events
    local names = {}
    local short = { span_start = "s", span_end = "e", event = "t" }
    for _, e in ipairs(ev) do names[#names + 1] = short[e.type] .. ":" .. e.name end
    eq(names, { "s:sglang_generate", "s:sglang_pd_prefill", "s:sglang_pd_prefill_bootstrap",
      "e:sglang_pd_prefill_bootstrap", "s:sglang_pd_prefill_forward", "e:sglang_pd_prefill_forward",
      "e:sglang_pd_prefill", "s:sglang_pd_decode", "s:sglang_pd_decode_forward", "e:sglang_pd_decode_forward",
      "e:sglang_pd_decode", "t:sglang_pd_summary", "e:sglang_generate" })
    local t0 = ev[1].ts
    near(ev[5].ts - t0, 0.1, 1e-6)   -- forward starts after bootstrap (epoch seconds: ~2e-7 resolution)
    near(ev[9].ts - t0, 0.3, 1e-6)   -- decode after the whole prefill
    eq(ev[7].attrs, { phase = "prefill", duration_s = 0.30000000000000004 })
    eq(ev[12].attrs, { pd_transfer_total_mb = 12 })
    eq(ev[2].parent_span_id, ev[1].span_id)
    eq(ev[13].attrs, { pd_prefill_forward_duration = 0.2, pd_prefill_bootstrap_duration = 0.1,
      pd_decode_forward_duration = 0.5, pd_transfer_total_mb = 12 }, "and flat pd_* end attrs (viewer lanes, perf/*)")
  end)

  it("never breaks the caller on bad targets", function()
    eq(trace.span(42, "x", nil, function() return "ran" end), "ran")
    trace.event(nil, "nothing")
    eq(trace.span({}, "empty", nil, function(sp) return sp.closed end), false)
  end)
end)

-- Events wait outside Lua tables until read (lua/rl/_trace_store.lua); every
-- reader must see what the records always were.
describe("rl.trace deferred events", function()
  local store = require "rl._trace_store"

  it("gives unique 32-hex ids across a million spans and across counter epochs", function()
    local seen, n = {}, 0
    for _ = 1, 1000000 do
      local id = trace.new_id()
      if seen[id] then break end
      seen[id] = true
      n = n + 1
    end
    eq(n, 1000000)
    seen = nil
    local last, first = store.id_of(4294967295), store.id_of(4294967296)
    ok(last:match("^ffffffff%x+ffffffff$") and #last == 32)
    ok(first:match("^00000000%x+00000000$") and #first == 32)
    ok(last:sub(9, 24) ~= first:sub(9, 24), "a new random part after 2^32 serials")
    eq(store.id_of(4294967296), first, "an id's text never changes")
    -- Span ids inside real records: distinct and distinct from the trace id.
    local s = sample.new { index = 0 }
    for _ = 1, 20000 do trace.start(s, "x"):finish() end
    local ids = { [s.trace.trace_id] = true }
    for i = 1, #s.trace.events, 2 do
      local e = s.trace.events[i]
      ok(#e.span_id == 32 and not ids[e.span_id])
      ids[e.span_id] = true
      eq(s.trace.events[i + 1].span_id, e.span_id)
    end
  end)

  it("stamps wall-clock seconds that never go back within a sample", function()
    local s = sample.new { index = 0 }
    local t0 = os.time()
    for i = 1, 2000 do trace.span(s, "s", nil, function() trace.event(s, "e" .. i % 3) end) end
    local ev = s.trace.events
    eq(#ev, 6000)
    ok(math.abs(ev[1].ts - t0) < 600, "epoch seconds, like time.time()")  -- the clock's kind, not a speed
    ok(ev[1].ts ~= math.floor(ev[1].ts) or ev[2].ts ~= math.floor(ev[2].ts), "sub-second resolution")
    for i = 2, #ev do ok(ev[i].ts >= ev[i - 1].ts, "ts in emission order") end
  end)

  it("shows the records to every reader: .events, json, to_dict, clone, inspect, flush", function()
    local s = sample.new { index = 7, group_index = 3 }
    trace.span(s, "a", { k = 1 }, function(sp) sp:set("r", 0.5) end)
    local c = s.trace
    eq(rawget(c, "events"), nil, "deferred until read")
    local d = rl.json.decode(rl.json.encode(s:to_dict()))
    eq(#d.trace.events, 2)
    eq(d.trace.events[1], { type = "span_start", name = "a", ts = c.events[1].ts, trace_id = c.trace_id,
                            sample_id = 7, group_id = 3, attempt = 0, span_id = c.events[1].span_id, attrs = { k = 1 } })
    eq(d.trace.events[2].attrs, { r = 0.5 })
    local held = c.events
    trace.event(s, "later")
    ok(s:clone().trace.events[3].name == "later")
    trace.event(s, "again")
    ok(rl.inspect(c, { depth = 5, max_items = 1000 }):find('"again"'))
    trace.event(s, "raw")
    trace.flush(c)
    local keys = {}
    for k in pairs(c) do keys[k] = true end
    ok(keys.events, "pairs sees events after flush")
    eq(c.events, held, "one events table throughout")
    eq(#held, 5)
    eq(rl.json.decode(rl.json.encode(c)).events[5].name, "raw")
    -- The dump writer (C++, reads tables raw) and rl.dump.save see them too.
    local s2 = sample.new { index = 8 }
    trace.span(s2, "dumped", nil, function() end)
    local back = rl.dump.decode(rl.dump.encode({ rollout_id = 0, samples = { s2 } }))
    eq(#back.samples[1].trace.events, 2)
    eq(back.samples[1].trace.events[2].name, "dumped")
    trace.event(s2, "saved")
    local dir = os.tmpname()
    os.remove(dir)
    local path = assert(rl.dump.save(dir .. "/{rollout_id}.pt", 3, { s2 }))
    eq(rl.dump.load(path).samples[1].trace.events[3].name, "saved")
    os.remove(path)
    os.remove(dir)
    -- Events a reader adds by hand keep their place.
    held[#held + 1] = { type = "event", name = "by hand" }
    trace.event(s, "after hand")
    eq(c.events[6].name, "by hand")
    eq(c.events[7].name, "after hand")
  end)

  it("records ended spans' end attrs set later, keeping error attrs", function()
    local s = sample.new { index = 1 }
    local sp = trace.start(s, "plain")
    sp:finish()
    sp:set("late", 1)
    local sp2
    pcall(trace.span, s, "failing", nil, function(x) sp2 = x; x:set("early", 1); error("no") end)
    sp2:set("late", 2)
    local ends = by_type(s.trace.events, "span_end")
    eq(ends[1].attrs, { late = 1 })
    eq(ends[2].attrs.late, 2)
    eq(ends[2].attrs.early, 1)
    eq(ends[2].attrs.error_type, "LuaError")
    ok(ends[2].attrs.error_message:find("no"))
    ok(sp.closed and sp.name == "plain")
  end)

  it("names error types and survives errors whose tostring fails", function()
    local s = sample.new { index = 1 }
    local bad = setmetatable({}, { __tostring = function() error("tostring broke") end })
    raises(function() trace.span(s, "t", nil, function() error({ code = 1 }) end) end)
    ok(not pcall(trace.span, s, "b", nil, function() error(bad) end))
    local c = rl.spawn(function() trace.span(s, "c", nil, function() rl.sleep(10) end) end)
    rl.sleep(0.01)
    c:cancel("stop")
    pcall(c.wait, c)
    local ends = by_type(s.trace.events, "span_end")
    eq(ends[1].attrs.error_type, "table")
    eq(ends[2].attrs.error_type, "table")
    eq(ends[2].attrs.error_message, "<table>")
    eq(ends[3].name, "c")
    eq(ends[3].attrs.error_type, "Cancelled")
    trace.event(s, "next")
    eq(by_type(s.trace.events, "event", "next")[1].parent_span_id, nil, "stack restored")
  end)

  it("keeps a spawned task's parent when the parent's span ends first (contextvars)", function()
    local s = sample.new { index = 0 }
    local child
    trace.span(s, "parent", nil, function()
      child = rl.spawn(function()
        rl.sleep(0.02)
        trace.span(s, "child", nil, function() end)
      end)
    end)
    trace.span(s, "sibling", nil, function() rl.wait_all { child } end)
    local starts = by_type(s.trace.events, "span_start")
    eq(starts[1].name, "parent")
    eq(starts[2].name, "sibling")
    eq(starts[2].parent_span_id, nil)
    eq(starts[3].name, "child")
    eq(starts[3].parent_span_id, starts[1].span_id)
  end)

  it("finishes a span from another task and restores the opening task's stack", function()
    local s = sample.new { index = 0 }
    local sp = trace.start(s, "handed over")
    rl.wait_all { rl.spawn(function() sp:set("by", "child"); sp:finish() end) }
    trace.event(s, "after")
    local ev = s.trace.events
    eq(ev[2].type, "span_end")
    eq(ev[2].attrs, { by = "child" })
    eq(ev[3].parent_span_id, nil)
  end)

  it("traces carriers that carry a metatable of their own, and lists of samples", function()
    local s = sample.new { index = 0 }
    s.trace = setmetatable({ version = 1, trace_id = ("ab"):rep(16), events = {}, attempt = 0 }, { __name = "mine" })
    trace.span(s, "own", nil, function(sp) sp:set("x", 1) end)
    eq(rawget(s.trace, "events")[2].attrs, { x = 1 }, "written at once")
    local group = { sample.new { index = 1 }, sample.new { index = 2 } }
    trace.span(group, "g", nil, function(sp)
      trace.span(group[2], "inner", nil, function() end)
      sp:set("n", 2)
    end)
    local e2 = group[2].trace.events
    eq(e2[2].parent_span_id, e2[1].span_id)
    eq(e2[4].attrs, { n = 2 })
    eq(group[1].trace.events[2].attrs, { n = 2 })
  end)

  it("can be turned off", function()
    local s = sample.new { index = 0 }
    eq(trace.enabled(), true)
    eq(trace.enabled(false), false)
    local r = { trace.span(s, "off", nil, function(sp) sp:set("a", 1); sp:update({ b = 2 }); return 1, 2 end) }
    trace.event(s, "off")
    trace.next_attempt(s)
    raises(function() trace.span(s, "off", nil, function() error("still raised") end) end, "still raised")
    eq(trace.enabled(true), true)
    eq(r, { 1, 2 })
    eq(s.trace, nil, "nothing recorded")
    trace.event(s, "on")
    eq(#s.trace.events, 1)
  end)
end)

describe("rl.trace.fn", function()
  local sample = rl.sample
  local function names(s)
    local out = {}
    for _, ev in ipairs(s.trace.events) do out[#out + 1] = ev.type .. ":" .. ev.name end
    return table.concat(out, " ")
  end
  it("traces by argument index, parameter name, getter, or the enclosing span", function()
    local score = rl.trace.fn("score", { target = "smp", attrs = function(_, k) return { k = k } end },
      function(smp, k) return smp.index * k end)
    local s = sample.new { index = 3, group_index = 0 }
    eq(score(s, 2), 6)
    eq(names(s), "span_start:score span_end:score")
    eq(s.trace.events[1].attrs, { k = 2 })
    local by_index = rl.trace.fn("second", { target = 2 }, function(_, smp) return smp.index end)
    eq(by_index("x", s), 3)
    local by_getter = rl.trace.fn("got", { target = function(t) return t.s end }, function(t) return t.s.index end)
    eq(by_getter { s = s }, 3)
    local inner = rl.trace.fn("inner", function() error("bad") end)
    local ok_, err = pcall(rl.trace.span, s, "outer", nil, function() inner() end)
    eq(ok_, false)
    ok(tostring(err):find("bad"), err)
    local ev = s.trace.events
    eq(ev[#ev - 1].name, "inner")
    eq(ev[#ev - 1].attrs.error_message:find("bad") ~= nil, true)
    eq(ev[#ev - 2].parent_span_id, ev[#ev - 3].span_id)
    raises(function() rl.trace.fn("x", { target = "nope" }, function(a) end) end, "no parameter named 'nope'")
    eq(rl.trace.fn("free", function(a) return a + 1 end)(1), 2)  -- outside spans: untraced, still runs
  end)
end)
