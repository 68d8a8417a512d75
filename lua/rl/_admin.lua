-- Private: the run's admin token (runtime/base/admin_token.hpp), which the control
-- endpoints of rlhost's engines and routers require even on loopback. Children
-- inherit it as $RLHOST_ADMIN_TOKEN; rl.engine, rl.router, the trainer's sync and
-- the rollout's abort send it. See docs/engine.md ("Security").
local core = require "rl._core"

local M = {}

--- JSON request headers carrying 'Authorization: Bearer <api_key or the admin token>'.
function M.headers(api_key)
  return { ["content-type"] = "application/json", authorization = "Bearer " .. (api_key or core.admin.token()) }
end

--- Saves a token this process generated to <runtime dir>/<pid>.admin-token (mode
--- 0600, removed at exit) so the same user's tools can reach this run's servers;
--- returns its path, or nil when the token was inherited (the parent saved it) or
--- could not be saved.
function M.save()
  if not core.admin.generated() then return nil end
  return (core.admin.save())
end

--- How a person passes the token ("need 'Authorization: Bearer ...' ..."), for
--- `rlhost engine` and `rlhost router` to print. Saves it (mode 0600) when this
--- process generated it.
function M.hint()
  if not core.admin.generated() then
    return "need 'Authorization: Bearer $RLHOST_ADMIN_TOKEN' (the token this process inherited from its parent)"
  end
  local path, err = core.admin.save()
  if not path then return "need the admin token, which could not be saved: " .. tostring(err) end
  return ("need 'Authorization: Bearer <token>', e.g. curl -H \"Authorization: Bearer $(cat %s)\" "
    .. "(that file is yours alone, mode 0600; set RLHOST_ADMIN_TOKEN before starting to choose the token)"):format(path)
end

return M
