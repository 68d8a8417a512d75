--- rl.engine.vllm: vLLM as an engine backend (vime's path). A child process of
--- `python -m vllm.entrypoints.openai.api_server`, driven over HTTP.
--
--   local eng = assert(rl.engine.start{ backend = "vllm", model = dir, vllm_args = { dtype = "float32" } })
--   local out = eng:generate{ input_ids = { 1, 2, 3 }, sampling_params = { max_new_tokens = 8 }, return_logprob = true }
--   eng:update_weights_from_disk("/dev/shm/step_3", "3")   -- in-place reload_weights, then a prefix-cache reset
--   eng:stop()
--
-- The engine takes and returns SGLang's /generate shapes, as the native one does:
-- requests become vLLM's /v1/completions (token-id prompts, `return_token_ids`,
-- per-token log-probs) and answers come back as {text, output_ids, meta_info}.
-- The same translation lets rl.rollout talk to vLLM engines through rlhost's
-- router (rl.rollout.new{backend = "vllm"}). docs/engine.md ("vLLM engines").
local json = require "rl.json"
local task = require "rl.task"
local log = require "rl.log"
local core = require "rl._core"
local now = core.loop.now
local proc = core.process   -- spawn/kill/reap: children die with us (runtime/base/child_process.hpp)

local M = {}

local VllmEngine = {}
VllmEngine.__index = VllmEngine
M.Engine = VllmEngine

local INSTALL_HINT = "install it with scripts/install_vllm.sh (or scripts/bootstrap.sh --test-deps), "
  .. "or point RLHOST_VLLM_PYTHON / opts.python at a python with vLLM"

--- The python that runs vLLM: opts.python, else $RLHOST_VLLM_PYTHON, else the venv
--- scripts/install_vllm.sh makes ($RLHOST_VLLM_VENV or ~/.cache/rlhost/vllm-venv).
function M.python(explicit)
  if explicit then return explicit, "opts.python" end
  local env = os.getenv("RLHOST_VLLM_PYTHON")
  if env and env ~= "" then return env, "RLHOST_VLLM_PYTHON" end
  local venv = os.getenv("RLHOST_VLLM_VENV")
  if not venv or venv == "" then venv = (os.getenv("HOME") or "") .. "/.cache/rlhost/vllm-venv" end
  return venv .. "/bin/python", "the default venv"
end

local function executable(path)
  local f = io.open(path, "rb")
  if not f then return false end
  f:close()
  return true
end

-- ---- SGLang /generate <-> vLLM /v1/completions ------------------------------------

-- SGLang sampling_params -> /v1/completions fields (the names vLLM takes as extras).
local SAMPLING = {
  temperature = "temperature", top_p = "top_p", min_p = "min_p", stop = "stop", stop_token_ids = "stop_token_ids",
  ignore_eos = "ignore_eos", n = "n", frequency_penalty = "frequency_penalty", presence_penalty = "presence_penalty",
  repetition_penalty = "repetition_penalty", skip_special_tokens = "skip_special_tokens",
  spaces_between_special_tokens = "spaces_between_special_tokens", min_new_tokens = "min_tokens",
  max_new_tokens = "max_tokens", sampling_seed = "seed", no_stop_trim = "include_stop_str_in_output",
}

--- One SGLang /generate request (a single prompt) -> a /v1/completions body.
function M.completions_request(req, model)
  local sp = req.sampling_params or {}
  local body = { model = model, return_token_ids = true, stream = false }
  if req.lora_path ~= nil and req.lora_path ~= json.null then   -- vLLM picks an adapter by model name
    if type(req.lora_path) ~= "string" or req.lora_path == "" then
      return nil, "vLLM generate: 'lora_path' must name one loaded adapter (a string; vLLM takes no per-prompt list)"
    end
    body.model = req.lora_path
  end
  if req.input_ids ~= nil then body.prompt = req.input_ids else body.prompt = req.text end
  if type(body.prompt) ~= "table" and type(body.prompt) ~= "string" then
    return nil, "vLLM generate: the request has neither 'input_ids' nor 'text'"
  end
  if type(body.prompt) == "table" and type(body.prompt[1]) == "table" then
    return nil, "vLLM generate: batched input_ids are not supported (one prompt per request; use n for several samples)"
  end
  for k, v in pairs(sp) do
    local name = SAMPLING[k]
    if name then body[name] = v end
  end
  if sp.top_k ~= nil and sp.top_k > 0 then body.top_k = sp.top_k end
  if body.max_tokens == nil then body.max_tokens = 128 end
  -- 0: the sampled token's log-prob only (top_logprobs_num asks for more)
  if req.return_logprob then body.logprobs = tonumber(req.top_logprobs_num) or 0 end
  if req.rid ~= nil then body.request_id = tostring(req.rid) end
  return body
end

--- Where and what to POST for one SGLang /generate request to an engine or a router of
--- the given backend: "/generate" and req itself, or for "vllm" "/v1/completions" and
--- its translation (nil, err when it cannot be translated).
function M.target(req, backend)
  if backend ~= "vllm" then return "/generate", req end
  local body, err = M.completions_request(req)
  if not body then return nil, err end
  return "/v1/completions", body
end

local FINISH = { length = "length", stop = "stop", abort = "abort", cancelled = "abort", error = "abort" }

--- A /v1/completions response -> SGLang /generate output(s): one table per choice.
--- weight_version: what to report in meta_info (vLLM's completions carry none).
function M.generate_response(resp, weight_version, elapsed)
  if type(resp) ~= "table" or type(resp.choices) ~= "table" then
    return nil, "vLLM generate: no 'choices' in the answer"
  end
  local usage = type(resp.usage) == "table" and resp.usage or {}
  local details = type(usage.prompt_tokens_details) == "table" and usage.prompt_tokens_details or {}
  local outs = {}
  for i, c in ipairs(resp.choices) do
    local ids = type(c.token_ids) == "table" and c.token_ids or {}
    local lp = type(c.logprobs) == "table" and c.logprobs or nil
    local items
    if lp and type(lp.token_logprobs) == "table" then
      items = {}
      for j, id in ipairs(ids) do
        local v = lp.token_logprobs[j]
        items[j] = { v == nil and json.null or v, id, json.null }
      end
    end
    local reason = FINISH[tostring(c.finish_reason)] or "stop"
    local fr = { type = reason }
    if reason == "stop" and c.stop_reason ~= nil and c.stop_reason ~= json.null then fr.matched = c.stop_reason end
    if reason == "length" then fr.length = #ids end
    if reason == "abort" then fr.message = "aborted by vLLM (" .. tostring(c.finish_reason) .. ")" end
    local prompt_n = type(c.prompt_token_ids) == "table" and #c.prompt_token_ids or tonumber(usage.prompt_tokens) or 0
    outs[i] = {
      text = c.text or "",
      output_ids = json.array(ids),
      meta_info = {
        id = resp.id, finish_reason = fr, prompt_tokens = prompt_n, completion_tokens = #ids,
        cached_tokens = tonumber(details.cached_tokens) or 0, weight_version = weight_version,
        output_token_logprobs = items and json.array(items) or nil, e2e_latency = elapsed,
      },
    }
  end
  return outs
end

-- ---- launching ---------------------------------------------------------------------

-- Ports handed to servers launched but not serving yet: the OS may offer a port again
-- until its server binds it, and several servers launch together (rl.engine.wait_all).
local pending_ports = {}

-- Hands a launched server's reserved port back (it serves, exited or was stopped).
local function release_port(self)
  if self._reserved_port then pending_ports[self._reserved_port], self._reserved_port = nil, nil end
end

local function free_port()
  for _ = 1, 20 do
    local srv, err = require("rl.http").serve { host = "127.0.0.1", port = 0, handler = function() return { status = 503 } end }
    if not srv then return nil, err end
    local p = srv:port()
    srv:stop()
    if not pending_ports[p] then return p end
  end
  return nil, "the OS kept offering ports already handed to starting vLLM servers"
end

local function flag_value(v)
  if type(v) == "table" then return json.encode(v) end
  return tostring(v)
end

-- vllm_args {gpu_memory_utilization = 0.7, ["profiler-config"] = "{...}", enforce_eager = true}
-- -> {"--gpu-memory-utilization", "0.7", ...}; true: a bare flag, false: left out.
local function vllm_flags(args)
  local keys = {}
  for k in pairs(args or {}) do keys[#keys + 1] = k end
  table.sort(keys)
  local out = {}
  for _, k in ipairs(keys) do
    local v = args[k]
    local flag = "--" .. tostring(k):gsub("_", "-")
    if v == true then out[#out + 1] = flag
    elseif v ~= false then out[#out + 1] = flag; out[#out + 1] = flag_value(v) end
  end
  return out
end
M.vllm_flags = vllm_flags

-- What rlhost sets unless vllm_args does: the CPU build's needs and what the
-- rollout relies on (log-probs after temperature, as the trainer computes them).
-- max_model_len comes from the model (max_model_len below).
local DEFAULT_ARGS = { dtype = "float32", enforce_eager = true, logprobs_mode = "processed_logprobs" }

--- The context vLLM is asked for when vllm_args has no max_model_len: the model's own
--- (config.json's max_position_embeddings: vLLM refuses to start above it), at most
--- what one sequence's KV cache can hold in kv_space_gib (float32, as rlhost runs it);
--- 2048 when the config says nothing. Also returns how it was chosen.
function M.max_model_len(model, kv_space_gib)
  local shape = require("rl._model_shape").read(model)
  if not shape or not shape.context then return 2048, "no max_position_embeddings in the model's config" end
  local fit = math.floor((kv_space_gib or 1) * 2 ^ 30 / require("rl._model_shape").kv_bytes_per_token(shape, 4))
  if fit < shape.context then return math.max(fit, 1), ("what %g GiB of KV cache holds"):format(kv_space_gib or 1) end
  return math.floor(shape.context), "the model's max_position_embeddings"
end

-- The child we spawn: a small supervisor in vLLM's python that runs the server in our
-- process group. vLLM's EngineCore and workers outlive a killed API server, so when we
-- die (the child's death signal, SIGTERM) or stop it (SIGTERM to the group) it lets
-- the server shut down for up to 10 s, then SIGKILLs the whole group. vLLM's ZMQ
-- sockets go in a directory of the supervisor's own (VLLM_RPC_BASE_PATH, unless the
-- caller set it), removed as the group goes: a killed EngineCore leaves its sockets
-- behind, a few files in the temporary directory per start otherwise.
local SUPERVISOR = [[
import os, shutil, signal, subprocess, sys, tempfile
own = None
if not os.environ.get("VLLM_RPC_BASE_PATH"):
    own = os.environ["VLLM_RPC_BASE_PATH"] = tempfile.mkdtemp(prefix="rlhost-vllm-rpc-")
def tidy():
    if own:
        shutil.rmtree(own, ignore_errors=True)
p = subprocess.Popen(sys.argv[1:])
def down(*_):
    try:
        p.terminate(); p.wait(timeout=10)
    except Exception:
        pass
    tidy()
    os.killpg(0, signal.SIGKILL)
signal.signal(signal.SIGTERM, down)
signal.signal(signal.SIGINT, down)
rc = p.wait()
signal.signal(signal.SIGTERM, signal.SIG_IGN)
os.killpg(0, signal.SIGTERM)
tidy()
sys.exit(rc if rc >= 0 else 128 - rc)
]]


-- The ranks vLLM's --max-lora-rank takes (vllm/config/lora.py, MaxLoRARanks).
M.LORA_RANKS = { 1, 8, 16, 32, 64, 128, 256, 320, 512 }

--- The --max-lora-rank that serves adapters of rank `rank`: the smallest vLLM takes
--- at or above it; nil and why above the largest.
function M.lora_rank(rank)
  for _, r in ipairs(M.LORA_RANKS) do if r >= rank then return r end end
  return nil, ("rank %d is above the largest vLLM serves (%d) (hint: a smaller --lora-rank)")
    :format(rank, M.LORA_RANKS[#M.LORA_RANKS])
end

--- Spawns a vLLM server. opts: model, host, port, served_model_name, python,
--- vllm_args (flags, `--<key>`), env (extra environment), ready_timeout (s, default
--- 600), log_file, kv_cache_space (GiB, VLLM_CPU_KVCACHE_SPACE, default 1),
--- weight_version, nice (the server's CPU priority, 0-19), max_lora_rank (> 0:
--- --enable-lora, --max-lora-rank the smallest vLLM rank at or above it, --max-loras 1
--- unless vllm_args says, and run-time adapter loading: VLLM_ALLOW_RUNTIME_LORA_UPDATING).
--- Returns a launch handle (rl.engine.launch): ready once /health answers; or nil and why.
function M.launch(opts)
  local py, from = M.python(opts.python)
  if not executable(py) then
    return nil, ("rl.engine.start: backend 'vllm' needs vLLM's python, and %s (%s) does not exist; %s")
      :format(py, from, INSTALL_HINT)
  end
  local port = opts.port
  if port == nil or port == 0 then
    local err
    port, err = free_port()
    if not port then return nil, "rl.engine.start: no free port for vLLM: " .. tostring(err) end
  end
  local host = opts.host or "127.0.0.1"
  local args = {}
  for k, v in pairs(DEFAULT_ARGS) do args[k] = v end
  for k, v in pairs(opts.vllm_args or {}) do args[tostring(k):gsub("-", "_")] = v end
  local kv_space = tonumber(opts.kv_cache_space or os.getenv("VLLM_CPU_KVCACHE_SPACE") or "") or 1
  if args.max_model_len == nil then
    local why
    args.max_model_len, why = M.max_model_len(opts.model, kv_space)
    log.debug("vLLM max_model_len %d (%s)", args.max_model_len, why)
  end
  local lora = (opts.max_lora_rank or 0) > 0
  if lora then   -- adapters loaded at run time (:load_lora), up to that rank
    local rank, err = M.lora_rank(opts.max_lora_rank)
    if not rank then return nil, "rl.engine.start: opts.max_lora_rank: " .. err end
    if args.enable_lora == nil then args.enable_lora = true end
    if args.max_lora_rank == nil then args.max_lora_rank = rank end
    if args.max_loras == nil then args.max_loras = 1 end
  end
  local profiling = args.profiler_config ~= nil
  local env = {
    VLLM_TARGET_DEVICE = os.getenv("VLLM_TARGET_DEVICE") or "cpu",
    VLLM_CPU_KVCACHE_SPACE = tostring(opts.kv_cache_space or os.getenv("VLLM_CPU_KVCACHE_SPACE") or 1),
    VLLM_SERVER_DEV_MODE = "1",   -- /collective_rpc, /reset_prefix_cache
    -- /stop_profile flushes traces through the engine's RPC: minutes, not the default 10 s
    VLLM_RPC_TIMEOUT = os.getenv("VLLM_RPC_TIMEOUT") or (profiling and "1800000" or nil),
    VLLM_LOGGING_LEVEL = os.getenv("VLLM_LOGGING_LEVEL"),
    VLLM_ALLOW_RUNTIME_LORA_UPDATING = lora and "True" or nil,   -- /v1/load_lora_adapter, /v1/unload_lora_adapter
  }
  for k, v in pairs(opts.env or {}) do env[k] = tostring(v) end
  local served = opts.served_model_name or opts.model
  local cmd = { py, "-m", "vllm.entrypoints.openai.api_server", "--model", opts.model, "--host", host,
                "--port", tostring(port), "--served-model-name", served }
  for _, f in ipairs(vllm_flags(args)) do cmd[#cmd + 1] = f end
  local argv = { "/usr/bin/env" }
  local env_keys = {}
  for k in pairs(env) do env_keys[#env_keys + 1] = k end
  table.sort(env_keys)
  for _, k in ipairs(env_keys) do argv[#argv + 1] = k .. "=" .. env[k] end
  for _, a in ipairs { py, "-c", SUPERVISOR } do argv[#argv + 1] = a end
  for _, a in ipairs(cmd) do argv[#argv + 1] = a end
  local logf = opts.log_file or (os.tmpname() .. ".vllm.log")
  local shown = {}
  for i, a in ipairs(cmd) do shown[i] = require("rl.process").quote(a) end
  log.info("Launching vLLM server: " .. table.concat(shown, " ") .. " (log: " .. logf .. ")")
  local pid, err = proc.spawn(argv, { log = logf, death_signal = 15, nice = opts.nice })
  if not pid then return nil, "rl.engine.start: " .. tostring(err) end
  local url = ("http://%s:%d"):format(host == "0.0.0.0" and "127.0.0.1" or host, port)
  local self = setmetatable({ backend = "vllm", mode = "vllm", url = url, pid = pid, log_file = logf,
                              model = served, weight_version = opts.weight_version or "default",
                              _api_key = opts.api_key }, VllmEngine)
  local timeout = opts.ready_timeout or 600
  local deadline = now() + timeout
  if opts.port == nil or opts.port == 0 then   -- until it serves, or exits, or is stopped
    pending_ports[port], self._reserved_port = true, port
  end
  return require("rl.engine.launch").new(self, function()
    local code = proc.reap(pid)
    if code then
      self.pid = nil
      release_port(self)
      return nil, ("rl.engine.start: the vLLM server exited with status %s before serving; its log (%s):\n%s")
        :format(tostring(code), logf, require("rl.engine._common").log_tail(logf, 4000))
    end
    local r = require("rl.http").get(url .. "/health", { timeout = 5 })
    if r and r.status == 200 then
      release_port(self)
      log.info("Starting vLLM server on " .. url .. " (pid " .. pid .. ")")
      return true
    end
    if now() > deadline then
      self:stop()
      return nil, ("rl.engine.start: the vLLM server did not serve within %s s (ready_timeout; pid %d stopped); "
        .. "its log (%s):\n%s"):format(tostring(timeout), pid, logf, require("rl.engine._common").log_tail(logf, 4000))
    end
    return false
  end, 0.5)
end

-- ---- engine methods ----------------------------------------------------------------

local function post(self, path, body, timeout)
  local http = require "rl.http"
  local headers = { ["content-type"] = "application/json" }
  if self._api_key then headers.authorization = "Bearer " .. self._api_key end
  local resp, err = http.request { method = "POST", url = self.url .. path, body = body and json.encode(body) or "",
                                   headers = headers, timeout = timeout or 3600 }
  if not resp then return nil, ("POST %s%s: %s"):format(self.url, path, tostring(err)) end
  if resp.status ~= 200 then
    return nil, ("POST %s%s: HTTP %d: %s"):format(self.url, path, resp.status, resp.body:sub(1, 500))
  end
  if resp.body == "" then return {} end
  local v = json.decode(resp.body)
  return v == nil and { message = resp.body } or v, nil, resp
end

--- SGLang /generate request -> response (a list when n > 1), through /v1/completions.
function VllmEngine:generate(req)
  require("rl.engine._common").check_generate(req)
  local body, berr = M.completions_request(req, self.model)
  if not body then return nil, berr end
  local t0 = now()
  local resp, err = post(self, "/v1/completions", body)
  if not resp then return nil, err end
  local outs, terr = M.generate_response(resp, self.weight_version, now() - t0)
  if not outs then return nil, terr end
  if #outs == 1 then return outs[1] end
  return outs
end

-- Prometheus text -> {name = value} for unlabelled sums of `vllm:*` series.
local function scrape(text)
  local v = {}
  for name, value in text:gmatch("\n(vllm:[%w_]+)[^\n]* ([%d%.eE+-]+)") do
    v[name] = (v[name] or 0) + (tonumber(value) or 0)
  end
  return v
end

--- Engine counters from vLLM's /metrics, in the native engine's names.
function VllmEngine:stats()
  local resp, err = require("rl.http").get(self.url .. "/metrics", { timeout = 30 })
  if not resp then return nil, err end
  if resp.status ~= 200 then return nil, ("GET %s/metrics: HTTP %d"):format(self.url, resp.status) end
  local m = scrape("\n" .. resp.body)
  return {
    num_running = m["vllm:num_requests_running"] or 0, num_queued = m["vllm:num_requests_waiting"] or 0,
    token_usage = m["vllm:kv_cache_usage_perc"] or 0,
    prompt_tokens_total = m["vllm:prompt_tokens_total"] or 0,
    generation_tokens_total = m["vllm:generation_tokens_total"] or 0,
    requests_total = m["vllm:request_success_total"] or 0,
    weight_version = self.weight_version, backend = "vllm",
  }
end

--- True when /health answers 200.
function VllmEngine:health(timeout)
  local r = require("rl.http").get(self.url .. "/health", { timeout = timeout or 10 })
  return r ~= nil and r.status == 200
end

--- Drops the prefix cache (/reset_prefix_cache).
function VllmEngine:flush_cache()
  local r, err = post(self, "/reset_prefix_cache", nil, 120)
  if not r then return nil, err end
  return true
end

-- After new weights or a new adapter: the prefix cache dropped (its KV came from the old
-- ones) and the weight version recorded, here and in vLLM's own record (GET /weight_info;
-- not fatal: older vLLMs lack it). → true | nil, err
local function swapped(self, weight_version)
  local ok, ferr = self:flush_cache()
  if not ok then return nil, ferr end
  if weight_version ~= nil then
    self.weight_version = tostring(weight_version)
    local _, verr = post(self, "/update_weight_version", { new_version = self.weight_version }, 60)
    if verr then log.debug("rl.engine.vllm: update_weight_version: " .. verr) end
  end
  return true
end

--- Reloads the weights in place from a safetensors directory (/collective_rpc
--- reload_weights), drops the prefix cache and records the weight version.
function VllmEngine:update_weights_from_disk(dir, weight_version)
  if type(dir) ~= "string" then
    error("rl.engine.Engine:update_weights_from_disk: bad argument #1 'dir' (string expected, got " .. type(dir) .. ")", 2)
  end
  task.need_task("rl.engine.Engine:update_weights_from_disk")
  local r, err = post(self, "/collective_rpc", { method = "reload_weights", kwargs = { weights_path = dir } })
  if not r then return nil, "reload_weights: " .. err end
  local ok, ferr = swapped(self, weight_version)
  if not ok then return nil, "after reload_weights: " .. ferr end
  return { success = true, message = "reloaded from " .. dir, weight_version = self.weight_version }
end

-- How many of its adapters' files a vLLM engine keeps (load_lora's copies).
M.KEEP_LORA_FILES = 4

--- Loads the LoRA adapter in `dir` (PEFT files) under `name`, in place of the adapter of
--- that name if any (a trainer's adapter sync); requests naming it (lora_path, OpenAI's
--- model) run under the new one from then on. The server needs LoRA enabled (launched
--- with max_lora_rank, or --enable-lora and VLLM_ALLOW_RUNTIME_LORA_UPDATING=True).
--- Replacing is an unload and a load, not vLLM's load_inplace: the adapter gets a fresh
--- id, so vLLM loads its files once (a load_inplace adapter is reloaded from its path at
--- every step that runs it); the prefix cache is dropped too. vLLM loads a hard-linked
--- copy of `dir` that the engine keeps (the last M.KEEP_LORA_FILES, until :stop()): it
--- reads an adapter's files again when requests still running under an evicted one need
--- it. A request naming the adapter between the unload and the load answers 404 (the
--- rollout retries it). Returns {success, message, weight_version} or nil, err.
function VllmEngine:load_lora(name, dir, weight_version)
  if type(name) ~= "string" or name == "" then
    error("rl.engine.Engine:load_lora: bad argument #1 'name' (non-empty string expected, got " .. type(name) .. ")", 2)
  end
  if type(dir) ~= "string" then
    error("rl.engine.Engine:load_lora: bad argument #2 'dir' (string expected, got " .. type(dir) .. ")", 2)
  end
  task.need_task("rl.engine.Engine:load_lora")
  -- vLLM reads the files again whenever it evicts and needs an adapter that requests still
  -- run under (a sync during generation), and the sync removes its directory afterwards:
  -- the engine loads its own hard-linked copy and keeps the last KEEP_LORA_FILES of them
  self._lora_seq = (self._lora_seq or 0) + 1
  local own = ("%s.vllm-%s-%d"):format((dir:gsub("/+$", "")), tostring(self.url):match(":(%d+)$") or "x", self._lora_seq)
  local q = require("rl.process").quote
  local rc = os.execute(("cp -al -- %s %s 2>/dev/null || cp -a -- %s %s"):format(q(dir), q(own), q(dir), q(own)))
  if rc ~= 0 and rc ~= true then return nil, ("load_lora: copying %s to %s failed"):format(dir, own) end
  local function failed(err)
    require("rl._fs").remove_tree(own)
    if err:find('HTTP 404: {"detail":"Not Found"}', 1, true) then   -- no such route
      err = err .. " (hint: this server loads no LoRA adapters at run time: rlhost starts it so with "
        .. "max_lora_rank (the recipe's --lora-rank); one started elsewhere needs --enable-lora, --max-lora-rank "
        .. "and VLLM_ALLOW_RUNTIME_LORA_UPDATING=True)"
    end
    return nil, "load_lora: " .. err
  end
  local _, uerr = post(self, "/v1/unload_lora_adapter", { lora_name = name }, 120)
  if uerr and not (uerr:find(": HTTP 404: ", 1, true) and uerr:find("NotFoundError", 1, true)) then
    return failed(uerr)   -- (an adapter of that name not loaded yet: NotFoundError)
  end
  local _, err = post(self, "/v1/load_lora_adapter", { lora_name = name, lora_path = own }, 600)
  if err then return failed(err) end
  self._lora_files = self._lora_files or {}
  table.insert(self._lora_files, own)
  while #self._lora_files > M.KEEP_LORA_FILES do require("rl._fs").remove_tree(table.remove(self._lora_files, 1)) end
  local ok, ferr = swapped(self, weight_version)
  if not ok then return nil, "after load_lora: " .. ferr end
  return { success = true, message = ("adapter '%s' loaded from %s (a copy of %s)"):format(name, own, dir),
           weight_version = self.weight_version }
end

--- A handle on a vLLM server started elsewhere (slime's --rollout-external): requests,
--- stats and weight reloads as for one rlhost launched, never stopped by rlhost. opts:
--- model (the served name), weight_version, api_key.
function M.attach(url, opts)
  opts = opts or {}
  return setmetatable({ backend = "vllm", mode = "vllm", url = url, model = opts.model, external = true,
                        weight_version = opts.weight_version or "default", _api_key = opts.api_key }, VllmEngine)
end

--- The server's weight-receiving side (rl.weight_sync): files only (reload_weights).
function VllmEngine:weight_receiver()
  return require("rl.weight_sync").new_receiver { url = self.url, engine = self, kind = "vllm", disk_only = true }
end

--- Aborts a request by rid, or every request when rid is nil (/abort_requests);
--- returns how many were aborted.
function VllmEngine:abort(rid)
  task.need_task("rl.engine.Engine:abort")
  local r = post(self, "/abort_requests", rid == nil and {} or { request_ids = { tostring(rid) } }, 60)
  return r and tonumber(r.aborted) or 0
end

--- Pauses generation (mode "abort": in-flight requests end as aborted; "wait":
--- let them finish; "keep": freeze them) until :resume().
function VllmEngine:pause(mode)
  task.need_task("rl.engine.Engine:pause")
  return post(self, "/pause?mode=" .. (mode or "abort"), nil, 600)
end

function VllmEngine:resume()
  task.need_task("rl.engine.Engine:resume")
  return post(self, "/resume", nil, 60)
end

local function gpu_only(what)
  return nil, ("rl.engine.Engine:%s: not available on vLLM engines here (vLLM's sleep mode is GPU-only)"):format(what)
end
function VllmEngine:release_memory() return gpu_only("release_memory") end
function VllmEngine:resume_memory() return gpu_only("resume_memory") end

--- Stops the server: SIGTERM to its process group (supervisor, API server, EngineCore,
--- worker; the supervisor SIGKILLs the group after 10 s), SIGKILL after 20 s. Idempotent.
function VllmEngine:stop() self:stop_within(20) end

--- A bounded stop (rl.recipe.health's, for a dead or stuck server): SIGTERM to its
--- process group, SIGKILL after min(timeout, 20) s. Returns true.
function VllmEngine:stop_within(timeout)
  release_port(self)
  if self.pid then require("rl.process").stop_pid(self.pid, math.min(timeout, 20)) end
  self.pid = nil
  for _, d in ipairs(self._lora_files or {}) do require("rl._fs").remove_tree(d) end
  self._lora_files = nil
  return true
end

function VllmEngine:__tostring() return ("rl.engine(vllm, %s)"):format(tostring(self.url)) end

return M
