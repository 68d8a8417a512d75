--- rl.recipe.placement: where a job's trainer and engines run, from slime's vocabulary.
--
--   --device auto|cpu|cuda|cuda:N   the trainer's device (auto: the first GPU when there is one)
--   --rollout-device D              the engines' device (default below)
--   --colocate                      engines on the trainer's device; they release their weights and
--                                   KV cache while the trainer steps and resume after the sync
--                                   (turns --offload-rollout on, as slime's --colocate does)
--
-- Without --rollout-device: colocated, or on the CPU, the engines share the trainer's
-- device; on a GPU with more GPUs free, the engines take the next one (slime's separate
-- placement); on a single GPU without --colocate they share it and keep their memory.
local M = {}

--- Resolves opt.device / opt.rollout_device / opt.colocate into
--- { trainer = "cuda:0", engines = "cuda:1", colocate = bool }; a device
--- the build or machine lacks is a usage error naming the flag.
function M.resolve(opt)
  local rl = require "rl"
  local function check(name, flag)
    local d, err = rl.device.resolve(name, flag)
    if not d then rl.args.usage_error(err) end
    return d
  end
  local trainer = check(opt.device or "auto", "--device")
  -- data parallel (--nproc, torchrun): a rank's unnumbered GPU is its LOCAL_RANK's
  local local_rank = tonumber(os.getenv("LOCAL_RANK") or "")
  if local_rank and trainer ~= "cpu" and not tostring(opt.device):match(":") then
    trainer = check("cuda:" .. local_rank, "--device (LOCAL_RANK " .. local_rank .. ")")
  end
  local engines
  if opt.rollout_device then
    engines = check(opt.rollout_device, "--rollout-device")
    if opt.colocate and engines ~= trainer then
      rl.args.usage_error(("--colocate puts the engines on the trainer's device (%s), but --rollout-device is %s; "
        .. "drop one of the two"):format(trainer, engines))
    end
  elseif opt.colocate or trainer == "cpu" then
    engines = trainer
  else
    local n = rl.torch.info().cuda_devices
    local next_gpu = tonumber(trainer:match("^cuda:(%d+)$")) + 1
    engines = next_gpu < n and ("cuda:" .. next_gpu) or trainer
  end
  return { trainer = trainer, engines = engines, colocate = opt.colocate or false }
end

--- One log line: "placement: trainer cuda:0, engines cuda:0 (colocated)". Whether the
--- engines offload is rl.recipe.engines' (--offload-rollout) and logged there.
function M.describe(p)
  local how = p.colocate and " (colocated)"
    or (p.trainer == p.engines and p.trainer ~= "cpu" and " (shared without --colocate: the engines keep their memory)") or ""
  return ("placement: trainer %s, engines %s%s"):format(p.trainer, p.engines, how)
end

return M
