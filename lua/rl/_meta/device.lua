---@meta
-- LuaLS type stubs for rl.device (lua/rl/device.lua).

---@class rl.device
rl.device = {}

--- The device of loads that name none: set_default's, else $RLHOST_DEVICE, else "cpu".
---@return string
function rl.device.default() end

--- Makes `name` the process's default device (checked); nil restores $RLHOST_DEVICE / cpu.
---@param name string|nil
function rl.device.set_default(name) end

--- "cpu", "cuda:N" (plain "cuda" is "cuda:0"; "auto" the first GPU or the CPU), checked
--- against this build and machine; nil and an error with a hint otherwise.
---@param name string|nil  nil: default()
---@param what? string     names the option or flag in the error
---@return string|nil device, string|nil err
function rl.device.resolve(name, what) end

--- resolve, raising its error.
---@param name string|nil
---@param what? string
---@param level? integer
---@return string
function rl.device.check(name, what, level) end
