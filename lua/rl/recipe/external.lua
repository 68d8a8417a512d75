--- rl.recipe.external: slime's --rollout-external — train against engines started
--- elsewhere, given by --rollout-external-engine-addrs HOST:PORT. Each is waited for
--- (GET /health) and named by what it serves: an SGLang-API server (rlhost's engine,
--- SGLang: /get_model_info; rl.engine.attach) or vLLM (/v1/models; rl.engine.vllm.attach).
--- rlhost never stops them. Weight sync: shared memory to an rlhost engine on this machine,
--- else files (update_weights_from_disk; vLLM: reload_weights, which needs
--- VLLM_SERVER_DEV_MODE=1), which must be readable where they run: the same machine, or
--- --remote-weights-dir on a shared file system. The control
--- endpoints want the run's admin token: start rlhost engines with the same
--- RLHOST_ADMIN_TOKEN in their environment (docs/recipes.md#external-engines).
local rl = require "rl"
local json = require "rl.json"
local log = require "rl.log"

local M = {}

local function get(url, timeout)
  local r = require("rl.http").get(url, { timeout = timeout or 5 })
  return r and r.status == 200 and r or nil
end

--- The engine at `addr` (HOST:PORT, or a URL), once it answers /health within `timeout`
--- seconds: a handle with url and backend ("native" for an SGLang-API server, "vllm").
--- nil, why when it does not answer or serves neither API.
function M.connect(addr, timeout)
  local url = addr:match("^https?://") and addr:gsub("/+$", "") or ("http://" .. addr)
  local deadline = require("rl._core").loop.now() + (timeout or 60)
  while not get(url .. "/health") do
    if require("rl._core").loop.now() > deadline then
      return nil, ("%s did not answer GET /health within %g s (is it started, and listening on that address?)")
        :format(url, timeout or 60)
    end
    require("rl.task").sleep(0.5)
  end
  local info = get(url .. "/get_model_info")
  if info then
    local body = json.decode(info.body)
    local h = rl.engine.attach(url)
    h.backend, h.model = "native", type(body) == "table" and body.model_path or nil
    return h
  end
  local models = get(url .. "/v1/models")
  if models then
    local body = json.decode(models.body)
    local first = type(body) == "table" and type(body.data) == "table" and body.data[1]
    return require("rl.engine.vllm").attach(url, { model = first and first.id or nil })
  end
  return nil, url .. " serves neither /get_model_info (an SGLang-API server: rlhost's engine, SGLang) nor /v1/models (vLLM)"
end

--- Every engine of --rollout-external-engine-addrs, in order; a usage error naming the
--- address when one cannot be reached, or when they mix backends.
function M.connect_all(addrs, timeout)
  local engines, backend = {}, nil
  for i, a in ipairs(addrs) do
    local e, err = M.connect(a, timeout)
    if not e then require("rl.args").usage_error("--rollout-external-engine-addrs " .. a .. ": " .. err) end
    if backend and e.backend ~= backend then
      require("rl.args").usage_error(("--rollout-external-engine-addrs: %s is a %s server, %s a %s one (one kind of "
        .. "engine per run)"):format(addrs[1], backend, a, e.backend))
    end
    backend = e.backend
    engines[i] = e
    log.info("external engine %d: %s (%s%s)", i - 1, e.url, e.backend, e.model and (", " .. e.model) or "")
  end
  return engines, backend
end

return M
