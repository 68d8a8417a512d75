-- rl.metrics.serve / rl.metrics.prometheus_text: the trainer's live /metrics.
local rl = require "rl"

local function promtool_check(text)
  if not rl.process.which("promtool") then return nil end
  local path = os.tmpname()
  local f = assert(io.open(path, "w")); f:write(text); f:close()
  local code, out = rl.process.run({ "/bin/sh", "-c", 'promtool check metrics < "$0"', path }, { timeout = 30 })
  os.remove(path)
  return code, out
end

describe("rl.metrics Prometheus endpoint", function()
  it("exports the last value of every logged numeric key as a gauge with HELP and TYPE", function()
    local srv = assert(rl.metrics.serve {})
    ok(srv:url():match("^http://127%.0%.0%.1:%d+$"), srv:url())
    local lg = assert(rl.metrics.logger { console = false })
    lg:log({ ["train/step"] = 1, ["train/loss"] = 0.5, ["train/pg_clipfrac"] = 0.1 }, "train/step")
    lg:log({ ["train/step"] = 2, ["train/loss"] = 0.25, ["train/kl_loss"] = 1e-5 }, "train/step")
    rl.metrics.logger({ console = false }):log({ ["rollout/step"] = 7, ["rollout/raw_reward"] = 0.75,
      ["perf/request/e2e_latency/mean"] = 1.5, ["eval/gsm8k-pass@4"] = 0.5, ["rollout/note"] = "text",
      ["rollout/flag"] = true, ["perf/nan"] = 0 / 0 })
    local resp = assert(rl.http.get(srv:url() .. "/metrics"))
    eq(resp.status, 200)
    ok(resp.headers["content-type"]:find("text/plain; version=0.0.4", 1, true))
    local text = resp.body
    for line in ([[
# HELP rlhost_train_loss rl.metrics key train/loss (last logged value)
# TYPE rlhost_train_loss gauge
rlhost_train_loss 0.25
rlhost_train_kl_loss 1e-05
rlhost_train_pg_clipfrac 0.1
rlhost_train_step 2
rlhost_rollout_step 7
rlhost_rollout_raw_reward 0.75
rlhost_perf_request_e2e_latency_mean 1.5
rlhost_eval_gsm8k_pass_4 0.5
rlhost_rollout_flag 1
rlhost_perf_nan NaN]]):gmatch("[^\n]+") do
      ok(text:find("\n" .. line .. "\n", 1, true) or text:find("^" .. line:gsub("%p", "%%%0") .. "\n"), line .. "\n" .. text)
    end
    ok(not text:find("rollout_note", 1, true))
    ok(text:find("rlhost_metrics_last_log_timestamp_seconds %d"))
    eq(rl.http.get(srv:url() .. "/nope").status, 404)
    eq(rl.metrics.prometheus_text(), text, "the endpoint serves prometheus_text()")
    srv:stop()
  end)

  it("promtool check metrics accepts the exposition", function()
    if not rl.process.which("promtool") then
      skip("promtool is not installed (`promtool check metrics`)", "apt-get install prometheus (Debian; ships promtool), or scripts/bootstrap.sh --test-deps")
    end
    rl.metrics.logger({ console = false }):log({ ["train/step"] = 3, ["train/loss"] = 0.5, ["perf/nan"] = 0 / 0,
      ["eval/gsm8k-pass@4"] = 0.5 }, "train/step")
    local text = rl.metrics.prometheus_text()
    ok(text:find("rlhost_train_loss 0.5\n", 1, true), text)
    local code, out = promtool_check(text)
    eq(code, 0, out)
  end)

  it("notes once (at debug level) when two keys map to one name, and rejects bad options", function()
    rl.metrics.logger({ console = false }):log({ ["train/step"] = 1, ["x/a-b"] = 1, ["x/a_b"] = 2 })
    local text = rl.metrics.prometheus_text()
    local n = select(2, text:gsub("\nrlhost_x_a_b ", ""))
    eq(n, 1)
    -- the note goes to the log (stderr), once per key however often it is logged; a process
    -- of its own, so the log can be read
    local BIN = os.getenv("RLHOST_BIN") or rl.process.self()
    local code, log = rl.process.run({ BIN, "--no-control", "-e", [[
      rl.log.level("debug")
      local lg = rl.metrics.logger({ console = false })
      for step = 1, 3 do lg:log({ ["train/step"] = step, ["x/a-b"] = 1, ["x/a_b"] = 2 }) end
    ]] }, { timeout = 60 })
    eq(code, 0, log)
    local notes = select(2, log:gsub("both map to the Prometheus name rlhost_x_a_b; only the first is exported", ""))
    eq(notes, 1, log)
    ok(log:find("rl.metrics: 'x/a", 1, true), log)
    raises(function() rl.metrics.serve { prot = 1 } end, "rl.metrics.serve: unknown option 'prot'")
    local srv = assert(rl.metrics.serve {})
    local port = srv:port()
    local again, err = rl.metrics.serve { port = port }
    eq(again, nil)
    ok(err:find("cannot listen", 1, true), err)
    srv:stop()
  end)
end)
