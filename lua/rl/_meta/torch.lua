---@meta
-- LuaLS type stubs for rl.torch (librlhost_torch.so, loaded on first use).

---@class rl.torch.Info
---@field version string LibTorch version, e.g. "2.15.0"
---@field cuda_built boolean this build has the CUDA/NCCL paths compiled in
---@field cuda_available boolean a CUDA device is usable now
---@field cuda_devices integer number of visible CUDA devices
---@field cuda_runtime_version integer cudaRuntimeGetVersion() (0 in CPU builds)
---@field nccl_version integer ncclGetVersion() (0 in CPU builds)
---@field num_threads integer LibTorch intra-op threads
---@field num_interop_threads integer LibTorch inter-op threads
---@field kernel_threads integer threads rlhost's own kernels run on (num_threads unless built without -fopenmp)

---@class rl.torch
rl.torch = {}

---@return rl.torch.Info
function rl.torch.info() end

--- Sets LibTorch's intra-op thread count (LibTorch itself rejects n <= 0).
---@param n integer
function rl.torch.set_num_threads(n) end

--- Seeds LibTorch's default generators.
---@param seed integer
function rl.torch.manual_seed(seed) end

---@class rl.torch.BlockCache
---@field installed boolean LibTorch's CPU allocator is the block cache (RLHOST_CPU_BLOCK_CACHE is not 0)
---@field hits integer requests of 1 MiB or more met (wholly or in part) by cached blocks
---@field misses integer such requests met by new memory alone
---@field live_bytes integer bytes of large blocks in tensors now
---@field cached_bytes integer bytes of freed large blocks kept for reuse

--- The CPU block cache's counters: large tensors' memory kept for reuse between steps.
---@return rl.torch.BlockCache
function rl.torch.block_cache() end
