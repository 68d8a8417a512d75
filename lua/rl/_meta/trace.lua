---@meta
-- LuaLS type stubs for rl.trace (lua/rl/trace.lua). See docs/lua-api.md ("rl.trace").

---@class rl.trace.Handle
---@field trace_id string
---@field carrier table {version, trace_id, events, sample_id, group_id, attempt}
---@field sample_id integer|nil
---@field group_id integer|nil
---@field parent_span_id string|nil

---@class rl.trace.Span an FFI object for one sample, a table for lists
---@field name string
---@field closed boolean
local Span = {}
---@param key string
function Span:set(key, value) end
---@param attrs table end attrs; the "_trace_children" key becomes child spans/events
function Span:update(attrs) end
---@param err? any ends with error_type / error_message
function Span:finish(err) end

---@alias rl.trace.Target rl.Sample|rl.trace.Handle|table[]

---@class rl.trace
rl.trace = {}
---@return rl.trace.Handle
function rl.trace.bind(sample) end
---@param opts? {trace_id?: string, sample_id?: integer, group_id?: integer, attempt?: integer, parent_span_id?: string}
---@return rl.trace.Handle
function rl.trace.bind_carrier(carrier, opts) end
---@generic R
---@param target rl.trace.Target
---@param name string
---@param attrs table|nil start attrs
---@param fn fun(span: rl.trace.Span, ...): R
---@return R
function rl.trace.span(target, name, attrs, fn, ...) end
---@return rl.trace.Span
function rl.trace.start(target, name, attrs) end
function rl.trace.event(target, name, attrs) end
function rl.trace.next_attempt(target, attrs) end
---@return table payload
function rl.trace.export(handle) end
---@return rl.trace.Handle
function rl.trace.import(payload, carrier) end
---@return table attrs
function rl.trace.sglang_meta_attrs(meta) end
---@param carrier? table builds its deferred event records now (every carrier when nil)
function rl.trace.flush(carrier) end
---@param on? boolean
---@return boolean enabled
function rl.trace.enabled(on) end

--- Wraps f: each call runs in a span `name` (slime's trace_function). opts.target: an
--- argument index, a parameter name of f, or a function(...) -> target; default the
--- enclosing span's target. opts.attrs: a table or a function(...) -> attrs.
---@generic F: function
---@param name string
---@param opts? {target?: integer|string|fun(...): any, attrs?: table|fun(...): table}
---@param f F
---@return F
function rl.trace.fn(name, opts, f) end

--- The handle of the innermost open span of the running task, or nil.
---@return table|nil
function rl.trace.current() end
--- A fresh trace/span id, for an id a caller needs before its span exists.
---@return string
function rl.trace.new_id() end
