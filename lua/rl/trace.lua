--- rl.trace: per-sample traces in slime's carrier format (slime/observability/trace_utils.py).
--
--   local h = rl.trace.bind(sample)                      -- sample.trace = the carrier
--   rl.trace.span(sample, "generate_and_rm", nil, function(span)
--     ...                                                -- nested spans nest (per task)
--     span:set("reward", r)                              -- an end attr
--   end)
--   rl.trace.event(sample, "attempt_start", { attempt = 1 })
--
-- A carrier is `{version = 1, trace_id, events = {...}, sample_id, group_id, attempt}`;
-- events are `{type = "span_start"|"span_end"|"event", name, ts, trace_id, sample_id,
-- group_id, attempt, span_id?, parent_span_id?, attrs?}` appended in emission order. A
-- span is a span_start and a span_end with the same span_id. The span stack is
-- task-local and a spawned task inherits its parent's (as asyncio tasks copy
-- contextvars), so nesting follows the code. A target is a sample, a handle, or a
-- list of them (one span per element, same timestamps). Tracing never breaks the
-- rollout: bookkeeping errors are logged at debug level and swallowed; errors of
-- the traced function itself propagate (after the span ends with error attrs).
local json = require "rl.json"
local task = require "rl.task"

local M = { VERSION = 1, CHILDREN_KEY = "_trace_children" }

M.SGLANG_META_KEYS = { "prompt_tokens", "completion_tokens", "cached_tokens", "queue_time", "e2e_latency",
                       "decode_throughput" }
M.PD_PREFILL_SEGMENTS = {
  { "pd_prefill_bootstrap_queue_duration", "sglang_pd_prefill_bootstrap_queue" },
  { "pd_prefill_bootstrap_duration", "sglang_pd_prefill_bootstrap" },
  { "pd_prefill_alloc_wait_duration", "sglang_pd_prefill_alloc_wait" },
  { "pd_prefill_forward_duration", "sglang_pd_prefill_forward" },
  { "pd_prefill_transfer_queue_duration", "sglang_pd_prefill_transfer_queue" },
}
M.PD_DECODE_SEGMENTS = {
  { "pd_decode_prealloc_duration", "sglang_pd_decode_prealloc" },
  { "pd_decode_bootstrap_duration", "sglang_pd_decode_bootstrap" },
  { "pd_decode_alloc_wait_duration", "sglang_pd_decode_alloc_wait" },
  { "pd_decode_transfer_duration", "sglang_pd_decode_transfer" },
  { "pd_decode_forward_duration", "sglang_pd_decode_forward" },
}
M.PD_SUMMARY_KEYS = { "pd_transfer_speed_gb_s", "pd_transfer_total_mb", "pd_prefill_retry_count" }

local now = require("rl._core").loop.time  -- wall clock, as Python's time.time()

-- Ids: 32 hex chars like uuid4().hex — a 32-bit counter, a random per-process
-- part (16 hex chars; renewed after 2^32 ids), and the counter again. The
-- counter sits at both ends because LuaJIT hashes a long string by a few of its
-- bytes (start, quarter, middle, end): ids differing only inside would collide.
local tohex = require("bit").tohex
local id_prefix, id_counter
local function new_prefix()
  local f = io.open("/dev/urandom", "rb")
  local bytes = f and f:read(8) or (tostring(os.time()) .. tostring({}) .. tostring(os.clock()))
  if f then f:close() end
  local hex = bytes:gsub(".", function(c) return ("%02x"):format(c:byte()) end)
  id_prefix = (hex .. ("0"):rep(16)):sub(1, 16)
  id_counter = 0
end
new_prefix()
local function new_id()
  id_counter = id_counter + 1
  if id_counter >= 4294967295 then new_prefix() end
  local c = tohex(id_counter, 8)
  return c .. id_prefix .. c
end
M._new_id = new_id

local function swallow(where, err)
  require("rl.log").debug("trace " .. where .. " skipped: " .. tostring(err))
end

-- ---- carriers and handles ----------------------------------------------------------------

local Handle = {}
Handle.__index = Handle
M.Handle = Handle

local function ensure_carrier(c, sample_id, group_id)
  c = type(c) == "table" and c or {}
  if c.version == nil then c.version = M.VERSION end
  if c.trace_id == nil then c.trace_id = new_id() end
  if c.events == nil then c.events = json.array() end
  if sample_id ~= nil then c.sample_id = sample_id end
  if group_id ~= nil then c.group_id = group_id end
  c.attempt = tonumber(c.attempt) or 0
  return c
end

local function new_handle(carrier, parent_span_id)
  return setmetatable({ trace_id = carrier.trace_id, carrier = carrier, sample_id = carrier.sample_id,
                        group_id = carrier.group_id, parent_span_id = parent_span_id }, Handle)
end

-- sample -> its handle, while the sample's carrier and ids stay the same.
local handle_cache = setmetatable({}, { __mode = "k" })

--- Binds (creating if needed) the sample's carrier, `sample.trace`; returns a handle.
function M.bind(sample)
  if type(sample) ~= "table" then error("rl.trace.bind: bad argument #1 'sample' (table expected)", 2) end
  local h = handle_cache[sample]
  local tr = sample.trace
  if h and h.carrier == tr and h.sample_id == sample.index and h.group_id == sample.group_index then return h end
  if tr == json.null then tr = nil end
  sample.trace = ensure_carrier(tr, sample.index, sample.group_index)
  h = new_handle(sample.trace)
  handle_cache[sample] = h
  return h
end

--- A handle over any carrier table (cross-process propagation).
function M.bind_carrier(carrier, opts)
  opts = opts or {}
  local c = ensure_carrier(carrier, opts.sample_id, opts.group_id)
  if opts.trace_id then c.trace_id = opts.trace_id end
  if opts.attempt then c.attempt = opts.attempt end
  return new_handle(c, opts.parent_span_id)
end

-- ---- the task-local span stack -------------------------------------------------------------

-- context.trace_stack is an immutable linked list {trace_id, span_id, handles, next}.
local function stack() return task.context().trace_stack end

local function innermost_span(trace_id, st)
  while st do
    if st.trace_id == trace_id then return st.span_id end
    st = st.next
  end
end

--- Export for another process: {version, trace_id, sample_id, group_id, attempt, parent_span_id}.
function M.export(h)
  return { version = M.VERSION, trace_id = h.trace_id, sample_id = h.sample_id, group_id = h.group_id,
           attempt = h.carrier.attempt, parent_span_id = h.parent_span_id or innermost_span(h.trace_id, stack()) }
end

--- Import a payload from export(): a handle whose spans continue the remote trace.
function M.import(payload, carrier)
  return M.bind_carrier(carrier or {}, { trace_id = payload.trace_id, sample_id = payload.sample_id,
    group_id = payload.group_id, attempt = payload.attempt, parent_span_id = payload.parent_span_id })
end

-- Target -> list of handles (empty: untraced).
local function handles_of(target, out)
  out = out or {}
  if type(target) ~= "table" then return out end
  local mt = getmetatable(target)
  if mt == Handle then
    out[#out + 1] = target
  elseif target[1] ~= nil and type(target[1]) == "table" then
    for _, t in ipairs(target) do handles_of(t, out) end
  elseif target.index ~= nil or target.group_index ~= nil or target.trace ~= nil or target.prompt ~= nil then
    out[#out + 1] = M.bind(target)
  end
  return out
end

-- attrs tables are stored as given (not copied): callers pass fresh tables.
local function append(h, kind, name, ts, attrs, span_id, parent)
  local c = h.carrier
  local ev = { type = kind, name = name, ts = ts, trace_id = h.trace_id, sample_id = h.sample_id,
               group_id = h.group_id, attempt = c.attempt, span_id = span_id, parent_span_id = parent,
               attrs = attrs and next(attrs) ~= nil and attrs or nil }
  local events = c.events
  events[#events + 1] = ev
  return ev
end

-- ---- spans -----------------------------------------------------------------------------

local Span = {}
Span.__index = Span
M.Span = Span

local function append_children(records, children, parent_ts)
  for _, child in ipairs(children) do
    local start = parent_ts + (tonumber(child.start_offset) or 0)
    if child.type == "event" then
      for _, r in ipairs(records) do append(r.handle, "event", child.name, start, child.attrs, nil, r.span_id) end
    elseif child.type == "span" then
      local stop = parent_ts + (tonumber(child.end_offset) or 0)
      if stop >= start then
        local kids = {}
        for _, r in ipairs(records) do
          local id = new_id()
          append(r.handle, "span_start", child.name, start, nil, id, r.span_id)
          kids[#kids + 1] = { handle = r.handle, span_id = id }
        end
        if type(child.children) == "table" then append_children(kids, child.children, start) end
        for _, k in ipairs(kids) do append(k.handle, "span_end", child.name, stop, child.attrs, k.span_id) end
      end
    end
  end
end

--- Sets an end attr (also on end events already written).
function Span:set(key, value)
  local ea = self.end_attrs
  if not ea then ea = {}; self.end_attrs = ea end
  ea[key] = value
  if self.end_event then self.end_event.attrs = ea end
  if self.end_events then
    for _, ev in ipairs(self.end_events) do ev.attrs = ea end
  end
end

--- Merges attrs into the end attrs; the `_trace_children` key becomes child spans
--- and events laid out relative to this span's start (SGLang PD phases).
function Span:update(attrs)
  local ok, err = pcall(function()
    local children
    for k, v in pairs(attrs) do
      if k == M.CHILDREN_KEY then children = v else self:set(k, v) end
    end
    if children then
      local recs = self.h1 and { { handle = self.h1, span_id = self.id1 } } or self.records or {}
      append_children(recs, children, self.start_ts)
    end
  end)
  if not ok then swallow("update", err) end
end

local function start_impl(sp, target, name, attrs)
  local ctx = task.context()
  local st = ctx.trace_stack
  local ts = now()
  sp.start_ts, sp.saved_stack, sp.ctx = ts, st, ctx
  -- One sample (the common case) without building a handle list.
  local h = getmetatable(target) == Handle and target or nil
  if not h and type(target) == "table" and target[1] == nil then
    if target.index ~= nil or target.group_index ~= nil or target.trace ~= nil or target.prompt ~= nil then
      h = M.bind(target)
    end
  end
  if h then
    local id = new_id()
    append(h, "span_start", name, ts, attrs, id, h.parent_span_id or innermost_span(h.trace_id, st))
    sp.h1, sp.id1 = h, id
    ctx.trace_stack = { trace_id = h.trace_id, span_id = id, next = st }
    return
  end
  local top = st
  for _, hh in ipairs(handles_of(target)) do
    local id = new_id()
    append(hh, "span_start", name, ts, attrs, id, hh.parent_span_id or innermost_span(hh.trace_id, st))
    sp.records = sp.records or {}
    sp.records[#sp.records + 1] = { handle = hh, span_id = id }
    top = { trace_id = hh.trace_id, span_id = id, next = top }
  end
  ctx.trace_stack = top
end

--- Starts a span on target (handles of it); returns the span (finish it with
--- span:finish(err?)). Prefer rl.trace.span, which finishes it for you.
function M.start(target, name, attrs)
  local sp = setmetatable({ name = name, closed = false }, Span)
  local ok, err = pcall(start_impl, sp, target, name, attrs)
  if not ok then swallow(name, err) end
  return sp
end

local function finish_impl(self, err)
  if not self.ctx then return end
  local attrs = self.end_attrs
  if err ~= nil then
    local a = {}
    if attrs then for k, v in pairs(attrs) do a[k] = v end end
    a.error_type = type(err) == "table" and (getmetatable(err) and "Cancelled" or "table") or "LuaError"
    a.error_message = tostring(err)
    attrs = a
  end
  local ts = now()
  if self.h1 then self.end_event = append(self.h1, "span_end", self.name, ts, attrs, self.id1) end
  if self.records then
    local ends = {}
    for _, r in ipairs(self.records) do ends[#ends + 1] = append(r.handle, "span_end", self.name, ts, attrs, r.span_id) end
    self.end_events = ends
  end
  self.ctx.trace_stack = self.saved_stack
end

--- Ends the span (error attrs when err is given). Idempotent.
function Span:finish(err)
  if self.closed then return end
  self.closed = true
  local ok, e = pcall(finish_impl, self, err)
  if not ok then swallow(self.name, e) end
end

--- Runs fn(span, ...) inside a span on target and returns fn's results; an error
--- ends the span with error_type / error_message and is re-raised.
local function settle(sp, ok, ...)
  if ok then
    sp:finish()
    return ...
  end
  local err = ...
  sp:finish(err)
  error(err, 0)
end

--- Runs fn(span, ...) inside a span on target and returns fn's results; an error
--- ends the span with error_type / error_message and is re-raised.
function M.span(target, name, attrs, fn, ...)
  local sp = M.start(target, name, attrs)
  return settle(sp, pcall(fn, sp, ...))
end

--- An instant event on target (parent: the handle's, else the innermost open span).
function M.event(target, name, attrs)
  local ok, err = pcall(function()
    local ts = now()
    local st = stack()
    for _, h in ipairs(handles_of(target)) do
      append(h, "event", name, ts, attrs, nil, h.parent_span_id or innermost_span(h.trace_id, st))
    end
  end)
  if not ok then swallow(name, err) end
end

--- Next attempt (a retry or a partial-rollout resume): attempt += 1, then an
--- "attempt_start" event; later events carry the new attempt.
function M.next_attempt(target, attrs)
  local ok, err = pcall(function()
    for _, h in ipairs(handles_of(target)) do
      h.carrier.attempt = (tonumber(h.carrier.attempt) or 0) + 1
      local a = { attempt = h.carrier.attempt }
      for k, v in pairs(attrs or {}) do a[k] = v end
      M.event(h, "attempt_start", a)
    end
  end)
  if not ok then swallow("attempt_start", err) end
  return target
end

--- Trace attrs from an SGLang (or rlhost engine) meta_info: the keys of
--- SGLANG_META_KEYS, finish_reason's type, sglang_request_id, and PD phases as
--- `_trace_children` (prefill segments end to end, then decode, then a summary event)
--- and also as flat pd_* attrs.
function M.sglang_meta_attrs(meta)
  local attrs = {}
  if type(meta) ~= "table" then return attrs end
  local function present(v) return v ~= nil and v ~= json.null end
  for _, k in ipairs(M.SGLANG_META_KEYS) do
    if present(meta[k]) then attrs[k] = meta[k] end
  end
  local fr = meta.finish_reason
  if type(fr) == "table" and fr ~= json.null and fr.type ~= nil then
    attrs.finish_reason = fr.type
  elseif present(fr) then
    attrs.finish_reason = fr
  end
  if present(meta.id) then attrs.sglang_request_id = meta.id end
  local children, cursor = {}, 0
  for _, phase in ipairs { { "sglang_pd_prefill", "prefill", M.PD_PREFILL_SEGMENTS },
                           { "sglang_pd_decode", "decode", M.PD_DECODE_SEGMENTS } } do
    local pc, kids = 0, {}
    for _, seg in ipairs(phase[3]) do
      local d = tonumber(meta[seg[1]])
      if d and d > 0 then
        kids[#kids + 1] = { type = "span", name = seg[2], start_offset = pc, end_offset = pc + d,
                            attrs = { [seg[1]] = meta[seg[1]] } }
        pc = pc + d
      end
    end
    if #kids > 0 then
      children[#children + 1] = { type = "span", name = phase[1], start_offset = cursor, end_offset = cursor + pc,
                                  attrs = { phase = phase[2], duration_s = pc }, children = kids }
      cursor = cursor + pc
    end
  end
  local summary = {}
  for _, k in ipairs(M.PD_SUMMARY_KEYS) do
    if present(meta[k]) then summary[k] = meta[k] end
  end
  if next(summary) then
    children[#children + 1] = { type = "event", name = "sglang_pd_summary", start_offset = cursor, attrs = summary }
  end
  if #children > 0 then attrs[M.CHILDREN_KEY] = children end
  -- The same PD timings flat on the span too: slime's viewer draws its [P]/[D]
  -- lanes and its perf/prefill/*, perf/decode/* metrics from flat pd_* end attrs,
  -- which its child-span version (#2118) stopped writing.
  for _, list in ipairs { M.PD_PREFILL_SEGMENTS, M.PD_DECODE_SEGMENTS } do
    for _, seg in ipairs(list) do
      if present(meta[seg[1]]) then attrs[seg[1]] = meta[seg[1]] end
    end
  end
  for k, v in pairs(summary) do attrs[k] = v end
  return attrs
end

return M
