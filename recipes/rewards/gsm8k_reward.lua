-- The GSM8K recipe's reward, reloadable: edit and save this file while
-- recipes/grpo_gsm8k.lua runs and the next rollout step uses the new version (a
-- syntax error is logged with file:line and the previous version keeps running).
-- The file's content hash is in every sample's trace ("modules" event) and in the
-- step's metrics (reload/rewards.gsm8k_reward/hash).
local gsm8k = require "rl.rewards.gsm8k"

local M = {}

--- 1 when the response's final answer (`#### N`, a \boxed{}, or the last number)
--- equals the label's, else 0.
function M.reward(sample)
  return (gsm8k.score(sample.response, sample.label))
end

return M
