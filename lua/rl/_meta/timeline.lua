---@meta
-- LuaLS type stubs for rl.timeline (lua/rl/timeline.lua). See docs/observability.md
-- ("Trace timeline viewer") and docs/lua-api.md ("rl.timeline").

---@class rl.timeline
rl.timeline = {}

---@class rl.timeline.BuildOpts
---@field pt_path? string the cache's pt_path field (default: the path read)
---@field generated_at? number the cache's generated_at (seconds; default 0)
---@field cache_path? string write the cache here instead of returning it
---@field html_path? string write the page here (needs html_head, html_mid, html_tail)
---@field html_head? string
---@field html_mid? string
---@field html_tail? string
---@field first_rows? integer rows in the page's first part (default 200)
---@field perfetto? boolean also return a Chrome trace
---@field perfetto_path? string write the Chrome trace here

---@class rl.timeline.Result
---@field sample_count integer samples in the dump
---@field traced_samples integer samples with a trace dict
---@field rows integer samples with trace events (slime's sample_count)
---@field pd_rows integer rows with synthetic [P]/[D] lanes
---@field items integer items over all rows
---@field cache? string the cache JSON (when no cache_path)
---@field perfetto? string the Chrome trace (when asked without a path)

---@class rl.timeline.Header
---@field cache_version integer
---@field sample_count integer rows, as slime counts them
---@field dump_sample_count integer samples in the dump
---@field pd_row_count integer

--- Rebuilds every sample's timeline; writes or returns the cache, page, Chrome trace.
---@param pt_path string
---@param opts? rl.timeline.BuildOpts
---@return rl.timeline.Result|nil res, string|nil err
function rl.timeline.build(pt_path, opts) end

--- Writes the page from a cache file: head, first rows, mid, the other rows, tail.
---@param cache_path string
---@param html_path string
---@param head string
---@param mid string
---@param tail string
---@param first_rows? integer
---@return true|nil ok, string|nil err
function rl.timeline.page(cache_path, html_path, head, mid, tail, first_rows) end

--- Modification time in seconds (fractional), or nil when there is no such file.
---@param path string
---@return number|nil
function rl.timeline.mtime(path) end

--- The header of a cache rlhost wrote, or nil (missing, other version, older writer).
---@param path string
---@return rl.timeline.Header|nil
function rl.timeline.cache_header(path) end
