--- rl.tinker.checkpoints: the tinker:// checkpoints on disk, as the SDK's RestClient
--- lists and deletes them. A checkpoint is a directory
--- <checkpoint_dir>/<training run id>/<weights | sampler_weights>/<name> holding a PEFT
--- adapter (adapter_config.json, ...); its id is "<kind>/<name>", its path
--- tinker://<run>/<kind>/<name>. What is on disk is the truth: checkpoints of runs whose
--- clients are gone (an earlier server, a finished session) are listed too. What the
--- RestClient sets on a checkpoint (its expiry, whether it is published) lives beside its
--- files in tinker_meta.json, so it outlasts the server; that file counts in neither the
--- checkpoint's time nor its size.
---
---   local list = checkpoints.scan(dir)             -- every checkpoint, newest first
---   local list = checkpoints.scan(dir, run_id)     -- one run's
---   checkpoints.json(c)                            -- the SDK's Checkpoint
---   checkpoints.delete(dir, run_id, "sampler_weights/step-3")   -- → checkpoint dir | nil, why
---   checkpoints.meta(cdir)                         -- {expires_at = seconds | nil, public = bool}
---   checkpoints.set_meta(cdir, { public = true })  -- merges and writes it
---   checkpoints.copy(dir, cdir, run_id, "weights", "step-3")   -- → its tinker path | nil, why, message
local M = {}

--- The file beside a checkpoint's own that holds what the RestClient set on it.
M.META = "tinker_meta.json"

local TYPES = { weights = "training", sampler_weights = "sampler" }

local function exists(path)
  local f = io.open(path, "r")
  if f then f:close() end
  return f ~= nil
end

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
--- epoch: its newest file), size (bytes, all its files), expires_at (seconds since the
--- epoch, or nil: never), public}. Only directories with an
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
        if file:sub(1, #M.META) == M.META then   -- the metadata (and its temporary file)
          c.has_meta = true
        else
          c.time = math.max(c.time, tonumber(mtime))
          c.size = c.size + tonumber(size)
        end
        if file == "adapter_config.json" then c.complete = true end
      end
    end
  end
  for _, c in pairs(by_dir) do
    if c.complete then
      if c.has_meta then
        local m = M.meta(c.dir)
        c.expires_at, c.public = m.expires_at, m.public
      end
      list[#list + 1] = c
    end
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
           tinker_path = c.path, size_bytes = c.size, public = c.public == true,
           expires_at = c.expires_at and M.iso_time(c.expires_at) or nil }
end

--- What the RestClient set on the checkpoint in directory `cdir`: {expires_at (seconds
--- since the epoch) or nil, public (boolean)}; {} fields when nothing was set or the file
--- cannot be read.
function M.meta(cdir)
  local text = require("rl._fs").read_file(cdir .. "/" .. M.META)
  local ok, m = pcall(require("rl.json").decode, text or "")
  if not ok or type(m) ~= "table" then return { public = false } end
  return { expires_at = type(m.expires_at) == "number" and m.expires_at or nil, public = m.public == true }
end

--- Merges `changes` ({expires_at = seconds | false (never), public = bool}) into the
--- checkpoint's metadata and writes it (a temporary file renamed over the old one, so a
--- crash leaves the old or the new). → the new metadata, or nil, err.
function M.set_meta(cdir, changes)
  local m = M.meta(cdir)
  if changes.expires_at ~= nil then m.expires_at = changes.expires_at or nil end
  if changes.public ~= nil then m.public = changes.public end
  local path = cdir .. "/" .. M.META
  local ok, err = require("rl._fs").write_file(path .. ".tmp", require("rl.json").encode(
    { expires_at = m.expires_at, public = m.public }))
  if not ok then return nil, err end
  local rok, rerr = os.rename(path .. ".tmp", path)
  if not rok then return nil, rerr end
  return m
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

--- Copies the checkpoint in directory `src` to run `run` under `dir`, as <kind>/<name>:
--- its files, not its metadata (a copy is private and does not expire unless told). The
--- files go to a hidden directory first, which is then renamed into place, so a copy is
--- listed whole or not at all, and never lands on a checkpoint that exists.
--- → its tinker path, or nil, why ("bad", "exists", "failed"), message.
function M.copy(dir, src, run, kind, name)
  if not M.valid_run_id(run) or not TYPES[kind] or not valid_name(name) then
    return nil, "bad", ("'%s/%s/%s' is not a checkpoint of a training run"):format(tostring(run), tostring(kind), tostring(name))
  end
  local path = ("tinker://%s/%s/%s"):format(run, kind, name)
  local kind_dir = table.concat({ dir, run, kind }, "/")
  local dst = kind_dir .. "/" .. name
  if exists(dst) then return nil, "exists", path .. " exists (delete it first, or copy to another run)" end
  local fs, process = require("rl._fs"), require("rl.process")
  local tmp = dir .. "/.copying-" .. require("rl.tinker.keys").random_hex(8)
  local code, out = process.run({ "mkdir", "-p", kind_dir }, { timeout = 60 })
  if code == 0 then code, out = process.run({ "cp", "-R", "--", src, tmp }, { timeout = 600 }) end
  if code ~= 0 then
    fs.remove_tree(tmp)
    return nil, "failed", ("copying %s failed: %s"):format(src, tostring(out):sub(1, 500))
  end
  os.remove(tmp .. "/" .. M.META)
  os.remove(tmp .. "/" .. M.META .. ".tmp")
  -- rename(2) onto a directory that is not empty fails: a copy that raced here loses
  local ok, err = os.rename(tmp, dst)
  if not ok then
    fs.remove_tree(tmp)
    if exists(dst .. "/adapter_config.json") then return nil, "exists", path .. " exists" end
    return nil, "failed", "placing the copy at " .. dst .. ": " .. tostring(err)
  end
  return path
end

return M
