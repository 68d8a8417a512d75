--- rl.device: where LibTorch work runs — "cpu", "cuda", "cuda:N", or "auto" (the first
--- GPU when this build and machine have one, else the CPU).
--
--   local dev = assert(rl.device.resolve("auto"))          -- "cuda:0" or "cpu"
--   rl.model.load(dir)                                     -- on rl.device.default()
--   RLHOST_DEVICE=cuda rlhost tests/lua/spec.lua ...       -- the default for every load
--
-- rl.model.load/init, rl.engine.start and rl.trainer.new take `device`; without one they
-- use default(): set_default's, else $RLHOST_DEVICE, else "cpu".
local M = {}

local function info() return require("rl.torch").info() end

local chosen   -- set_default's

--- The device of loads that name none: set_default's, else $RLHOST_DEVICE, else "cpu".
function M.default()
  if chosen then return chosen end
  local env = os.getenv("RLHOST_DEVICE")
  return (env and env ~= "") and env or "cpu"
end

--- Makes `name` (checked: resolve's rules) the default of this process; nil: back to
--- $RLHOST_DEVICE / cpu. tests/lua/spec.lua sets $RLHOST_TEST_DEVICE's here.
function M.set_default(name)
  if name == nil then chosen = nil; return end
  chosen = M.check(name, "rl.device.set_default", 2)
end

--- A device name checked against this build and machine: "cpu", "cuda:N" (plain "cuda"
--- becomes "cuda:0"). Returns the name, or nil and an error with a hint. `what` names the
--- option or flag in the error (default "device").
function M.resolve(name, what)
  what = what or "device"
  if name == nil then name = M.default() end
  if type(name) ~= "string" then return nil, ("%s: a device name expected (cpu, cuda, cuda:N, auto), got %s"):format(what, type(name)) end
  if name == "cpu" then return "cpu" end
  if name == "auto" then
    local i = info()
    return i.cuda_available and "cuda:0" or "cpu"
  end
  local idx = name:match("^cuda:(%d+)$") or (name == "cuda" and "0")
  if not idx then
    return nil, ("%s: '%s' is not a device (use cpu, cuda, cuda:N or auto)"):format(what, name)
  end
  local i = info()
  if not i.cuda_built then
    return nil, ("%s: %s asked for, but this rlhost was built without CUDA (hint: rebuild with "
      .. "-DRLHOST_CUDA=ON, or use --device cpu)"):format(what, name)
  end
  if not i.cuda_available or tonumber(idx) >= i.cuda_devices then
    return nil, ("%s: %s asked for, but %s (hint: check nvidia-smi and CUDA_VISIBLE_DEVICES, or use --device cpu)")
      :format(what, name, i.cuda_available and ("this machine has " .. i.cuda_devices .. " GPU(s)") or "no GPU is usable")
  end
  return "cuda:" .. idx
end

--- Like resolve, but raises the error (at `level`, default the caller's caller).
function M.check(name, what, level)
  local d, err = M.resolve(name, what)
  if not d then error(err, (level or 2) + 1) end
  return d
end

return M
