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
