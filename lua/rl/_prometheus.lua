--- Prometheus exposition of the last logged metrics (private; rl.metrics.serve
--- and rl.metrics.prometheus_text are the public side).
--
-- Every rl.metrics log call (module logger or rl.metrics.logger) hands its dict
-- to update(); each numeric key becomes a gauge named prefix .. sanitised key
-- (`train/loss` -> `rlhost_train_loss`) holding the last value logged.
local M = {}

local huge = math.huge
local gauges = {}   -- name -> {key, value, time}
local owners = {}   -- name -> the metrics key that claimed it first
local warned = {}
local name_cache = {}  -- metrics key -> Prometheus name (keys repeat every step)
local last_log_time
local listeners = setmetatable({}, { __mode = "k" })   -- fn -> true: called after each change
M.prefix = "rlhost_"

-- The gauge this module writes itself: a logged key mapping to its name is not exported
-- (two families of one name break the whole scrape).
local function builtin_name() return M.prefix .. "metrics_last_log_timestamp_seconds" end

--- Calls fn() after every update (rl.metrics.serve pushes the text to its server).
function M.on_change(fn) listeners[fn] = true end
function M.off_change(fn) listeners[fn] = nil end
local function changed() for fn in pairs(listeners) do fn() end end

--- The Prometheus name for a metrics key: [a-zA-Z0-9_] only, no leading digit.
function M.name(key, prefix)
  local s = tostring(key):gsub("[^%w_]", "_"):gsub("__+", "_"):gsub("^_", ""):gsub("_$", "")
  s = (prefix or M.prefix) .. s
  if s:match("^%d") then s = "_" .. s end
  return s
end

--- Records every numeric (or boolean) value of one logged dict.
function M.update(metrics, now)
  last_log_time = now
  for k, v in pairs(metrics) do
    if type(k) == "string" then
      if type(v) == "boolean" then v = v and 1 or 0 end
      if type(v) == "number" then
        local name = name_cache[k]
        if not name then name = M.name(k); name_cache[k] = name end
        local owner = owners[name]
        if owner == nil then
          owner = name == builtin_name() and "(rlhost's own gauge)" or k
          owners[name] = owner
        end
        if owner == k then
          gauges[name] = { key = k, value = v, time = now }
        elseif not warned[k] then
          warned[k] = true
          -- debug, not warn: slime's own keys collide (eval/x/truncated_ratio, eval/x-truncated_ratio)
          require("rl.log").debug("rl.metrics: '%s' and '%s' both map to the Prometheus name %s; only the first is exported",
            owner, k, name)
        end
      end
    end
  end
  changed()
end

--- Forgets every gauge (tests).
function M.reset()
  gauges, owners, warned, last_log_time = {}, {}, {}, nil
  changed()
end

local function fmt(v)
  if v ~= v then return "NaN" end
  if v == huge then return "+Inf" elseif v == -huge then return "-Inf" end
  if v == math.floor(v) and math.abs(v) < 1e15 then return ("%d"):format(v) end
  local short = ("%.15g"):format(v)
  return tonumber(short) == v and short or ("%.17g"):format(v)
end

local function help_text(key)
  return (key:gsub("\\", "\\\\"):gsub("\n", "\\n"))
end

--- The exposition text (format 0.0.4): HELP and TYPE per gauge, sorted by name.
function M.text()
  local names = {}
  for name in pairs(gauges) do names[#names + 1] = name end
  table.sort(names)
  local out = {}
  for _, name in ipairs(names) do
    local g = gauges[name]
    out[#out + 1] = ("# HELP %s rl.metrics key %s (last logged value)"):format(name, help_text(g.key))
    out[#out + 1] = ("# TYPE %s gauge"):format(name)
    out[#out + 1] = name .. " " .. fmt(g.value)
  end
  local up = builtin_name()
  out[#out + 1] = "# HELP " .. up .. " wall-clock time of the last rl.metrics log call (0: none yet)"
  out[#out + 1] = "# TYPE " .. up .. " gauge"
  out[#out + 1] = up .. " " .. fmt(last_log_time or 0)
  return table.concat(out, "\n") .. "\n"
end

return M
