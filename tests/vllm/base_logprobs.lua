-- base_logprobs.lua MODEL DUMP: the rollout dump's samples scored by the base model
-- (no adapter) and the mean |rollout log-prob - base log-prob| over every response
-- token, as JSON {tokens, mean_abs_diff, max_abs_diff}.
local rl = require "rl"
local model, path = arg[1], arg[2]
local d = assert(rl.dump.load(path))
local tr = rl.trainer.new { model = model }
local b = { tokens = {}, response_lengths = {}, rewards = {}, total_lengths = {}, loss_masks = {} }
for i, s in ipairs(d.samples) do
  local mask = {}
  for j = 1, s.response_length do mask[j] = 1 end
  b.tokens[i], b.response_lengths[i], b.rewards[i] = s.tokens, s.response_length, 0
  b.total_lengths[i], b.loss_masks[i] = #s.tokens, mask
end
local base = tr:logprobs(b)
local n, sum, worst = 0, 0, 0
for i, s in ipairs(d.samples) do
  for j, lp in ipairs(s.rollout_log_probs) do
    local diff = math.abs(lp - base[i][j])
    n, sum, worst = n + 1, sum + diff, math.max(worst, diff)
  end
end
print(rl.json.encode { tokens = n, mean_abs_diff = sum / math.max(n, 1), max_abs_diff = worst })
