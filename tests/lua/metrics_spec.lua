local rl = require "rl"
local metrics = rl.metrics
local json = rl.json
local read = read_file  -- spec.lua helpers

local function lines_of(path)
  local out = {}
  for line in read(path):gmatch("([^\n]*)\n") do out[#out + 1] = assert(json.decode(line)) end
  return out
end

local function rm_rf(dir) os.execute("rm -rf '" .. dir .. "'") end

local function is_nan(v) return v ~= v end

describe("rl.metrics.statistics", function()
  it("mean, median, max, min like numpy", function()
    eq(metrics.statistics { 3, 1, 2 }, { mean = 2, median = 2, max = 3, min = 1 })
    eq(metrics.statistics { 4, 1, 3, 2 }, { mean = 2.5, median = 2.5, max = 4, min = 1 }, "even count: mean of the middle two")
    eq(metrics.statistics { 7 }, { mean = 7, median = 7, max = 7, min = 7 })
    local s = metrics.statistics { 0.1, 0.2, 0.7, 10 }
    near(s.mean, 2.75, 1e-12)
    near(s.median, 0.45, 1e-12)
    eq(metrics.statistics { -1, math.huge }.max, math.huge)
  end)

  it("a NaN makes every statistic NaN", function()
    local s = metrics.statistics { 1, 0 / 0, 3 }
    ok(is_nan(s.mean) and is_nan(s.median) and is_nan(s.max) and is_nan(s.min))
  end)

  it("rejects empty and non-numeric input", function()
    raises(function() metrics.statistics {} end, "rl.metrics.statistics: bad argument #1 'values' (non-empty array of numbers expected")
    raises(function() metrics.statistics { 1, "2" } end, "got string at [2]")
    raises(function() metrics.statistics(3) end, "array of numbers expected, got number")
  end)
end)

describe("rl.metrics.add_prefix", function()
  it("prefixes every key, as slime's dict_add_prefix", function()
    eq(metrics.add_prefix({ a = 1, ["b/c"] = 2 }, "rollout/"), { ["rollout/a"] = 1, ["rollout/b/c"] = 2 })
    local stats = metrics.add_prefix(metrics.statistics { 1, 3 }, "response_len/")
    eq(stats["response_len/mean"], 2)
    raises(function() metrics.add_prefix({}, 1) end, "bad argument #2 'prefix'")
  end)
end)

describe("rl.metrics.timer", function()
  before_each(function() metrics.timer.reset() end)

  it("timer(name, fn) returns fn's results and adds its time", function()
    local a, b, c = metrics.timer("gen", function(x, y) rl.sleep(0.02); return x + y, nil, "z" end, 1, 2)
    eq({ a, b, c }, { 3, nil, "z" })
    ok(metrics.timer.get("gen") >= 0.015, "at least the sleep")
    metrics.timer("gen", function() end)
    ok(metrics.timer.get("gen") >= 0.015)
    eq(metrics.timer.get("never"), 0)
  end)

  it("start/stop accumulate; metrics() names them perf/<name>_time", function()
    metrics.timer.start("train")
    rl.sleep(0.01)
    local dt = metrics.timer.stop("train")
    ok(dt > 0)
    metrics.timer.start("train")
    metrics.timer.stop("train")
    local m = metrics.timer.metrics()
    ok(m["perf/train_time"] >= dt)
    eq(next(m, next(m)), nil, "one timer")
    metrics.timer.reset("train")
    eq(metrics.timer.metrics(), {})
  end)

  it("misuse raises", function()
    metrics.timer.start("x")
    raises(function() metrics.timer.start("x") end, "timer 'x' is already running")
    metrics.timer.stop("x")
    raises(function() metrics.timer.stop("x") end, "timer 'x' is not running")
    raises(function() metrics.timer.start("") end, "bad argument #1 'name'")
    raises(function() metrics.timer("x", 3) end, "bad argument #2 'fn'")
  end)

  it("an error in fn propagates and is not timed", function()
    raises(function() metrics.timer("boom", function() error("inner failure") end) end, "inner failure")
    eq(metrics.timer.get("boom"), 0)
  end)
end)

describe("rl.metrics.format_line", function()
  it("rollout: reward, response length, truncation and the rollout time", function()
    eq(metrics.format_line({
      ["rollout/step"] = 3, ["rollout/raw_reward"] = 0.4237, ["rollout/response_len/mean"] = 118.25,
      ["rollout/truncated_ratio"] = 0.02, ["perf/rollout_time"] = 12.34, ["rollout/zero_std/count_0.0"] = 2,
    }, "rollout/step"), "rollout 3 | reward 0.424 | resp_len 118 | truncated 0.02 | 12.3 s")
    eq(metrics.format_line({ ["rollout/step"] = 0, ["rollout/rewards"] = 1 }, "rollout/step"), "rollout 0 | reward 1")
  end)

  it("train: loss, kl, grad norm, step time", function()
    eq(metrics.format_line({
      ["train/step"] = 10, ["train/loss"] = -0.0123, ["train/kl_loss"] = 1.5e-05, ["train/grad_norm"] = 0.8,
      ["perf/step_time"] = 250.4, ["perf/rollout_time"] = 3,
    }, "train/step"), "train 10 | loss -0.0123 | kl 1.5e-05 | grad_norm 0.8 | rollout_time 3.0 s | 250 s")
    -- with a critic (use_critic): its loss after the policy's
    eq(metrics.format_line({ ["train/step"] = 2, ["train/loss"] = 0.5, ["train/value_loss"] = 0.25 }, "train/step"),
      "train 2 | loss 0.5 | value_loss 0.25")
  end)

  it("eval: each dataset's mean reward and its largest pass@k", function()
    eq(metrics.format_line({
      ["eval/step"] = 2, ["eval/gsm8k"] = 0.625, ["eval/gsm8k-pass@1"] = 0.625, ["eval/gsm8k-pass@4"] = 0.8,
      ["eval/gsm8k-truncated_ratio"] = 0, ["eval/gsm8k/response_len/mean"] = 90, ["eval/aime"] = 0.1,
    }, "eval/step"), "eval 2 | aime 0.1 | gsm8k 0.625 pass@4 0.8")
  end)

  it("unknown keys: the first few numeric ones; non-finite values print as nan/inf", function()
    eq(metrics.format_line({ ["custom/step"] = 1, b = 2, a = 0 / 0, c = "text" }, "custom/step"),
      "custom 1 | a nan | b 2")
    eq(metrics.format_line({ ["rollout/step"] = 1, ["rollout/raw_reward"] = math.huge }, "rollout/step"),
      "rollout 1 | reward inf")
  end)
end)

describe("rl.metrics.logger", function()
  it("JSONL: the whole dict with its step and time; non-finite numbers as null", function()
    local dir = tmpdir()
    local lines = {}
    local lg = assert(metrics.logger { metrics_dir = dir, console = function(l) lines[#lines + 1] = l end })
    eq(lg.jsonl_path, dir .. "/metrics.jsonl")
    local t0 = rl.time()
    lg:log({ ["rollout/step"] = 0, ["rollout/raw_reward"] = 0.5, ["rollout/x"] = 0 / 0, note = "hi",
             nested = { 1, math.huge } }, "rollout/step")
    lg:log({ ["rollout/step"] = 1, ["rollout/raw_reward"] = -math.huge, flag = true }, "rollout/step")
    lg:close()
    local recs = lines_of(lg.jsonl_path)
    eq(#recs, 2)
    eq(recs[1]["rollout/step"], 0)
    eq(recs[1]["rollout/raw_reward"], 0.5)
    eq(recs[1]["rollout/x"], json.null)
    eq(recs[1].note, "hi")
    eq(recs[1].nested[2], json.null)
    ok(math.abs(recs[1].time - t0) < 600, "time is wall-clock seconds")  -- epoch, not a monotonic clock
    eq(recs[2]["rollout/raw_reward"], json.null)
    eq(recs[2].flag, true)
    eq(lines, { "rollout 0 | reward 0.5", "rollout 1 | reward -inf" })
    -- keys are sorted, one object per line
    ok(read(lg.jsonl_path):match("^{\"nested\":"), "sorted keys")
    rm_rf(dir)
  end)

  it("a metrics' own time key is kept", function()
    local dir = tmpdir()
    local lg = assert(metrics.logger { jsonl = dir .. "/m.jsonl", console = false })
    lg:log({ ["train/step"] = 4, time = 12 })
    lg:close()
    eq(lines_of(dir .. "/m.jsonl")[1], { ["train/step"] = 4, time = 12 })
    rm_rf(dir)
  end)

  it("step keys: given, inferred, missing, not an integer", function()
    local seen = {}
    local lg = assert(metrics.logger { console = function(l) seen[#seen + 1] = l end })
    lg:log({ ["eval/step"] = 2, ["eval/gsm8k"] = 0.5 })
    lg:log({ ["train/step"] = 7, ["train/loss"] = 1 })
    lg:log({ mine = 3, v = 1 }, "mine")
    eq(seen, { "eval 2 | gsm8k 0.5", "train 7 | loss 1", "mine 3 | v 1" })
    raises(function() lg:log({ x = 1 }) end, "no step key given and none of rollout/step, train/step, eval/step")
    raises(function() lg:log({ x = 1 }, "rollout/step") end, 'metrics["rollout/step"] must be the integer step, got nil')
    raises(function() lg:log({ ["rollout/step"] = 1.5 }, "rollout/step") end, "got 1.5")
    raises(function() lg:log({ ["rollout/step"] = 0 / 0 }, "rollout/step") end, "must be the integer step")
    raises(function() lg:log("x") end, "bad argument #1 'metrics'")
    raises(function() lg:log({}, 3) end, "bad argument #2 'step_key'")
  end)

  it("console: a recipe's formatter, or none", function()
    local seen = {}
    local lg = assert(metrics.logger {
      console = function(l) seen[#seen + 1] = l end,
      console_format = function(m, key, step)
        if step % 2 == 1 then return nil end
        return metrics.format_line(m, key) .. " | custom " .. m.custom
      end,
    })
    lg:log({ ["rollout/step"] = 0, custom = "a" })
    lg:log({ ["rollout/step"] = 1, custom = "b" })
    eq(seen, { "rollout 0 | custom a" })
    local quiet = assert(metrics.logger { console = false })
    quiet:log({ ["rollout/step"] = 0 })  -- nothing to see, nothing raised
    raises(function() metrics.logger { console = 3 } end, "bad option 'console'")
    raises(function() metrics.logger { use_tensorboard = "yes" } end, "bad option 'use_tensorboard' (boolean expected")
  end)

  it("TensorBoard: finite numbers only; the step key is not a scalar", function()
    local dir = tmpdir()
    local lg = assert(metrics.logger { tensorboard_dir = dir, console = false })
    eq(lg.tensorboard_dir, dir)
    ok(lg.tensorboard_file:find(dir .. "/events.out.tfevents.", 1, true) == 1, lg.tensorboard_file)
    lg:log({ ["rollout/step"] = 5, ["rollout/ok_value"] = 0.25, ["rollout/nan_value"] = 0 / 0,
             ["rollout/inf_value"] = math.huge, ["rollout/text"] = "x", ["rollout/bool"] = true }, "rollout/step")
    local data = read(lg.tensorboard_file)  -- readable before close: flushed per call
    ok(data:find("brain.Event:2", 1, true))
    ok(data:find("rollout/ok_value", 1, true))
    ok(not data:find("nan_value", 1, true) and not data:find("inf_value", 1, true))
    ok(not data:find("rollout/text", 1, true) and not data:find("rollout/bool", 1, true))
    ok(not data:find("rollout/step", 1, true))
    lg:close()
    lg:close()
    lg:log({ ["rollout/step"] = 6, ["rollout/ok_value"] = 1 }, "rollout/step")  -- console only now
    eq(read(lg.tensorboard_file), data)
    rm_rf(dir)
  end)

  it("a directory that cannot be created is nil, err naming it", function()
    local file = os.tmpname()
    local lg, err = metrics.logger { tensorboard_dir = file .. "/tb" }
    eq(lg, nil)
    ok(err:find("tensorboard: cannot create directory '" .. file .. "/tb'", 1, true), err)
    ok(err:find("hint:", 1, true), err)
    lg, err = metrics.logger { metrics_dir = file .. "/m" }
    eq(lg, nil)
    ok(err:find("metrics jsonl: cannot create directory '" .. file .. "/m'", 1, true), err)
    os.remove(file)
  end)

  it("the TensorBoard directory follows slime's defaults", function()
    eq(metrics.tensorboard_dir { tensorboard_dir = "x/y" }, "x/y")
    if not os.getenv("TENSORBOARD_DIR") then
      eq(metrics.tensorboard_dir { tb_project_name = "p", tb_experiment_name = "e" }, "tensorboard_log/p/e")
      ok(metrics.tensorboard_dir { tb_project_name = "p" }:match("^tensorboard_log/p/%d%d%d%d%d%d%d%d_%d%d%d%d%d%d$"))
    end
  end)
end)

describe("rl.metrics module logger", function()
  it("configure / log / close", function()
    local dir = tmpdir()
    local seen = {}
    local lg = assert(metrics.configure { metrics_dir = dir, console = function(l) seen[#seen + 1] = l end,
                                          unrelated_recipe_option = 1 })
    eq(metrics.get(), lg)
    metrics.log({ ["rollout/step"] = 1, ["rollout/raw_reward"] = 1 }, "rollout/step")
    metrics.close()
    eq(#lines_of(dir .. "/metrics.jsonl"), 1)
    eq(seen, { "rollout 1 | reward 1" })
    ok(metrics.get() ~= lg, "a fresh console-only logger after close")
    local _, err = metrics.configure { metrics_dir = "/proc/no/such/dir" }
    ok(err and err:find("metrics jsonl", 1, true), err)
    metrics.close()
    rm_rf(dir)
  end)

  it("add_options gives slime's flags to rl.args", function()
    local spec = metrics.add_options { prog = "t", { name = "metrics_dir", type = "string", default = "mine" } }
    local opt = assert(rl.args.parse(spec, { "--use-tensorboard", "--tb-project-name", "p", "--no-metrics-console" }))
    eq(opt.use_tensorboard, true)
    eq(opt.tb_project_name, "p")
    eq(opt.metrics_console, false)
    eq(opt.metrics_dir, "mine", "a name the recipe declares itself is kept")
    opt = assert(rl.args.parse(metrics.add_options { prog = "t" }, {}))
    eq(opt.use_tensorboard, false)
    eq(opt.metrics_console, true)
  end)
end)

describe("rl._core.metrics (the binding)", function()
  local cm = require("rl._core").metrics

  it("misuse raises naming the argument; no C++ object outlives its handle", function()
    local dir = tmpdir()
    collectgarbage()
    collectgarbage()  -- handles of earlier tests must not count
    jit.flush()  -- a compiled trace may hold an earlier test's handle as a constant
    collectgarbage("collect")
    local before = rl._core_stats().live_objects
    -- in a function of its own, so no stack slot of this one keeps a handle alive
    local function exercise()
      local w = assert(cm.tensorboard_open(dir))
      raises(function() w:add_scalars(1.5, {}) end, "rl.metrics.TensorBoardWriter:add_scalars: bad argument #1 'step'")
      raises(function() w:add_scalars(1, { a = "x" }) end, "bad argument #2 'values' (table of string tags to numbers expected, got string = string)")
      raises(function() w:add_scalars(1, { [1] = 2 }) end, "got number = number")
      raises(function() cm.tensorboard_open(3) end, "rl.metrics.tensorboard_open: bad argument #1 'dir'")
      eq(w:add_scalars(2, { a = 1, b = 0 / 0 }), true, "the binding writes what it is given; skipping is rl.metrics' choice")
      eq(w:close(), true)
      local okk, err = w:add_scalars(3, { a = 1 })
      eq(okk, nil)
      ok(err:find("closed", 1, true), err)
      local j = assert(cm.jsonl_open(dir .. "/x.jsonl"))
      raises(function() j:write('{"a":\n1}') end, "bad argument #1 'json_text' (a JSONL line cannot contain a line break)")
      raises(function() j:write(nil) end, "bad argument #1 'json_text'")
      eq(j:write("{}"), true)
      j:close()
      okk, err = j:write("{}")
      ok(okk == nil and err:find("closed", 1, true), err)
    end
    coroutine.wrap(exercise)()  -- its stack goes with it: no stale slot holds a handle
    -- Compiled traces may hold a handle as a constant (an upvalue LuaJIT specialised
    -- on): flush them, then settle like http_spec does (up to 10 s on a loaded CI
    -- machine). A CI run once kept one handle 10 s without the flush.
    local live
    local t0 = rl.now()
    while rl.now() - t0 < 10 do
      jit.flush()
      collectgarbage("collect")
      live = rl._core_stats().live_objects
      if live == before then break end
      rl.sleep(0.01)
    end
    eq(live, before)
    rm_rf(dir)
  end)
end)
