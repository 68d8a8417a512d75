--- rl.recipe.sync_check: slime's --check-weight-update-equal, by log-probs. After a
--- weight sync every engine samples a response to a fixed prompt and reports its
--- per-token log-probs; the trainer scores the same tokens with its weights. Engines
--- that did not take the new weights disagree by the size of the last update; the
--- ones that did agree to the engines' numerics (float32 on a CPU: ~1e-6 for native
--- engines, ~1e-5 for vLLM). Returns the largest |engine - trainer| over engines and
--- tokens, or raises naming the engine when it is above `tolerance`. A prefill/decode
--- group's engines answer only in pairs: its checks go through the group's router (one
--- per engine; the router picks the pairs).
local json = require "rl.json"

local M = {}

M.MAX_NEW_TOKENS = 16

--- job: the recipe's job (engines, trainer, data, tokenizer, opt). → max abs diff.
function M.run(job, tolerance)
  local opt = job.opt
  local first = job.data.prompts and job.data.prompts[1]
  local prompt = first and first.prompt or "1 + 1 ="
  if type(prompt) == "table" then prompt = job.tokenizer:apply_chat_template(prompt, { add_generation_prompt = true }) end
  local ids = job.tokenizer:encode(prompt, { add_special_tokens = false })
  local worst = 0
  -- a prefill/decode group's engines answer in pairs only: as many checks through its router
  local pd = job.policy_group and job.policy_group.pd and job.policy_group
  for i, eng in ipairs(job.engines or {}) do
    local req = { input_ids = json.array(ids), return_logprob = true,
      lora_path = job.trainer:lora() and job.trainer.lora_name or nil,
      sampling_params = { max_new_tokens = M.MAX_NEW_TOKENS, temperature = opt.rollout_temperature, top_p = 1,
                          top_k = -1, sampling_seed = opt.rollout_seed } }
    local out, err
    if pd then
      local via
      out, err, via = require("rl.recipe.engines").generate(pd, req)
      eng = { url = ("%s (a prefill/decode pair: %s)"):format(pd.url, via and via.worker or "?") }
    else
      out, err = eng:generate(req)
    end
    if not out then error(("--check-weight-update-equal: engine %d (%s): %s"):format(i, tostring(eng.url), tostring(err)), 0) end
    if out[1] ~= nil then out = out[1] end
    local items = out.meta_info and out.meta_info.output_token_logprobs
    if type(items) ~= "table" or #items == 0 then
      error(("--check-weight-update-equal: engine %d (%s) returned no log-probs"):format(i, tostring(eng.url)), 0)
    end
    local tokens, resp, lps = {}, {}, {}
    for j, t in ipairs(ids) do tokens[j] = t end
    for j, it in ipairs(items) do tokens[#ids + j], resp[j], lps[j] = it[2], 1, it[1] end
    local b = { tokens = { tokens }, response_lengths = { #items }, rewards = { 0 }, total_lengths = { #tokens },
                loss_masks = { resp } }
    -- a sharded trainer's log-probs are a collective: the job's other ranks compute them too
    local function score() return job.trainer:logprobs(b) end
    local mine = job.with_trainer_ranks and job:with_trainer_ranks("logprobs", score, b) or score()
    for j, lp in ipairs(lps) do
      local d = math.abs(lp - mine[1][j])
      if d > worst then worst = d end
      if d > tolerance then
        error(("--check-weight-update-equal: engine %d (%s) does not answer with the trainer's weights: log-prob of "
          .. "response token %d is %.6g, the trainer's %.6g (|diff| %.3g > %g); its weight version: %s")
          :format(i, tostring(eng.url), j, lp, mine[1][j], d, tolerance, tostring(out.meta_info.weight_version)), 0)
      end
    end
  end
  return worst
end

return M
