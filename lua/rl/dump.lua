--- rl.dump: debug rollout dumps in torch.save's format (slime's --save-debug-rollout-data,
--- --load-debug-rollout-data, --load-debug-rollout-data-subsample). No LibTorch needed.
--
--   local path = rl.dump.save("dump/rollout_{rollout_id}.pt", 3, samples)           -- dump/rollout_3.pt
--   rl.dump.save("dump/rollout_{rollout_id}.pt", 3, eval_samples, { eval = true })   -- dump/rollout_eval_3.pt
--   local d, err = rl.dump.load("dump/rollout_{rollout_id}.pt", { rollout_id = 3, subsample = 0.5 })
--   for _, s in ipairs(d.samples) do ... end                                         -- rl.Sample objects
--
-- A dump is `{rollout_id = int, samples = {sample dicts...}}`, samples with their
-- traces; Python's torch.load(path, weights_only=False) returns the same plain dicts,
-- and dumps written by slime (torch.save) load here. See docs/lua-api.md ("rl.dump").
local core = require "rl._core"
local json = require "rl.json"
local sample = require "rl.sample"

local M = {}

-- Dict keys are written in this order (Lua tables have none): slime's Sample
-- fields, then the trace carrier's and its events' keys, so a dump reads like
-- slime's. Other keys follow, sorted.
M.KEY_ORDER = {}
for _, f in ipairs(sample.fields) do M.KEY_ORDER[#M.KEY_ORDER + 1] = f end
for _, k in ipairs { "samples", "trace", "type", "name", "ts", "version", "trace_id", "events", "sample_id", "group_id",
                     "attempt", "span_id", "parent_span_id", "attrs" } do
  M.KEY_ORDER[#M.KEY_ORDER + 1] = k
end

-- Numbers under these keys are written as Python floats even when integral (a
-- reward of 1, a log-prob of 0): Lua has one number type, slime's fields have two.
M.FLOAT_KEYS = { "reward", "raw_reward", "rollout_log_probs", "teacher_log_probs", "non_generation_time", "ts",
                 "queue_time", "e2e_latency", "decode_throughput" }

local function arg_error(fn, i, name, what) error(("rl.dump.%s: bad argument #%d '%s' (%s)"):format(fn, i, name, what), 3) end

local function is_integer(x) return type(x) == "number" and x == math.floor(x) and math.abs(x) < 2 ^ 53 end

--- The dump path for a rollout: `{rollout_id}` in `template` becomes the id, with
--- `eval_` in front for eval dumps (slime: template.format(rollout_id="eval_3")).
--- `{{` and `}}` are literal braces, as in Python's str.format.
function M.path(template, rollout_id, opts)
  if type(template) ~= "string" then arg_error("path", 1, "template", "string expected, got " .. type(template)) end
  if not is_integer(rollout_id) then arg_error("path", 2, "rollout_id", "integer expected, got " .. tostring(rollout_id)) end
  local id = ((opts and opts.eval) and "eval_" or "") .. ("%d"):format(rollout_id)
  local bad
  local out = template:gsub("{{", "\1"):gsub("}}", "\2"):gsub("{([^}]*)}", function(field)
    if field == "rollout_id" then return id end
    bad = bad or field
  end)
  if bad then
    error(("rl.dump: unknown field {%s} in path template '%s' (only {rollout_id} is known)"):format(bad, template), 2)
  end
  return (out:gsub("\1", "{"):gsub("\2", "}"))
end

-- Samples as a flat list: a list as is; an eval result {name = {samples = {...}}}
-- flattened over datasets in name order (slime flattens in its dict order).
local function flat_samples(samples)
  if samples[1] ~= nil or next(samples) == nil then return samples end
  local names = {}
  for name, info in pairs(samples) do
    if type(info) ~= "table" or type(info.samples) ~= "table" then return nil end
    names[#names + 1] = name
  end
  table.sort(names, function(a, b) return tostring(a) < tostring(b) end)
  local out = {}
  for _, name in ipairs(names) do
    for _, s in ipairs(samples[name].samples) do out[#out + 1] = s end
  end
  return out
end

--- Writes `{rollout_id, samples}` to the path for `rollout_id` (parent folders are
--- created; the file appears atomically). opts: eval (an eval dump), float_keys
--- (more keys whose numbers are floats). Returns the path, or nil, err when the
--- file cannot be written.
function M.save(template, rollout_id, samples, opts)
  opts = opts or {}
  if type(samples) ~= "table" then arg_error("save", 3, "samples", "list of samples expected, got " .. type(samples)) end
  local path = M.path(template, rollout_id, opts)
  local list = flat_samples(samples)
  if not list then arg_error("save", 3, "samples", "a list of samples, or {name = {samples = {...}}} for eval") end
  local float_keys = M.FLOAT_KEYS
  if opts.float_keys then
    float_keys = { unpack(M.FLOAT_KEYS) }
    for _, k in ipairs(opts.float_keys) do float_keys[#float_keys + 1] = k end
  end
  local rows = json.array()
  for i = 1, #list do rows[i] = list[i] end
  local value = { rollout_id = rollout_id, samples = rows }
  json.materialize()  -- deferred trace events (rl.trace) become tables first: the writer reads raw
  local ok, res, err = pcall(core.dump.save, path, value, { key_order = M.KEY_ORDER, float_keys = float_keys })
  if not ok then error(res, 2) end
  if not res then return nil, err end
  return path
end

-- slime keeps the first k//2 and the last k - k//2 rows of k = int(n * ratio); a ratio
-- giving k = 0 keeps every row, as slime's slicing does (data[:0] + data[-0:]).
local function subsample_rows(samples, ratio)
  local n = #samples
  if n == 0 then return samples end
  local k = math.floor(n * ratio)
  if k == 0 then return samples end
  local head = math.floor(k / 2)
  local out = {}
  for i = 1, head do out[#out + 1] = samples[i] end
  for i = n - (k - head) + 1, n do out[#out + 1] = samples[i] end
  return out
end

-- With a seed: a random subset of whole prompt groups (by group_index, in order of
-- first appearance; a sample without one is its own group): Python's
-- random.Random(seed).shuffle of the group positions, the first max(1, int(G *
-- ratio)) kept, samples in their original order.
local function subsample_groups(samples, ratio, seed)
  local order, members, key_of = {}, {}, {}
  for i, s in ipairs(samples) do
    local g = s.group_index
    if g == nil or g == json.null then g = { i } end  -- a unique key
    if not members[g] then
      members[g] = true
      order[#order + 1] = g
    end
    key_of[i] = g
  end
  local positions = {}
  for i = 1, #order do positions[i] = i - 1 end
  require("rl.pyrandom").new(seed):shuffle(positions)
  local keep = {}
  for i = 1, math.max(1, math.floor(#order * ratio)) do keep[order[positions[i] + 1]] = true end
  local out = {}
  for i, s in ipairs(samples) do
    if keep[key_of[i]] then out[#out + 1] = s end
  end
  return out
end

--- Reads a dump (ours or slime's). `path` may be a template: opts.rollout_id (and
--- opts.eval) fill `{rollout_id}`. opts: subsample (a ratio in (0, 1]), seed (with
--- subsample: random whole groups instead of slime's head and tail rows), raw (keep
--- the sample dicts as loaded instead of rl.Sample objects). Returns the dump's dict
--- with `samples` as rl.Sample objects, or nil, err (missing file, corrupt file,
--- not a dump).
function M.load(path, opts)
  opts = opts or {}
  if type(path) ~= "string" then arg_error("load", 1, "path", "string expected, got " .. type(path)) end
  if type(opts) ~= "table" then arg_error("load", 2, "opts", "table expected, got " .. type(opts)) end
  local ratio = opts.subsample
  if ratio ~= nil and (type(ratio) ~= "number" or not (ratio > 0 and ratio <= 1)) then
    arg_error("load", 2, "opts", "subsample must be a number in (0, 1], got " .. tostring(ratio))
  end
  if opts.seed ~= nil and not is_integer(opts.seed) then
    arg_error("load", 2, "opts", "seed must be an integer, got " .. tostring(opts.seed))
  end
  if opts.rollout_id ~= nil then path = M.path(path, opts.rollout_id, opts) end
  local data, err = core.dump.load(path)
  if data == nil then return nil, err end
  -- slime's viewer also accepts a bare list of samples.
  if json.is_array(data) then data = { samples = data } end
  if type(data) ~= "table" or type(data.samples) ~= "table" then
    return nil, path .. ": not a rollout dump (expected a dict with 'samples', got a " ..
      (type(data) == "table" and "dict without it" or type(data)) .. ")"
  end
  local samples = data.samples
  if not opts.raw then
    local out = json.array()
    for i, d in ipairs(samples) do
      if type(d) ~= "table" then return nil, ("%s: samples[%d] is a %s, not a dict"):format(path, i - 1, type(d)) end
      local ok, s = pcall(sample.from_dict, d)
      if not ok then return nil, ("%s: samples[%d]: %s"):format(path, i - 1, tostring(s)) end
      out[i] = s
    end
    samples = out
  end
  if ratio then
    local n = #samples
    samples = json.array(opts.seed and subsample_groups(samples, ratio, opts.seed) or subsample_rows(samples, ratio))
    require("rl.log").info("subsampled %s with ratio %g: %d -> %d samples", path, ratio, n, #samples)
  end
  local out = {}
  for k, v in pairs(data) do out[k] = v end
  out.samples = samples
  return out
end

--- The bytes of a .pt file for any value (no file written), and back: for tests and
--- transports. decode returns nil, err on bad input.
function M.encode(...)
  json.materialize()  -- as in save
  return core.dump.encode(...)
end
M.decode = core.dump.decode

return M
