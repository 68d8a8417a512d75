--- rl.rewards.remote: a reward computed by an HTTP service, as slime's `remote_rm`.
--
--   local fn = rl.rewards.get("remote", { url = "http://127.0.0.1:8000/reward", timeout = 120, retries = 10 })
--   fn(sample)  -- POST {"prompt", "response", "label"} -> the decoded JSON body
--
-- The body may be a number (the reward), an object (pick a field with
-- reward_key) or null (skip). Connection errors, timeouts and HTTP 5xx are
-- retried with exponential backoff and jitter (min(2^attempt, 30) s + U(0, 1) s);
-- 4xx and undecodable bodies fail at once. Must run inside a task.
local M = {}

function M.new(opts)
  if type(opts) ~= "table" or type(opts.url) ~= "string" or not opts.url:match("^https?://") then
    error("rl.rewards.remote: opts.url must be an http(s) URL, got " .. tostring(opts and opts.url), 3)
  end
  local http = require "rl.http"
  local json = require "rl.json"
  local url, timeout = opts.url, opts.timeout or 120
  local retries = opts.retries or 10
  local max_backoff = opts.max_backoff or 30
  local headers = opts.headers
  return function(sample)
    local body = { prompt = sample.prompt, response = sample.response, label = sample.label }
    if sample.metadata ~= nil then body.metadata = sample.metadata end
    local last_err
    for attempt = 0, retries do
      if attempt > 0 then require("rl.task").sleep(math.min(2 ^ (attempt - 1), max_backoff) + math.random()) end
      local resp, err = http.post(url, body, { timeout = timeout, headers = headers })
      if not resp then
        last_err = err
      elseif resp.status >= 500 then
        last_err = ("POST %s: HTTP %d: %s"):format(url, resp.status, resp.body:sub(1, 200))
      elseif resp.status >= 400 then
        error(("POST %s: HTTP %d: %s"):format(url, resp.status, resp.body:sub(1, 200)), 0)
      else
        local ok, v = pcall(json.decode, resp.body)
        if not ok then error(("POST %s: the reply is not JSON: %s"):format(url, resp.body:sub(1, 200)), 0) end
        if v == json.null then return nil end
        return v
      end
    end
    error(("remote reward failed after %d attempts: %s"):format(retries + 1, tostring(last_err)), 0)
  end
end

return M
