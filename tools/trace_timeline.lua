-- Trace timeline viewer for debug rollout dumps (slime's tools/trace_timeline_viewer.py):
--
--   rlhost tools/trace_timeline.lua dump/rollout_3.pt [--rebuild] [--no-serve]
--          [--port 9999] [--host 127.0.0.1] [--format perfetto]
--
-- Writes next to the dump <stem>.trace_timeline_cache.json (slime's cache schema,
-- version 1; reused while newer than the dump unless --rebuild) and
-- <stem>.trace_timeline_viewer.html (self-contained: the cache is inlined, so it
-- also opens from file://), then serves the dump's folder until Ctrl-C.
-- --format perfetto also writes <stem>.perfetto.json (Chrome trace events).
-- docs/observability.md, "Trace timeline viewer", describes the page.
local timeline = rl.timeline

local opt = rl.args {
  description = "Per-sample trace timelines of a debug rollout dump (.pt) in a browser page.",
  { name = "pt_path", positional = true, required = true, metavar = "PATH.pt",
    help = "dump written by --save-debug-rollout-data / rl.dump.save (rlhost or slime)" },
  { name = "rebuild", type = "bool", default = false, help = "rebuild the cache even when it is newer than the dump" },
  { name = "serve", type = "bool", default = true, help = "serve the dump's folder over HTTP (--no-serve: only write files)" },
  { name = "port", type = "int", default = 9999, help = "HTTP port (0: a free one)" },
  { name = "host", type = "string", default = "127.0.0.1", help = "bind address (loopback unless you mean it)" },
  { name = "format", choices = { "html", "perfetto" }, default = "html",
    help = "perfetto: also write <stem>.perfetto.json for ui.perfetto.dev / chrome://tracing" },
}

local function fail(msg, hint)
  if msg:find("(hint:", 1, true) then hint = nil end  -- the runtime's message has its own
  io.stderr:write("trace_timeline: ", msg, hint and ("\n  hint: " .. hint) or "", "\n")
  io.stderr:flush()
  rl.exit(1)
end

local function read_file(path, max)
  local f = io.open(path, "rb")
  if not f then return nil end
  local s = f:read(max or "*a")
  f:close()
  return s
end

local pt = opt.pt_path
local pt_mtime = timeline.mtime(pt)
if not pt_mtime then
  fail("pt file not found: " .. pt, "pass the .pt dump written by --save-debug-rollout-data or rl.dump.save")
end
local dir, base = pt:match("^(.*)/([^/]*)$")
if not dir then dir, base = ".", pt end
if dir == "" then dir = "/" end
local stem = base:gsub("%.[^.]*$", "")
if stem == "" then stem = base end
local function beside(suffix) return (dir == "." and "" or dir .. "/") .. stem .. suffix end
local cache_path = beside(".trace_timeline_cache.json")
local html_path = beside(".trace_timeline_viewer.html")
local perfetto_path = beside(".perfetto.json")
local want_perfetto = opt.format == "perfetto"

local abs_pt = pt
if pt:sub(1, 1) ~= "/" then
  local cwd = os.getenv("PWD")
  if cwd then abs_pt = cwd .. "/" .. pt:gsub("^%./", "") end
end

local function fresh(path)
  local m = timeline.mtime(path)
  return m ~= nil and m >= pt_mtime
end

-- The page: the template with the cache inlined (the writer escapes '<' in strings).
local here = (debug.getinfo(1, "S").source:match("^@(.*)/[^/]*$")) or "."
local template_path = here .. "/trace_timeline/viewer.html"
local template = read_file(template_path)
if not template then fail("viewer template missing: " .. template_path, "the tools/ folder of the rlhost tree is incomplete") end
-- Two placeholders: the cache's first rows (painted at once) and the other rows.
local at = template:find("__TIMELINE_CACHE__", 1, true)
local at2 = template:find("__TIMELINE_REST__", 1, true)
if not (at and at2 and at2 > at) then
  fail(template_path .. ": no __TIMELINE_CACHE__ / __TIMELINE_REST__ placeholders", "restore tools/trace_timeline/viewer.html")
end
local title = (stem:gsub("[<>&\"]", ""))
local html_head = template:sub(1, at - 1):gsub("__TITLE__", function() return title end)
local html_mid = template:sub(at + #"__TIMELINE_CACHE__", at2 - 1)
local html_tail = template:sub(at2 + #"__TIMELINE_REST__")

local header = (not opt.rebuild and fresh(cache_path)) and timeline.cache_header(cache_path) or nil
local how
if header and (not want_perfetto or fresh(perfetto_path)) then
  local ok, err = timeline.page(cache_path, html_path, html_head, html_mid, html_tail)
  if not ok then fail(err) end
  how = "reused"
else
  local t0 = rl.now()
  local res, err = timeline.build(pt, {
    pt_path = abs_pt, generated_at = rl.time(), cache_path = cache_path, html_path = html_path,
    html_head = html_head, html_mid = html_mid, html_tail = html_tail, perfetto_path = want_perfetto and perfetto_path or nil,
  })
  if not res then
    fail(err, "expected a torch.save dump {'rollout_id', 'samples': [...]} from --save-debug-rollout-data or rl.dump.save")
  end
  if res.rows == 0 then
    fail(("%s: no traces: %d samples, %d with a trace carrier, none with timestamped events"):format(
      pt, res.sample_count, res.traced_samples),
      "dumps keep sample.trace when the rollout ran with tracing on (rl.trace.enabled(true), the default)")
  end
  header = { sample_count = res.rows, dump_sample_count = res.sample_count, pd_row_count = res.pd_rows }
  how = ("built in %.2f s"):format(rl.now() - t0)
end

print("pt: " .. pt)
print("cache: " .. cache_path .. " (" .. how .. ")")
print("html: " .. html_path)
if want_perfetto then print("perfetto: " .. perfetto_path .. " (open in https://ui.perfetto.dev or chrome://tracing)") end
-- samples: what slime prints (samples with trace events), then the dump's total
print(("samples: %d with traces (of %d in the dump)%s"):format(header.sample_count, header.dump_sample_count,
  (header.pd_row_count or 0) > 0 and (", %d with PD [P]/[D] lanes"):format(header.pd_row_count) or ""))
io.stdout:flush()
if not opt.serve then return end

local loopback = opt.host == "127.0.0.1" or opt.host == "localhost" or opt.host == "::1"
if not loopback then
  io.stderr:write(("trace_timeline: serving %s on %s: anyone who can reach it can read every file there\n"):format(dir, opt.host))
end
local srv, err = rl.http.serve { host = opt.host, port = opt.port, static_dir = dir, allow_remote = not loopback }
if not srv then fail(err, "pick another --port (0 takes a free one), or --no-serve") end
local name = html_path:match("([^/]*)$")
print(("Serving %s/%s  (the dump's folder; Ctrl-C to stop)"):format(srv:url():gsub("/$", ""), name))
io.stdout:flush()
srv:wait()
