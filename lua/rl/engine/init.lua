--- rl.engine: the native inference engine, in this process or in a child.
--
--   local eng = assert(rl.engine.start{ model = "/models/Qwen3-0.6B", port = 0 })
--   print(eng.url)                                       -- SGLang-compatible HTTP server
--   local out = eng:generate{ text = "1+1=", sampling_params = { max_new_tokens = 8 } }
--   print(out.text, out.meta_info.finish_reason.type)
--   eng:update_weights_from_disk("/ckpt/step_10")
--   eng:stop()
--
-- mode = "thread" (default): the engine runs on its own scheduler thread in this
-- process and :generate goes straight to it (no HTTP); the HTTP server still
-- serves `url` for routers and other clients. mode = "process": a child
-- `rlhost engine ... --ready-file F` is started and everything goes over HTTP.
-- Both take and return SGLang's /generate shapes. Runtime failures (bad model
-- directory, refused request) return nil, err; misuse raises. See docs/engine.md.
-- backend = "vllm" starts a vLLM server instead (lua/rl/engine/vllm.lua), with the
-- same methods; backend = "native" (default) is rlhost's own engine.
local json = require "rl.json"
local task = require "rl.task"
local core = require "rl._core"
local now = core.loop.now
local proc = core.process   -- spawn/kill/reap: children die with us (runtime/base/child_process.hpp)
local launch = require "rl.engine.launch"

local M = {}

local Engine = {}
Engine.__index = Engine

local options = require "rl.engine.options"   -- every option, declared once

local function decode(text)
  local v, err = json.decode(text)
  if err then return nil, "rl.engine: bad JSON from the engine: " .. err end
  return v
end

-- ---- thread mode -------------------------------------------------------------------

local function native() return require("rl.torch")._engine end

local function handle(self, fname)
  if not self._h then error(fname .. ": the engine was stopped", 3) end
  return self._h
end

local await = task.await_json

local function start_thread(opts)
  local h, err = native().start(options.native(opts))
  if not h then return nil, err end
  local url = h:url()
  -- _api_key: what its own control endpoints want (its weight receiver's shm and c10d requests)
  return setmetatable({ _h = h, mode = "thread", url = url ~= "" and url or nil, _api_key = opts.api_key }, Engine)
end

-- ---- process mode ------------------------------------------------------------------

local read_file = require("rl._fs").read_file

local common = require "rl.engine._common"
local tail = common.log_tail


local function launch_process(opts)
  local dir = os.tmpname()
  os.remove(dir)
  local ready = dir .. ".ready"
  local log = opts.log_file or (dir .. ".log")
  local argv = { "@self", "engine", "--model", opts.model, "--ready-file", ready }
  if opts.port == nil then argv[#argv + 1] = "--port=0" end
  -- the api key goes by the environment ($RLHOST_API_KEY), never on argv (readable by every user)
  local flags = {}
  for k, v in pairs(opts) do if k ~= "api_key" then flags[k] = v end end
  for _, a in ipairs(options.argv(flags)) do argv[#argv + 1] = a end
  -- A child inherits this process's CPUs: when rl.process.set_cpus pinned this process,
  -- an engine without its own list gets the CPUs it had before.
  local unpinned = require("rl.process").unpinned_cpus()
  if opts.cpus == nil and unpinned then argv[#argv + 1] = "--cpus=" .. unpinned end
  -- The child inherits $RLHOST_ADMIN_TOKEN (never on argv, which other users can read).
  local pid, err = proc.spawn(argv, { log = log, nice = opts.nice,
                                     env = opts.api_key and { RLHOST_API_KEY = opts.api_key } or nil })
  if not pid then return nil, "rl.engine.start: " .. err end
  local eng = setmetatable({ mode = "process", pid = pid, log_file = log, _api_key = opts.api_key }, Engine)
  local deadline = now() + (opts.ready_timeout or 300)
  return launch.new(eng, function()
    local url = read_file(ready)
    if url and url:match("^http") then
      os.remove(ready)
      eng.url = url:gsub("%s+$", "")
      return true
    end
    local code = proc.reap(pid)
    if code then
      eng.pid = nil
      return nil, ("rl.engine.start: the engine process exited with status %s before serving; its log (%s):\n%s")
        :format(tostring(code), log, tail(log, 4000))
    end
    if now() > deadline then
      eng:stop_within(5)
      return nil, ("rl.engine.start: the engine process did not serve within %s s; its log (%s):\n%s")
        :format(tostring(opts.ready_timeout or 300), log, tail(log, 4000))
    end
    return false
  end)
end

local function http() return require "rl.http" end

--- Headers for an engine's control endpoints: the Bearer token they need (the
--- run's admin token, or `api_key` when given). For scripts that call them over
--- rl.http themselves.
function M.control_headers(api_key) return require("rl._admin").headers(api_key) end

local function post(self, path, body, control)
  local headers = control and M.control_headers(self._api_key) or { ["content-type"] = "application/json" }
  local resp, err = http().request {
    method = "POST", url = self.url .. path, body = json.encode(body or {}), headers = headers, timeout = 3600,
  }
  if not resp then return nil, err end
  if resp.status ~= 200 then
    local e = json.decode(resp.body)
    local msg = type(e) == "table" and (e.error and e.error.message or e.message) or resp.body
    return nil, ("POST %s%s: HTTP %d: %s"):format(self.url, path, resp.status, tostring(msg))
  end
  if resp.body == "" or not resp.body:match("^%s*[%[{]") then return { success = true, message = resp.body } end
  return decode(resp.body)
end

-- ---- handle methods -----------------------------------------------------------------

--- Generates for one SGLang /generate request table (text or input_ids, single
--- or batched, sampling_params, return_logprob, ...); yields the calling task.
--- Returns the /generate response (a table, or a list for batches) or nil, err.
function Engine:generate(req)
  common.check_generate(req)
  if self.mode == "process" then
    local r = {}
    for k, v in pairs(req) do r[k] = v end
    r.stream = nil
    return post(self, "/generate", r)
  end
  local op, err = handle(self, "rl.engine.Engine:generate"):generate(json.encode(req))
  if not op then return nil, err end
  return await(op, "rl.engine.Engine:generate")
end

--- Engine counters: num_running, num_queued, token_usage, cache_hit_rate,
--- gen_throughput, prompt_tokens_total, generation_tokens_total, weight_version, ...
function Engine:stats()
  if self.mode == "process" then
    local resp, err = http().get(self.url .. "/get_server_info", { timeout = 30 })
    if not resp then return nil, err end
    local info, derr = decode(resp.body)
    if not info then return nil, derr end
    return info.internal_states and info.internal_states[1]
  end
  return decode(handle(self, "rl.engine.Engine:stats"):stats())
end

local function control(self, what, path, args)
  task.need_task("rl.engine.Engine:" .. what)
  if self.mode == "process" then return post(self, path, args, true) end
  local h = handle(self, "rl.engine.Engine:" .. what)
  return await(h:control(what, json.encode(args or {})), "rl.engine.Engine:" .. what)
end

--- Drops the prefix cache; false while requests run.
function Engine:flush_cache()
  local r, err = control(self, "flush_cache", "/flush_cache")
  if not r then return nil, err end
  return r.success ~= false
end

--- Loads new weights (safetensors in `dir`) into the running engine.
function Engine:update_weights_from_disk(dir, weight_version)
  if type(dir) ~= "string" then
    error("rl.engine.Engine:update_weights_from_disk: bad argument #1 'dir' (string expected, got " .. type(dir) .. ")", 2)
  end
  return control(self, "update_weights_from_disk", "/update_weights_from_disk",
    { model_path = dir, weight_version = weight_version })
end

--- Loads a LoRA adapter (a PEFT directory: adapter_config.json + adapter_model.safetensors)
--- under `name`, or replaces the adapter of that name in place (a trainer's adapter sync;
--- requests pick it by name: /generate's lora_path, OpenAI's model). Returns
--- {success, weight_version, ...} or nil, err (a bad directory changes nothing).
function Engine:load_lora(name, dir, weight_version)
  if type(name) ~= "string" then
    error("rl.engine.Engine:load_lora: bad argument #1 'name' (string expected, got " .. type(name) .. ")", 2)
  end
  if type(dir) ~= "string" then
    error("rl.engine.Engine:load_lora: bad argument #2 'dir' (string expected, got " .. type(dir) .. ")", 2)
  end
  return control(self, "load_lora_adapter", "/load_lora_adapter",
    { lora_name = name, lora_path = dir, weight_version = weight_version })
end

--- Unloads the LoRA adapter `name`; nil, err while requests use it (retry when they finish).
function Engine:unload_lora(name)
  if type(name) ~= "string" then
    error("rl.engine.Engine:unload_lora: bad argument #1 'name' (string expected, got " .. type(name) .. ")", 2)
  end
  return control(self, "unload_lora_adapter", "/unload_lora_adapter", { lora_name = name })
end

--- Frees the KV cache and/or weights (tags: "kv_cache", "weights"; default both).
function Engine:release_memory(tags)
  return control(self, "release_memory", "/release_memory_occupation", { tags = tags })
end

function Engine:resume_memory(tags)
  return control(self, "resume_memory", "/resume_memory_occupation", { tags = tags })
end

--- Aborts a request by rid, or every request when rid is nil; returns how many
--- were aborted.
function Engine:abort(rid)
  if self.mode == "process" then
    local r = post(self, "/abort_request", rid == nil and { abort_all = true } or { rid = rid }, true)
    return r and r.aborted or 0
  end
  if rid == nil then return handle(self, "rl.engine.Engine:abort"):abort_all() end
  return handle(self, "rl.engine.Engine:abort"):abort(rid)
end

--- Stops the engine (and its server, or its process). Idempotent.
function Engine:stop(drain)
  if drain ~= nil and (type(drain) ~= "number" or drain < 0) then
    error("rl.engine.Engine:stop: bad argument #1 'drain' (seconds >= 0 expected, got " .. tostring(drain) .. ")", 2)
  end
  if self.mode == "process" then
    if self.pid then require("rl.process").stop_pid(self.pid, 15) end
    self.pid = nil
    return
  end
  if self._h then
    self._h:stop(drain)
    self._h = nil
  end
end

--- Stops the engine, blocking the calling task at most `timeout` s: a thread-mode
--- engine stops on a thread of its own and, still stuck at the deadline, is abandoned
--- (its threads and memory go when they return); a process engine gets SIGKILL.
--- Returns true, or false and why.
function Engine:stop_within(timeout)
  if self.mode == "process" then
    local pid = self.pid
    if not pid then return true end
    proc.kill(pid, 9)
    if not require("rl.process").wait_pid(pid, timeout) then
      return false, ("process %d did not exit within %g s of SIGKILL"):format(pid, timeout)
    end
    self.pid = nil
    return true
  end
  if not self._h then return true end
  local stopped = self._h:stop_background()
  self._h = nil
  local deadline = now() + timeout
  while not stopped() do   -- checked on the event loop's timers: other tasks run
    if now() > deadline then
      return false, ("did not stop within %g s: abandoned (its threads end when they return)"):format(timeout)
    end
    task.sleep(0.02)
  end
  return true
end

--- Thread mode: drops the control commands (weight syncs, flushes) its scheduler has not
--- taken yet, failing their callers at once; the number dropped (0 for a process engine,
--- whose requests time out instead). rl.recipe.health uses it on a stuck scheduler.
function Engine:cancel_commands()
  if self.mode ~= "thread" or not self._h then return 0 end
  return self._h:cancel_commands()
end

--- The engine's weight-receiving side (rl.weight_sync): in memory (thread mode), through
--- shared memory or c10d (its server), through files; and the version it serves.
function Engine:weight_receiver()
  -- an engine server on another machine cannot share memory with us: files or c10d
  return require("rl.weight_sync").new_receiver { url = self.url, api_key = self._api_key, engine = self,
    kind = self._elsewhere and "server" or self.mode, native = self.mode == "thread" and self._h or nil }
end

--- Fault drill (thread mode; SIGSTOP is the drill for a process engine): the engine's
--- scheduler sleeps `seconds` between two steps while its HTTP server still answers
--- (rl.recipe.health finds it by its step counter: work waiting, no step).
function Engine:stall(seconds)
  if self.mode ~= "thread" then error("rl.engine.Engine:stall: thread-mode engines only (SIGSTOP a process)", 2) end
  handle(self, "rl.engine.Engine:stall"):stall(seconds)
end

function Engine:__tostring() return ("rl.engine(%s, %s)"):format(self.mode, tostring(self.url)) end

-- rl.engine.launch's work, after check_opts (called by the API function itself, so that
-- its errors name the user's line); fname: that function, for need_task's error.
local function launch_engine(opts, mode, fname)
  -- the device: opts.device, else rl.device.default() ($RLHOST_DEVICE, else cpu), checked here
  local dev, derr = require("rl.device").resolve(opts.device, "rl.engine.start: opts.device")
  if not dev then return nil, derr end
  require("rl._admin").save()   -- for the same user's tools (tools/profile_rollout.lua, curl)
  if mode == "vllm" then
    task.need_task(fname)
    local o = {}
    for k, v in pairs(opts) do
      if k ~= "threads" and k ~= "max_running_requests" and k ~= "mode" and k ~= "backend" and k ~= "device"
         and k ~= "cpus" then
        o[k] = v
      end
    end
    if dev ~= "cpu" then   -- a vLLM server on GPU N sees that GPU only
      o.env = o.env or {}
      local env = {}
      for k, v in pairs(o.env) do env[k] = v end
      env.CUDA_VISIBLE_DEVICES = env.CUDA_VISIBLE_DEVICES or dev:match("^cuda:(%d+)$")
      o.env = env
    end
    -- the recipe's native knobs, as vLLM flags unless vllm_args sets them
    local va = {}
    for k, v in pairs(opts.vllm_args or {}) do va[(tostring(k):gsub("-", "_"))] = v end
    if opts.max_running_requests and va.max_num_seqs == nil then va.max_num_seqs = opts.max_running_requests end
    o.vllm_args = va
    if opts.threads and not (opts.env and opts.env.OMP_NUM_THREADS) then
      o.env = {}
      for k, v in pairs(opts.env or {}) do o.env[k] = v end
      -- `threads` threads, scheduled by the OS as the native engine's are (vLLM's default
      -- binds one core per server and keeps one for itself)
      o.env.OMP_NUM_THREADS = tostring(opts.threads)
      o.env.VLLM_CPU_OMP_THREADS_BIND = o.env.VLLM_CPU_OMP_THREADS_BIND or opts.cpus or "nobind"
    elseif opts.cpus then
      o.env = o.env or {}
      local env = {}
      for k, v in pairs(o.env) do env[k] = v end
      env.VLLM_CPU_OMP_THREADS_BIND = env.VLLM_CPU_OMP_THREADS_BIND or opts.cpus
      o.env = env
    end
    return require("rl.engine.vllm").launch(o)
  end
  if dev ~= opts.device then
    local o = { device = dev }
    for k, v in pairs(opts) do if k ~= "device" then o[k] = v end end
    opts = o
  end
  if mode == "process" then
    task.need_task(fname)
    return launch_process(opts)
  end
  -- thread mode: the engine loads and serves in this call (no child to wait for)
  if opts.cpus then
    error(("%s: bad argument 'opts.cpus' (needs mode = 'process': a thread engine runs in this process, "
      .. "which rl.process.set_cpus pins as a whole)"):format(fname), 3)
  end
  if opts.nice then
    error(("%s: bad argument 'opts.nice' (needs mode = 'process': a thread engine shares this process's priority)")
      :format(fname), 3)
  end
  local eng, err = start_thread(opts)
  if not eng then return nil, err end
  return launch.ready(eng)
end

--- Starts an engine and waits until it serves. opts: model (required), mode ("thread" |
--- "process"), host, port (0 = any free one), max_running_requests, kv_cache_tokens, dtype, device,
--- threads, max_connections, max_sequences_per_request, max_queued_requests, max_tokens_in_flight, served_model_name, api_key, serve (thread mode: false =
--- no HTTP server), ready_timeout (process mode, s), log_file (process mode).
function M.start(opts)
  local l, err = launch_engine(opts, options.check(opts, "rl.engine.start"), "rl.engine.start")
  if not l then return nil, err end
  return l:wait_ready()
end

--- A handle on an engine server started elsewhere (slime's --rollout-external; an rlhost
--- engine or any SGLang-API server at `url`): requests, stats and weight syncs over HTTP
--- as for a process engine; stop() leaves it running. Weights come by shared memory when
--- it runs on this machine (a loopback URL), else by files. opts: api_key.
function M.attach(url, opts)
  opts = opts or {}
  local host = tostring(url):match("^https?://%[?([^%]/]-)%]?:%d+") or tostring(url):match("^https?://([^/:]+)")
  local here = host == "127.0.0.1" or host == "localhost" or host == "::1"
  return setmetatable({ mode = "process", url = url, external = true, _elsewhere = not here,
                        _api_key = opts.api_key }, Engine)
end

--- Spawns an engine without waiting for it to serve (rl.engine.start's options and
--- misuse errors): a launch handle (lua/rl/engine/launch.lua) whose :wait_ready()
--- yields until it serves (the engine, or nil and why) and :stop() kills it; or nil and
--- why when it could not be spawned. A thread-mode engine is ready at once (it loads in
--- this call). Engines launched one after another come up together: rl.engine.wait_all.
function M.launch(opts)
  local mode = options.check(opts, "rl.engine.launch")
  return launch_engine(opts, mode, "rl.engine.launch")
end

M.wait_all = launch.wait_all

--- SIGTERM stops this process like Ctrl-C (the main task is cancelled, which cleans up):
--- for `rlhost engine` under a supervisor.
function M.forward_sigterm() native().forward_sigterm() end

M._native = native   -- for tests of the native half
return M
