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
-- Events are stored as native rows and built into those records when read
-- (lua/rl/_trace_store.lua): a span's open+close stays a few hundred ns.
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

local ffi = require "ffi"
local store = require "rl._trace_store"
local Sample = require("rl.sample").Sample
local tnew = require "table.new"
local now, new_serial, id_of, new_id, append = store.now, store.new_serial, store.id_of, store.new_id, store.append
--- A fresh trace/span id (what spans get): for ids a caller must make before its span exists.
M.new_id = new_id

local enabled = true
local context = task.context

local function swallow(where, err)
  require("rl.log").debug("trace " .. tostring(where) .. " skipped: " .. tostring(err))
end

-- ---- carriers and handles ----------------------------------------------------------------

local Handle = {}
Handle.__index = Handle
M.Handle = Handle

-- Handles by id (`_id`), for spans that are FFI structs and cannot hold a reference.
local handles = setmetatable({}, { __mode = "v" })
local handle_ids = 0

local function ensure_carrier(c, sample_id, group_id)
  c = type(c) == "table" and c or {}
  if c.version == nil then c.version = M.VERSION end
  if c.trace_id == nil then c.trace_id = new_id() end
  if not store.deferred(c) and c.events == nil then c.events = json.array() end
  if sample_id ~= nil then c.sample_id = sample_id end
  if group_id ~= nil then c.group_id = group_id end
  c.attempt = tonumber(c.attempt) or 0
  return c
end

local function new_handle(carrier, parent_span_id)
  handle_ids = handle_ids + 1
  local h = setmetatable({ trace_id = carrier.trace_id, carrier = carrier, sample_id = carrier.sample_id,
    group_id = carrier.group_id, parent_span_id = parent_span_id, _id = handle_ids }, Handle)
  handles[handle_ids] = h
  return h
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

--- Builds the event records of `carrier` (every carrier when nil) now. Reading
--- `carrier.events`, rl.json.encode, sample:to_dict() and rl.inspect do it for
--- you; code that walks a carrier with pairs/next/rawget calls this first.
M.flush = store.flush

--- Turns tracing on or off (on at start) and returns whether it is on. Off,
--- spans, events and attempts record nothing; span still runs its function.
function M.enabled(on)
  if on ~= nil then enabled = on and true or false end
  return enabled
end

-- ---- the task-local span stack -------------------------------------------------------------

-- A task's open spans, innermost last: st[3d-2] = handle, st[3d-1] = span serial,
-- st[3d] = the span's end attrs (false until set); st.n = depth. A mutable array
-- rather than a list of nodes, so that opening a span allocates nothing; a
-- spawned task gets a copy (rl.task.spawn calls __snapshot), as asyncio tasks
-- copy contextvars. Spans find their stack by id (stacks is weak).
local Stack = {}
local stacks = setmetatable({}, { __mode = "v" })
local stack_ids = 0

local function new_stack()
  stack_ids = stack_ids + 1
  local st = setmetatable({ n = 0, id = stack_ids }, Stack)
  stacks[stack_ids] = st
  return st
end

function Stack.__snapshot(st)
  local copy = new_stack()
  for i = 1, 3 * st.n do copy[i] = st[i] end
  copy.n = st.n
  return copy
end

local function stack_here()
  local ctx = context()
  local st = ctx.trace_stack
  if st == nil then
    st = new_stack()
    ctx.trace_stack = st
  end
  return st
end

local function innermost_below(st, trace_id, d)
  for i = d, 1, -1 do
    if st[3 * i - 2].trace_id == trace_id then return st[3 * i - 1] end
  end
end

-- The innermost open span of trace_id (its serial). The top is checked outside
-- the loop: a loop here would end the JIT trace of a caller's loop (LuaJIT
-- compiles no inner loop into a root trace).
local function innermost_span(st, trace_id)
  local d = st.n
  if d == 0 then return nil end
  if st[3 * d - 2].trace_id == trace_id then return st[3 * d - 1] end
  return innermost_below(st, trace_id, d - 1)
end

local function push(st, h, id)
  local d = st.n + 1
  local b = 3 * d
  st[b - 2], st[b - 1], st[b] = h, id, false
  st.n = d
  return d
end

-- Ends level d (span serial id) if it is still open: the stack goes back to
-- depth d-1. Levels above (spans opened inside, still open: ended out of
-- order) leave the stack too, but stay in place for their own finish.
local function pop(st, d, id)
  local b = 3 * d
  if st.n < d or st[b - 1] ~= id then return end
  if st.n == d then st[b - 2], st[b - 1], st[b] = false, false, false end
  st.n = d - 1
end

--- Export for another process: {version, trace_id, sample_id, group_id, attempt, parent_span_id}.
function M.export(h)
  local parent = h.parent_span_id
  if parent == nil then
    local k = innermost_span(stack_here(), h.trace_id)
    parent = k and id_of(k)
  end
  return { version = M.VERSION, trace_id = h.trace_id, sample_id = h.sample_id, group_id = h.group_id,
           attempt = h.carrier.attempt, parent_span_id = parent }
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

-- The handle of a handle, or of a sample bound before, when finding it runs no
-- unknown code (metatables) and so cannot fail; nil: take the protected path.
local function fast_handle(target)
  local mt = getmetatable(target)
  if mt == Handle then return target end
  if (mt == Sample or mt == nil) and type(target) == "table" and target[1] == nil then
    local h = handle_cache[target]
    if h and h.carrier == target.trace and h.sample_id == target.index and h.group_id == target.group_index then
      return h
    end
  end
end

-- ---- spans -----------------------------------------------------------------------------
-- Two kinds with one interface (set, update, finish, name, closed). The common
-- span, one sample or handle, is an FFI struct: a few bytes the GC neither
-- scans nor, much, counts (a table per span cost more in collections than all
-- the rest of a span). Its handle, end attrs and stack level live in the stack.
-- Spans over lists, or over carriers with a metatable of their own, are tables.

local function append_children(records, children, parent_ts)
  for _, child in ipairs(children) do
    local start = parent_ts + (tonumber(child.start_offset) or 0)
    if child.type == "event" then
      for _, r in ipairs(records) do append(r.h, "event", child.name, start, child.attrs, nil, r.span_id) end
    elseif child.type == "span" then
      local stop = parent_ts + (tonumber(child.end_offset) or 0)
      if stop >= start then
        local kids = {}
        for _, r in ipairs(records) do
          local id = new_serial()
          append(r.h, "span_start", child.name, start, nil, id, r.span_id)
          kids[#kids + 1] = { h = r.h, span_id = id }
        end
        if type(child.children) == "table" then append_children(kids, child.children, start) end
        for _, k in ipairs(kids) do append(k.h, "span_end", child.name, stop, child.attrs, k.span_id) end
      end
    end
  end
end

-- An end attr for a span already ended: onto its span_end record (built now).
local function patch_end(h, serial, key, value)
  local events, id = h.carrier.events, id_of(serial)
  for i = #events, 1, -1 do
    local ev = events[i]
    if ev.span_id == id and ev.type == "span_end" then
      local a = ev.attrs
      if not a then
        a = {}
        ev.attrs = a
      end
      a[key] = value
      return
    end
  end
end

local function error_attrs(attrs, err)
  local a = {}
  if attrs then for k, v in pairs(attrs) do a[k] = v end end
  a.error_type = task.is_cancelled(err) and "Cancelled" or type(err) == "table" and "table" or "LuaError"
  local ok, msg = pcall(tostring, err)
  a.error_message = ok and msg or ("<" .. type(err) .. ">")
  return a
end

local function update_impl(sp, attrs)
  local children
  for k, v in pairs(attrs) do
    if k == M.CHILDREN_KEY then children = v else sp:set(k, v) end
  end
  if children then
    local records, ts = sp:_records()
    if ts then append_children(records, children, ts) end
  end
end

-- Methods of both kinds.
local function update(sp, attrs)
  local ok, err = pcall(update_impl, sp, attrs)
  if not ok then swallow("update", err) end
end

-- Table spans: name, closed, end_attrs, and when traced records ({h, span_id}
-- per target), stack, base (its depth before), start_ts.
local Span = {}
Span.__index = Span
M.Span = Span
Span.update = update

function Span:_records() return self.records or {}, self.start_ts end

--- Sets an end attr (also on end events already written).
function Span:set(key, value)
  if self.closed and self.records then
    for _, r in ipairs(self.records) do
      local ok, err = pcall(patch_end, r.h, r.span_id, key, value)
      if not ok then swallow(self.name, err) end
    end
    return
  end
  local ea = self.end_attrs
  if not ea then
    ea = {}
    self.end_attrs = ea
  end
  ea[key] = value
end

local function finish_table(self, err)
  local records, st = self.records, self.stack
  if not records then return end
  local base = self.base
  if st.n > base and st[3 * base + 2] == records[1].span_id then
    if st.n == base + #records then
      for i = 3 * base + 1, 3 * st.n do st[i] = false end
    end
    st.n = base
  end
  local attrs = self.end_attrs
  if err ~= nil then attrs = error_attrs(attrs, err) end
  local ts = now()
  for _, r in ipairs(records) do append(r.h, "span_end", self.name, ts, attrs, r.span_id) end
end

--- Ends the span (error attrs when err is given). Idempotent.
function Span:finish(err)
  if self.closed then return end
  self.closed = true
  local ok, e = pcall(finish_table, self, err)
  if not ok then swallow(self.name, e) end
end

-- FFI spans. stack: the stack's id; handle: the handle's _id; name_ix: the
-- name's index in its carrier's store.
local CSpan = {}  -- methods
pcall(ffi.cdef, [[
typedef struct { double serial, start_ts, stack, handle; int32_t depth, name_ix; bool closed; } rl_trace_span;
]])
local function cspan_name(sp)
  local h = handles[sp.handle]
  return h and store.name_of(h.carrier, sp.name_ix)
end
-- nil when the module is loaded again (a metatype is set once): table spans then.
local _, SpanC = pcall(ffi.metatype, "rl_trace_span", {
  __index = function(sp, key)
    local m = CSpan[key]
    if m ~= nil then return m end
    if key == "name" then return cspan_name(sp) end
  end,
  __tostring = function(sp)
    return ("rl.trace.Span(%s, %s)"):format(tostring(cspan_name(sp)), sp.closed and "closed" or "open")
  end,
})
if type(SpanC) ~= "cdata" then SpanC = nil end
CSpan.update = update

function CSpan._records(sp)
  local h = handles[sp.handle]
  if not h then return {}, nil end
  return { { h = h, span_id = sp.serial } }, sp.start_ts
end

function CSpan.set(sp, key, value)
  local st = stacks[sp.stack]
  local b = 3 * sp.depth
  if not sp.closed and st and st[b - 1] == sp.serial then
    local ea = st[b]
    if not ea then
      ea = tnew(0, 2)  -- sized: a first insert into {} would rehash
      st[b] = ea
    end
    ea[key] = value
    return
  end
  local h = handles[sp.handle]
  if h then
    local ok, err = pcall(patch_end, h, sp.serial, key, value)
    if not ok then swallow("set", err) end
  end
end

local function finish_error(h, sp, attrs, err)
  append(h, "span_end", cspan_name(sp), now(), error_attrs(attrs, err), sp.serial, nil)
end

function CSpan.finish(sp, err)
  if sp.closed then return end
  sp.closed = true
  local st, d, id = stacks[sp.stack], sp.depth, sp.serial
  local b = 3 * d
  local h, ea
  if st and st[b - 1] == id then
    h, ea = st[b - 2], st[b]
  else
    h, ea = handles[sp.handle], false
  end
  if h then
    if err == nil then
      append(h, "span_end", store.name_of(h.carrier, sp.name_ix), now(), ea, id, nil)
    else
      local ok, e = pcall(finish_error, h, sp, ea, err)
      if not ok then swallow("finish", e) end
    end
  end
  if st then pop(st, d, id) end
end

-- The common case, one sample or handle: nothing here can fail, so no pcall.
local function start_one(h, name, attrs)
  local st = stack_here()
  local ts = now()
  local id = new_serial()
  local ix = append(h, "span_start", name, ts, attrs, id, h.parent_span_id or innermost_span(st, h.trace_id))
  local d = push(st, h, id)
  if ix and SpanC then return SpanC(id, ts, st.id, h._id, d, ix, false) end
  return setmetatable({ name = name, closed = false, end_attrs = false, records = { { h = h, span_id = id } },
                        stack = st, base = d - 1, start_ts = ts }, Span)
end

local function start_any(sp, target, name, attrs)
  local hs = handles_of(target)
  if #hs == 0 then return end
  local st = stack_here()
  local ts = now()
  local records = {}
  for i, h in ipairs(hs) do  -- parents: the stack before this span
    local id = new_serial()
    append(h, "span_start", name, ts, attrs, id, h.parent_span_id or innermost_span(st, h.trace_id))
    records[i] = { h = h, span_id = id }
  end
  sp.records, sp.stack, sp.base, sp.start_ts = records, st, st.n, ts
  for _, r in ipairs(records) do push(st, r.h, r.span_id) end
end

--- Starts a span on target (handles of it); returns the span (finish it with
--- span:finish(err?)). Prefer rl.trace.span, which finishes it for you.
function M.start(target, name, attrs)
  if enabled then
    local h = fast_handle(target)
    if h then return start_one(h, name, attrs) end
  end
  local sp = setmetatable({ name = name, closed = false, end_attrs = false }, Span)
  if enabled then
    local ok, err = pcall(start_any, sp, target, name, attrs)
    if not ok then swallow(name, err) end
  end
  return sp
end

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

--- The handle of the innermost open span of the running task (nil outside spans).
function M.current()
  local st = context().trace_stack
  if not st or st.n == 0 then return nil end
  return st[3 * st.n - 2]
end

--- Wraps f so that every call runs inside a span `name` (slime's trace_function).
--- opts.target picks what is traced: an argument index, a parameter name of f, or
--- a function(...) -> target of the call's arguments; without it, the enclosing
--- span's target. opts.attrs: a table, or a function(...) -> start attrs.
function M.fn(name, opts, f)
  if f == nil and type(opts) == "function" then f, opts = opts, nil end
  if type(name) ~= "string" then error("rl.trace.fn: bad argument #1 'name' (string expected)", 2) end
  if type(f) ~= "function" then error("rl.trace.fn: bad argument #3 'f' (function expected)", 2) end
  opts = opts or {}
  local target, attrs = opts.target, opts.attrs
  local index = type(target) == "number" and target or nil
  if type(target) == "string" then
    for i = 1, 255 do
      local pname = debug.getlocal(f, i)
      if pname == nil then break end
      if pname == target then index = i; break end
    end
    if not index then error("rl.trace.fn: f has no parameter named '" .. target .. "'", 2) end
  elseif target ~= nil and not index and type(target) ~= "function" then
    error("rl.trace.fn: opts.target must be an argument index, a parameter name or a function", 2)
  end
  local function call(_, ...) return f(...) end
  return function(...)
    if not enabled then return f(...) end
    local t
    if index then
      t = (select(index, ...))
    elseif target then
      local ok, v = pcall(target, ...)
      t = ok and v or nil
    else
      t = M.current()
    end
    local a = attrs
    if type(attrs) == "function" then
      local ok, v = pcall(attrs, ...)
      a = ok and v or nil
    end
    return M.span(t, name, a, call, ...)
  end
end

local function event_any(target, name, attrs)
  local ts = now()
  local st = stack_here()
  for _, h in ipairs(handles_of(target)) do
    append(h, "event", name, ts, attrs, nil, h.parent_span_id or innermost_span(st, h.trace_id))
  end
end

--- An instant event on target (parent: the handle's, else the innermost open span).
function M.event(target, name, attrs)
  if not enabled then return end
  local h = fast_handle(target)
  if h then
    append(h, "event", name, now(), attrs, nil, h.parent_span_id or innermost_span(stack_here(), h.trace_id))
    return
  end
  local ok, err = pcall(event_any, target, name, attrs)
  if not ok then swallow(name, err) end
end

local function next_attempt_any(target, attrs)
  for _, h in ipairs(handles_of(target)) do
    h.carrier.attempt = (tonumber(h.carrier.attempt) or 0) + 1
    local a = { attempt = h.carrier.attempt }
    for k, v in pairs(attrs or {}) do a[k] = v end
    M.event(h, "attempt_start", a)
  end
end

--- Next attempt (a retry or a partial-rollout resume): attempt += 1, then an
--- "attempt_start" event; later events carry the new attempt.
function M.next_attempt(target, attrs)
  if not enabled then return target end
  local ok, err = pcall(next_attempt_any, target, attrs)
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
