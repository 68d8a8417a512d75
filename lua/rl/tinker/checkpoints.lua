--- rl.tinker.checkpoints: the tinker:// checkpoints on disk, as the SDK's RestClient
--- lists and deletes them. A checkpoint is a directory
--- <checkpoint_dir>/<training run id>/<weights | sampler_weights>/<name> holding a PEFT
--- adapter (adapter_config.json, ...); its id is "<kind>/<name>", its path
--- tinker://<run>/<kind>/<name>. What is on disk is the truth: checkpoints of runs whose
--- clients are gone (an earlier server, a finished session) are listed too.
---
---   local list = checkpoints.scan(dir)             -- every checkpoint, newest first
---   local list = checkpoints.scan(dir, run_id)     -- one run's
---   checkpoints.json(c)                            -- the SDK's Checkpoint
---   checkpoints.delete(dir, run_id, "sampler_weights/step-3")   -- → checkpoint dir | nil, why
local M = {}

local TYPES = { weights = "training", sampler_weights = "sampler" }

local function valid_name(name)
  return type(name) == "string" and name:match("^[%w%._%-]+$") ~= nil and name ~= "." and name ~= ".."
end

--- A training run id as this server makes them (<session>:train:<n>): no '/', not '.' or '..'.
function M.valid_run_id(id)
  return type(id) == "string" and id:match("^[%w%._%-:]+$") ~= nil and id ~= "." and id ~= ".."
end

--- An RFC 3339 time (UTC) of seconds since the epoch, as the SDK's datetimes read it.
function M.iso_time(t)
  return os.date("!%Y-%m-%dT%H:%M:%S", math.floor(t)) .. "Z"
end

--- The checkpoints under `dir` (of run `run` alone when given), newest first: each
--- {run, kind, name, id = kind/name, path = tinker://..., dir, time (seconds since the
--- epoch: its newest file), size (bytes, all its files)}. Only directories with an
--- adapter_config.json count. → list, or nil, err when the directory cannot be read.
function M.scan(dir, run)
  if run ~= nil and not M.valid_run_id(run) then return {} end
  local root = run and (dir .. "/" .. run) or dir
  local f = io.open(root, "r")
  if not f then return {} end   -- nothing saved yet
  f:close()
  -- find prints each file's mtime, size and path below root; it runs beside the event loop
  local code, out = require("rl.process").run({ "find", root, "-mindepth", run and "3" or "4", "-type", "f",
                                                "-printf", "%T@ %s %P\\n" }, { timeout = 60 })
  if not code then return nil, out end
  if code ~= 0 then return nil, "listing " .. root .. " failed: " .. out:sub(1, 500) end
  local by_dir, list = {}, {}
  for line in out:gmatch("[^\n]+") do
    local mtime, size, rel = line:match("^(%d+%.?%d*) (%d+) (.+)$")
    if rel then
      if run then rel = run .. "/" .. rel end
      local r, kind, name, file = rel:match("^([^/]+)/([^/]+)/([^/]+)/(.+)$")
      if r and TYPES[kind] and valid_name(name) and M.valid_run_id(r) then
        local key = r .. "/" .. kind .. "/" .. name
        local c = by_dir[key]
        if not c then
          c = { run = r, kind = kind, name = name, id = kind .. "/" .. name, path = "tinker://" .. key,
                dir = dir .. "/" .. key, time = 0, size = 0 }
          by_dir[key] = c
        end
        c.time = math.max(c.time, tonumber(mtime))
        c.size = c.size + tonumber(size)
        if file == "adapter_config.json" then c.complete = true end
      end
    end
  end
  for _, c in pairs(by_dir) do
    if c.complete then list[#list + 1] = c end
  end
  table.sort(list, function(a, b)
    if a.time ~= b.time then return a.time > b.time end
    return a.path < b.path
  end)
  return list
end

--- A checkpoint as the SDK's Checkpoint (checkpoint_type "training" or "sampler").
function M.json(c)
  return { checkpoint_id = c.id, checkpoint_type = TYPES[c.kind], time = M.iso_time(c.time),
           tinker_path = c.path, size_bytes = c.size, public = false }
end

--- The directory of checkpoint `checkpoint_id` ("weights/<name>" or
--- "sampler_weights/<name>") of run `run` under `dir`, or nil and why ("bad": not a
--- checkpoint id; "missing": no such checkpoint).
function M.locate(dir, run, checkpoint_id)
  local kind, name = tostring(checkpoint_id):match("^([^/]+)/([^/]+)$")
  if not M.valid_run_id(run) or not TYPES[kind] or not valid_name(name) then
    return nil, "bad", ("'%s' of training run '%s' is not a checkpoint id (weights/<name> or sampler_weights/<name>)")
      :format(tostring(checkpoint_id), tostring(run))
  end
  local cdir = table.concat({ dir, run, kind, name }, "/")
  local f = io.open(cdir .. "/adapter_config.json", "r")
  if not f then return nil, "missing", ("no checkpoint tinker://%s/%s/%s"):format(run, kind, name) end
  f:close()
  return cdir
end

--- Removes checkpoint `checkpoint_id` of run `run` (its directory, and the run's
--- directories when nothing else is left in them). → its directory, or nil, why, message.
function M.delete(dir, run, checkpoint_id)
  local cdir, why, msg = M.locate(dir, run, checkpoint_id)
  if not cdir then return nil, why, msg end
  local ok, err = require("rl._fs").remove_tree(cdir)
  if not ok then return nil, "failed", err end
  local kind_dir = cdir:match("^(.*)/[^/]+$")
  if os.remove(kind_dir) then os.remove(kind_dir:match("^(.*)/[^/]+$")) end   -- only empty ones go
  return cdir
end

return M
