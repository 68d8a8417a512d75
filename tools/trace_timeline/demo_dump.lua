-- Writes a synthetic debug rollout dump whose traces look like an rlhost rollout
-- (generate_and_rm_group ⊃ generate_and_rm ⊃ sglang_generate ⊃ {router, engine_queue,
-- engine_prefill, engine_decode}, reward_model, a few instant events, retries), for
-- trying the viewer, its tests and bench/trace_timeline.sh:
--
--   rlhost tools/trace_timeline/demo_dump.lua OUT.pt [--samples 64] [--pd] [--seed 1]
--
-- --pd adds PD-disaggregation timings as rlhost writes them: flat pd_* end attrs on
-- sglang_generate plus sglang_pd_prefill / sglang_pd_decode child spans and a
-- sglang_pd_summary event. A few samples keep an open span, an unmatched end, or a
-- second attempt. Deterministic for a seed.
local opt = rl.args {
  description = "Synthetic rollout dump with rlhost-shaped traces (for the trace timeline viewer).",
  { name = "out", positional = true, required = true, metavar = "OUT.pt" },
  { name = "samples", type = "int", default = 64 },
  { name = "group_size", type = "int", default = 4 },
  { name = "pd", type = "bool", default = false, help = "add PD (prefill/decode disaggregation) timings" },
  { name = "seed", type = "int", default = 1 },
  { name = "start", type = "number", default = 1767225600, help = "epoch seconds of the first span" },
}
local json = rl.json

local state = opt.seed
local function rand()  -- a small LCG: deterministic and fast
  state = (state * 1103515245 + 12345) % 2147483648
  return state / 2147483648
end
local id_n = 0
local function new_id()
  id_n = id_n + 1
  return ("%08x%024x"):format(opt.seed, id_n)
end

local PREFILL = { "pd_prefill_bootstrap_queue_duration", "pd_prefill_bootstrap_duration", "pd_prefill_alloc_wait_duration",
                  "pd_prefill_forward_duration", "pd_prefill_transfer_queue_duration" }
local DECODE = { "pd_decode_prealloc_duration", "pd_decode_bootstrap_duration", "pd_decode_alloc_wait_duration",
                 "pd_decode_transfer_duration", "pd_decode_forward_duration" }

local function carrier_for(s)
  return { version = 1, trace_id = new_id(), events = json.array(), sample_id = s.index, group_id = s.group_index, attempt = 0 }
end
local function push(c, ev)
  ev.trace_id, ev.sample_id, ev.group_id = c.trace_id, c.sample_id, c.group_id
  ev.attempt = ev.attempt or c.attempt
  c.events[#c.events + 1] = ev
end
local function span(c, name, t0, t1, parent, start_attrs, end_attrs, keep_open)
  local id = new_id()
  push(c, { type = "span_start", name = name, ts = t0, span_id = id, parent_span_id = parent, attrs = start_attrs })
  if not keep_open then push(c, { type = "span_end", name = name, ts = t1, span_id = id, attrs = end_attrs }) end
  return id
end

local samples = json.array()
local t_group = opt.start
local n_groups = math.ceil(opt.samples / opt.group_size)
for g = 0, n_groups - 1 do
  t_group = t_group + rand() * 0.4
  for k = 0, opt.group_size - 1 do
    local i = g * opt.group_size + k
    if i >= opt.samples then break end
    local s = { index = i, group_index = g, prompt = "question " .. i, label = tostring(i % 97), status = "completed",
                response_length = 0, metadata = { source = i % 3 == 0 and "gsm8k" or "math" } }
    local c = carrier_for(s)
    local t = t_group + rand() * 0.05
    local queue, prefill = 0.002 + rand() * 0.05, 0.01 + rand() * 0.04
    local tokens = 32 + math.floor(rand() * 480)
    local decode = tokens * (0.008 + rand() * 0.004)
    local router = 0.0005 + rand() * 0.002
    local gen_end = t + router + queue + prefill + decode
    local reward_end = gen_end + 0.001 + rand() * 0.02
    local group_id = span(c, "generate_and_rm_group", t, reward_end + 0.001, nil, { group_size = opt.group_size },
                          nil, true)
    local retry = i % 23 == 7
    if retry then c.attempt = 1 end
    local rm_id = new_id()
    push(c, { type = "span_start", name = "generate_and_rm", ts = t, span_id = rm_id, parent_span_id = group_id })
    push(c, { type = "event", name = "request_enqueue", ts = t + 0.0001, parent_span_id = rm_id, attrs = { session = i } })
    if retry then
      push(c, { type = "event", name = "attempt_start", ts = t + 0.0002, parent_span_id = rm_id, attrs = { attempt = 1 } })
    end
    local meta = { prompt_tokens = 64 + i % 50, completion_tokens = tokens, cached_tokens = (i % 4) * 16,
                   queue_time = queue, e2e_latency = queue + prefill + decode, decode_throughput = tokens / decode,
                   finish_reason = { type = i % 9 == 0 and "length" or "stop" }, id = new_id(),
                   prefill_time = prefill, decode_time = decode }
    if opt.pd then
      local p, d = prefill / 5, decode / 5
      for _, key in ipairs(PREFILL) do meta[key] = p * (key:find("forward") and 3 or 0.5) end
      for _, key in ipairs(DECODE) do meta[key] = d * (key:find("forward") and 4 or 0.25) end
      meta.pd_transfer_speed_gb_s, meta.pd_transfer_total_mb, meta.pd_prefill_retry_count = 12.5 + rand(), 3.2 + rand(), 0
    end
    local attrs = rl.rollout.generate_trace_attrs(meta, { elapsed = router + meta.e2e_latency, worker = "http://127.0.0.1:3000" })
    local children = attrs._trace_children or {}
    attrs._trace_children = nil
    attrs.response_length = tokens
    local gen_id = new_id()
    push(c, { type = "span_start", name = "sglang_generate", ts = t, span_id = gen_id, parent_span_id = rm_id,
              attrs = { max_new_tokens = 512 } })
    -- _trace_children placed relative to the span's start, as rl.trace's span:update does
    local function place(kids, parent, base)
      for _, ch in ipairs(kids) do
        if ch.type == "event" then
          push(c, { type = "event", name = ch.name, ts = base + ch.start_offset, parent_span_id = parent, attrs = ch.attrs })
        else
          local id = new_id()
          push(c, { type = "span_start", name = ch.name, ts = base + ch.start_offset, span_id = id, parent_span_id = parent })
          if ch.children then place(ch.children, id, base + ch.start_offset) end
          push(c, { type = "span_end", name = ch.name, ts = base + ch.end_offset, span_id = id, attrs = ch.attrs })
        end
      end
    end
    place(children, gen_id, t)
    push(c, { type = "span_end", name = "sglang_generate", ts = gen_end, span_id = gen_id, attrs = attrs })
    local reward = (i % 3 == 0) and 1.0 or 0.0
    span(c, "reward_model", gen_end, reward_end, rm_id, nil, { outcome = "ok", reward = reward })
    push(c, { type = "event", name = "sample_complete", ts = reward_end, parent_span_id = rm_id })
    if i % 31 == 5 then  -- an ongoing span at dump time
      span(c, "custom_tool_call", reward_end - 0.01, nil, rm_id, { tool = "python" }, nil, true)
    else
      push(c, { type = "span_end", name = "generate_and_rm", ts = reward_end + 0.0005, span_id = rm_id })
    end
    if i % 37 == 11 then  -- an end whose start was lost
      push(c, { type = "span_end", name = "lost_span", ts = reward_end + 0.0007, span_id = new_id() })
    end
    push(c, { type = "span_end", name = "generate_and_rm_group", ts = reward_end + 0.001, span_id = group_id })
    s.trace, s.reward, s.response_length = c, reward, tokens
    samples[#samples + 1] = s
  end
end
local path = assert(rl.dump.save(opt.out, 0, samples))
print(("wrote %s: %d samples%s"):format(path, #samples, opt.pd and " (PD)" or ""))
