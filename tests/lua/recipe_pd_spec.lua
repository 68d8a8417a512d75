-- rl.recipe.pd and the PD side of rl.recipe.engines: slime's --prefill-num-servers and
-- --sglang-config server groups with worker_type prefill/decode, parsed and checked, and
-- the launch plan (which engine gets which options, what the router is given), before
-- anything starts. The run itself: tests/e2e/test_recipe_pd.py.
local rl = require "rl"
local engines = require "rl.recipe.engines"
local pd = require "rl.recipe.pd"

local HERE = debug.getinfo(1, "S").source:match("^@(.*)/[^/]*$") or "."
local files = dofile(HERE .. "/support/config_files.lua")
local usage_msg, config = files.usage_msg, files.config

local BASE = { model = "/models/policy", mode = "process", threads = 1, max_running_requests = 8 }

-- The launch plan of `opt` as {group = {role, disaggregation_mode, bootstrap port, transfer backend}, ...}.
local function plan_of(opt)
  local out = {}
  for _, g in ipairs(engines.launch_plan(opt, { model_dir = "/models/policy" }, BASE)) do
    local rows = {}
    for i, e in ipairs(g.engines) do
      rows[i] = { e.role, e.opts.disaggregation_mode or "-", e.opts.disaggregation_bootstrap_port or "-",
                  e.opts.disaggregation_transfer_backend or "-" }
    end
    out[#out + 1] = { g.name, g.pd, rows }
  end
  return out
end

describe("--prefill-num-servers", function()
  it("makes the first N engines prefill and the rest decode, as slime", function()
    eq(plan_of { num_engines = 3, prefill_num_servers = 1 }, { { "default", true, {
      { "prefill", "prefill", 0, "-" }, { "decode", "decode", "-", "-" }, { "decode", "decode", "-", "-" } } } })
    eq(plan_of { num_engines = 4, prefill_num_servers = 2, disaggregation_transfer_backend = "tcp" },
      { { "default", true, { { "prefill", "prefill", 0, "tcp" }, { "prefill", "prefill", 0, "tcp" },
                             { "decode", "decode", "-", "tcp" }, { "decode", "decode", "-", "tcp" } } } })
    -- without it: one regular group, no disaggregation options at all
    eq(plan_of { num_engines = 2 }, { { "default", false, { { "regular", "-", "-", "-" }, { "regular", "-", "-", "-" } } } })
    -- every engine keeps the flags' options; fault drills see one group
    local g = engines.launch_plan({ num_engines = 2, prefill_num_servers = 1 }, { model_dir = "/m" }, BASE)[1]
    eq({ g.engines[1].opts.mode, g.engines[2].opts.threads, g.engines[2].opts.model }, { "process", 1, "/m" })
    eq(engines.plan({ num_engines = 2, prefill_num_servers = 1 }, { model_dir = "/m" }),
      { { name = "default", update_weights = true, engines = { n = 2 }, pd = true } })
  end)

  it("refuses a split that leaves no decode engine, a vLLM backend and flags it cannot take, naming the flag", function()
    local cases = {
      { { num_engines = 1, prefill_num_servers = 1 }, "--prefill-num-servers 1 leaves no decode engine: 1 engine(s) in all "
        .. "(hint: --num-engines or --rollout-num-gpus at least 2" },
      { { num_engines = 2, prefill_num_servers = 2 }, "--prefill-num-servers 2 leaves no decode engine" },
      { { num_engines = 2, prefill_num_servers = 0 }, "--prefill-num-servers must be an integer >= 1" },
      { { num_engines = 2, prefill_num_servers = 1, sglang_router_ip = "127.0.0.1", sglang_router_port = 30000 },
        "--sglang-router-ip with prefill/decode engines: not supported yet" },
      { { num_engines = 2, prefill_num_servers = 1, rollout_num_gpus_per_node = 2 },
        "--rollout-num-gpus-per-node with prefill/decode engines: not supported yet" },
      { { num_engines = 2, disaggregation_transfer_backend = "tcp" },
        "--disaggregation-transfer-backend needs prefill/decode engines (--prefill-num-servers N, or worker_type" },
    }
    for _, c in ipairs(cases) do
      local msg = usage_msg(function() plan_of(c[1]) end)
      ok(msg:find(c[2], 1, true), msg)
    end
    local msg = usage_msg(function()
      engines.launch_plan({ num_engines = 2, prefill_num_servers = 1 }, { model_dir = "/m" },
        { model = "/m", backend = "vllm" })
    end)
    ok(msg:find("--prefill-num-servers: worker_type prefill needs rlhost's native engines; the vllm backend does not "
      .. "disaggregate prefill and decode (hint: --rollout-backend native, or no --prefill-num-servers)", 1, true), msg)
  end)

  it("excludes --sglang-config and --rollout-external (slime's rules)", function()
    local slime_flags = require "rl.recipe.slime_flags"
    local msg = usage_msg(function() slime_flags.check { prefill_num_servers = 1, sglang_config = "g.yaml" } end)
    ok(msg:find("--sglang-config and --prefill-num-servers exclude each other", 1, true), msg)
    msg = usage_msg(function()
      slime_flags.check { prefill_num_servers = 1, rollout_external = true, rollout_external_engine_addrs = { "h:1" } }
    end)
    ok(msg:find("--rollout-external and --prefill-num-servers exclude each other", 1, true), msg)
  end)
end)

describe("--sglang-config worker_type prefill/decode", function()
  local YAML = [[
sglang:
  - name: actor
    server_groups:
      - worker_type: prefill
        num_gpus: 1
        overrides: {disaggregation-bootstrap-port: 0, disaggregation_transfer_backend: shm}
      - worker_type: decode
        num_gpus: 2
  - name: ref
    model_path: /models/ref
    update_weights: false
    server_groups:
      - worker_type: regular
        num_gpus: 1
]]

  it("reads the roles per server group; a PD model's engines get their modes, a regular model's none", function()
    local path = config("pd.yaml", YAML)
    local models = engines.load_config(path, "/models/policy")
    eq({ models[1].server_groups[1].worker_type, models[1].server_groups[2].worker_type,
         models[2].server_groups[1].worker_type }, { "prefill", "decode", "regular" })
    eq(plan_of { sglang_config = path }, {
      { "actor", true, { { "prefill", "prefill", 0, "shm" }, { "decode", "decode", "-", "-" }, { "decode", "decode", "-", "-" } } },
      { "ref", false, { { "regular", "-", "-", "-" } } } })
    -- a fixed bootstrap port for a single prefill engine stays as given
    path = config("pd.yaml", "sglang:\n  - name: a\n    server_groups:\n      - {worker_type: prefill, num_gpus: 1, "
      .. "overrides: {disaggregation_bootstrap_port: 8998}}\n      - {worker_type: decode, num_gpus: 1}\n")
    eq(plan_of { sglang_config = path }[1][3][1], { "prefill", "prefill", 8998, "-" })
  end)

  it("refuses a model with only one kind, regular mixed in, and options the worker_type sets, naming the field", function()
    local cases = {
      { "sglang:\n  - name: a\n    server_groups: [{num_gpus: 1, worker_type: prefill}]\n",
        "sglang[1] (a).server_groups: has prefill groups but no decode group: a prefill/decode model needs both" },
      { "sglang:\n  - name: a\n    server_groups: [{num_gpus: 2, worker_type: decode}]\n",
        "has decode groups but no prefill group" },
      { "sglang:\n  - name: a\n    server_groups: [{num_gpus: 1, worker_type: prefill}, {num_gpus: 1, worker_type: decode}, "
        .. "{num_gpus: 1}]\n", "sglang[1] (a).server_groups[3].worker_type: 'regular' next to prefill/decode groups in one "
        .. "model" },
      { "sglang:\n  - name: a\n    server_groups: [{num_gpus: 1, worker_type: encoder}]\n",
        "server_groups[1].worker_type: 'encoder' is not supported (regular, prefill or decode)" },
      { "sglang:\n  - name: a\n    server_groups: [{num_gpus: 1, worker_type: prefill}, {num_gpus: 1, worker_type: decode, "
        .. "overrides: {disaggregation_mode: prefill}}]\n",
        "server_groups[2].overrides.disaggregation_mode: set by the group's worker_type" },
      { "sglang:\n  - name: a\n    server_groups: [{num_gpus: 1, overrides: {disaggregation-mode: decode}}]\n",
        "server_groups[1].overrides.disaggregation_mode: set by the group's worker_type" },
      { "sglang:\n  - name: a\n    server_groups: [{num_gpus: 1, worker_type: prefill}, {num_gpus: 1, worker_type: decode, "
        .. "overrides: {disaggregation_bootstrap_port: 9000}}]\n",
        "server_groups[2].overrides.disaggregation_bootstrap_port: only a prefill group's engines take a bootstrap port" },
      { "sglang:\n  - name: a\n    server_groups: [{num_gpus: 2, worker_type: prefill, overrides: "
        .. "{disaggregation_bootstrap_port: 9000}}, {num_gpus: 1, worker_type: decode}]\n",
        "2 engines cannot share bootstrap port 9000 (hint: 0, a free one each)" },
    }
    for _, c in ipairs(cases) do
      local path = config("g.yaml", c[1])
      local msg = usage_msg(function() engines.load_config(path, "/models/policy") end)
      ok(msg:find("--sglang-config " .. path, 1, true), msg)
      ok(msg:find(c[2], 1, true), ("%q does not hold %q"):format(msg, c[2]))
    end
  end)

  it("refuses prefill/decode on a vLLM model, naming the config's field", function()
    local path = config("g.yaml", "sglang:\n  - name: a\n    backend: vllm\n    server_groups: [{num_gpus: 1, worker_type: "
      .. "prefill}, {num_gpus: 1, worker_type: decode}]\n")
    local msg = usage_msg(function() plan_of { sglang_config = path } end)
    ok(msg:find("--sglang-config " .. path .. ": sglang[1] (a).server_groups[1].worker_type: worker_type prefill needs "
      .. "rlhost's native engines; the vllm backend does not disaggregate prefill and decode (hint: backend: native for "
      .. "this model, or worker_type regular)", 1, true), msg)
  end)
end)

describe("the PD router's options", function()
  it("pair every prefill engine (with its bootstrap port) and every decode engine, the group's router options kept", function()
    -- started engines' handles as rl.engine returns them: url, and a prefill engine's bootstrap port
    local es = { { url = "http://127.0.0.1:4001", disaggregation_bootstrap_port = 8998 },
                 { url = "http://127.0.0.1:4002" }, { url = "http://127.0.0.1:4003" } }
    local o = assert(pd.router_options({ workers = { "x" }, policy = "round_robin", request_timeout = 60 }, es,
      { "prefill", "decode", "decode" }))
    eq(o, { pd_disaggregation = true, policy = "round_robin", request_timeout = 60,
            prefill = { { url = "http://127.0.0.1:4001", bootstrap_port = 8998 } },
            decode = { "http://127.0.0.1:4002", "http://127.0.0.1:4003" } })
    -- a role that is neither: an error, not a router that drops the engine
    local _, err = pd.router_options({}, { es[2] }, { "regular" })
    ok(err and err:find("engine 1 is regular, not prefill or decode", 1, true), err)
  end)

  it("takes a prefill engine's bootstrap port from its handle, else asks its /get_server_info", function()
    eq(pd.bootstrap_port { url = "http://127.0.0.1:1", disaggregation_bootstrap_port = 7001 }, 7001)
    -- no port on the handle: the engine is asked (here nothing listens: the error names the request)
    local p, perr = pd.bootstrap_port { url = "http://127.0.0.1:1" }
    eq(p, nil)
    ok(perr:find("GET http://127.0.0.1:1/get_server_info", 1, true), perr)
    local o, oerr = pd.router_options({}, { { url = "http://127.0.0.1:1" } }, { "prefill" })
    eq(o, nil)
    ok(oerr:find("/get_server_info", 1, true), oerr)
  end)
end)
