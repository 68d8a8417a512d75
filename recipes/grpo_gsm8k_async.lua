-- GRPO on GSM8K, asynchronous: the engines generate while the trainer trains.
--   one-step-off (slime's train_async.py): step k+1's rollout is generated while step k
--     trains; every sample is one weight update old when it trains (staleness 1).
--   fully-async (slime's fully_async, AReaL, PipelineRL): the engines generate without
--     pause; a step takes its groups as soon as enough are done, and the new weights swap
--     in between two decode steps, so a sample may span versions. At most
--     rollout_batch_size × (K + 1) groups are held; --staleness-policy says what becomes
--     of a group over K versions old (--max-staleness K).
-- The engines' log-probs are the behaviour policy's exactly: --use-tis corrects for the
-- lag with them (with the old log-probs recomputed: AReaL's decoupled PPO loss).
--
--   rlhost recipes/grpo_gsm8k_async.lua                                       # one step off
--   rlhost recipes/grpo_gsm8k_async.lua --async-mode fully-async --max-staleness 2 --use-tis
--   rlhost recipes/grpo_gsm8k_async.lua --async-mode off                      # lock-step
--
-- Flags are grpo_gsm8k.lua's (slime's) plus the three above. On a CPU machine, run the
-- engine as its own process at the lowest priority (--engine-mode process --engine-nice
-- 19): engine and trainer may use every core, and the engine runs on what the trainer
-- leaves idle; docs/recipes.md has the placements and the figures.

local reward = rl.reload.watch("rewards.gsm8k_reward")
local opt = rl.args(rl.recipe.options {
  description = "GRPO on GSM8K, one step off policy: step k+1's rollout runs while step k trains",
  { name = "async_mode", choices = { "one-step-off", "fully-async", "off" }, default = "one-step-off",
    help = "one-step-off: the next rollout runs while this step trains (slime's train_async.py); fully-async: the "
      .. "engines never wait for the trainer; off: lock-step" },
  { name = "max_staleness", type = "int", default = 8,
    help = "fully-async: weight versions a group may lag the policy that trains on it (K; verl's "
      .. "staleness_threshold, AReaL's max_head_offpolicyness, prime-rl's max_off_policy_steps)" },
  { name = "staleness_policy", choices = { "wait", "drop", "keep" }, default = "wait",
    help = "fully-async: steps take groups in admission order and wait for the oldest (none is ever over K), or "
      .. "take the first done and drop or keep those over K" },
})

-- The dynamic filter (groups whose rewards differ) and GRPO's group normalisation are
-- the library's: rl.rollout.filters.nonzero_std, rl.rewards.normalize_group.
local job = rl.recipe.setup(opt, { reward = reward:fn("reward"), dynamic_filter = rl.rollout.filters.nonzero_std })
if not job.is_main then return job:train_worker() end   -- `--nproc N`: ranks > 0 train on their share

local function advantages(groups) return job:train_data(groups) end

local ahead = opt.async_mode == "one-step-off" and rl.recipe.async.one_step_off(job)
local stream = opt.async_mode == "fully-async"
  and rl.recipe.async.fully_async(job, { max_staleness = opt.max_staleness, policy = opt.staleness_policy })
local first, last = job.start_rollout, opt.num_rollout - 1
if ahead and first <= last then ahead:start(first) end
if stream and first <= last then stream:start(first) end

for rollout_id = first, last do
  rl.reload.check()
  job:wait_while_paused()

  -- 1. This step's groups: generated during the last step's training (one-step-off),
  --    the first done (fully-async), or now (off). One-step-off then starts the next
  --    step's rollout, under the weights the engines have now, to run while this trains.
  local groups
  if stream then
    groups = stream:take(rollout_id)
    job:maybe_eval(rollout_id)
  elseif ahead then
    groups = ahead:take(rollout_id)
    job:maybe_eval(rollout_id)
    if rollout_id < last then ahead:start(rollout_id + 1) end
  else
    job:maybe_eval(rollout_id)
    groups = job:rollout_step(rollout_id)
  end

  -- 2-3. Advantages, and the policy update on them.
  job:train(advantages(groups))

  -- 4. The new weights to the engines: once the rollout in flight is done (one-step-off:
  --    every sample is sampled under one version), or at once, between two decode steps.
  if ahead then ahead:settle() end
  job:sync()
  local async = ahead or stream
  if async then async:synced(job.step_metrics["rollout/weight_version"]) end

  -- 5. Metrics (async/staleness_*, perf/rollout_wait_time beside slime's); a checkpoint.
  job:log_step()
  job:maybe_save(rollout_id)
  if job.stopping then break end
end
if ahead then ahead:cancel() end
if stream then stream:stop() end

job:maybe_eval(last + 1, true)
job:maybe_save(last, true)
job:finish(last)
