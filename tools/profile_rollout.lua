-- profile_rollout: start or stop the profiler on every engine behind a router
-- (slime's tools/profile_rollout.py; vime's for vLLM). Works with rlhost engines,
-- SGLang and vLLM (started with --profiler-config), mixed behind one router.
--
--   rlhost tools/profile_rollout.lua --router-url http://127.0.0.1:30000 --action start --num-steps 3
--   rlhost tools/profile_rollout.lua --router-url http://127.0.0.1:30000 --action stop
--   rlhost tools/profile_rollout.lua --worker-urls http://127.0.0.1:30001 --action start   # no router
--
-- GET <router>/workers, then POST <worker>/start_profile (or /stop_profile {}) on
-- every worker at once. rlhost engines and SGLang get SGLang's body {output_dir,
-- num_steps, activities, profile_by_stage, with_stack, record_shapes}; vLLM takes
-- {max_iterations, profile_prefix} and writes to the torch_profiler_dir of its
-- --profiler-config (a worker is vLLM when its /v1/models says owned_by "vllm", or
-- with --engine vllm). A failing worker is reported and the others go on. Exit status: 0 when at least one worker succeeded;
-- 1 when none did, the router cannot be read or lists no worker.
local opt = rl.args {
  description = "Starts or stops the profiler on every worker registered with a router.",
  { name = "router_url", type = "string", help = "the router, e.g. http://127.0.0.1:30000 (its /workers lists the engines)" },
  { name = "worker_urls", type = "list", help = "profile these workers directly instead of asking a router" },
  { name = "action", choices = { "start", "stop" }, default = "start" },
  { name = "engine", choices = { "auto", "sglang", "vllm" }, default = "auto",
    help = "the workers' profiler API: sglang (also rlhost engines), vllm, or auto (asks each worker's /v1/models)" },
  { name = "output_dir", type = "string", default = "/tmp/sglang_profile",
    help = "where the engines write traces (their filesystem; vLLM: fixed by its --profiler-config torch_profiler_dir)" },
  { name = "num_steps", type = "int", default = 3,
    help = "engine steps to record, then stop by itself (0: until --action stop; vLLM: max_iterations)" },
  { name = "activities", type = "list", default = { "CPU", "GPU" }, help = "CPU, GPU (CUDA), MEM" },
  { name = "profile_by_stage", type = "bool", default = false, help = "separate prefill/decode traces (SGLang)" },
  { name = "with_stack", type = "bool", default = false, help = "record stacks (large traces)" },
  { name = "record_shapes", type = "bool", default = false, help = "record input shapes" },
  { name = "per_worker_dirs", type = "bool", default = false,
    help = "give each worker its own <output-dir>/<host_port>/ (vLLM: file names start with <host_port>_)" },
  { name = "api_key", type = "string", help = "Bearer token for engines started with --api-key (default: the run's admin token, $RLHOST_ADMIN_TOKEN)" },
  { name = "timeout", type = "number", default = 120, help = "seconds to wait for each worker (stop writes the trace)" },
}

if not opt.router_url and #opt.worker_urls == 0 then
  rl.args.usage_error("give --router-url URL (the router's /workers lists the engines) or --worker-urls URL...")
end
if opt.num_steps < 0 then rl.args.usage_error("--num-steps must be 0 or more") end

local function die(fmt, ...)
  io.stderr:write("profile_rollout: ", fmt:format(...), "\n")
  rl.exit(1)
end

local function trim(u) return (tostring(u):gsub("/+$", "")) end

-- The workers' URLs from the router's /workers ({"workers": [{"url": ...}, ...]}).
local function router_workers(router)
  local url = trim(router) .. "/workers"
  if not url:match("^https?://") then
    die("--router-url %s: not an http:// URL (hint: e.g. http://127.0.0.1:30000)", router)
  end
  local resp, err = rl.http.get(url, { timeout = 10, connect_timeout = 5 })
  if not resp then
    die("--router-url %s: cannot reach the router: %s\n  hint: the URL is printed at startup (\"Router launched at HOST:PORT\");"
      .. " a new run picks a new port", router, err)
  end
  if resp.status ~= 200 then
    die("--router-url %s: GET /workers answered HTTP %d: %s\n  hint: is this a router? an engine URL goes to --worker-urls",
      router, resp.status, resp.body:sub(1, 200))
  end
  local doc = rl.json.decode(resp.body)
  if type(doc) ~= "table" or type(doc.workers) ~= "table" then
    die("--router-url %s: GET /workers did not return {\"workers\": [...]}: %s", router, resp.body:sub(1, 200))
  end
  local urls = {}
  for _, w in ipairs(doc.workers) do
    local u = type(w) == "table" and w.url or w
    if type(u) == "string" then urls[#urls + 1] = trim(u) end
  end
  return urls
end

local workers = #opt.worker_urls > 0 and opt.worker_urls or router_workers(opt.router_url)
if #workers == 0 then
  die("the router at %s lists no workers (GET /workers is empty)\n  hint: are the engines up and registered?"
    .. " start them with tools/serve_idle.lua or the recipe's --rollout-function sleep", opt.router_url)
end

-- "vllm" or "sglang" (rlhost engines speak SGLang's profiler API): --engine, else the
-- owner in the worker's /v1/models (vLLM answers owned_by "vllm").
local function engine_kind(url, headers)
  if opt.engine ~= "auto" then return opt.engine end
  local resp = rl.http.get(url .. "/v1/models", { headers = headers, timeout = 10, connect_timeout = 5 })
  local doc = resp and resp.status == 200 and rl.json.decode(resp.body)
  local first = type(doc) == "table" and type(doc.data) == "table" and doc.data[1]
  return type(first) == "table" and first.owned_by == "vllm" and "vllm" or "sglang"
end

local function worker_name(url) return (url:gsub("^%a+://", ""):gsub("[^%w%.%-]", "_")) end

local function body_for(url, kind)
  if opt.action == "stop" then return {} end
  if kind == "vllm" then
    -- vLLM's StartProfileRequest: the directory and activities are the server's
    -- --profiler-config; max_iterations ends the recording by itself.
    return { max_iterations = opt.num_steps > 0 and opt.num_steps or nil,
             profile_prefix = opt.per_worker_dirs and worker_name(url) or nil }
  end
  local dir = opt.output_dir
  if opt.per_worker_dirs then dir = dir:gsub("/+$", "") .. "/" .. worker_name(url) end
  return {
    output_dir = dir, num_steps = opt.num_steps > 0 and opt.num_steps or nil,
    activities = rl.json.array(opt.activities), profile_by_stage = opt.profile_by_stage,
    with_stack = opt.with_stack, record_shapes = opt.record_shapes,
  }
end

local function call(url)
  local u = trim(url)
  -- A control endpoint: --api-key, else the run's admin token ($RLHOST_ADMIN_TOKEN).
  local headers = rl.engine.control_headers(opt.api_key)
  local kind = engine_kind(u, headers)
  local endpoint = opt.action == "start" and "/start_profile" or "/stop_profile"
  local resp, err = rl.http.request {
    method = "POST", url = u .. endpoint, body = rl.json.encode(body_for(u, kind)), headers = headers,
    timeout = opt.timeout, connect_timeout = 5,
  }
  if not resp then return { url = u, kind = kind, ok = false, status = "-", detail = err } end
  local doc = rl.json.decode(resp.body)
  local detail
  if type(doc) == "table" then
    local e = doc.error
    detail = (type(e) == "table" and e.message) or (type(e) == "string" and e) or doc.message or doc.detail
    local paths = type(doc.paths) == "table" and #doc.paths > 0 and table.concat(doc.paths, ", ") or doc.path
    if resp.status == 200 and paths and paths ~= rl.json.null then detail = (detail and (detail .. " ") or "") .. "-> " .. paths end
    if resp.status == 200 and opt.action == "start" and doc.output_dir then
      detail = (detail or "") .. " output_dir=" .. tostring(doc.output_dir)
    end
  end
  detail = detail or resp.body:gsub("%s+$", ""):sub(1, 300)
  if kind == "vllm" and resp.status == 200 and detail == "" then
    -- vLLM answers an empty 200: say what it does with the request
    detail = opt.action == "stop" and "vLLM: stopped; traces written to its torch_profiler_dir"
      or ("vLLM: started%s; traces go to its --profiler-config torch_profiler_dir"):format(
        opt.num_steps > 0 and (" for %d iterations"):format(opt.num_steps) or "")
  end
  if resp.status == 404 then
    detail = detail .. (kind == "vllm"
      and " (hint: vLLM registers /start_profile only with --profiler-config '{\"profiler\":\"torch\",\"torch_profiler_dir\":\"DIR\"}';"
        .. " in a recipe --vllm-profiler-config; restart it)"
      or " (hint: this server has no profiler endpoint; SGLang needs a build with torch profiler)")
  end
  if resp.status == 409 and kind == "vllm" then
    detail = detail .. " (hint: vLLM keeps a session open after max_iterations ended the recording:"
      .. " run --action stop, then start again)"
  end
  return { url = u, kind = kind, ok = resp.status == 200, status = tostring(resp.status), detail = tostring(detail) }
end

local tasks = {}
for i, w in ipairs(workers) do tasks[i] = rl.spawn(call, w) end
local results = rl.wait_all(tasks)

local width = 6
for _, r in ipairs(results) do width = math.max(width, #r.url) end
local fmt = "%-" .. width .. "s  %-6s  %-6s  %s"
print(fmt:format("worker", "action", "status", "result"))
local ok_count = 0
for _, r in ipairs(results) do
  if r.ok then ok_count = ok_count + 1 end
  print(fmt:format(r.url, opt.action, r.ok and r.status or ("FAIL " .. r.status):gsub(" %-$", ""), r.detail))
end
print(("%d worker%s: %d ok, %d failed"):format(#results, #results == 1 and "" or "s", ok_count, #results - ok_count))
if opt.action == "start" and ok_count > 0 then
  local vllm, other = 0, 0
  for _, r in ipairs(results) do
    if r.ok and r.kind == "vllm" then vllm = vllm + 1 elseif r.ok then other = other + 1 end
  end
  local where = other == 0 and "each vLLM server's torch_profiler_dir"
    or (vllm > 0 and (opt.output_dir .. " (vLLM: its torch_profiler_dir)") or opt.output_dir)
  print(opt.num_steps > 0
    and ("traces appear under %s after %d engine steps with requests running (send some now)"):format(where, opt.num_steps)
    or ("recording until --action stop; traces go to %s"):format(where))
end
if ok_count == 0 then rl.exit(1) end
