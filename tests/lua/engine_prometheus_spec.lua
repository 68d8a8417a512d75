-- A real Prometheus, started by tools/prometheus.lua, scrapes a native engine
-- through the router's /engine_metrics, the router's /metrics and the trainer's
-- rl.metrics.serve endpoint; its HTTP API then returns sglang:* and rlhost_*
-- series. Without prometheus that test is skipped (ctest: Skipped) naming the package;
-- under CI=true it fails.
local rl = require "rl"
local read = read_file  -- spec.lua helpers

local SRC = os.getenv("RLHOST_SOURCE_DIR") or "."
local BIN = os.getenv("RLHOST_BIN") or rl.process.self()
local STORIES = test_data("models/stories260K")

local function wait_for(what, fn, timeout, log)
  local deadline = rl.now() + timeout
  while true do
    local v = fn()
    if v then return v end
    if rl.now() > deadline then
      error(("timed out after %d s waiting for %s; tools/prometheus.lua's log:\n%s"):format(timeout, what, read(log) or ""), 2)
    end
    rl.sleep(0.25)
  end
end

describe("tools/prometheus.lua", function()
  it("writes a config without starting anything", function()
    local out = os.tmpname()
    local code, text = rl.process.run({ BIN, "--no-control", SRC .. "/tools/prometheus.lua", "--router-url",
      "http://127.0.0.1:30000/", "--trainer-url", "http://127.0.0.1:9400", "--out", out, "--scrape-interval", "5s" }, { timeout = 30 })
    eq(code, 0, text)
    local cfg = read(out)
    ok(cfg:find("metrics_path: /engine_metrics\n    static_configs:\n      - targets: ['127.0.0.1:30000']", 1, true), cfg)
    ok(cfg:find("job_name: rlhost_trainer", 1, true), cfg)
    ok(cfg:find("scrape_interval: 5s", 1, true), cfg)
    code, text = rl.process.run({ BIN, "--no-control", SRC .. "/tools/prometheus.lua", "--router-url", "127.0.0.1:3000" }, { timeout = 30 })
    eq(code, 2, text)
    ok(text:find("--router-url: '127.0.0.1:3000' is not an http(s):// URL", 1, true), text)
    -- Prometheus's own checker accepts the config
    if not rl.process.which("promtool") then
      os.remove(out)
      skip("promtool is not installed (`promtool check config`)", "apt-get install prometheus (Debian; ships promtool), or scripts/bootstrap.sh --test-deps")
    end
    local c, o = rl.process.run({ "promtool", "check", "config", out }, { timeout = 30 })
    eq(c, 0, o)
    os.remove(out)
  end, { timeout = 60 })

  it("runs Prometheus, which scrapes sglang:* from the engines and rlhost_* from the trainer", function()
    if not rl.process.which("prometheus") then
      skip("prometheus is not installed", "apt-get install prometheus (Debian), or scripts/bootstrap.sh --test-deps")
    end
    local eng = assert(rl.engine.start { model = STORIES, threads = 1, port = 0 })
    local router = assert(rl.router.start { workers = { eng.url } })
    local trainer = assert(rl.metrics.serve {})
    local lg = assert(rl.metrics.logger { console = false })
    lg:log({ ["train/step"] = 1, ["train/loss"] = 0.5, ["train/kl_loss"] = 0.01 }, "train/step")
    lg:log({ ["train/step"] = 2, ["train/loss"] = 0.375, ["train/kl_loss"] = 0.02 }, "train/step")
    lg:log({ ["rollout/step"] = 0, ["rollout/raw_reward"] = 0.625 }, "rollout/step")

    local dir = os.tmpname()
    os.remove(dir)
    os.execute("mkdir -p '" .. dir .. "'")
    local log, ready = dir .. "/tool.log", dir .. "/prom.url"
    local p = assert(rl.process.spawn({ BIN, "--no-control", SRC .. "/tools/prometheus.lua", "--router-url", router.url,
      "--trainer-url", trainer:url(), "--out", dir .. "/prometheus.yml", "--start", "--storage", dir .. "/tsdb",
      "--retention", "1d", "--scrape-interval", "1s", "--listen", "127.0.0.1:0", "--ready-file", ready }, { log = log }))
    local ok_run, err = pcall(function()
      local api = wait_for("Prometheus to be ready", function()
        if not p:running() then error("tools/prometheus.lua exited early:\n" .. (read(log) or ""), 0) end
        local s = read(ready)
        return s and s:match("^(http://[%d%.:]+)")
      end, 60, log)
      for i = 1, 4 do
        assert(rl.http.json(rl.http.post(router.url .. "/generate",
          { text = "Once upon a time " .. i, sampling_params = { max_new_tokens = 16, temperature = 0 } })))
      end
      local function query(q)
        local r = rl.http.json(rl.http.get(api .. "/api/v1/query?query=" .. q:gsub("[^%w_]", function(c)
          return ("%%%02X"):format(c:byte()) end), { timeout = 5 }))
        local res = r and r.data and r.data.result
        return res and #res > 0 and res or nil
      end
      local res = wait_for("sglang:num_running_reqs", function() return query("sglang:num_running_reqs") end, 60, log)
      eq(res[1].metric.worker, eng.url)
      eq(res[1].metric.job, "rlhost_engines")
      wait_for("sglang:generation_tokens_total >= 64", function()
        local r = query("sglang:generation_tokens_total")
        return r and tonumber(r[1].value[2]) >= 64
      end, 60, log)
      res = wait_for("rlhost_train_loss", function() return query("rlhost_train_loss") end, 60, log)
      eq(tonumber(res[1].value[2]), 0.375)
      eq(res[1].metric.job, "rlhost_trainer")
      wait_for("rlhost_router_requests_total", function() return query("rlhost_router_requests_total") end, 60, log)
    end)
    p:kill(2)  -- Ctrl-C: the tool stops Prometheus
    local code = p:wait(30)
    if not code then p:stop() end
    trainer:stop()
    router:stop()
    eng:stop()
    if not ok_run then error(err, 0) end
    eq(code, 0, read(log))
    ok(read(log):find("stopping prometheus", 1, true), read(log))
    os.execute("rm -rf '" .. dir .. "'")
  end, { timeout = 240 })
end)
