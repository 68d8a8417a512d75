-- prometheus: a scrape config for a run (engines through the router's
-- /engine_metrics, the router's /metrics, the trainer's rl.metrics.serve
-- endpoint), and optionally the Prometheus server itself as a side process.
--
--   rlhost tools/prometheus.lua --router-url http://127.0.0.1:30000 --out prometheus.yml
--   rlhost tools/prometheus.lua --router-url URL --trainer-url http://127.0.0.1:9400 \
--       --start --storage runs/prom --retention 7d          -- serves http://127.0.0.1:9090 until Ctrl-C
--
-- Prometheus is the Debian package `prometheus` (scripts/bootstrap.sh installs it).
local opt = rl.args {
  description = "Writes a Prometheus scrape config for an rlhost run and optionally runs Prometheus.",
  { name = "router_url", type = "string", required = true, help = "the router (its /engine_metrics merges every engine)" },
  { name = "trainer_url", type = "string", help = "the trainer's metrics endpoint (rl.metrics.serve), scraped at /metrics" },
  { name = "out", type = "string", default = "prometheus.yml", help = "the config file to write" },
  { name = "scrape_interval", type = "string", default = "10s", help = "Prometheus duration, e.g. 1s, 10s, 1m" },
  { name = "start", type = "bool", default = false, help = "run prometheus with this config until Ctrl-C" },
  { name = "storage", type = "string", default = "prometheus_data", help = "TSDB directory (with --start)" },
  { name = "retention", type = "string", default = "15d", help = "how long the TSDB keeps samples (with --start)" },
  { name = "listen", type = "string", default = "127.0.0.1:9090", help = "Prometheus web/API address (with --start; port 0: a free port, read from Prometheus's log)" },
  { name = "prometheus", type = "string", default = "prometheus", help = "the prometheus binary" },
  { name = "ready_file", type = "string", help = "write Prometheus's URL here once it is ready (with --start)" },
}

local DURATION = "^%d+[smhdwy]$"
for _, k in ipairs { "scrape_interval", "retention" } do
  if not opt[k]:match(DURATION) and not opt[k]:match("^%d+ms$") then
    rl.args.usage_error(("--%s: '%s' is not a Prometheus duration (e.g. 10s, 7d)"):format(k:gsub("_", "-"), opt[k]))
  end
end

-- scheme, host:port, path prefix of a URL; raises a usage error naming the flag.
local function target(flag, url)
  local scheme, hostport, path = tostring(url):match("^(https?)://([^/]+)(.*)$")
  if not scheme then rl.args.usage_error(("--%s: '%s' is not an http(s):// URL"):format(flag, url)) end
  if not hostport:find(":", 1, true) then hostport = hostport .. (scheme == "https" and ":443" or ":80") end
  return scheme, hostport, (path:gsub("/+$", ""))
end

local function job(lines, name, flag, url, path)
  local scheme, hostport, prefix = target(flag, url)
  lines[#lines + 1] = "  - job_name: " .. name
  lines[#lines + 1] = "    scheme: " .. scheme
  lines[#lines + 1] = "    metrics_path: " .. prefix .. path
  lines[#lines + 1] = "    static_configs:"
  lines[#lines + 1] = "      - targets: ['" .. hostport .. "']"
end

local lines = {
  "# Written by rlhost tools/prometheus.lua (docs/observability.md).",
  "# rlhost_engines: every engine's /metrics through the router (label worker=<engine url>): sglang:*, vllm:*",
  "# rlhost_router: the router's own rlhost_router_* series; rlhost_trainer: rl.metrics gauges (rlhost_*)",
  "global:",
  "  scrape_interval: " .. opt.scrape_interval,
  "  evaluation_interval: " .. opt.scrape_interval,
  "scrape_configs:",
}
job(lines, "rlhost_engines", "router-url", opt.router_url, "/engine_metrics")
job(lines, "rlhost_router", "router-url", opt.router_url, "/metrics")
if opt.trainer_url then job(lines, "rlhost_trainer", "trainer-url", opt.trainer_url, "/metrics") end

local f, ferr = io.open(opt.out, "w")
if not f then
  io.stderr:write("prometheus: --out: cannot write ", tostring(ferr), "\n")
  rl.exit(1)
end
f:write(table.concat(lines, "\n"), "\n")
f:close()
print("wrote " .. opt.out)

local cmd = { opt.prometheus, "--config.file=" .. opt.out, "--storage.tsdb.path=" .. opt.storage,
              "--storage.tsdb.retention.time=" .. opt.retention, "--web.listen-address=" .. opt.listen }
if not opt.start then
  print("run it with: " .. table.concat(cmd, " "))
  return
end

if not rl.process.which(opt.prometheus) then
  io.stderr:write(("prometheus: --start: '%s' not found in PATH (hint: apt-get install prometheus, or"
    .. " scripts/bootstrap.sh --test-deps; or point --prometheus at the binary)\n"):format(opt.prometheus))
  rl.exit(1)
end
os.execute("mkdir -p " .. rl.process.quote(opt.storage))
local log = opt.out:gsub("%.ya?ml$", "") .. ".log"
local proc, perr = rl.process.spawn(cmd, { log = log })
if not proc then
  io.stderr:write("prometheus: ", perr, "\n")
  rl.exit(1)
end

local function log_tail()
  local lf = io.open(log, "rb")
  local s = lf and lf:read("*a") or ""
  if lf then lf:close() end
  return #s > 3000 and s:sub(-3000) or s
end

local url = "http://" .. opt.listen
-- Port 0: Prometheus binds a free port and logs it (msg="Listening on" address=HOST:PORT).
local find_port = opt.listen:match(":0$") ~= nil
local deadline = rl.now() + 60
while true do
  if find_port then
    local lf = io.open(log, "rb")
    local addr = lf and lf:read("*a"):match('msg="Listening on" address=([%w%.%[%]:]+:%d+)')
    if lf then lf:close() end
    if addr then url, find_port = "http://" .. addr, false end
  end
  local resp = not find_port and rl.http.get(url .. "/-/ready", { timeout = 2 })
  if resp and resp.status == 200 then break end
  if not proc:running() then
    io.stderr:write(("prometheus: exited with status %d before it was ready; its log (%s):\n%s\n"):format(proc.code, log, log_tail()))
    rl.exit(1)
  end
  if rl.now() > deadline then
    proc:stop()
    io.stderr:write(("prometheus: not ready at %s after 60 s; its log (%s):\n%s\n"):format(url, log, log_tail()))
    rl.exit(1)
  end
  rl.sleep(0.2)
end
print(("Prometheus at %s (pid %d, TSDB %s, retention %s, log %s); Ctrl-C stops it"):format(url, proc.pid, opt.storage,
  opt.retention, log))
print("  try: " .. url .. "/graph?g0.expr=sglang:num_running_reqs (vLLM workers: vllm:num_requests_running)")
io.stdout:flush()
if opt.ready_file then
  local rf = assert(io.open(opt.ready_file .. ".tmp", "w"))
  rf:write(url, "\n")
  rf:close()
  os.rename(opt.ready_file .. ".tmp", opt.ready_file)
end

local ok, err = pcall(function()
  while proc:running() do rl.sleep(0.5) end
end)
if ok then
  io.stderr:write(("prometheus: exited with status %d; its log (%s):\n%s\n"):format(proc.code, log, log_tail()))
  rl.exit(1)
end
print("stopping prometheus")
proc:stop(10)
if opt.ready_file then os.remove(opt.ready_file) end
if not rl.task.is_cancelled(err) then error(err, 0) end
