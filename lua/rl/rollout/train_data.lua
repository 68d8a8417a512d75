--- rl.rollout.train_data: samples → the trainer's batch (slime's
--- RolloutManager._convert_samples_to_train_data + _post_process_rewards), then
--- per-rank partitions balanced by sequence length.
--
--   local batch, m = rl.rollout.train_data.convert(groups, { estimator = "grpo",
--                                                  global_batch_size = 64 })
--   local parts = rl.rollout.train_data.split(batch, 2)     -- one per data-parallel rank
local json = require "rl.json"
local rewards = require "rl.rewards"
local metrics = require "rl.rollout.metrics"

local M = {}

M.FIELDS = { "tokens", "response_lengths", "rewards", "raw_reward", "truncated", "sample_indices", "group_indices",
             "rollout_ids", "loss_masks", "rollout_log_probs", "logprob_digests", "total_lengths", "samples",
             "round_number", "metadata", "teacher_log_probs" }

local function mask_of(s)
  local m = {}
  local lm = s.loss_mask
  for i = 1, s.response_length do
    m[i] = (type(lm) == "table" and lm ~= json.null and lm[i]) or (lm == nil and 1) or 0
  end
  return m
end

--- The train batch of a rollout step. samples: a list of samples or of groups.
--- opts:
---   estimator (grpo): the advantage estimator the batch is for (grpo, gspo, cispo,
---     reinforce_plus_plus, reinforce_plus_plus_baseline, ppo — raw rewards): its normalisation of
---     rl.rewards.normalize, recorded as batch.advantage_estimator, which the trainer
---     checks against its loss's; or a function (samples, raw) -> values [, raw'] (slime's
---     custom reward post-process, rl.rewards.normalize; nothing recorded)
---   normalize_group: function(rewards, estimator) -> values, one group's
---     normalisation in place of the library's (rl.rewards.normalize_group)
---   normalize (true): false keeps raw rewards (slime's --disable-rewards-normalization)
---   std (true): false skips the division by std (--disable-grpo-std-normalization)
---   reward_key, global_batch_size (trim to a multiple of it; "dynamic" or nil: keep all)
--- Samples whose reward is nil (skipped, failed, aborted) are left out — never
--- trained on as 0 — and counted in the returned metrics (rollout/skipped_samples).
--- remove_sample keeps the sample with its loss mask zeroed (slime).
--- Returns the batch (a table of equal-length lists, one entry per sample) and metrics.
function M.convert(samples, opts)
  opts = opts or {}
  local flat = metrics.flatten(samples)
  local keep, skipped = {}, 0
  for _, s in ipairs(flat) do
    if rewards.value(s, opts.reward_key) ~= nil then keep[#keep + 1] = s else skipped = skipped + 1 end
  end
  local est = opts.estimator or "grpo"
  local norm, raw
  if opts.normalize == false and type(est) ~= "function" then
    raw = {}
    for i, s in ipairs(keep) do raw[i] = rewards.value(s, opts.reward_key) end
    norm = raw
  else
    norm, raw = rewards.normalize(keep, { estimator = est, std = opts.std, reward_key = opts.reward_key,
                                          normalize_group = opts.normalize_group })
  end
  local n = #keep
  local gbs = opts.global_batch_size
  if type(gbs) == "number" and gbs > 0 then
    local trimmed = n - n % gbs
    if trimmed == 0 and n > 0 then
      error(("rl.rollout.train_data: %d usable samples, fewer than global_batch_size %d (hint: lower " ..
             "--global-batch-size or raise --rollout-batch-size × --n-samples-per-prompt)"):format(n, gbs), 2)
    end
    n = trimmed
  end
  local b = {}
  for _, f in ipairs(M.FIELDS) do b[f] = {} end
  local has_lp, has_digest = true, false
  for i = 1, n do
    local s = keep[i]
    local mask = mask_of(s)
    if s.remove_sample then for j = 1, #mask do mask[j] = 0 end end
    b.tokens[i] = s.tokens
    b.response_lengths[i] = s.response_length
    b.total_lengths[i] = #s.tokens
    b.rewards[i] = norm[i]
    local md = s.metadata
    b.raw_reward[i] = (type(md) == "table" and tonumber(md.raw_reward)) or raw[i]
    b.truncated[i] = s.status == "truncated" and 1 or 0
    b.sample_indices[i] = s.index
    b.samples[i] = s
    b.group_indices[i] = s.group_index
    b.rollout_ids[i] = s.rollout_id
    b.loss_masks[i] = mask
    local lp = s.rollout_log_probs
    if type(lp) == "table" and lp ~= json.null and #lp == s.response_length then b.rollout_log_probs[i] = lp
    else has_lp = false end
    -- the engine's proof that the log-probs are the trainer's own ("" none): rl.trainer
    -- then skips recomputing them (old_logprobs = "auto")
    local d = s.logprob_digest
    b.logprob_digests[i] = type(d) == "string" and d or ""
    if b.logprob_digests[i] ~= "" then has_digest = true end
  end
  -- slime's optional keys, present when the first sample has them: metadata.round_number
  -- (multi-turn), sample.train_metadata (as metadata), teacher_log_probs (on-policy distillation)
  local first = keep[1]
  local md1 = first and type(first.metadata) == "table" and first.metadata or {}
  for i = 1, n do
    local s, md = keep[i], type(keep[i].metadata) == "table" and keep[i].metadata or {}
    if md1.round_number ~= nil then b.round_number[i] = md.round_number end
    if first.train_metadata ~= nil and first.train_metadata ~= json.null then b.metadata[i] = s.train_metadata end
    local t = s.teacher_log_probs
    if type(first.teacher_log_probs) == "table" then
      if type(t) ~= "table" or #t ~= s.response_length then
        error(("rl.rollout.train_data: sample %s has %s teacher log-probs for %d response tokens (one per token)")
          :format(tostring(s.index), type(t) == "table" and #t or "no", s.response_length), 0)
      end
      b.teacher_log_probs[i] = t
    end
  end
  if n == 0 or md1.round_number == nil then b.round_number = nil end
  if n == 0 or first.train_metadata == nil or first.train_metadata == json.null then b.metadata = nil end
  if n == 0 or type(first.teacher_log_probs) ~= "table" then b.teacher_log_probs = nil end
  if not has_lp then b.rollout_log_probs = nil end
  if not has_lp or not has_digest then b.logprob_digests = nil end
  b.size = n
  if type(est) == "string" then b.advantage_estimator = est end
  local m = { ["rollout/skipped_samples"] = skipped, ["rollout/trimmed_samples"] = #keep - n }
  if n > 0 then
    local rs, rr, rl_ = 0, 0, 0
    for i = 1, n do rs, rr, rl_ = rs + b.rewards[i], rr + b.raw_reward[i], rl_ + b.response_lengths[i] end
    m["rollout/rewards"], m["rollout/raw_reward"], m["rollout/response_lengths"] = rs / n, rr / n, rl_ / n
  end
  return b, m
end

-- What a converted batch must hold per sample, and what is filled in when a hook leaves it out.
local REQUIRED = { "tokens", "response_lengths", "rewards" }

--- A batch from slime's --custom-convert-samples-to-train-data-path: the hook's dict
--- (tokens, response_lengths, rewards required; loss_masks, raw_reward, truncated,
--- sample_indices, rollout_log_probs optional) checked and completed. samples: what the
--- hook was given (their traces stay with the batch when the lengths agree). `what` names
--- the hook in errors. Returns the batch and its metrics.
function M.from_hook(d, samples, what)
  if type(d) ~= "table" then error(("%s returned %s (a table of per-sample lists expected)"):format(what, type(d)), 0) end
  local n
  for _, f in ipairs(REQUIRED) do
    if type(d[f]) ~= "table" then error(("%s: the train data has no '%s' list (it needs %s)"):format(what, f,
      table.concat(REQUIRED, ", ")), 0) end
    n = n or #d[f]
    if #d[f] ~= n then error(("%s: '%s' has %d entries, '%s' %d (one per sample)"):format(what, f, #d[f], REQUIRED[1],
      n), 0) end
  end
  local b = { size = n }
  for _, f in ipairs(M.FIELDS) do b[f] = d[f] end
  b.raw_reward = d.raw_reward or d.rewards
  b.truncated, b.total_lengths, b.loss_masks = d.truncated or {}, {}, d.loss_masks or {}
  b.sample_indices, b.group_indices, b.rollout_ids = d.sample_indices or {}, d.group_indices or {}, d.rollout_ids or {}
  for i = 1, n do
    local len = d.response_lengths[i]
    b.total_lengths[i] = #d.tokens[i]
    if not b.loss_masks[i] then
      local m = {}
      for j = 1, len do m[j] = 1 end
      b.loss_masks[i] = m
    elseif #b.loss_masks[i] ~= len then
      error(("%s: loss_masks[%d] has %d entries for a response of %d tokens"):format(what, i, #b.loss_masks[i], len), 0)
    end
    b.truncated[i] = b.truncated[i] or 0
    b.sample_indices[i] = b.sample_indices[i] or (samples[i] and samples[i].index) or i - 1
    b.group_indices[i] = b.group_indices[i] or (samples[i] and samples[i].group_index) or b.sample_indices[i]
    b.rollout_ids[i] = b.rollout_ids[i] or (samples[i] and samples[i].rollout_id) or 0
  end
  b.samples = #samples == n and samples or nil
  b.logprob_digests = nil   -- the hook's tokens are its own: the trainer recomputes the log-probs
  if b.rollout_log_probs and #b.rollout_log_probs ~= n then b.rollout_log_probs = nil end
  local m, rs = {}, 0
  for i = 1, n do rs = rs + b.rewards[i] end
  if n > 0 then m["rollout/rewards"] = rs / n end
  return b, m
end

--- The rows of batch for the given indices, as a batch.
function M.select(batch, idx)
  local out = { size = #idx, advantage_estimator = batch.advantage_estimator }
  for _, f in ipairs(M.FIELDS) do
    if batch[f] then
      local col = {}
      for i, j in ipairs(idx) do col[i] = batch[f][j] end
      out[f] = col
    end
  end
  return out
end

--- Index lists for `parts` partitions of equal size (±1) whose total lengths
--- are balanced (slime's get_seqlen_balanced_partitions, by greedy longest-first
--- assignment to the lightest partition with room). Indices are sorted per part.
function M.balanced_partitions(lengths, parts)
  local n = #lengths
  local order = {}
  for i = 1, n do order[i] = i end
  table.sort(order, function(a, b)
    if lengths[a] ~= lengths[b] then return lengths[a] > lengths[b] end
    return a < b
  end)
  local cap, out, sums = {}, {}, {}
  for p = 1, parts do
    cap[p] = math.floor(n / parts) + (p <= n % parts and 1 or 0)
    out[p], sums[p] = {}, 0
  end
  for _, i in ipairs(order) do
    local best
    for p = 1, parts do
      if #out[p] < cap[p] and (not best or sums[p] < sums[best]) then best = p end
    end
    table.insert(out[best], i)
    sums[best] = sums[best] + lengths[i]
  end
  for p = 1, parts do table.sort(out[p]) end
  return out, sums
end

--- Splits a batch across `ranks` data-parallel ranks: strided (rank r takes rows r, r +
--- ranks, ...: slime's default), or balanced by total length with opts.balance (slime's
--- --balance-data; the default when opts is nil).
function M.split(batch, ranks, opts)
  if type(ranks) ~= "number" or ranks < 1 then
    error("rl.rollout.train_data.split: bad argument #2 'ranks' (positive integer expected)", 2)
  end
  local parts
  if opts == nil or opts.balance then
    parts = M.balanced_partitions(batch.total_lengths, ranks)
  else
    parts = {}
    for r = 1, ranks do
      parts[r] = {}
      for i = r, batch.size or #batch.total_lengths, ranks do parts[r][#parts[r] + 1] = i end
    end
  end
  local out = {}
  for r = 1, ranks do out[r] = M.select(batch, parts[r]) end
  return out
end

return M
