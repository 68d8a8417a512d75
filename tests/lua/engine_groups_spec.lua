-- rl.recipe.engines: engine groups (slime's --sglang-config server groups) with real
-- engines and routers, the config's checks, fault tolerance per group
-- (rl.recipe.health) and offload/onload of weights and KV cache.
local rl = require "rl"
local engines = require "rl.recipe.engines"
local health = require "rl.recipe.health"

local STORIES = test_data("models/stories260K")
local GREEDY = { temperature = 0, max_new_tokens = 8, ignore_eos = true }

local HERE = debug.getinfo(1, "S").source:match("^@(.*)/[^/]*$") or "."
local files = dofile(HERE .. "/support/config_files.lua")
local usage_msg, config = files.usage_msg, files.config

-- A second model: a random Llama with stories260K's tokenizer (a "reference model").
local function second_model()
  local cfg = rl.json.decode(read_file(STORIES .. "/config.json"))
  return assert(rl.model.init { config = cfg, seed = 7, tokenizer = STORIES })
end

describe("rl.recipe.engines.load_config", function()
  local YAML = [[
# a policy and a frozen reference model
sglang:
  - name: actor
    server_groups:
      - worker_type: regular
        num_gpus: 2
        overrides: {max-running-requests: 8}
  - name: ref
    model_path: /models/ref/
    update_weights: false
    backend: vllm
    server_groups:
      - num_gpus: 1
        overrides:
          vllm_args: [--max-num-seqs, "4"]
]]

  it("reads slime's shape from YAML, JSON and Lua alike, with slime's defaults", function()
    local want
    for _, f in ipairs {
      { "g.yaml", YAML },
      { "g.json", [[{"sglang": [{"name": "actor", "server_groups": [{"worker_type": "regular", "num_gpus": 2,
        "overrides": {"max-running-requests": 8}}]}, {"name": "ref", "model_path": "/models/ref/",
        "update_weights": false, "backend": "vllm", "server_groups": [{"num_gpus": 1,
        "overrides": {"vllm_args": ["--max-num-seqs", "4"]}}]}]}]] },
      { "g.lua", [[return { sglang = { { name = "actor", server_groups = { { worker_type = "regular", num_gpus = 2,
        overrides = { ["max-running-requests"] = 8 } } } }, { name = "ref", model_path = "/models/ref/",
        update_weights = false, backend = "vllm", server_groups = { { num_gpus = 1,
        overrides = { vllm_args = { "--max-num-seqs", "4" } } } } } } }]] },
    } do
      local models = engines.load_config(config(f[1], f[2]), "/models/policy")
      local got = {}
      for i, m in ipairs(models) do
        local sgs = {}
        for j, sg in ipairs(m.server_groups) do sgs[j] = { n = sg.num_engines, overrides = sg.overrides } end
        got[i] = { m.name, m.model_path, m.update_weights, m.backend, sgs }
      end
      eq(got[1], { "actor", "/models/policy", true, nil, { { n = 2, overrides = { max_running_requests = 8 } } } })
      eq(got[2], { "ref", "/models/ref", false, "vllm", { { n = 1, overrides = { vllm_args = { "--max-num-seqs", "4" } } } } })
      if want then eq(got, want, f[1]) end
      want = got
    end
  end)

  it("infers update_weights from the model path, as slime does", function()
    local p = config("g.yaml", "sglang:\n  - name: judge\n    model_path: /models/judge\n    server_groups: [{num_gpus: 1}]\n"
      .. "  - name: actor\n    model_path: /models/policy\n    server_groups: [{num_gpus: 1}]\n")
    local models = engines.load_config(p, "/models/policy")
    eq(models[1].update_weights, false)
    eq(models[2].update_weights, true)
  end)

  it("refuses a bad config with the file, the field and a hint", function()
    local cases = {
      { "sglang:\n  - name: a\n    server_groups: [{num_gpus: 0}]\n", "sglang%[1%] %(a%)%.server_groups%[1%]%.num_gpus: expected the number of engines" },
      { "sglang:\n  - name: a\n    server_gropus: [{num_gpus: 1}]\n", "sglang%[1%] %(a%): unknown field%(s%) server_gropus" },
      { "sglang:\n  - name: a\n    server_groups: [{num_gpus: 1, worker_type: prefill}]\n", "server_groups: has prefill groups but no decode group" },
      { "sglang:\n  - name: a\n    server_groups: [{num_gpus: 1, overrides: [1]}]\n", "server_groups%[1%]%.overrides: expected a mapping" },
      { "sglang:\n  - name: a\n    server_groups: [{num_gpus: 1}]\n  - name: b\n    update_weights: true\n"
        .. "    server_groups: [{num_gpus: 1}]\n", "at most one model may take weight updates %(update_weights: true%); got a, b" },
      { "sglang:\n  - name: a\n    server_groups: [{num_gpus: 1}]\n  - name: a\n    server_groups: [{num_gpus: 1}]\n", "the name 'a' is used twice" },
      { "sglang:\n  - name: a\n    update_weights: yes please\n    server_groups: [{num_gpus: 1}]\n", "update_weights: expected a boolean" },
      { "server_groups: [{num_gpus: 1}]\n", "expected a top%-level 'sglang' list" },
      { "sglang:\n  - name: a\n    server_groups: [{num_gpus: 1}\n", "g%.yaml:3: '%[' is not closed" },
      { "sglang:\n  - name: a\n  server_groups: 1\n", "g%.yaml:3: 'server_groups: 1' does not fit here" },
    }
    for _, c in ipairs(cases) do
      local path = config("g.yaml", c[1])
      local msg = usage_msg(function() engines.load_config(path, "/models/policy") end)
      ok(msg:find("--sglang-config " .. path, 1, true), msg)
      ok(msg:find(c[2]), ("%q does not match %q"):format(msg, c[2]))
    end
    local msg = usage_msg(function() engines.load_config("/nonexistent/g.yaml", "/m") end)
    ok(msg:find("--sglang-config /nonexistent/g.yaml: cannot read it", 1, true), msg)
  end)
end)

-- A job as rl.recipe.setup makes it, with the two groups of `yaml` started.
local function start_job(yaml, extra)
  local opt = { sglang_config = config("groups.yaml", yaml), engine_mode = "thread" }
  for k, v in pairs(extra or {}) do opt[k] = v end
  local job = { opt = opt, model_dir = STORIES }
  local groups, policy = engines.start(opt, job, { mode = "thread", threads = 1, max_running_requests = 4 })
  job.groups, job.engines, job.router = groups, policy.engines, policy.router
  return job
end

local function greedy(url, text)
  local r = assert(rl.http.json(rl.http.post(url .. "/generate", { text = text, sampling_params = GREEDY },
    { timeout = 60 })))
  return r.text, r.meta_info.weight_version
end

describe("engine groups with real engines", function()
  it("serve each model behind its own router; a sync reaches only the groups that take updates; a frozen "
    .. "group's engine restarts without a refit", function()
    local ref_dir = second_model()
    local job = start_job(("sglang:\n  - name: actor\n    server_groups: [{num_gpus: 2}]\n"
      .. "  - name: ref\n    model_path: %s\n    update_weights: false\n    server_groups: [{num_gpus: 1}]\n"):format(ref_dir))
    local ok_run, err = pcall(function()
      local g = job.groups
      eq({ #g, g[1].name, g[2].name, g.actor == g[1], g.ref == g[2] }, { 2, "actor", "ref", true, true })
      eq({ #g.actor.engines, #g.ref.engines, g.ref.update_weights }, { 2, 1, false })
      ok(g.actor.url ~= g.ref.url)
      -- each router serves its own model
      local info = assert(rl.http.json(rl.http.get(g.ref.url .. "/get_model_info", { timeout = 10 })))
      eq(info.model_path, ref_dir)
      local ref_text, ref_v = greedy(g.ref.url, "Once upon a time")
      local pol_text = greedy(g.actor.url, "Once upon a time")
      ok(ref_text ~= pol_text, "two different models answer differently")
      -- what a reward calls: the same answer through the group's router, and which engine served it
      local out, gerr, ginfo = engines.generate(g.ref, { text = "Once upon a time", sampling_params = GREEDY })
      ok(out, gerr)
      eq({ out.text, out.meta_info.weight_version, ginfo.worker }, { ref_text, ref_v, g.ref.engines[1].url })
      -- --fault-injection's view of the groups before they start
      eq(engines.plan(job.opt, job), { { name = "actor", update_weights = true, engines = { n = 2 } },
                                       { name = "ref", update_weights = false, engines = { n = 1 } } })

      -- a trainer step, then the fault-tolerant sync: the policy's engines take version 1
      local tr = assert(rl.trainer.new { model = STORIES, optimizer = { lr = 0.05 } })
      assert(tr:train { tokens = { { 1, 400, 401, 402, 403, 404 }, { 1, 300, 301, 302, 303, 304 } },
        response_lengths = { 4, 4 }, rewards = { 1, -1 }, loss_masks = { { 1, 1, 1, 1 }, { 1, 1, 1, 1 } } })
      local h = health.new(job, { interval = 60, timeout = 10 })
      local r = assert(h:sync_weights(tr))
      eq(r.versions, { r.weight_version, r.weight_version })
      for _, e in ipairs(g.actor.engines) do eq(e:stats().weight_version, r.weight_version) end
      local text2, v2 = greedy(g.ref.url, "Once upon a time")
      eq({ text2, v2 }, { ref_text, ref_v })                 -- the frozen group: same weights, same version
      local new_pol = greedy(g.actor.url, "Once upon a time")
      ok(new_pol ~= pol_text, "the policy answers with its new weights")

      -- the frozen engine dies: restarted before the next sync, back in its router at
      -- once with its own model, and not refit
      h:mark_dead(3, "drill")
      eq(h.states[3].label, "ref engine 1")
      r = assert(h:sync_weights(tr))
      eq(h.states[3].state, "healthy")
      eq(h.states[3].restarts, 1)
      eq({ greedy(g.ref.url, "Once upon a time") }, { ref_text, ref_v })
      local urls = {}
      for _, w in ipairs(g.ref.router:workers()) do urls[#urls + 1] = w.url end
      eq(urls, { g.ref.engines[1].url })
    end)
    engines.stop(job)
    if not ok_run then error(err, 0) end
  end, { timeout = 240 })

  it("offload releases weights and KV cache of every group; onload brings back the same answers", function()
    local job = start_job("sglang:\n  - name: actor\n    server_groups: [{num_gpus: 1}]\n"
      .. "  - name: ref\n    update_weights: false\n    offload: false\n    server_groups: [{num_gpus: 1}]\n",
      { offload_rollout = true })
    local ok_run, err = pcall(function()
      local g = job.groups
      eq({ g.actor.offload, g.ref.offload }, { true, false })
      local before = greedy(g.actor.url, "Once upon a time")
      engines.offload(job)
      eq(job.offloaded, true)
      eq(g.actor.engines[1]:stats().memory_released, true)
      eq(g.ref.engines[1]:stats().memory_released, false)   -- offload: false keeps its memory
      engines.onload_weights(job)
      engines.onload_kv(job)
      eq(job.offloaded, false)
      eq(g.actor.engines[1]:stats().memory_released, false)
      eq(greedy(g.actor.url, "Once upon a time"), before)
    end)
    engines.stop(job)
    if not ok_run then error(err, 0) end
  end, { timeout = 120 })

  it("resume brings back the last update when a directory holds it, else the model's weights at the start version",
    function()
    local eng = assert(rl.engine.start { model = STORIES, threads = 1, serve = false })
    local function run()
      local r = assert(eng:generate { input_ids = { 1 }, sampling_params = GREEDY })
      return { r.output_ids, r.meta_info.weight_version }
    end
    local ok_run, err = pcall(function()
      local orig = run()
      local other = second_model()
      assert(eng:update_weights_from_disk(other, "v9"))
      local v9 = run()
      ok(v9[1][1] ~= orig[1][1] or v9[1][2] ~= orig[1][2], "the other model answers differently")
      assert(eng:release_memory())
      assert(eng:resume_memory())
      eq(run(), v9)                                   -- that directory still holds the last update
      local tr = assert(rl.trainer.new { model = STORIES })
      assert(tr:sync(eng, "7"))                       -- in memory: nothing on disk holds it
      eq(run(), { orig[1], "7" })
      assert(eng:release_memory { "weights" })
      assert(eng:resume_memory { "weights" })
      eq(run(), orig)                                 -- the model's own weights, at the start version
    end)
    eng:stop()
    if not ok_run then error(err, 0) end
  end, { timeout = 120 })

  it("--offload-rollout-level and --colocate follow slime", function()
    eq(engines.offload_options { colocate = true }, { "kv_cache", "weights" })
    eq(engines.offload_options { colocate = true, offload_rollout = false }, nil)
    eq(engines.offload_options { offload_rollout = true, offload_rollout_level = { "kv_cache" } }, { "kv_cache" })
    local msg = usage_msg(function() engines.offload_options { offload_rollout = true, offload_rollout_level = { "kv" } } end)
    ok(msg:find("--offload-rollout-level: unknown level 'kv'", 1, true), msg)
  end)
end)

-- Our children (pid -> command line), from ps: the shell popen starts is left out.
local function children()
  local p = io.popen("ps -o pid=,args= --ppid " .. rl.process.pid())
  local out = {}
  for line in p:read("*a"):gmatch("[^\n]+") do
    local pid, args = line:match("^%s*(%d+)%s+(.*)$")
    if pid and not args:find("ps -o pid=,args=", 1, true) then out[tonumber(pid)] = args end
  end
  p:close()
  return out
end

local function new_children(before)
  local out = {}
  for pid, args in pairs(children()) do if not before[pid] then out[#out + 1] = pid .. " " .. args end end
  return out
end

describe("engine start is concurrent", function()
  local TWO_GROUPS = "sglang:\n  - name: actor\n    server_groups: [{num_gpus: 2}]\n"
    .. "  - name: ref\n    model_path: %s\n    update_weights: false\n    server_groups: [{num_gpus: 1}]\n"

  local function start_processes(yaml)
    local opt = { sglang_config = config("groups.yaml", yaml), engine_mode = "process" }
    local job = { opt = opt, model_dir = STORIES }
    local groups, policy = engines.start(opt, job, { mode = "process", threads = 1, max_running_requests = 4 })
    job.groups, job.engines, job.router = groups, policy and policy.engines, policy and policy.router
    return job
  end

  -- fn(job) with the engines of `yaml` started; they are stopped whatever it does.
  local function with_processes(yaml, fn)
    local job = start_processes(yaml)
    local ok_run, err = pcall(fn, job)
    engines.stop(job)
    if not ok_run then error(err, 0) end
  end

  it("spawns every process engine of every group before waiting for any to serve", function()
    with_processes(TWO_GROUPS:format(STORIES), function(job)
      local all = { job.groups.actor.engines[1], job.groups.actor.engines[2], job.groups.ref.engines[1] }
      local last_spawn, first_ready = -math.huge, math.huge
      for _, e in ipairs(all) do
        eq(e.mode, "process")
        ok(e.spawned_at and e.ready_at and e.spawned_at <= e.ready_at, "spawn and ready times recorded")
        last_spawn, first_ready = math.max(last_spawn, e.spawned_at), math.min(first_ready, e.ready_at)
      end
      ok(last_spawn < first_ready, ("the last engine was spawned (%.3f) before the first served (%.3f)")
        :format(last_spawn, first_ready))
      -- the order, indices and routers are the sequential start's
      local pids = {}
      for _, e in ipairs(all) do pids[#pids + 1] = e.pid end
      eq(#pids, 3)
      local kids = children()   -- what the leak checks below look at
      for _, pid in ipairs(pids) do ok(kids[pid] and kids[pid]:find(" engine ", 1, true), kids[pid]) end
      eq(#job.groups.actor.engine_opts, 2)
      local workers = {}
      for i, w in ipairs(job.groups.actor.router:workers()) do workers[i] = w.url end
      eq(workers, { job.groups.actor.engines[1].url, job.groups.actor.engines[2].url })
      ok(greedy(job.groups.ref.url, "Once upon a time"))
    end)
  end, { timeout = 240 })

  it("fault tolerance restarts the engines that died together", function()
    with_processes(TWO_GROUPS:format(STORIES), function(job)
      local h = health.new(job, { interval = 60, timeout = 10 })
      local old = { job.groups.actor.engines[1], job.groups.ref.engines[1] }
      h:mark_dead(1, "drill")
      h:mark_dead(3, "drill")
      eq({ h.states[1].label, h.states[3].label }, { "engine 1", "ref engine 1" })   -- the policy's keep plain names
      h:restart_dead()
      -- the policy's waits for its refit at the next sync; the frozen group's rejoined at once
      eq({ h.states[1].state, h.states[2].state, h.states[3].state }, { "restarting", "healthy", "healthy" })
      eq({ h.states[1].restarts, h.states[2].restarts, h.states[3].restarts }, { 1, 0, 1 })
      local new = { job.groups.actor.engines[1], job.groups.ref.engines[1] }
      for k = 1, 2 do ok(new[k] ~= old[k] and new[k].pid and new[k].url, "a new engine serves") end
      ok(math.max(new[1].spawned_at, new[2].spawned_at) < math.min(new[1].ready_at, new[2].ready_at),
        "both were spawned before either served")
      ok(greedy(job.groups.ref.url, "Once upon a time"))
    end)
  end, { timeout = 240 })

  it("an engine that cannot serve fails the start, naming its group, and leaves no process behind", function()
    local before = children()
    local okk, err = pcall(start_processes, TWO_GROUPS:format("/nonexistent/ref-model"))
    ok(not okk, "the start fails")
    err = tostring(err)
    ok(err:find("engine 1 of group 'ref' did not start: rl.engine.start: the engine process exited with status",
      1, true), err)
    ok(err:find("/nonexistent/ref-model", 1, true), "the log's tail names the model: " .. err)
    eq(new_children(before), {})
  end, { timeout = 240 })

  it("an engine that cannot be spawned (no vLLM python) stops those already spawned", function()
    local before = children()
    local okk, err = pcall(start_processes, "sglang:\n  - name: actor\n    server_groups: [{num_gpus: 1}]\n"
      .. "  - name: judge\n    update_weights: false\n    backend: vllm\n    server_groups: [{num_gpus: 1, "
      .. "overrides: {python: /nonexistent/bin/python}}]\n")
    ok(not okk, "the start fails")
    err = tostring(err)
    ok(err:find("engine 1 of group 'judge' did not start: rl.engine.start: backend 'vllm' needs vLLM's python, "
      .. "and /nonexistent/bin/python (opts.python) does not exist", 1, true), err)
    eq(new_children(before), {})
  end, { timeout = 120 })
end)
