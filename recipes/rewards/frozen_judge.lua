-- A reward that asks a frozen model served next to the policy: an engine group with
-- update_weights: false in --sglang-config (here the one named "ref"; a reward or
-- reference model). The trainer never syncs it, so it answers with its own weights
-- all run long. Use it with slime's --custom-rm-path:
--
--   rlhost recipes/grpo_gsm8k.lua --sglang-config groups.yaml \
--       --custom-rm-path recipes/rewards/frozen_judge.lua:reward
--
-- groups.yaml (docs/recipes.md, "Engine groups"):
--   sglang:
--     - name: actor                     # the policy: --hf-checkpoint's model, synced
--       server_groups: [{num_gpus: 2}]
--     - name: ref
--       model_path: /models/judge
--       update_weights: false
--       server_groups: [{num_gpus: 1}]
--
-- The group may be native or vLLM (backend: vllm in its entry). The reward is GSM8K's
-- (the final answer against the label); the judge's verdict, the weight version and the
-- engine that served it go into sample.metadata.judge (dumps, traces), where a recipe
-- can weigh them in.
local gsm8k = require "rl.rewards.gsm8k"
local engines = require "rl.recipe.engines"

local M = {}

M.group = "ref"   -- the engine group to ask

--- Asks the frozen group (greedy, a few tokens) about the response; returns GSM8K's score.
function M.reward(sample)
  local job = rl.recipe.current
  local g = job and job.groups and job.groups[M.group]
  if not g then
    error(("frozen_judge: the job has no engine group '%s' (declare it in --sglang-config)"):format(M.group), 0)
  end
  local question = ("%s%s\nIs the answer right? "):format(sample.prompt or "", sample.response or "")
  -- through the group's router, whatever its backend (a vLLM group's goes to /v1/completions)
  local req = { text = question, sampling_params = { max_new_tokens = 4, temperature = 0 } }
  local out, err, info = engines.generate(g, req)
  if not out then
    -- Asked once more: a router never retries a request the engine had already taken
    -- (docs/router.md: it may be what killed it), so an engine that died with our
    -- question in hand fails it; the next try goes to a live engine.
    out, err, info = engines.generate(g, req)
  end
  if not out then error("frozen_judge: " .. tostring(err), 0) end
  sample.metadata = sample.metadata or {}
  sample.metadata.judge = { text = out.text, weight_version = out.meta_info and out.meta_info.weight_version,
                            group = M.group, backend = g.backend, worker = info.worker }
  return (gsm8k.score(sample.response, sample.label))
end

return M
