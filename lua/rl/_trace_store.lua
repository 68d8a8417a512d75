--- rl._trace_store (private, for rl.trace): the clock, span ids, and the
--- deferred event store that keeps tracing off the rollout's hot path.
--
-- Building an event record as a Lua table (ten fields, a 32-char id string)
-- costs far more than the rest of a span, most of it in allocation and GC. So
-- while a carrier is being written, its events stay as fixed-size rows in
-- malloc'd memory (ids as numbers, no strings formatted) and become slime's
-- records when something reads them:
--   * `carrier.events` — while rows are pending the key is absent from the
--     carrier and its metatable's __index builds the records, then sets it;
--   * raw readers (rl.json.encode, rl.dump.save/encode, rl.sample's to_dict and
--     clone, rl.inspect) call rl.json.materialize(), which builds every pending
--     carrier's records.
-- After that the carrier is a plain table again (plus this metatable) until the
-- next append detaches its events once more. Records are appended to the same
-- events table each time, so its identity never changes.
local ffi = require "ffi"
local json = require "rl.json"
local clear = require "table.clear"
local tnew = require "table.new"

local M = {}

-- ---- clock: wall-clock seconds (Python's time.time()) ------------------------------------
-- Through the FFI: a lua_CFunction call would end the JIT trace it sits in.
M.now = require("rl._core").loop.time
do
  -- pcall: the declarations stay from a first load (cdef fails the second time),
  -- and another module may have declared clock_gettime itself.
  pcall(ffi.cdef, "typedef struct { long sec, nsec; } rl_trace_timespec;")
  pcall(ffi.cdef, "int clock_gettime(int clk, rl_trace_timespec *ts);")
  local C = ffi.C
  local ok, tsp = pcall(ffi.new, "rl_trace_timespec")
  local works = ok and select(2, pcall(function() return C.clock_gettime(0, tsp) == 0 end))
  if works == true then  -- 0: CLOCK_REALTIME
    M.now = function()
      C.clock_gettime(0, tsp)
      return tonumber(tsp.sec) + tonumber(tsp.nsec) * 1e-9
    end
  end
end

-- ---- ids ---------------------------------------------------------------------------------
-- A span id is a serial number until a record is built; its text is 32 hex
-- chars like uuid4().hex: the low 32 bits of the serial, a random 64-bit part
-- per 2^32 serials, and the low bits again. The counter sits at both ends
-- because LuaJIT hashes a long string by a few of its bytes (start, quarter,
-- middle, end): ids differing only inside would share a hash chain.
local format, floor = string.format, math.floor
local serial = 0
local prefixes = {}  -- serial // 2^32 -> 16 hex chars

local function random_prefix()
  local f = io.open("/dev/urandom", "rb")
  local bytes = f and f:read(8) or (tostring(os.time()) .. tostring({}) .. tostring(os.clock()))
  if f then f:close() end
  local hex = bytes:gsub(".", function(c) return ("%02x"):format(c:byte()) end)
  return (hex .. ("0"):rep(16)):sub(1, 16)
end

function M.new_serial()
  serial = serial + 1
  return serial
end

function M.id_of(k)
  local epoch = floor(k / 4294967296)
  local p = prefixes[epoch]
  if not p then p = random_prefix(); prefixes[epoch] = p end
  local low = k - epoch * 4294967296
  return format("%08x%s%08x", low, p, low)
end

function M.new_id() return M.id_of(M.new_serial()) end

-- Recently formatted ids by serial % 64: a span's end row follows its start
-- closely, and siblings share a parent.
local cached_serial, cached_id = {}, {}
local function id_cached(k)
  local slot = k % 64
  if cached_serial[slot] == k then return cached_id[slot] end
  local id = M.id_of(k)
  cached_serial[slot], cached_id[slot] = k, id
  return id
end

-- ---- the store -----------------------------------------------------------------------------
-- A carrier's store is its metatable: { __index = lazy_index, active, n, cap,
-- buf (rows in malloc'd memory: the GC neither traverses nor counts them, so
-- they add no collection work), refs (the attrs tables and foreign parent ids
-- the rows point to), names, handles, base (the events table rows go to) }.
pcall(ffi.cdef, [[
typedef struct {
  double ts, attempt, span, parent;  /* span: serial or 0; parent: serial, 0, or -(refs index) */
  int32_t name, handle, attrs;       /* indexes into the store's names, handles, refs; 0: none */
  uint8_t kind;
} rl_trace_row;
]])
pcall(ffi.cdef, "void *realloc(void *p, size_t n);")
pcall(ffi.cdef, "void free(void *p);")
local C, ROW_PTR = ffi.C, ffi.typeof("rl_trace_row *")
local ROW_SIZE = ffi.sizeof("rl_trace_row")
local KINDS = { [1] = "span_start", [2] = "span_end", [3] = "event" }
local KIND_OF = { span_start = 1, span_end = 2, event = 3 }

local pending = setmetatable({}, { __mode = "k" })  -- carriers with rows not yet built
local lazy_index

-- Builds the pending rows of c into its events table.
local function materialize(c, st)
  st.active = false
  pending[c] = nil
  local buf, n, refs, names, handles = st.buf, st.n, st.refs, st.names, st.handles
  local events = st.base
  st.n, st.nrefs, st.base = 0, 0, false
  -- Someone assigned c.events while rows were pending: theirs wins, as it would
  -- have over records appended before the assignment.
  if rawget(c, "events") == nil then
    events = events or json.array(tnew(n, 0))
    local len = #events
    for i = 0, n - 1 do
      local r = buf[i]
      local h, span, parent, attrs = handles[r.handle], r.span, r.parent, refs[r.attrs]
      if span > 0 then span = id_cached(span) else span = nil end
      if parent > 0 then parent = id_cached(parent) elseif parent < 0 then parent = refs[-parent] else parent = nil end
      if type(attrs) ~= "table" or next(attrs) == nil then attrs = nil end
      len = len + 1
      events[len] = { type = KINDS[r.kind], name = names[r.name], ts = r.ts, trace_id = h.trace_id,
                      sample_id = h.sample_id, group_id = h.group_id, attempt = r.attempt,
                      span_id = span, parent_span_id = parent, attrs = attrs }
    end
    rawset(c, "events", events)
  end
  -- Keep small buffers for the next batch; let large ones go.
  if st.cap > 256 then
    C.free(ffi.gc(st.buf, nil))
    st.cap, st.buf = 0, false
  end
  clear(refs)
end

local function flush(c)
  local st = getmetatable(c)
  if type(st) == "table" and st.__index == lazy_index and st.active then
    local ok, err = pcall(materialize, c, st)
    if not ok then require("rl.log").debug("trace events dropped: " .. tostring(err)) end
  end
end

--- Builds the records of carrier c, or of every carrier when c is nil.
function M.flush(c)
  if c ~= nil then return flush(c) end
  if next(pending) == nil then return end
  for carrier in pairs(pending) do flush(carrier) end
end
json.on_materialize(M.flush)

lazy_index = function(c, key)
  if key ~= "events" then return nil end
  flush(c)
  return rawget(c, "events")
end

--- True while c's events are deferred (c.events would build them).
function M.deferred(c)
  local st = getmetatable(c)
  return type(st) == "table" and st.__index == lazy_index and st.active
end

-- Starts (or restarts) deferring c's events; nil if c cannot defer (a metatable
-- of its own, or `events` that is not a table).
local function detach(c)
  local st = getmetatable(c)
  if st ~= nil and (type(st) ~= "table" or st.__index ~= lazy_index) then return nil end
  local events = rawget(c, "events")
  if events ~= nil and type(events) ~= "table" then return nil end
  if st == nil then
    st = { __index = lazy_index, active = false, n = 0, cap = 0, buf = false, nrefs = 0, refs = {},
           names = {}, name_ix = {}, handles = {}, h1 = false, base = false }
    setmetatable(c, st)
  end
  st.base = events or false
  rawset(c, "events", nil)
  st.active = true
  pending[c] = true
  return st
end

-- Room for more rows; false when memory is short (the event is dropped).
local function grow(st)
  local cap = math.max(16, st.cap * 2)
  local old = st.buf or nil
  if old then ffi.gc(old, nil) end  -- realloc takes it over
  local buf = ffi.cast(ROW_PTR, C.realloc(old, cap * ROW_SIZE))
  if buf == nil then
    if old then ffi.gc(old, C.free) end
    return false
  end
  st.buf, st.cap = ffi.gc(buf, C.free), cap
  return true
end

local function name_index(st, name)
  if name == nil or name ~= name then return 0 end
  local names = st.names
  names[#names + 1] = name
  st.name_ix[name] = #names
  return #names
end

local function handle_index(st, h)
  local hs = st.handles
  for i = 1, #hs do
    if hs[i] == h then return i end
  end
  hs[#hs + 1] = h
  if #hs == 1 then st.h1 = h end
  return #hs
end

local function ref(st, v)
  local k = st.nrefs + 1
  st.nrefs = k
  st.refs[k] = v
  return k
end

-- Carriers that cannot defer get their records built at once (what rl.trace
-- always did); errors are the caller's to swallow.
local function append_now(h, kind, name, ts, attrs, span, parent)
  local c = h.carrier
  if c.events == nil then c.events = json.array() end
  local events = c.events
  events[#events + 1] = { type = kind, name = name, ts = ts, trace_id = h.trace_id, sample_id = h.sample_id,
    group_id = h.group_id, attempt = c.attempt, span_id = span and M.id_of(span),
    parent_span_id = type(parent) == "number" and M.id_of(parent) or parent or nil,
    attrs = attrs and next(attrs) ~= nil and attrs or nil }
end

--- The name with index ix in carrier c's store (see append).
function M.name_of(c, ix)
  local st = getmetatable(c)
  if type(st) == "table" and st.__index == lazy_index then return st.names[ix] end
end

--- Appends one event of handle h: span and parent are serials (parent may also
--- be a foreign id string), attrs a table stored as given (not copied).
--- Returns the name's index for name_of, or nil when c cannot defer.
function M.append(h, kind, name, ts, attrs, span, parent)
  local c = h.carrier
  local st = getmetatable(c)
  if st == nil or st.__index ~= lazy_index or not st.active then
    st = detach(c)
    if not st then
      local ok, err = pcall(append_now, h, kind, name, ts, attrs, span, parent)
      if not ok then require("rl.log").debug("trace " .. tostring(name) .. " skipped: " .. tostring(err)) end
      return nil
    end
  end
  local ni = st.name_ix[name] or name_index(st, name)
  local n = st.n
  if n == st.cap and not grow(st) then return ni end
  local r = st.buf[n]
  r.kind = KIND_OF[kind]
  r.name = ni
  r.ts = ts
  r.handle = h == st.h1 and 1 or handle_index(st, h)
  local a = c.attempt
  r.attempt = type(a) == "number" and a or tonumber(a) or 0
  r.span = span or 0
  r.parent = type(parent) == "number" and parent or parent and -ref(st, parent) or 0
  r.attrs = attrs and ref(st, attrs) or 0
  st.n = n + 1
  return ni
end

return M
