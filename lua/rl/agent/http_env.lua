--- rl.agent.http_env: an environment that lives in another process (any language),
--- reached over HTTP with JSON close to OpenAI's chat messages (docs/agentic.md,
--- "HTTP environments"):
---   POST /reset {session_id, sample}          -> {observation}
---   POST /step  {session_id, turn, action}    -> {observation, reward, done}
---   POST /close {session_id}                  (answer ignored)
--
--   local env = rl.agent.http_env.new { url = "http://127.0.0.1:8100", timeout = 30 }
local json = require "rl.json"
local toolcall = require "rl.agent.toolcall"

local M = {}

local SAMPLE_KEYS = { "prompt", "label", "metadata", "index", "group_index", "rollout_id" }

-- A transport failure before the request reached the server (nothing was sent).
local function never_sent(err)
  err = tostring(err)
  return err:find("Couldn't connect to server", 1, true) ~= nil or err:find("resolve", 1, true) ~= nil
end

--- An environment adapter for the server at opts.url. opts: url, timeout (30 s per
--- request), retries (2: of /reset and /close, and only when the request never
--- reached the server), headers (extra request headers), max_response (bytes of one
--- answer, 16 MiB). A /step is sent once, on a connection of its own (never resent:
--- the server may have applied it); when it fails, the sample fails.
function M.new(opts)
  if type(opts) ~= "table" or type(opts.url) ~= "string" or not opts.url:match("^https?://") then
    error("rl.agent.http_env.new: bad argument 'opts.url' (an http:// URL expected)", 2)
  end
  local base = opts.url:gsub("/+$", "")
  local timeout, retries = opts.timeout or 30, opts.retries or 2
  local max_response = opts.max_response or 16 * 2 ^ 20

  local function post(path, body, once)
    local http = require "rl.http"
    local headers = { ["content-type"] = "application/json" }
    for k, v in pairs(opts.headers or {}) do headers[k] = v end
    local text = json.encode(body)
    local resp, err
    for attempt = 1, (once and 1 or retries + 1) do
      resp, err = http.request { method = "POST", url = base .. path, body = text, headers = headers, timeout = timeout,
                                 max_body = max_response, fresh_connection = once or nil }
      if resp or not never_sent(err) then break end
      if attempt <= retries then require("rl.task").sleep(0.2 * attempt) end
    end
    if not resp then
      error(("rl.agent.http_env: POST %s%s: %s%s"):format(base, path, tostring(err),
        once and " (a step is sent once, never again: the server may have applied it)" or ""), 0)
    end
    if resp.status ~= 200 then
      error(("rl.agent.http_env: POST %s%s: HTTP %d: %s"):format(base, path, resp.status, resp.body:sub(1, 300)), 0)
    end
    local v, derr = json.decode(resp.body)
    if type(v) ~= "table" or json.is_array(v) then
      error(("rl.agent.http_env: POST %s%s: the answer is not a JSON object (%s)"):format(base, path,
        tostring(derr or resp.body:sub(1, 100))), 0)
    end
    return v
  end

  -- resumable: a trajectory resumed elsewhere (partial rollout, a loaded dump) reattaches to
  -- its session (metadata.env_session), whose state the server keeps
  local env = { url = base, resumable = true }
  function env.new(sample)
    local md = sample.metadata
    local sid = type(md) == "table" and md.env_session
    if not sid then
      sid = require("rl.trace").new_id()
      if type(md) == "table" then md.env_session = sid end
    end
    local inst = { session_id = sid }
    function inst.reset(_, s)
      local d = {}
      for _, k in ipairs(SAMPLE_KEYS) do d[k] = s[k] end
      local r = post("/reset", { session_id = sid, sample = d })
      return r.observation
    end
    function inst.step(_, action)
      local calls = toolcall.parse(action.text)
      local msg = { role = "assistant", content = action.text }
      if #calls > 0 then msg.tool_calls = toolcall.openai(calls, action.turn) end
      local r = post("/step", { session_id = sid, turn = action.turn, action = msg }, true)
      if r.done ~= nil and type(r.done) ~= "boolean" then
        error(("rl.agent.http_env: POST %s/step: \"done\" must be true or false, got %s"):format(base, json.encode(r.done)), 0)
      end
      local reward = r.reward
      if reward == json.null then reward = nil end
      if reward ~= nil and type(reward) ~= "number" and type(reward) ~= "table" then
        error(("rl.agent.http_env: POST %s/step: \"reward\" must be a number or null"):format(base), 0)
      end
      return r.observation, reward, r.done == true
    end
    function inst.close()
      pcall(post, "/close", { session_id = sid })
    end
    return inst
  end
  return env
end

return M
