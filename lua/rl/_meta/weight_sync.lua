---@meta
-- LuaLS type stubs for rl.weight_sync (lua/rl/weight_sync.lua): weights from a trainer (any
-- weight source) into engines. docs/trainer.md, "Weight sync".

---@class rl.weight_sync.Receiver the engine side: what an engine can take, the version it serves
---@field url string|nil its server
---@field kind "thread"|"process"|"vllm"|"server"|"object"
local Receiver = {}
--- The methods it can take, in the order "auto" prefers them.
---@return ("memory"|"shm"|"disk"|"distributed")[]
function Receiver:methods() end
---@param method "memory"|"shm"|"disk"|"distributed"
---@return boolean
function Receiver:can(method) end
--- A thread-mode engine takes the source's tensors between two of its steps.
---@param source rl.weight_sync.Source
---@param version string
---@return {weight_version: string}|nil, string|nil
function Receiver:receive_memory(source, version) end
--- /init_weights_shm: the engine's two-buffer file and layout.
---@return table|nil layout, string|nil err
function Receiver:open_shm(timeout) end
--- /update_weights_from_shm: the engine switches to `buffer` of file `id`.
---@return {weight_version: string, next_buffer: integer}|nil, string|nil
function Receiver:receive_shm(id, buffer, version, timeout) end
--- The safetensors in `dir` into the live weights (update_weights_from_disk).
---@return {weight_version: string}|nil, string|nil
function Receiver:receive_disk(dir, version, timeout) end
--- /init_weights_update_group: join a c10d group as rank args.rank_offset.
---@param args {master_address: string, master_port: integer, rank_offset: integer, world_size: integer, group_name: string, backend?: string, timeout?: number}
---@return table|nil, string|nil
function Receiver:join_group(args, timeout) end
--- /update_weights_from_distributed: every tensor of meta by broadcast from rank 0, then the swap.
---@param meta {names: string[], dtypes: string[], shapes: integer[][]}
---@param bucket_bytes? integer the sender's buckets (rlhost's engines; 0 or nil: a tensor per broadcast)
---@return table|nil, string|nil
function Receiver:receive_distributed(meta, group_name, version, timeout, bucket_bytes) end
--- /update_weights_from_safetensors: one bucket (a safetensors file) of update `update_id`; the part with last installs them all.
---@param body string safetensors bytes
---@param last boolean
---@return {weight_version: string, installed: boolean, staged: integer}|nil, string|nil
function Receiver:receive_http(body, update_id, last, version, timeout) end
--- LoRA: a PEFT directory loaded under `name` in place of the adapter of that name (/load_lora_adapter).
---@return {weight_version: string}|nil, string|nil
function Receiver:receive_lora(name, dir, version, timeout) end
--- LoRA in memory: a copy of the source's adapter loaded under `name` by a thread-mode engine.
---@param source rl.weight_sync.Source
---@return {weight_version: string}|nil, string|nil
function Receiver:receive_lora_memory(source, name, version) end
--- /init_lora_shm: a two-buffer file for an adapter like meta ({r, lora_alpha, target_modules}) under `name`.
---@return table|nil layout, string|nil err
function Receiver:open_lora_shm(name, meta, timeout) end
--- /update_lora_from_shm: `buffer` of file `id` holds the adapter; a copy is installed under `name`.
---@return {weight_version: string, next_buffer: integer}|nil, string|nil
function Receiver:receive_lora_shm(name, id, buffer, version, timeout) end
--- /update_lora_from_distributed: the adapter's tensors by broadcast from rank 0, installed under `name`.
---@param meta {names: string[], dtypes: string[], shapes: integer[][], r: integer, lora_alpha: number, target_modules: string[]}
---@return table|nil, string|nil
function Receiver:receive_lora_distributed(name, meta, group_name, version, timeout, bucket_bytes) end
--- /destroy_weights_update_group, best effort.
function Receiver:leave_group(group_name, timeout) end
--- The weight version the engine serves now.
---@return string|nil version, string|nil err
function Receiver:version() end
--- Thread mode: drops the transfers its scheduler has not taken; how many.
---@return integer
function Receiver:cancel_pending() end

---@class rl.weight_sync.Source what a sender sends from (rl.trainer's tr:weight_source(); each call waits in its task)
---@field meta? fun(self): {names: string[], dtypes: string[], shapes: integer[][]}
---@field copy_to_engine? fun(self, native: userdata, version: string): table|nil, string|nil
---@field write_shm? fun(self, layout_json: string, buffer: integer): boolean|nil, string|nil
---@field forget_shm? fun(self, id: string)
---@field join_group? fun(self, group: userdata): boolean|nil, string|nil
---@field broadcast? fun(self, group: userdata): boolean|nil, string|nil
---@field save? fun(self, dir: string): boolean|nil, string|nil
---@field lora_name? string LoRA sources: the name engines serve the adapter under (only the adapter moves)
---@field lora_meta? fun(self): {names: string[], dtypes: string[], shapes: integer[][], r: integer, lora_alpha: number, target_modules: string[]}
---@field save_lora? fun(self, dir: string): boolean|nil, string|nil the adapter as PEFT files
---@field copy_lora_to_engine? fun(self, native: userdata, name: string, version: string): table|nil, string|nil
---@field write_lora_shm? fun(self, layout_json: string, buffer: integer): boolean|nil, string|nil
---@field broadcast_lora? fun(self, group: userdata, bucket_bytes?: integer): boolean|nil, string|nil

---@class rl.weight_sync.PushOptions
---@field version string the weight version the engines take
---@field method? "auto"|"shm"|"disk"|"distributed"|"http" auto: memory, else shm for process engines (files when one cannot share), else disk
---@field timeout? number shm, distributed: seconds for every step (default 120)
---@field master_address? string distributed: where engines reach the sender (127.0.0.1)
---@field master_port? integer distributed: the store's port (default a free one)
---@field backend? "gloo"|"nccl" distributed
---@field tmp_dir? string disk: where the weights' directory goes (default /dev/shm, else $TMPDIR)
---@field lora_name? string LoRA sources: the name to load the adapter under (default source.lora_name)
---@field keep_going? boolean a failed engine does not stop the others (its versions[i] is false)
---@field bucket_bytes? integer distributed, rlhost engines: consecutive tensors of one dtype per broadcast, at most this many bytes (0: one per tensor); http: tensor bytes per request (default 64 MiB)
---@field guard? fun(i: integer, rx: rl.weight_sync.Receiver): (fun()|nil) called as engine i's transfer starts; what it returns is called when it ends

---@class rl.weight_sync.PushResult
---@field seconds number
---@field weight_version string
---@field methods string[] per engine: memory, shm, disk, distributed or http (a LoRA source's: lora/memory, lora/shm, ...)
---@field versions (string|false)[] per engine: the version it serves, or false
---@field errors table<integer, string> per failed engine: why

---@class rl.weight_sync.Sender
local Sender = {}
---@param targets any one engine or a list (rl.engine, vLLM engine, Receiver, URL, {url, api_key})
---@param opts rl.weight_sync.PushOptions
---@return rl.weight_sync.PushResult|nil, string|nil
function Sender:push(targets, opts) end
--- Forgets the shared-memory file kept for the engine at url (it is gone).
function Sender:forget(url) end
--- Drops the c10d group (its engines leave it, all at once; waited for) and every shared file.
function Sender:close() end

---@class rl.weight_sync
---@field LEAVE_TIMEOUT number seconds an engine has to leave a c10d group (every engine asked at once)
---@field REPLY_GRACE number seconds the engines' requests get after a failed broadcast before they are given up
rl.weight_sync = {}
--- The receiver of an engine, a URL, {url, api_key}, or an object with update_weights_from_disk.
---@return rl.weight_sync.Receiver|nil, string|nil
function rl.weight_sync.receiver(target) end
--- For engine backends: a receiver from the engine's own parts.
---@param parts {url?: string, api_key?: string, engine?: table, native?: userdata, kind?: string, disk_only?: boolean}
---@return rl.weight_sync.Receiver
function rl.weight_sync.new_receiver(parts) end
---@param source rl.weight_sync.Source
---@return rl.weight_sync.Sender
function rl.weight_sync.sender(source) end
