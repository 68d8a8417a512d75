---@meta
-- LuaLS type stubs for rl.profile (lua/rl/profile/). See docs/lua-api.md ("rl.profile")
-- and docs/profiling.md.

---@class rl.profile
rl.profile = {}

---@class rl.profile.Trace
---@field path string
---@field rank integer|nil from TP-<n> / rank<n> in the name, or distributedInfo.rank
---@field events table[] the Chrome trace events
---@field meta table the other top-level keys (deviceProperties, distributedInfo, ...)

---@class rl.profile.Report
---@field path string
---@field rank integer|nil
---@field mode "gpu"|"cpu" gpu: kernels/memcpy/memset are the busy set; cpu: cpu_op events
---@field events integer
---@field ops integer
---@field span number microseconds from the first to the last busy interval
---@field busy number microseconds covered by at least one op
---@field idle number
---@field util number busy / span
---@field self_total number
---@field categories {name: string, count: integer, time: number}[] by self time, largest first
---@field top_ops {name: string, category: string, count: integer, time: number}[]
---@field gaps {s: number, e: number, len: number, offset: number, cause?: string, cause_cat?: string, overlap?: number}[]
---@field lanes {name: string, events: integer, busy: number, util: number}[] per stream (gpu) or thread (cpu)
---@field steps rl.profile.Steps[] engine steps by kind, from vLLM's execute_* annotations (empty without them)

---@class rl.profile.Steps
---@field kind "prefill"|"decode" prefill: the step took new prompts; decode: running sequences only
---@field count integer
---@field total number microseconds
---@field mean number
---@field p50 number
---@field p90 number
---@field max number
---@field tokens integer tokens the steps computed (prompt + generated)
---@field mean_batch number requests per step

--- Trace files (*.json, *.json.gz) under `dir`, recursively and sorted, or nil, err.
---@param dir string
---@return string[]|nil files, string|nil err
function rl.profile.find_traces(dir) end

--- Reads a Chrome trace (gzipped or not), or nil, err naming the file.
---@param path string
---@return rl.profile.Trace|nil trace, string|nil err
function rl.profile.load(path) end

--- The rank of a trace file, or nil.
---@param path string
---@param meta? table
---@return integer|nil
function rl.profile.rank_of(path, meta) end

--- Time by category, top ops, busy vs idle, biggest gaps with their cause.
---@param trace rl.profile.Trace
---@param opts? {top_n?: integer, gaps?: integer}
---@return rl.profile.Report|nil report, string|nil err
function rl.profile.analyze(trace, opts) end

--- A vLLM step annotation (execute_context_<n>(<tokens>)_generation_<n>(<tokens>), or the
--- detailed form) → {kind, tokens, requests}; nil for any other name.
---@param name string
---@return {kind: "prefill"|"decode", tokens: integer, requests: integer}|nil
function rl.profile.step_of(name) end

--- The category of an op or kernel name (gemm, attention, communication, norm, ...).
---@param name string
---@param cat? string
---@return string
function rl.profile.classify(name, cat) end
