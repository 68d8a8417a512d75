-- GRPO on GSM8K (slime's run-qwen3-*-grpo recipe, in one file): sample a group of
-- responses per problem, score them, keep the groups whose rewards differ, normalise
-- rewards within each group, take a clipped policy-gradient step, hand the new weights
-- to the engines, repeat.
--
--   rlhost recipes/grpo_gsm8k.lua                       # the embedded default model, 2 CPU cores
--   rlhost recipes/grpo_gsm8k.lua --hf-checkpoint /models/Qwen2.5-0.5B-Instruct \
--       --prompt-data gsm8k/train.jsonl --lr 1e-6 --save ckpt --save-interval 20
--
-- Flags are slime's (--help). Edit while it runs: the reward (rewards/gsm8k_reward.lua)
-- and the functions below reload at the next step when their file is saved.

-- ---- What you edit: definitions only down to rl.reload.inline (a reload runs them again).
local edit = {}

--- The dynamic sampling filter (off with --dynamic-sampling-filter none): keep a group only
--- if its rewards differ, since equal rewards give every sample a zero advantage.
--- Library: rl.rollout.filters.nonzero_std(rollout, group). The custom trace span
--- "dynamic_filter" puts the verdict into each sample's trace.
function edit.filter(rollout, group)
  return rl.trace.span(group, "dynamic_filter", nil, function(span)
    local verdict = rl.rollout.filters.nonzero_std(rollout, group)
    span:set("keep", verdict.keep)
    if verdict.reason then span:set("reason", verdict.reason) end
    return verdict
  end)
end

--- One group's rewards → the values the trainer turns into advantages. GRPO (and GSPO,
--- CISPO): each reward minus the group's mean, over the group's std. Library:
--- rl.rewards.normalize_group(rewards, estimator), which also knows reinforce_plus_plus(_baseline)
--- and ppo (raw rewards: the critic is the baseline).
function edit.normalize(rewards, estimator)
  if estimator == "ppo" or estimator:find("^reinforce") then return rl.rewards.normalize_group(rewards, estimator) end
  local n, sum = #rewards, 0
  for _, r in ipairs(rewards) do sum = sum + r end
  local mean, ss = sum / n, 0
  for _, r in ipairs(rewards) do ss = ss + (r - mean) ^ 2 end
  local std = math.sqrt(ss / math.max(n - 1, 1))
  local out = {}
  for i, r in ipairs(rewards) do out[i] = n > 1 and (r - mean) / (std + 1e-6) or r - mean end
  return out
end

local edits = rl.reload.inline(edit)            -- ---- the recipe ----------------------------
local reward = rl.reload.watch("rewards.gsm8k_reward")
local opt = rl.args(rl.recipe.options {
  description = "GRPO on GSM8K: rollout → reward → filter → group normalisation → policy step → weight sync",
})

-- Model, prompts, engines behind a router, trainer (or resume), metric sinks, rollout.
local job = rl.recipe.setup(opt, { reward = reward:fn("reward"), dynamic_filter = edits:fn("filter") })
if not job.is_main then return job:train_worker() end   -- `--nproc N`: ranks > 0 train on their share
if opt.rollout_function == "sleep" then return job:sleep() end

local last = job.start_rollout - 1
for rollout_id = job.start_rollout, opt.num_rollout - 1 do
  -- Edited functions take effect here, between steps; `rlhost attach` may pause us.
  rl.reload.check()
  job:wait_while_paused()
  job:maybe_eval(rollout_id)   -- held-out accuracy before the first step and every --eval-interval

  -- 1. Rollout: n responses per prompt, scored by the reward, over-sampling until
  --    --rollout-batch-size groups pass edit.filter.
  local groups = job:rollout_step(rollout_id)

  -- 2. Advantages: each group's rewards through edit.normalize, into the train batch
  --    (which records the estimator; the trainer checks it is its own).
  local batch = job:train_data(groups, { normalize_group = edits:fn("normalize") })

  -- 3. Policy update: PPO-clip on the new log-probs, --global-batch-size samples per step.
  job:train(batch)

  -- 4. The new weights to the engines.
  job:sync()

  -- 5. Metrics to the console, JSONL and TensorBoard; a checkpoint when due.
  job:log_step()
  job:maybe_save(rollout_id)
  last = rollout_id
  if job.stopping then break end
end

job:maybe_eval(last + 1, true)
job:maybe_save(last, true)
job:finish(last)
