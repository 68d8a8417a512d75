-- The in-process half of bench/tinker_overhead.py: the same forward_backward + optim_step
-- work as the SDK's calls, straight on the trainer (trainer/stepwise.hpp through
-- rl.torch._stepwise), no HTTP, no protobuf, no futures.
--
--   rlhost bench/tinker_inprocess.lua MODEL_DIR DATA.json ITERS WARMUP RANK ALPHA
local dir, data_file, iters, warmup, rank, alpha = arg[1], arg[2], tonumber(arg[3]), tonumber(arg[4]),
  tonumber(arg[5]), tonumber(arg[6])
local data = rl.json.decode(assert(require("rl._fs").read_file(data_file)))
local model = assert(rl.model.load(dir, { dtype = "float32" }))
local h = require("rl.torch")._stepwise.new(rl.model.handle(model),
  rl.json.encode { rank = rank, alpha = alpha, seed = 1, targets = { "all-linear", "lm_head" } })  -- the SDK's default (train_unembed)
local adam = rl.json.encode { learning_rate = 1e-4, beta1 = 0.9, beta2 = 0.95, eps = 1e-12 }
local function step()
  assert(rl.task.await_json(h:forward_backward(data, "cross_entropy", {}, false), "fb"))
  assert(rl.task.await_json(h:optim_step(adam), "optim"))
end
for _ = 1, warmup do step() end
local t0 = rl.now()
for _ = 1, iters do step() end
print(("inprocess_seconds_per_step %.4f"):format((rl.now() - t0) / iters))
