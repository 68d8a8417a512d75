--- rl.agent.metrics: the per-step metrics of multi-turn trajectories (keys without
--- the rollout/ prefix, as rl.rollout.metrics.from_samples, which adds them when
--- samples carry metadata.trajectory):
---   turns/{mean,median,max,min}, tool_calls/{mean,median,max,min},
---   tool_errors/rate (calls whose outcome is not ok / calls), tool_errors/count,
---   tool/<name>/calls, tool/<name>/error_rate, agent_end/<reason> (counts).
local json = require "rl.json"

local M = {}

--- The metrics of `samples` (a flat list), or an empty table when none has a trajectory.
function M.from_samples(samples)
  local out = {}
  local turns, calls = {}, {}
  local per, ends = {}, {}
  local total_calls, total_err = 0, 0
  for _, s in ipairs(samples) do
    local md = type(s) == "table" and s.metadata
    local tr = type(md) == "table" and md.trajectory
    if type(tr) == "table" and type(tr.turns) == "table" then
      turns[#turns + 1] = #tr.turns
      local c = 0
      for _, t in ipairs(tr.turns) do
        c = c + (tonumber(t.tool_calls) or 0)
        total_err = total_err + (tonumber(t.tool_errors) or 0)
        for _, tc in ipairs(type(t.tools) == "table" and t.tools or {}) do
          local p = per[tc.name] or { calls = 0, errors = 0 }
          per[tc.name] = p
          p.calls = p.calls + 1
          if tc.outcome ~= "ok" then p.errors = p.errors + 1 end
        end
      end
      calls[#calls + 1] = c
      total_calls = total_calls + c
      local r = tr.end_reason
      if type(r) == "string" then ends[r] = (ends[r] or 0) + 1 end
    end
  end
  if #turns == 0 then return out end
  local stats = require("rl.metrics").statistics
  for k, v in pairs(stats(turns)) do out["turns/" .. k] = v end
  for k, v in pairs(stats(calls)) do out["tool_calls/" .. k] = v end
  out["tool_errors/count"] = total_err
  out["tool_errors/rate"] = total_calls > 0 and total_err / total_calls or 0
  for name, p in pairs(per) do
    out["tool/" .. name .. "/calls"] = p.calls
    out["tool/" .. name .. "/error_rate"] = p.errors / p.calls
  end
  for r, n in pairs(ends) do out["agent_end/" .. r] = n end
  return out
end

return M
