--- rl.timeline: per-sample trace timelines of a debug rollout dump, as slime's
--- tools/trace_timeline_viewer.py builds them (cache version 1), and the viewer's
--- files. The reconstruction and the big outputs are C++ (runtime/trace/timeline*);
--- tools/trace_timeline.lua is the command-line tool on top.
--
--   local res, err = rl.timeline.build("dump/rollout_3.pt", { cache_path = "c.json" })
--   print(res.rows, res.items)                     -- rows = samples with trace events
--   local cache = assert(rl.timeline.build(pt)).cache   -- the cache text itself
--
-- docs/observability.md ("Trace timeline viewer") has the rules and the cache schema.
local core = require "rl._core"

local ct = core.timeline
local M = {}

--- Rebuilds every sample's timeline from the dump at `pt_path` and writes (or returns)
--- its forms. `opts`: `pt_path` (the cache's pt_path field, default the path),
--- `generated_at` (seconds, default 0), `cache_path`, `html_path` (with `html_head`,
--- `html_mid`, `html_tail`: the page around the inlined cache), `first_rows` (rows in
--- the page's first part, default 200), `perfetto` (return a Chrome trace) or
--- `perfetto_path`. Returns {sample_count (samples in the dump), traced_samples, rows,
--- pd_rows, items, cache (when no cache_path), perfetto (when asked, no path)}, or
--- nil, err for a missing or corrupt file, a file that is not a dump, a failed write.
--- Files are written only when some sample has trace events (rows > 0).
function M.build(pt_path, opts) return ct.build(pt_path, opts) end

--- Writes the page from a cache file already built: `head`, the cache's first
--- `first_rows` rows (default 200), `mid`, the other rows as a JSON array, `tail`.
--- Returns true, or nil, err naming the file.
function M.page(cache_path, html_path, head, mid, tail, first_rows)
  return ct.page(cache_path, html_path, head, mid, tail, first_rows)
end

--- A file's modification time (seconds since the epoch, fractional), or nil when
--- there is no such file.
function M.mtime(path) return ct.mtime(path) end

--- The header of a cache file rlhost wrote: {cache_version, sample_count (rows, as
--- slime counts them), dump_sample_count, pd_row_count}, or nil when the file is
--- missing, not a version-1 cache, or one written before these fields.
function M.cache_header(path)
  if type(path) ~= "string" then
    error("rl.timeline.cache_header: bad argument #1 'path' (string expected, got " .. type(path) .. ")", 2)
  end
  local f = io.open(path, "rb")
  if not f then return nil end
  local head = f:read(8192) or ""
  f:close()
  head = head:match("^(.-)\"rows\":") or head  -- the header ends where the rows start
  local h = {}
  for k, v in head:gmatch('"([%w_]+)":(%d+)') do
    if h[k] == nil then h[k] = tonumber(v) end
  end
  if h.cache_version ~= 1 or not h.sample_count or not h.dump_sample_count then return nil end
  return h
end

return M
