-- GRPO on GSM8K, one step off policy (slime's train_async.py): the rollout of step k+1
-- is generated while step k trains, so the engines and the trainer work at the same
-- time. Every sample is one weight update old when it trains (staleness 1); the engines'
-- log-probs are the behaviour policy's exactly, and --use-tis corrects for the lag.
--
--   rlhost recipes/grpo_gsm8k_async.lua                    # the embedded default model
--   rlhost recipes/grpo_gsm8k_async.lua --async-mode off   # the same recipe, lock-step
--
-- Flags are grpo_gsm8k.lua's (slime's) plus --async-mode. On 2 CPU cores, give the engine
-- and the trainer a core each (--engine-mode process --threads 1: the engine is its own
-- process with one thread, the trainer has the other core), so that the overlap is real
-- rather than two thread pools taking turns; docs/recipes.md has the figures.

local reward = rl.reload.watch("rewards.gsm8k_reward")
local opt = rl.args(rl.recipe.options {
  description = "GRPO on GSM8K, one step off policy: step k+1's rollout runs while step k trains",
  { name = "async_mode", choices = { "one-step-off", "off" }, default = "one-step-off",
    help = "one-step-off: the next rollout runs while this step trains (slime's train_async.py); off: lock-step" },
})

-- The dynamic filter (groups whose rewards differ) and GRPO's group normalisation are
-- the library's: rl.rollout.filters.nonzero_std, rl.rewards.normalize_group.
local job = rl.recipe.setup(opt, { reward = reward:fn("reward"), dynamic_filter = rl.rollout.filters.nonzero_std })
if not job.is_main then return job:train_worker() end   -- `--nproc N`: ranks > 0 train on their share

local function advantages(groups)
  return rl.rollout.train_data.convert(groups, { estimator = opt.advantage_estimator,
    reward_key = opt.reward_key, global_batch_size = opt.global_batch_size })
end

local ahead = opt.async_mode == "one-step-off" and rl.recipe.async.one_step_off(job)
local first, last = job.start_rollout, opt.num_rollout - 1
if ahead and first <= last then ahead:start(first) end

for rollout_id = first, last do
  rl.reload.check()
  job:wait_while_paused()

  -- 1. This step's groups: generated during the last step's training (one-step-off),
  --    or now (off). Then the next step's rollout starts, under the weights the engines
  --    have now, and runs while this step trains.
  local groups
  if ahead then
    groups = ahead:take(rollout_id)
    job:maybe_eval(rollout_id)
    if rollout_id < last then ahead:start(rollout_id + 1) end
  else
    job:maybe_eval(rollout_id)
    groups = job:rollout_step(rollout_id)
  end

  -- 2-3. Advantages, and the policy update on them.
  job:train(advantages(groups))

  -- 4. The new weights to the engines, once the rollout in flight is done (every sample
  --    is sampled under one version).
  if ahead then ahead:settle() end
  job:sync()
  if ahead then ahead:synced(job.step_metrics["rollout/weight_version"]) end

  -- 5. Metrics (async/staleness_*, perf/rollout_wait_time beside slime's); a checkpoint.
  job:log_step()
  job:maybe_save(rollout_id)
  if job.stopping then break end
end
if ahead then ahead:cancel() end

job:maybe_eval(last + 1, true)
job:maybe_save(last, true)
job:finish(last)
