--- rl.profile: read profiler traces (Chrome trace JSON, gzipped or not) written
--- by the native engine, SGLang or vLLM, and analyse them (rl.profile.analyze).
--
--   local files, err = rl.profile.find_traces("/tmp/sglang_profile")
--   local tr = assert(rl.profile.load(files[1]))      -- {path, rank, events, meta}
--   local report = rl.profile.analyze(tr, { top_n = 20 })
--
-- Times in a report are microseconds, as in the traces.
local json = require "rl.json"
local gzip = require "rl.gzip"

local M = {}

local shell_quote = require("rl.process").quote

local function is_dir(path)
  local p = io.popen("test -d " .. shell_quote(path) .. " && echo yes")
  local out = p and p:read("*l")
  if p then p:close() end
  return out == "yes"
end

--- Trace files under `dir` (recursively): names ending in .json or .json.gz,
--- sorted. Returns the list, or nil, err when `dir` is not a directory or holds none.
function M.find_traces(dir)
  if type(dir) ~= "string" or dir == "" then
    error("rl.profile.find_traces: bad argument #1 'dir' (non-empty string expected, got " .. type(dir) .. ")", 2)
  end
  if not is_dir(dir) then
    return nil, ("'%s' is not a directory (hint: pass the output_dir given to /start_profile, e.g. /tmp/sglang_profile)"):format(dir)
  end
  local p = assert(io.popen("find " .. shell_quote(dir) .. " -type f \\( -name '*.json' -o -name '*.json.gz' \\) 2>/dev/null"))
  local files = {}
  for line in p:lines() do files[#files + 1] = line end
  p:close()
  table.sort(files)
  if #files == 0 then
    return nil, ("'%s' holds no trace files (*.trace.json.gz, *.json) (hint: traces are written when profiling stops:"
      .. " after --num-steps engine steps with requests running, or at --action stop)"):format(dir)
  end
  return files
end

--- The rank a trace file belongs to: `TP-<n>` (SGLang), `rank<n>` / `rank-<n>`
--- (vLLM, torch), or distributedInfo.rank; nil when unknown.
function M.rank_of(path, meta)
  local base = tostring(path):match("([^/]+)$") or path
  local r = base:match("TP%-(%d+)") or base:match("[Rr]ank[_%-]?(%d+)")
  if r then return tonumber(r) end
  local d = meta and meta.distributedInfo
  if type(d) == "table" and type(d.rank) == "number" then return d.rank end
  return nil
end

--- Reads a Chrome trace: {path, rank, events, meta} (meta: the top-level keys
--- but traceEvents), or nil, err naming the file and what is wrong.
function M.load(path)
  local text, err = gzip.read_file(path)
  if not text then return nil, err end
  if text:match("^%s*$") then return nil, path .. ": empty file (hint: was the trace still being written?)" end
  local doc, jerr = json.decode(text)
  text = nil  -- luacheck: ignore (free the text before building more tables)
  if doc == nil then
    return nil, ("%s: not a Chrome trace: %s (hint: a truncated or partly written file? open it in Perfetto to check)")
      :format(path, tostring(jerr):gsub("^rl%.json%.decode: ", ""))
  end
  local events, meta
  if type(doc) == "table" and json.is_array(doc) then
    if #doc > 0 and (type(doc[1]) ~= "table" or doc[1].ph == nil) then
      return nil, path .. ": not a Chrome trace: a JSON list whose items are not trace events (no 'ph')"
    end
    events, meta = doc, {}
  elseif type(doc) == "table" and type(doc.traceEvents) == "table" then
    events, meta = doc.traceEvents, doc
    doc.traceEvents = nil
  else
    return nil, path .. ": not a Chrome trace: no 'traceEvents' list (hint: expected a torch profiler/kineto trace)"
  end
  return { path = path, rank = M.rank_of(path, meta), events = events, meta = meta }
end

M.analyze = function(...) return require("rl.profile.analyze").analyze(...) end
M.classify = function(...) return require("rl.profile.analyze").classify(...) end
M.step_of = function(...) return require("rl.profile.analyze").step_of(...) end

return M
