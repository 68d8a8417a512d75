--- rl.recipe.pd: prefill/decode disaggregation of an engine group (slime's
--- --prefill-num-servers and --sglang-config server groups with worker_type prefill and
--- decode). A PD group's prefill engines compute the prompt's KV cache and hand it to a
--- decode engine, which generates the response; the group's router sends each request to
--- a (prefill, decode) pair. Every name the engine and the router take lives here:
--- rl.recipe.engines and rl.recipe.health go through this module. See docs/recipes.md,
--- "Prefill/decode disaggregation".
local rl = require "rl"

local M = {}

M.ROLES = { regular = true, prefill = true, decode = true }

-- The native engine's options (rl.engine.start; kebab-case flags of `rlhost engine`).
local MODE, BOOTSTRAP, TRANSFER = "disaggregation_mode", "disaggregation_bootstrap_port", "disaggregation_transfer_backend"
M.TRANSFER_BACKENDS = { "auto", "shm", "tcp" }

--- Whether a model's server groups disaggregate ({{worker_type = ...}, ...}).
function M.is_pd(server_groups)
  for _, sg in ipairs(server_groups) do
    if sg.worker_type == "prefill" or sg.worker_type == "decode" then return true end
  end
  return false
end

--- Checks one model's server groups: with any prefill or decode group it needs both
--- (the router pairs them) and no regular one (a PD router sends every request to a
--- pair; a regular engine belongs in a model entry of its own). bad(field, msg) raises.
function M.check_model(server_groups, at, bad)
  local n = { regular = 0, prefill = 0, decode = 0 }
  for gi, sg in ipairs(server_groups) do
    local gat = ("%s.server_groups[%d]"):format(at, gi)
    if sg.overrides[MODE] ~= nil then
      bad(gat .. ".overrides." .. MODE, "set by the group's worker_type (prefill or decode); leave it out")
    end
    local port = sg.overrides[BOOTSTRAP]
    if port ~= nil and sg.worker_type ~= "prefill" then
      bad(gat .. ".overrides." .. BOOTSTRAP, "only a prefill group's engines take a bootstrap port (worker_type prefill)")
    end
    if port ~= nil and port ~= 0 and sg.num_engines > 1 then
      bad(gat .. ".overrides." .. BOOTSTRAP, ("%d engines cannot share bootstrap port %s (hint: 0, a free one each)")
        :format(sg.num_engines, tostring(port)))
    end
    n[sg.worker_type] = n[sg.worker_type] + sg.num_engines
  end
  if n.prefill + n.decode == 0 then return end
  if n.regular > 0 then
    for gi, sg in ipairs(server_groups) do
      if sg.worker_type == "regular" then
        bad(("%s.server_groups[%d].worker_type"):format(at, gi), "'regular' next to prefill/decode groups in one model: "
          .. "its router pairs a prefill with a decode engine for every request, and a regular engine is neither (hint: "
          .. "make every group of the model prefill or decode, or give the regular engines a model entry of their own)")
      end
    end
  end
  for _, role in ipairs { "prefill", "decode" } do
    if n[role] == 0 then
      bad(at .. ".server_groups", ("has %s groups but no %s group: a prefill/decode model needs both (hint: add "
        .. "{worker_type: %s, num_gpus: 1})"):format(role == "prefill" and "decode" or "prefill", role, role))
    end
  end
end

--- slime's --prefill-num-servers N: the first N engines of the default group prefill,
--- the rest decode. Returns its server groups; a usage error naming the flag otherwise.
function M.server_groups(opt)
  local n, total = opt.prefill_num_servers, opt.num_engines
  if type(n) ~= "number" or n < 1 or n % 1 ~= 0 then
    rl.args.usage_error(("--prefill-num-servers must be an integer >= 1 (got %s)"):format(tostring(n)))
  end
  if total - n < 1 then
    rl.args.usage_error(("--prefill-num-servers %d leaves no decode engine: %d engine(s) in all (hint: --num-engines "
      .. "or --rollout-num-gpus at least %d; the first %d engine(s) prefill, the rest decode)"):format(n, total, n + 1, n))
  end
  return { { worker_type = "prefill", num_engines = n, overrides = {}, where = "--prefill-num-servers" },
           { worker_type = "decode", num_engines = total - n, overrides = {}, where = "--prefill-num-servers" } }
end

--- The flags a PD job cannot take, and those only a PD job takes (any_pd: whether a
--- group disaggregates), checked before anything starts (usage errors naming them).
function M.check_options(opt, any_pd)
  if not any_pd then
    if opt.disaggregation_transfer_backend then
      rl.args.usage_error("--disaggregation-transfer-backend needs prefill/decode engines (--prefill-num-servers N, or "
        .. "worker_type prefill and decode in --sglang-config)")
    end
    return
  end
  if opt.sglang_router_ip then
    rl.args.usage_error("--sglang-router-ip with prefill/decode engines: not supported yet (rlhost starts the group's "
      .. "router in PD mode; hint: leave out --sglang-router-ip/--sglang-router-port)")
  end
  if opt.rollout_num_gpus_per_node then
    rl.args.usage_error("--rollout-num-gpus-per-node with prefill/decode engines: not supported yet (other hosts' "
      .. "engines join the router as regular workers; hint: one host, or no --prefill-num-servers)")
  end
end

--- An engine's options for its role: a prefill engine gets disaggregation_mode prefill and
--- a bootstrap port (the group's overrides', else 0: a free one), a decode engine
--- disaggregation_mode decode; --disaggregation-transfer-backend for both. Only rlhost's
--- native engines disaggregate: another backend is a usage error naming the field.
function M.engine_options(role, eopts, backend, opt, where)
  if role == "regular" or role == nil then return eopts end
  if backend ~= "native" then
    local hint = opt.sglang_config and "backend: native for this model, or worker_type regular"
      or "--rollout-backend native, or no --prefill-num-servers"
    rl.args.usage_error(("%s: worker_type %s needs rlhost's native engines; the %s backend does not disaggregate "
      .. "prefill and decode (hint: %s)"):format(where, role, backend, hint))
  end
  eopts[MODE] = role
  if role == "prefill" then
    if eopts[BOOTSTRAP] == nil then eopts[BOOTSTRAP] = 0 end
  else
    eopts[BOOTSTRAP] = nil
  end
  if eopts[TRANSFER] == nil and opt.disaggregation_transfer_backend then
    eopts[TRANSFER] = opt.disaggregation_transfer_backend
  end
  return eopts
end

--- The bootstrap port a started prefill engine listens on: its handle's, else its
--- /get_server_info's. nil and why when neither says.
function M.bootstrap_port(eng)
  local p = tonumber(eng[BOOTSTRAP])
  if p and p > 0 then return p end
  local resp, err = rl.http.get(eng.url .. "/get_server_info", { timeout = 30 })
  if not resp or resp.status ~= 200 then
    return nil, ("GET %s/get_server_info: %s"):format(eng.url, resp and ("HTTP " .. resp.status) or tostring(err))
  end
  local info = rl.json.decode(resp.body)
  p = type(info) == "table" and tonumber(info[BOOTSTRAP])
  if p and p > 0 then return p end
  return nil, ("%s/get_server_info reports no %s (is it a prefill engine?)"):format(eng.url, BOOTSTRAP)
end

-- One worker of a PD router: {url, bootstrap_port} for a prefill engine, the URL for a decode one.
local function member(role, eng)
  if role ~= "prefill" then return eng.url end
  local port, err = M.bootstrap_port(eng)
  if not port then return nil, err end
  return { url = eng.url, bootstrap_port = port }
end

--- rl.router.start's options for a PD group (base: the group's router options;
--- engines and roles: the group's, index by index), or nil and why.
function M.router_options(base, engines, roles)
  local o = {}
  for k, v in pairs(base) do o[k] = v end
  o.workers, o.pd_disaggregation, o.prefill, o.decode = nil, true, {}, {}
  for i, eng in ipairs(engines) do
    local m, err = member(roles[i], eng)
    if not m then return nil, err end
    local list = o[roles[i]]
    if not list then return nil, ("engine %d is %s, not prefill or decode"):format(i, tostring(roles[i])) end
    list[#list + 1] = m
  end
  return o
end

--- Puts engine eng (role: prefill or decode) into a PD router (a restarted engine's
--- rejoin): router:add(url, {worker_type, bootstrap_port}), POST /workers on the wire.
--- The router's entry, or nil and why.
function M.add_worker(router, eng, role)
  local m, err = member(role, eng)
  if not m then return nil, err end
  return router:add(eng.url, { worker_type = role, bootstrap_port = type(m) == "table" and m.bootstrap_port or nil })
end

return M
