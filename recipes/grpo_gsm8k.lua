-- GRPO on GSM8K (slime's run-qwen3-*-grpo recipe, in one file): sample a group of
-- responses per problem, score them, normalise rewards within each group, take a
-- clipped policy-gradient step, hand the new weights to the engines, repeat.
--
--   rlhost recipes/grpo_gsm8k.lua                       # the embedded default model, 2 CPU cores
--   rlhost recipes/grpo_gsm8k.lua --hf-checkpoint /models/Qwen2.5-0.5B-Instruct \
--       --prompt-data gsm8k/train.jsonl --lr 1e-6 --save ckpt --save-interval 20
--
-- Flags are slime's (rlhost recipes/grpo_gsm8k.lua --help). The reward lives in
-- rewards/gsm8k_reward.lua next to this file and reloads when it changes.
local opt = rl.args(rl.recipe.options {
  description = "GRPO on GSM8K: rollout → reward → group normalisation → policy step → weight sync",
})

-- The reward, reloadable while the job runs.
local reward_module = rl.reload.watch("rewards.gsm8k_reward")

-- Model, prompts, engines behind a router, trainer (or resume), metric sinks, rollout.
local job = rl.recipe.setup(opt, { reward = reward_module:fn("reward") })
if not job.is_main then return job:train_worker() end   -- `--nproc N`: ranks > 0 train on their share
if opt.rollout_function == "sleep" then return job:sleep() end

local rollout, trainer = job.rollout, job.trainer

local last = job.start_rollout - 1
for rollout_id = job.start_rollout, opt.num_rollout - 1 do
  -- An edited reward takes effect here, between steps; `rlhost attach` may pause us.
  rl.reload.check()
  job:wait_while_paused()

  -- Held-out accuracy before the first step and every --eval-interval steps.
  job:maybe_eval(rollout_id)

  -- 1. Rollout: n responses per prompt, over-sampling until --rollout-batch-size
  --    groups have rewards that differ (all-equal groups carry no signal).
  local groups = job:rollout_step(rollout_id)

  -- 2. Advantages: each reward minus its group's mean, over the group's std.
  local batch = rl.rollout.train_data.convert(groups, {
    estimator = opt.advantage_estimator, global_batch_size = opt.global_batch_size,
  })

  -- 3. Policy update (PPO-clip on the new log-probs), then 4. weights to the engines.
  job:train_and_sync(batch)

  -- 5. Metrics to the console, JSONL and TensorBoard; checkpoint when due.
  job:log_step()
  job:maybe_save(rollout_id)
  last = rollout_id
  if job.stopping then break end
end

job:maybe_eval(last + 1, true)
job:maybe_save(last, true)
job:finish(last)
