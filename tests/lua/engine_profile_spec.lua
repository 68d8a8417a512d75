-- The profiling walkthrough (docs/profiling.md) end to end on real native
-- engines: tools/serve_idle.lua (engines + router, sleeping), profile_rollout
-- start, requests, traces written after --num-steps, profile_rollout stop,
-- analyze_profile on the engines' own traces, Ctrl-C.
local rl = require "rl"
local read = read_file  -- spec.lua helpers

local SRC = os.getenv("RLHOST_SOURCE_DIR") or "."
local BIN = os.getenv("RLHOST_BIN") or rl.process.self()
local STORIES = test_data("models/stories260K")

local function tool(name, ...)
  local code, out = rl.process.run({ BIN, "--no-control", SRC .. "/tools/" .. name .. ".lua", ... }, { timeout = 120 })
  assert(code, out)
  return code, out
end

local function wait_for(what, fn, timeout, log)
  local deadline = rl.now() + (timeout or 60)
  while true do
    local v = fn()
    if v then return v end
    if rl.now() > deadline then error(("timed out waiting for %s\n%s"):format(what, log and (read(log) or "") or ""), 2) end
    rl.sleep(0.1)
  end
end

describe("profiling walkthrough", function()
  it("serve_idle + profile_rollout + requests + analyze_profile", function()
    local dir = os.tmpname()
    os.remove(dir)
    local ready, log, prof = dir .. ".url", dir .. ".log", dir .. "-traces"
    local idle = assert(rl.process.spawn({ BIN, "--no-control", SRC .. "/tools/serve_idle.lua", "--model", STORIES,
      "--num-engines", "2", "--policy", "round_robin", "--interval", "1", "--ready-file", ready }, { log = log }))
    local ok_run, err = pcall(function()
      local router = wait_for("serve_idle's ready file", function()
        if not idle:running() then error("serve_idle exited early:\n" .. (read(log) or ""), 0) end
        local s = read(ready)
        return s and s:match("^(http://[%d%.:]+)")
      end, 120, log)
      ok(read(log):find("Router launched at 127.0.0.1:", 1, true), read(log))

      local code, out = tool("profile_rollout", "--router-url", router, "--action", "start", "--num-steps", "3",
        "--activities", "CPU", "--output-dir", prof, "--per-worker-dirs")
      eq(code, 0, out)
      ok(out:find("2 workers: 2 ok, 0 failed", 1, true), out)

      -- requests through the router: each engine runs >= 3 steps
      local tasks = {}
      for i = 1, 8 do
        tasks[i] = rl.spawn(function()
          return assert(rl.http.json(rl.http.post(router .. "/generate",
            { text = "Once upon a time " .. i, sampling_params = { max_new_tokens = 12, temperature = 0, ignore_eos = true } })))
        end)
      end
      for _, r in ipairs(rl.wait_all(tasks)) do eq(r.meta_info.completion_tokens, 12) end

      local files = wait_for("two traces", function()
        local f = rl.profile.find_traces(prof)
        return f and #f == 2 and f
      end, 60)
      for _, f in ipairs(files) do ok(f:match("%.trace%.json%.gz$"), f) end
      code, out = tool("profile_rollout", "--router-url", router, "--action", "stop")
      eq(code, 0, out)
      ok(out:find("already stopped after num_steps", 1, true), out)

      code, out = tool("analyze_profile", "--profile-dir", prof, "--all-ranks", "--top-n", "5")
      eq(code, 0, out)
      ok(out:find("cpu trace", 1, true), out)
      ok(out:find("cross-rank summary", 1, true), out)
      ok(out:find("top 5 ops by self time", 1, true), out)
      local r = assert(rl.profile.analyze(assert(rl.profile.load(files[1]))))
      eq(r.mode, "cpu")
      ok(r.busy > 0 and r.busy <= r.span, r.busy)
      ok(#r.categories >= 2, #r.categories)
      -- the hourly line, every --interval 1 s here
      wait_for("a 'rollout sleep for' line", function() return read(log):find("rollout sleep for", 1, true) end, 30, log)
    end)
    idle:kill(2)  -- Ctrl-C
    local code = idle:wait(60)
    if not code then idle:stop() end
    os.execute("rm -rf '" .. prof .. "'")
    if not ok_run then error(err, 0) end
    eq(code, 0, read(log))
    ok(read(log):find("rollout sleep: interrupted", 1, true), read(log))
    ok(not read(ready), "the ready file is removed")
  end, { timeout = 300 })
end)
