-- GRPO on GSM8K with a calculator: each response is a multi-turn trajectory in which the
-- model may end a turn with a <tool_call> (Qwen2.5's syntax); the calculator's answer
-- comes back as a tool turn and the model goes on, until a turn calls no tool (its
-- "#### N" line is the answer). One token buffer per trajectory, never re-tokenized
-- (rl.agent, docs/agentic.md); the tool turns are trained with loss mask 0. The reward
-- is the final answer's; the rest is grpo_gsm8k.lua's loop.
--
--   rlhost recipes/gsm8k_tools.lua                       # the tool-using default model, 2 CPU cores
--   rlhost recipes/gsm8k_tools.lua --hf-checkpoint /models/Qwen2.5-0.5B-Instruct \
--       --prompt-data gsm8k/train.jsonl --lr 1e-6 --max-turns 8
--
-- Flags are slime's plus --max-turns and --tool-timeout (--help).

-- ---- What you edit: definitions only down to rl.reload.inline (a reload runs them again).
local edit = {}

--- The tools the model may call: a registry of Lua functions (rl.agent.tools).
function edit.tools(opt)
  return rl.agent.tools.registry { rl.agent.tools.calculator { timeout = opt.tool_timeout } }
end

--- Tool use of a list of finished trajectories: the share that called a tool, the calls
--- per trajectory and the share of calls that returned a result (not an error).
function edit.tool_use(samples)
  local with, calls, errors = 0, 0, 0
  for _, s in ipairs(samples) do
    local tr = s.metadata and s.metadata.trajectory
    local n = 0
    for _, t in ipairs(tr and tr.turns or {}) do
      n, errors = n + (t.tool_calls or 0), errors + (t.tool_errors or 0)
    end
    calls = calls + n
    if n > 0 then with = with + 1 end
  end
  return { with_tool = with / math.max(#samples, 1), calls = calls / math.max(#samples, 1),
           success = calls > 0 and (calls - errors) / calls or nil }
end

local edits = rl.reload.inline(edit)            -- ---- the recipe ----------------------------
local reward = rl.reload.watch("rewards.gsm8k_reward")
local opt = rl.args(rl.recipe.options {
  description = "GRPO on GSM8K with a calculator tool: multi-turn rollouts, reward on the final answer",
  { name = "max_turns", type = "int", default = 6, help = "assistant turns per trajectory at most" },
  { name = "tool_timeout", type = "number", default = 2, help = "seconds a tool call may run" },
  { name = "rollout_max_response_len", type = "int",
    help = "tokens per trajectory after the prompt, tool turns included (default: 256 default model, 1024 otherwise)" },
  { name = "rollout_batch_size", type = "int", help = "prompts per rollout step (default: 8 default model, 16 otherwise)" },
  { name = "eval_max_prompts", type = "int", help = "evaluate on the first N prompts of each eval set (default model: 500, its whole held-out set)" },
})
if opt.max_turns < 1 then rl.args.usage_error("--max-turns must be >= 1") end
if not opt.hf_checkpoint then   -- the default model: trajectories of a few turns, more and smaller steps
  opt.rollout_max_response_len = opt.rollout_max_response_len or 256
  opt.rollout_batch_size = opt.rollout_batch_size or 8
  opt.eval_max_prompts = opt.eval_max_prompts or 500
end

-- The environment: each turn's tool calls are run and answered; a turn without one ends it.
local env = rl.agent.tool_env { tools = edits:fn("tools")(opt) }
local job = rl.recipe.setup(opt, {
  reward = reward:fn("reward"), default_model = { tools = true },
  custom_generate = rl.agent.generate_fn { env = env, max_turns = opt.max_turns },
})
if not job.is_main then return job:train_worker() end

-- Held-out accuracy (the gsm8k reward, pass@1) and the calculator's use on the eval set.
local function evaluate(rollout_id, final)
  local m = job:maybe_eval(rollout_id, final)
  if not m then return end
  local samples = {}
  for _, r in pairs(job.last_eval_results) do for _, s in ipairs(r.samples) do samples[#samples + 1] = s end end
  local use = edits:fn("tool_use")(samples)
  rl.log.info("eval %d | heldout %.3f | with calculator %.2f | calls %.2f | tool-call success %s", rollout_id,
    m["eval/heldout"] or 0 / 0, use.with_tool, use.calls, use.success and ("%.3f"):format(use.success) or "-")
end

local last = job.start_rollout - 1
for rollout_id = job.start_rollout, opt.num_rollout - 1 do
  rl.reload.check()
  job:wait_while_paused()
  evaluate(rollout_id)

  -- 1. Rollout: n multi-turn trajectories per prompt, scored on the final answer.
  local groups, samples = job:rollout_step(rollout_id)

  -- 2. Advantages: GRPO's group normalisation (the loss mask keeps the tool turns out).
  local batch = job:train_data(groups)

  -- 3. Policy update, 4. weights to the engines.
  job:train(batch)
  job:sync()

  -- 5. Metrics (rollout/turns/*, rollout/tool_calls/*, rollout/tool_errors/rate with the rest).
  local use = edits:fn("tool_use")(samples)
  job.step_metrics["rollout/tool_calls/with_tool"] = use.with_tool
  if use.success then job.step_metrics["rollout/tool_calls/success_rate"] = use.success end
  job:log_step()
  job:maybe_save(rollout_id)
  last = rollout_id
  if job.stopping then break end
end

evaluate(last + 1, true)
job:maybe_save(last, true)
job:finish(last)
