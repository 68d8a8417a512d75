---@meta
-- LuaLS type stubs for rl.dump (lua/rl/dump.lua). See docs/lua-api.md ("rl.dump").

---@class rl.dump.Dump
---@field rollout_id integer
---@field samples rl.Sample[] (plain dicts with opts.raw)

---@class rl.dump.SaveOpts
---@field eval? boolean an eval dump: `{rollout_id}` becomes "eval_<id>"
---@field float_keys? string[] more keys whose numbers are written as Python floats

---@class rl.dump.LoadOpts
---@field rollout_id? integer fills `{rollout_id}` when `path` is a template
---@field eval? boolean with rollout_id: the eval dump's path
---@field subsample? number a ratio in (0, 1]: slime's first/last rows (or random groups with seed)
---@field seed? integer with subsample: keep a random subset of whole prompt groups
---@field raw? boolean keep sample dicts as loaded (no rl.Sample objects)

---@class rl.dump
---@field KEY_ORDER string[] dict keys written first, in this order
---@field FLOAT_KEYS string[] keys whose numbers are always Python floats
rl.dump = {}

---@param template string e.g. "dump/rollout_{rollout_id}.pt"
---@param rollout_id integer
---@param opts? {eval?: boolean}
---@return string path
function rl.dump.path(template, rollout_id, opts) end

---@param template string path or template with {rollout_id}
---@param rollout_id integer
---@param samples rl.Sample[]|table<string, {samples: rl.Sample[]}>
---@param opts? rl.dump.SaveOpts
---@return string|nil path
---@return string|nil err
function rl.dump.save(template, rollout_id, samples, opts) end

---@param path string a .pt file, or a template with opts.rollout_id
---@param opts? rl.dump.LoadOpts
---@return rl.dump.Dump|nil
---@return string|nil err
function rl.dump.load(path, opts) end

---@param value any
---@param opts? {archive?: string, key_order?: string[], float_keys?: string[]}
---@return string bytes the bytes of a .pt file
function rl.dump.encode(value, opts) end

---@param bytes string
---@param name? string names the input in errors
---@return any|nil value
---@return string|nil err
function rl.dump.decode(bytes, name) end
