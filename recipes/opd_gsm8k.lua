-- On-policy distillation on GSM8K (slime's OPD example, in one file): the student samples
-- a group of responses per problem, a frozen teacher scores every sampled token, and the
-- student takes a policy-gradient step whose per-token advantage is its reward's group
-- advantage minus --opd-kl-coef × (student log-prob − teacher log-prob): the reverse KL
-- to the teacher, on the student's own samples.
--
--   rlhost recipes/opd_gsm8k.lua          # student: the default model; teacher: a larger default
--   rlhost recipes/opd_gsm8k.lua --hf-checkpoint /models/Qwen3-1.7B --opd-teacher-load /models/Qwen3-8B \
--       --prompt-data gsm8k/train.jsonl --lr 1e-6
--   rlhost recipes/opd_gsm8k.lua --opd-type sglang --opd-teacher-url http://127.0.0.1:30000   # a teacher engine
--
-- Flags are slime's (--help); docs/recipes.md, "On-policy distillation".

-- The teacher when none is given: the default model's recipe, larger (192 wide, 6 layers)
-- and on clean labels (the student's SFT data has 40 % wrong final answers), built and
-- cached on first use; the tokenizer is the student's (same data, same seed).
local DEFAULT_TEACHER = { name = "default-math-teacher-v1", hidden_size = 192, num_layers = 6,
                          intermediate_size = 768, final_noise = 0 }

local opt = rl.args(rl.recipe.options {
  description = "On-policy distillation: student rollouts → teacher log-probs → reverse-KL advantages → policy step",
  { name = "use_opd", type = "bool", default = true, help = "on-policy distillation (this recipe's point)" },
  { name = "opd_type", choices = { "megatron", "sglang" }, default = "megatron",
    help = "megatron: the teacher in the trainer's process (--opd-teacher-load); sglang: an engine (--opd-teacher-url)" },
  { name = "dynamic_sampling_filter", choices = { "nonzero_std", "none" }, default = "none",
    help = "none: every group trains (the teacher's signal is dense; equal rewards still teach)" },
})
if opt.opd_type == "megatron" and not opt.opd_teacher_load and not opt.hf_checkpoint then
  -- built by rank 0, which alone runs the teacher (ranks > 0 only train)
  opt.opd_teacher_load = rl.dist.rank() == 0 and rl.mathgen.default_model(DEFAULT_TEACHER)
    or rl.mathgen.warmup.cache_dir() .. "/" .. DEFAULT_TEACHER.name
end

-- Model, prompts, engines behind a router, trainer, the teacher (job.opd), metric sinks.
local job = rl.recipe.setup(opt, { reward = "gsm8k" })
if not job.is_main then return job:train_worker() end

local last = job.start_rollout - 1
for rollout_id = job.start_rollout, opt.num_rollout - 1 do
  rl.reload.check()
  job:wait_while_paused()
  job:maybe_eval(rollout_id)

  -- 1. Rollout: the student's responses, n per prompt, with their rewards.
  local groups = job:rollout_step(rollout_id)

  -- 2. The teacher scores each sampled token (sample.teacher_log_probs), inside
  --    job:train_data; the batch carries them beside the group-normalised rewards.
  local batch = job:train_data(groups)

  -- 3. Policy step: advantage − opd_kl_coef × (logp_student − logp_teacher), token by token
  --    (train/opd_reverse_kl: the mean of that difference, falling as the student learns).
  job:train(batch)

  -- 4. The new weights to the engines; 5. metrics and checkpoints.
  job:sync()
  job:log_step()
  job:maybe_save(rollout_id)
  last = rollout_id
  if job.stopping then break end
end

job:maybe_eval(last + 1, true)
job:maybe_save(last, true)
job:finish(last)
