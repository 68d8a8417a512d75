--- rl.recipe.engines: the engine groups of a job, as slime's rollout servers and their
--- server groups (--sglang-config). Each model entry is a group: its own engines behind
--- its own router, a model directory, a backend, and whether it takes the trainer's
--- weights (update_weights; false for a frozen reference or reward model served next to
--- the policy). Without a config the job has one group, "default", from --num-engines,
--- --engine-mode, --threads and --max-running-requests. Also slime's offload/onload
--- (--offload-rollout): engines release weights and KV cache while the trainer trains.
--- See docs/recipes.md, "Engine groups" and "Offload".
local rl = require "rl"
local log = require "rl.log"
local pd = require "rl.recipe.pd"

local M = {}

local MODEL_FIELDS = { name = true, model_path = true, update_weights = true, num_gpus_per_engine = true,
                       server_groups = true, engine_groups = true, backend = true, offload = true }
local GROUP_FIELDS = { worker_type = true, num_gpus = true, num_gpus_per_engine = true, overrides = true }

local brief = require("rl._yaml").excerpt   -- what a message quotes of the file: a few dozen bytes

local function sorted_keys(t, allowed)
  local out = {}
  for k in pairs(t) do if not allowed[k] then out[#out + 1] = brief(tostring(k)) end end
  table.sort(out)
  if #out > 8 then out = { table.concat(out, ", ", 1, 8) .. (", ... (%d in all)"):format(#out) } end
  return out
end

-- Instructions a Lua config may run: it only builds a table (a loop that never ends is
-- a mistake, reported as one rather than a hang).
local LUA_CONFIG_STEPS = 10000000

-- A Lua config file: source text only (LuaJIT does not verify bytecode, and a mutated
-- chunk crashes the process), run with no globals, the JIT off and a step budget.
local function run_lua_config(text, path)
  local chunk, lerr = require("rl._fs").load_source(text, path, {})
  if not chunk then return nil, lerr end
  jit.off(chunk, true)
  local co = coroutine.create(chunk)
  local TOO_LONG = {}
  debug.sethook(co, function() error(TOO_LONG, 0) end, "", LUA_CONFIG_STEPS)
  local ok, v = coroutine.resume(co)
  if not ok and v == TOO_LONG then
    return nil, ("it ran more than %d Lua instructions without returning (a config only returns a table; "
      .. "is there an endless loop?)"):format(LUA_CONFIG_STEPS)
  end
  if not ok then v = tostring(v); return nil, #v > 400 and (v:sub(1, 400) .. "...") or v end
  if coroutine.status(co) ~= "dead" then return nil, "it yielded instead of returning a table" end
  return v
end

local function read_config(path)
  local f, err = io.open(path, "rb")
  if not f then return nil, "cannot read it: " .. tostring(err) end
  local text = f:read("*a")
  f:close()
  if not text then return nil, "cannot read it (a directory?)" end
  if path:match("%.lua$") then return run_lua_config(text, path) end
  if path:match("%.json$") or text:match("^%s*{") then
    local json = require "rl.json"
    local v, derr = json.decode(text, { unique_keys = true })
    if v == nil or v == json.null then
      return nil, "bad JSON: " .. tostring(derr or "the file holds null"):gsub("^rl%.json%.decode: ", "")
    end
    return v
  end
  return require("rl._yaml").parse(text, path)
end

--- Reads and checks a server-group config (YAML, JSON or a Lua file returning a
--- table) in slime's --sglang-config shape:
---   sglang: [ {name, model_path, update_weights, backend, offload,
---              server_groups: [ {worker_type: regular, num_gpus: N, overrides: {...}} ]} ]
--- Returns the list of models, each {name, model_path, update_weights, backend, offload,
--- server_groups = {{num_engines, overrides}}}; raises a usage error naming the file
--- and the field otherwise. `policy_model`: the trainer's model directory
--- (update_weights defaults to whether a model's path is it, as in slime).
function M.load_config(path, policy_model)
  local function bad(field, msg)
    rl.args.usage_error(("--sglang-config %s: %s%s"):format(path, field and (field .. ": ") or "", msg))
  end
  local data, err = read_config(path)
  if data == nil and err and err:sub(1, #path + 1) == path .. ":" then   -- a YAML error names file:line
    rl.args.usage_error("--sglang-config " .. err)
  end
  if data == nil then bad(nil, err or "the file holds no value") end
  if type(data) ~= "table" or type(data.sglang) ~= "table" then
    bad(nil, "expected a top-level 'sglang' list of models (e.g. sglang: [{name: actor, server_groups: "
      .. "[{worker_type: regular, num_gpus: 2}]}])")
  end
  local unknown = sorted_keys(data, { sglang = true })
  if #unknown > 0 then bad(nil, "unknown top-level field(s) " .. table.concat(unknown, ", ") .. " (only 'sglang')") end
  local models, names, updatable = {}, {}, {}
  for mi, m in ipairs(data.sglang) do
    local at = ("sglang[%d]"):format(mi)
    if type(m) ~= "table" then bad(at, "expected a model entry (a mapping), got " .. type(m)) end
    if type(m.name) ~= "string" or not m.name:match("^[%w_%-]+$") or #m.name > 64 then
      bad(at .. ".name", "expected a name of letters, digits, _ or - (at most 64; e.g. actor, ref), got "
        .. brief(tostring(m.name)))
    end
    at = ("%s (%s)"):format(at, m.name)
    if names[m.name] then bad(at .. ".name", "the name '" .. m.name .. "' is used twice") end
    names[m.name] = true
    unknown = sorted_keys(m, MODEL_FIELDS)
    if #unknown > 0 then
      bad(at, "unknown field(s) " .. table.concat(unknown, ", ") .. " (known: backend, engine_groups, name, model_path, "
        .. "num_gpus_per_engine, offload, server_groups, update_weights)")
    end
    if m.server_groups and m.engine_groups then bad(at, "has both 'server_groups' and its old name 'engine_groups'") end
    local function check_type(field, v, want)
      if v ~= nil and type(v) ~= want then bad(at .. "." .. field, ("expected a %s, got %s"):format(want, type(v))) end
    end
    check_type("model_path", m.model_path, "string")
    check_type("update_weights", m.update_weights, "boolean")
    check_type("backend", m.backend, "string")
    check_type("offload", m.offload, "boolean")
    if m.num_gpus_per_engine ~= nil and m.num_gpus_per_engine ~= 1 then
      bad(at .. ".num_gpus_per_engine", "rlhost engines take one device each (1), got " .. brief(tostring(m.num_gpus_per_engine)))
    end
    local model_path = m.model_path and m.model_path:gsub("/+$", "") or policy_model
    local update = m.update_weights
    if update == nil then
      update = model_path == policy_model
      if not update then
        log.warn("--sglang-config %s: model '%s' serves %s, not the trainer's %s: update_weights defaults to false "
          .. "(set it to silence this)", path, m.name, model_path, tostring(policy_model))
      end
    end
    if update then updatable[#updatable + 1] = m.name end
    local raw = m.server_groups or m.engine_groups
    if type(raw) ~= "table" or #raw == 0 then bad(at .. ".server_groups", "expected a non-empty list of server groups") end
    local groups = {}
    for gi, g in ipairs(raw) do
      local gat = ("%s.server_groups[%d]"):format(at, gi)
      if type(g) ~= "table" then bad(gat, "expected a mapping, got " .. type(g)) end
      unknown = sorted_keys(g, GROUP_FIELDS)
      if #unknown > 0 then
        bad(gat, "unknown field(s) " .. table.concat(unknown, ", ") .. " (known: num_gpus, num_gpus_per_engine, "
          .. "overrides, worker_type)")
      end
      local wt = g.worker_type or "regular"
      if not pd.ROLES[wt] then
        bad(gat .. ".worker_type", "'" .. brief(tostring(wt)) .. "' is not supported (regular, prefill or decode)")
      end
      if type(g.num_gpus) ~= "number" or g.num_gpus < 1 or g.num_gpus % 1 ~= 0 then
        bad(gat .. ".num_gpus", "expected the number of engines (an integer >= 1), got " .. brief(tostring(g.num_gpus)))
      end
      if g.num_gpus_per_engine ~= nil and g.num_gpus_per_engine ~= 1 then
        bad(gat .. ".num_gpus_per_engine", "rlhost engines take one device each (1), got "
          .. brief(tostring(g.num_gpus_per_engine)))
      end
      if g.overrides ~= nil and (type(g.overrides) ~= "table" or g.overrides[1] ~= nil) then
        bad(gat .. ".overrides", "expected a mapping of engine options (e.g. {max_running_requests: 64})")
      end
      local ov = {}
      for k, v in pairs(g.overrides or {}) do ov[(tostring(k):gsub("%-", "_"))] = v end
      if ov.model_path then   -- slime's per-group model path
        if type(ov.model_path) ~= "string" or ov.model_path:gsub("/+$", "") ~= model_path then
          bad(gat .. ".overrides.model_path", "every server group of a model serves its model_path (" .. brief(model_path) .. ")")
        end
        ov.model_path = nil
      end
      groups[gi] = { num_engines = g.num_gpus, overrides = ov, where = gat, worker_type = wt }
    end
    pd.check_model(groups, at, bad)   -- prefill and decode together, no regular beside them
    models[mi] = { name = m.name, model_path = model_path, update_weights = update, backend = m.backend,
                   offload = m.offload, server_groups = groups, where = at }
  end
  if #models == 0 then bad("sglang", "the list of models is empty") end
  if #updatable > 1 then
    bad(nil, "at most one model may take weight updates (update_weights: true); got " .. table.concat(updatable, ", "))
  end
  if #updatable == 0 then   -- the trainer would train a policy that no engine serves (and sync it nowhere)
    local names = {}
    for i, m in ipairs(models) do names[i] = m.name end
    bad(nil, ("no model takes the trainer's weights: %s %s frozen (hint: give the policy's entry update_weights: true, "
      .. "or leave out its model_path so it serves --hf-checkpoint's model)"):format(table.concat(names, ", "),
      #names == 1 and "is" or "are all"))
  end
  return models
end

-- The models of the job: the config's, or one "default" group from the flags (its first
-- --prefill-num-servers engines prefill, the rest decode).
local function models_of(opt, job)
  local models
  if opt.sglang_config then
    models = M.load_config(opt.sglang_config, job.model_dir)
  else
    local sgs = opt.prefill_num_servers and pd.server_groups(opt)
      or { { num_engines = opt.num_engines, overrides = {}, worker_type = "regular" } }
    models = { { name = "default", model_path = job.model_dir, update_weights = true, server_groups = sgs,
                 where = "the engine flags" } }
  end
  local any_pd = false
  for _, m in ipairs(models) do
    m.pd = pd.is_pd(m.server_groups)
    any_pd = any_pd or m.pd
  end
  pd.check_options(opt, any_pd)
  return models
end

--- The groups the job will start, before any starts (checked, read once per job):
--- {name, update_weights, engines = {n = count}} each, for checks of flags that name
--- groups or engines (--fault-injection).
function M.plan(opt, job)
  job.engine_models = job.engine_models or models_of(opt, job)
  local out = {}
  for i, m in ipairs(job.engine_models) do
    local n = 0
    for _, sg in ipairs(m.server_groups) do n = n + sg.num_engines end
    out[i] = { name = m.name, update_weights = m.update_weights, engines = { n = n }, pd = m.pd or nil }
  end
  return out
end

--- The groups of a started job: job.groups, else one of job.engines behind job.router.
function M.groups_of(job)
  return job.groups or { { name = "default", engines = job.engines or {}, router = job.router, update_weights = true } }
end

--- The group whose engines go by plain numbers (engine 1, ...): the policy's (the one
--- taking weight updates), else a job's only group.
function M.plain_group(groups)
  for _, g in ipairs(groups) do if g.update_weights then return g end end
  if #groups == 1 then return groups[1] end
end

--- How logs and drills name engine i of group g: "engine i" in the plain group, else
--- "<group> engine i".
function M.engine_label(groups, g, i)
  return g == M.plain_group(groups) and ("engine " .. i) or ("%s engine %d"):format(g.name, i)
end

local function stop_all(groups, launches)
  for _, g in ipairs(groups) do
    if g.router then g.router:stop() end
  end
  for _, l in ipairs(launches or {}) do l.handle:stop() end   -- spawned, serving or not
  for _, g in ipairs(groups) do
    for _, e in ipairs(g.engines) do e:stop() end
  end
end

-- Each server group of every model with its engines' options, in order (groups, their
-- server groups), before anything starts: {model, si, sg, eopts, backend}.
local function engine_specs(opt, models, base_opts)
  local specs = {}
  for _, m in ipairs(models) do
    for si, sg in ipairs(m.server_groups) do
      local eopts = {}
      for k, v in pairs(base_opts) do eopts[k] = v end
      eopts.model = m.model_path
      if m.backend then eopts.backend = m.backend end   -- else the flags' (job.engine_opts.backend)
      for k, v in pairs(sg.overrides) do eopts[k] = v end
      if eopts.backend == "native" then eopts.backend = nil end   -- rl.engine's default
      local backend = eopts.backend or "native"
      for k in pairs(base_opts) do   -- another backend's pass-through flags (vllm_args, ...) stay with it
        local b = k:match("^(%w+)_args$")
        if b and b ~= backend and sg.overrides[k] == nil then eopts[k] = nil end
      end
      if backend == "vllm" then   -- --vllm-<flag> and --vllm-python reach a vLLM group whatever the policy's backend
        if eopts.vllm_args == nil then eopts.vllm_args = opt.vllm_args end
        if eopts.python == nil then eopts.python = opt.vllm_python end
        -- --lora-rank: the policy's vLLM servers load the trainer's adapter at run time
        if (opt.lora_rank or 0) > 0 and m.update_weights and eopts.max_lora_rank == nil then
          eopts.max_lora_rank = opt.lora_rank
        end
      elseif sg.overrides.python == nil then
        eopts.python = nil   -- vLLM's python, when the flags' backend is vllm
      end
      local role = sg.worker_type or "regular"
      pd.engine_options(role, eopts, backend, opt, (opt.sglang_config and ("--sglang-config " .. opt.sglang_config .. ": ")
        or "") .. (sg.where or m.where) .. (opt.sglang_config and ".worker_type" or ""))
      specs[#specs + 1] = { model = m, si = si, sg = sg, eopts = eopts, backend = backend, role = role }
    end
  end
  return specs
end

--- What M.start would launch, before anything starts (checked as M.start checks it):
--- per group {name, pd, engines = {{role, opts}, ...}} — each engine's role (regular,
--- prefill or decode) and its rl.engine.start options, in launch order. A PD group's
--- router pairs them (rl.recipe.pd.router_options, once their bootstrap ports are known).
function M.launch_plan(opt, job, base_opts)
  job.engine_models = job.engine_models or models_of(opt, job)
  local out, by_model = {}, {}
  for _, sp in ipairs(engine_specs(opt, job.engine_models, base_opts)) do
    local g = by_model[sp.model]
    if not g then
      g = { name = sp.model.name, pd = sp.model.pd or false, engines = {} }
      by_model[sp.model] = g
      out[#out + 1] = g
    end
    for _ = 1, sp.sg.num_engines do g.engines[#g.engines + 1] = { role = sp.role, opts = sp.eopts } end
  end
  return out
end

-- Every engine of every group spawned (in order: groups, their server groups, engines),
-- before any is waited for. Returns the launches {handle, group, index (in its group),
-- eopts}; on a spawn failure stops those spawned and raises.
local function launch_all(opt, models, groups, base_opts)
  local launches, by_model = {}, {}
  for _, sp in ipairs(engine_specs(opt, models, base_opts)) do
    local m, sg, eopts = sp.model, sp.sg, sp.eopts
    local g = by_model[m]
    if not g then
      g = { name = m.name, model_path = m.model_path, update_weights = m.update_weights,
            engines = {}, engine_opts = {}, server_groups = {}, launched = 0, pd = m.pd or nil, roles = {} }
      by_model[m] = g
      groups[#groups + 1] = g
    end
    g.backend = sp.backend
    g.server_groups[sp.si] = { num_engines = sg.num_engines, engine_opts = eopts, worker_type = sp.role }
    for _ = 1, sg.num_engines do
      g.launched = g.launched + 1
      local n = g.launched
      g.roles[n] = sp.role
      local ok, l, err = pcall(rl.engine.launch, eopts)
      if not ok or not l then
        stop_all(groups, launches)
        if not ok then   -- a bad option: the config's fault
          rl.args.usage_error(("%s%s: %s"):format(opt.sglang_config and ("--sglang-config " .. opt.sglang_config .. ": ")
            or "", sg.where or m.where, tostring(l):gsub("^[^:]*:%d+: ", "")))
        end
        error(("engine %d of group '%s' did not start: %s"):format(n, m.name, tostring(err)), 0)
      end
      launches[#launches + 1] = { handle = l, group = g, index = n, eopts = eopts }
    end
  end
  return launches
end

-- ---- the engines a job asks for, against the machine ----------------------------

--- Engines one job may start on this machine, whatever the config says.
M.MAX_ENGINES = 64
-- Host memory beyond weights and KV cache: an idle `rlhost engine` process (~146 MiB
-- measured), a thread engine's buffers, a vLLM server's python, torch and engine core.
local OVERHEAD = { process = 160 * 2 ^ 20, thread = 16 * 2 ^ 20, vllm = 1.5 * 2 ^ 30 }

local function mem_available()
  local text = require("rl._fs").read_file("/proc/meminfo")
  local kb = text and text:match("MemAvailable:%s*(%d+)")
  return kb and tonumber(kb) * 1024
end

local function dtype_bytes(dtype)
  return (dtype == "bfloat16" or dtype == "float16" or dtype == "half") and 2 or 4
end

-- Host memory one engine of `sp` takes — its process, and on the CPU its weights and
-- KV cache budget — estimated from the model's config.json; nil when unknown.
local function engine_bytes(sp)
  local eopts = sp.eopts
  local shape = require("rl._model_shape").read(eopts.model)
  if not shape then return nil end
  if sp.backend == "vllm" then   -- on the CPU (rlhost asks for float32), KV space VLLM_CPU_KVCACHE_SPACE GiB
    local kv = tonumber(eopts.kv_cache_space or os.getenv("VLLM_CPU_KVCACHE_SPACE") or "") or 1
    return OVERHEAD.vllm + shape.parameters * 4 + kv * 2 ^ 30
  end
  if sp.backend ~= "native" then return nil end
  local overhead = OVERHEAD[eopts.mode == "process" and "process" or "thread"]
  if (eopts.device or "cpu") ~= "cpu" then return overhead end   -- weights and KV cache on the device
  local bytes = dtype_bytes(eopts.dtype)
  local per_token = require("rl._model_shape").kv_bytes_per_token(shape, bytes)
  local kv
  if (eopts.kv_cache_tokens or 0) > 0 then
    kv = eopts.kv_cache_tokens * per_token
  else   -- the engine's budget: kv_cache_bytes, at most every running request at full context
    local context = eopts.context_length or shape.context or 2048
    kv = math.min(eopts.kv_cache_bytes or 2 ^ 30, (eopts.max_running_requests or 64) * context * per_token)
  end
  return overhead + shape.parameters * bytes + kv
end

local function mib(b) return ("%.0f MiB"):format(b / 2 ^ 20) end

--- Checks the engines the job asks for (--sglang-config's groups, or --num-engines)
--- against the machine before any starts: at most MAX_ENGINES, and their estimated
--- memory (weights, KV cache budget, process) within what the machine has available.
--- Raises a usage error naming the field; returns {engines = n, bytes = estimate}.
function M.check_capacity(opt, job, base_opts)
  job.engine_models = job.engine_models or models_of(opt, job)
  local function where(sp)
    if opt.sglang_config then return ("--sglang-config %s: %s.num_gpus"):format(opt.sglang_config, sp.sg.where) end
    return "--num-engines"
  end
  local total, bytes, biggest, lines = 0, 0, nil, {}
  for _, sp in ipairs(engine_specs(opt, job.engine_models, base_opts)) do
    local n = sp.sg.num_engines
    total = total + n
    if not biggest or n > biggest.sg.num_engines then biggest = sp end
    local each = engine_bytes(sp)
    if each then
      bytes = bytes + n * each
      lines[#lines + 1] = ("%s: %d x ~%s"):format(sp.model.name, n, mib(each))
    end
  end
  if total > M.MAX_ENGINES then
    rl.args.usage_error(("%s: %d engines in all (%d here), more than the %d one job runs on a machine "
      .. "(hint: one engine per device or a few per CPU; num_gpus counts engines)"):format(where(biggest), total,
      biggest.sg.num_engines, M.MAX_ENGINES))
  end
  local avail = mem_available()
  if avail and bytes > avail then
    rl.args.usage_error(("%s: %d engine(s) need about %s of memory (%s: weights, KV cache budget and process each), "
      .. "but the machine has %s available (hint: fewer engines, a smaller --max-running-requests, or "
      .. "kv_cache_bytes / kv_cache_tokens in the group's overrides)"):format(where(biggest), total, mib(bytes),
      table.concat(lines, ", "), mib(avail)))
  end
  return { engines = total, bytes = bytes }
end

-- slime's "Ports for engine N: {...}" line, for each engine of the groups (in order).
local function log_ports(groups)
  local n = 0
  for _, g in ipairs(groups) do
    for _, e in ipairs(g.engines) do
      local host, port = tostring(e.url):match("^https?://%[?([^%]/]-)%]?:(%d+)")
      log.info("Ports for engine %d: {'host': '%s', 'port': %s%s}", n, tostring(host), tostring(port),
        #groups > 1 and (", 'group': '" .. g.name .. "'") or "")
      n = n + 1
    end
  end
end

-- The router of a group: the one running at --sglang-router-ip/port (the policy's group
-- only; the engines are registered with it), else a new one on --sglang-router-port (the
-- first group; others on free ports, as slime) with --sglang-router-request-timeout-secs.
local function group_router(opt, urls, first, g)
  local ropts = { workers = urls, policy = opt.router_policy, port = first and opt.sglang_router_port or nil,
                  request_timeout = opt.sglang_router_request_timeout_secs }
  if g and g.pd then   -- prefill/decode: the router pairs them (rl.recipe.pd)
    local o, err = pd.router_options(ropts, g.engines, g.roles)
    if not o then return nil, err end
    return rl.router.start(o)
  end
  if opt.sglang_router_ip and first then
    local url = ("http://%s:%d"):format(opt.sglang_router_ip, opt.sglang_router_port)
    local r, err = rl.router.connect(url)
    if not r then return nil, err .. " (--sglang-router-ip/--sglang-router-port name a router that must be running)" end
    for _, u in ipairs(urls) do
      local ok, aerr = r:add(u)
      if not ok then return nil, ("registering %s with the router at %s: %s"):format(u, url, tostring(aerr)) end
    end
    r.reused = true   -- its stop() takes our engines out and leaves it running
    return r
  end
  return rl.router.start(ropts)
end

-- --rollout-external: the policy's group from the engines at the given addresses.
local function start_external(opt)
  local engines, backend = require("rl.recipe.external").connect_all(opt.rollout_external_engine_addrs,
    opt.rollout_health_check_timeout)
  local urls = {}
  for k, e in ipairs(engines) do urls[k] = e.url end
  local router, err = group_router(opt, urls, true)
  if not router then error("router did not start: " .. tostring(err), 0) end
  local g = { name = "default", engines = engines, engine_opts = {}, backend = backend, update_weights = true,
              router = router, url = router.url, offload = false, external = true }
  log_ports({ g })
  return { g, default = g }, g
end

--- Starts every group's engines and router. base_opts: rl.engine.start's options from
--- the flags (job.engine_opts: model, mode, threads, ...); a group's backend, model and
--- overrides go on top, unchanged, so backend options reach rl.engine.start as given.
--- Every engine of every group is spawned first, then all are waited for together (each
--- under its own ready_timeout): a job's start takes about its slowest engine's, not
--- their sum. Thread-mode engines load in the spawning call, one after another.
--- Returns the groups in order (also by name: groups.ref, groups.default) and the
--- policy group (the one that takes weight updates, else nil).
function M.start(opt, job, base_opts)
  if opt.rollout_external then return start_external(opt) end
  local models = job.engine_models or models_of(opt, job)
  local offload = M.offload_options(opt)
  local groups, by_name, policy = {}, {}, nil
  local launches = launch_all(opt, models, groups, base_opts)
  local handles = {}
  for k, l in ipairs(launches) do handles[k] = l.handle end
  local ok, i, err = rl.engine.wait_all(handles)
  if not ok then
    stop_all(groups, launches)
    local l = launches[i]
    error(("engine %d of group '%s' did not start: %s"):format(l.index, l.group.name, tostring(err)), 0)
  end
  for _, l in ipairs(launches) do
    local g = l.group
    g.engines[l.index], g.engine_opts[l.index] = l.handle.engine, l.eopts
  end
  for gi, m in ipairs(models) do
    local g = groups[gi]
    by_name[m.name] = g
    local urls = {}
    for k, e in ipairs(g.engines) do urls[k] = e.url end
    local router, rerr = group_router(opt, urls, gi == 1, g)
    if not router then
      stop_all(groups)
      error(("router of group '%s' did not start: %s"):format(m.name, tostring(rerr)), 0)
    end
    g.router, g.url = router, router.url
    if m.update_weights then policy = g end
    -- slime's needs_offload: every group shares the machine with the trainer here
    g.offload = (offload and m.offload ~= false) or false
    if g.offload and g.backend == "vllm" and not M.gpu_available() then
      log.warn("--offload-rollout: group '%s' (vLLM) keeps its memory: vLLM's sleep mode needs a GPU, not supported "
        .. "on this platform", m.name)
      g.offload = false
    elseif g.offload and type(g.engines[1].release_memory) ~= "function" then
      log.warn("--offload-rollout: group '%s' keeps its memory: its %s engines cannot release it", m.name, g.backend)
      g.offload = false
    end
    if #models > 1 or opt.sglang_config or g.pd then
      log.info("engine group '%s': %d %s engine(s) of %s behind %s%s%s%s", m.name, #g.engines, g.backend, m.model_path,
        g.url, M.roles_summary(g), m.update_weights and " (takes weight updates)" or " (frozen)",
        g.offload and ", offloaded while training" or "")
    end
  end
  for name, g in pairs(by_name) do groups[name] = g end
  log_ports(groups)
  return groups, policy
end

--- A PD group's split as logs say it (" (1 prefill + 1 decode)"), else "".
function M.roles_summary(g)
  if not g.pd then return "" end
  local n = { prefill = 0, decode = 0 }
  for _, r in ipairs(g.roles or {}) do n[r] = (n[r] or 0) + 1 end
  return (" (%d prefill + %d decode)"):format(n.prefill, n.decode)
end

--- Puts engine i of group g (back) into its router: as a prefill or decode worker in a
--- PD group (rl.recipe.pd.add_worker), else router:add. The entry, or nil and why.
function M.router_add(g, i)
  local eng = g.engines[i]
  if g.pd then return pd.add_worker(g.router, eng, g.roles[i]) end
  return g.router:add(eng.url)
end

--- Asks group g through its router: one SGLang-shaped /generate request (req: text or
--- input_ids, sampling_params, return_logprob) -> the SGLang-shaped answer, or nil and
--- why; a vLLM group's request goes to /v1/completions (rl.engine.vllm translates), so
--- a reward asks any group the same way. Also returns {worker = the engine's URL (the
--- router's x-rlhost-worker)}. timeout: seconds (default 60).
function M.generate(g, req, timeout)
  local json = require "rl.json"
  local vllm = g.backend == "vllm" and require "rl.engine.vllm"
  local path, body = require("rl.engine.vllm").target(req, g.backend)
  if not path then return nil, body end
  local url = g.url .. path
  local resp, err = rl.http.post(url, body, { timeout = timeout or 60 })
  if not resp then return nil, ("POST %s: %s"):format(url, tostring(err)) end
  if resp.status ~= 200 then return nil, ("POST %s: HTTP %d: %s"):format(url, resp.status, resp.body:sub(1, 300)) end
  local worker = (resp.headers or {})["x-rlhost-worker"]
  local out = json.decode(resp.body)
  if type(out) ~= "table" then return nil, ("POST %s: bad JSON"):format(url) end
  if vllm then   -- vLLM's answers carry no weight version: the serving engine's record
    local version
    for _, e in ipairs(g.engines) do if e.url == worker then version = e.weight_version end end
    local outs, terr = vllm.generate_response(out, version or (g.engines[1] or {}).weight_version)
    if not outs then return nil, ("POST %s: %s"):format(url, terr) end
    out = #outs == 1 and outs[1] or outs
  end
  return out, nil, { worker = worker }
end

function M.gpu_available()
  local ok, info = pcall(function() return rl.torch.info() end)
  return ok and type(info) == "table" and info.cuda_available == true
end

-- ---- offload / onload (slime's RolloutManager.offload, onload_weights, onload_kv) ---

local LEVELS = { kv_cache = "kv_cache", weight = "weights", weights = "weights" }

--- Whether the job offloads (--offload-rollout, on by default under --colocate as in
--- slime) and what (--offload-rollout-level: kv_cache, weight): the memory tags, or nil.
function M.offload_options(opt)
  local on = opt.offload_rollout
  if on == nil then on = opt.colocate end
  if not on then return nil end
  local tags = {}
  for _, l in ipairs(opt.offload_rollout_level or { "kv_cache", "weight" }) do
    if not LEVELS[l] then
      rl.args.usage_error(("--offload-rollout-level: unknown level '%s' (kv_cache, weight)"):format(tostring(l)))
    end
    tags[#tags + 1] = LEVELS[l]
  end
  return tags
end

local function each_offloaded(job, fn)
  local errs = {}
  for _, g in ipairs(job.groups or {}) do
    if g.offload then
      for i, e in ipairs(g.engines) do
        local r, err = fn(e)
        if not r then errs[#errs + 1] = ("group '%s' engine %d: %s"):format(g.name, i, tostring(err)) end
      end
    end
  end
  return errs
end

--- Releases the weights and KV cache of every offloaded group (--offload-rollout-level
--- names what); health monitoring pauses until onload_kv.
function M.offload(job)
  if job.offloaded then return end
  local any = false
  for _, g in ipairs(job.groups or {}) do any = any or g.offload end
  if not any then return end
  if job.health then job.health:hold("offloaded") end
  local tags = M.offload_options(job.opt)
  local t0, n = rl.now(), 0
  local errs = each_offloaded(job, function(e) n = n + 1; return e:release_memory(tags) end)
  job.offloaded = true
  if not job.offload_logged then   -- said once
    job.offload_logged = true
    log.info("--offload-rollout: %d engine(s) released %s for training in %.2f s; resumed around the weight sync",
      n - #errs, table.concat(tags, " and "), rl.now() - t0)
  end
  if #errs > 0 then log.warn("offload: %s", table.concat(errs, "; ")) end
end

--- Brings the weights back (before the weight sync; a frozen group reloads its own model).
function M.onload_weights(job)
  if not job.offloaded then return end
  local errs = each_offloaded(job, function(e) return e:resume_memory({ "weights" }) end)
  if #errs > 0 and job.health then   -- an engine that died meanwhile: the probes before the sync restart it
    log.warn("onload of the weights failed: %s; fault tolerance probes and restarts it before the sync",
      table.concat(errs, "; "))
  elseif #errs > 0 then
    error("onload of the weights failed: " .. table.concat(errs, "; "), 0)
  end
end

--- Brings the KV cache back (after the weight sync) and resumes health monitoring.
function M.onload_kv(job)
  if not job.offloaded then return end
  local errs = each_offloaded(job, function(e) return e:resume_memory({ "kv_cache" }) end)
  job.offloaded = false
  if job.health then job.health:release("offloaded") end
  if #errs > 0 and job.health then
    log.warn("onload of the KV cache failed: %s; fault tolerance's probes find the engine", table.concat(errs, "; "))
  elseif #errs > 0 then
    error("onload of the KV cache failed: " .. table.concat(errs, "; "), 0)
  end
end

--- Stops every group's router and engines.
function M.stop(job)
  if job.groups then stop_all(job.groups) end
end

return M
