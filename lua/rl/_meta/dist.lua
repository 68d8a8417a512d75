---@meta
-- LuaLS type stubs for rl.dist (lua/rl/dist.lua over librlhost_torch.so). See docs/trainer.md, "Data parallel".

---@class rl.dist.InitOptions
---@field rank? integer default: $RANK
---@field world_size? integer default: $WORLD_SIZE (1 when unset)
---@field master_addr? string default: $MASTER_ADDR or 127.0.0.1
---@field master_port? integer default: $MASTER_PORT (required with world_size > 1)
---@field timeout? number seconds for the rendezvous and every collective (300)
---@field backend? "auto"|"gloo"|"nccl" auto (default): nccl on a CUDA build with a GPU, else gloo
---@field local_rank? integer default: $LOCAL_RANK (the GPU with nccl)

---@class rl.dist
local dist = {}

--- Joins the process group (from the environment `rlhost --nproc` / torchrun set, overridden by opts).
---@param opts? rl.dist.InitOptions
---@return true
function dist.init(opts) end

--- Initialises from the environment when it asks for more than one rank and nothing is yet.
---@return userdata|nil group
function dist.ensure() end

---@return integer
function dist.rank() end
---@return integer
function dist.world_size() end
---@return boolean true on rank 0
function dist.is_main() end
---@return boolean
function dist.is_initialized() end

--- Waits until every rank gets here.
---@return true
function dist.barrier() end

--- Rank `root`'s (default 0) JSON-able value on every rank.
---@param obj any
---@param root? integer
---@return any
function dist.broadcast_object(obj, root) end

--- Rank r gets list[r + 1] of rank `root`'s list (world_size values); other ranks pass nil.
---@param list any[]|nil
---@param root? integer
---@return any
function dist.scatter_object(list, root) end

--- Every rank's JSON-able value, as a list by rank (list[r + 1] is rank r's), on rank
--- `root` (default 0); other ranks get nil. Every rank must call it.
---@param obj any
---@param root? integer
---@return any[]|nil
function dist.gather_object(obj, root) end

--- Leaves the group (the trainer stops all-reducing). Idempotent.
function dist.destroy() end

--- A process group of its own beside the default one (rl.weight_sync's trainer-to-engines group):
--- rank 0 starts its store now; the handle's owner runs the rendezvous.
---@param opts {rank: integer, world_size: integer, master_addr?: string, master_port?: integer, timeout?: number, name?: string, backend?: "gloo"|"nccl"}
---@return userdata handle with :port() and :close()
function dist.new_group(opts) end

---@class rl.dist.Store
local Store = {}
--- Sets key to value. → true, or nil and why.
---@param key string
---@param value string
---@return true|nil ok
---@return string? err
function Store:set(key, value) end
--- The key's value, or nil when no one set it (never waits); nil, why on failure.
---@param key string
---@return string|nil value
---@return string? err
function Store:get(key) end
--- Adds delta to the counter at key (0 when new). → the sum, or nil, why.
---@param key string
---@param delta? integer
---@return integer|nil sum
---@return string? err
function Store:add(key, delta) end
function Store:close() end

--- The job's key-value store (its c10d store: rank 0's, or torchrun's agent's, per
--- attempt), keys under rlhost/kv/<name>/ apart from the groups'; its own connection.
---@param name string
---@param timeout? number seconds per call (30)
---@return rl.dist.Store
function dist.store(name, timeout) end

--- The address the job's other hosts reach this one at (GLOO_SOCKET_IFNAME's interface,
--- else the route to `towards`, default MASTER_ADDR; 127.0.0.1 on one host).
---@param towards? string
---@return string|nil address
---@return string? err
function dist.host_address(towards) end

return dist
