-- Prompt log-probs through SGLang's /generate shape (logprob_start_len): the
-- input_token_logprobs layout, per-request starts in a batch, max_new_tokens 0, bad
-- values refused naming the field, and the values bit for bit the trainer's
-- (rl.trainer :logprobs) and the engine's own for the same tokens sampled.
local rl = require "rl"

local STORIES = test_data("models/stories260K")
local PROMPT = { 1, 40, 47, 26, 50, 60, 70, 80, 90, 100 }

local function ids_of(entries)
  local ids = {}
  for i, e in ipairs(entries) do ids[i] = e[2] end
  return ids
end

describe("engine prompt log-probs", function()
  it("lays input_token_logprobs out as SGLang does, per request in a batch", function()
    local eng = assert(rl.engine.start { model = STORIES, threads = 1, serve = false })
    local out = assert(eng:generate { input_ids = PROMPT, return_logprob = true, logprob_start_len = 0,
      return_text_in_logprobs = true, sampling_params = { max_new_tokens = 0 } })
    local m = out.meta_info
    eq(out.output_ids, {})
    eq(m.completion_tokens, 0)
    eq(m.finish_reason, { type = "length", length = 0 })
    eq(m.output_token_logprobs, {})
    eq(#m.input_token_logprobs, #PROMPT)
    eq(ids_of(m.input_token_logprobs), PROMPT)
    eq(m.input_token_logprobs[1][1], rl.json.null)  -- the start position has none
    for j = 2, #PROMPT do
      local e = m.input_token_logprobs[j]
      ok(type(e[1]) == "number" and e[1] <= 0, j)
      ok(type(e[3]) == "string", "return_text_in_logprobs gives each token's text")
    end

    -- A batch: one start per prompt, -1 for none; top log-probs for prompt positions too.
    local outs = assert(eng:generate { input_ids = { PROMPT, { 1, 40, 47 }, PROMPT }, return_logprob = true,
      logprob_start_len = { 4, -1, 9 }, top_logprobs_num = 2,
      sampling_params = { max_new_tokens = 3, temperature = 0, ignore_eos = true } })
    local a, b, c = outs[1].meta_info, outs[2].meta_info, outs[3].meta_info
    eq(#a.input_token_logprobs, #PROMPT - 4)
    eq(ids_of(a.input_token_logprobs), { 50, 60, 70, 80, 90, 100 })
    eq(a.input_token_logprobs[1][1], rl.json.null)
    for j = 2, #a.input_token_logprobs do
      -- position 4 + j - 1 of the prompt: the same value as scored from position 0
      eq(a.input_token_logprobs[j][1], m.input_token_logprobs[4 + j][1])
    end
    eq(#a.input_top_logprobs, #PROMPT - 4)
    eq(a.input_top_logprobs[1], rl.json.null)
    eq(#a.input_top_logprobs[2], 2)
    eq(#a.output_token_logprobs, 3)
    eq(b.input_token_logprobs, {})
    eq(c.input_token_logprobs, { { rl.json.null, 100, rl.json.null } })
    eng:stop()
  end, { timeout = 120 })

  it("refuses starts outside the prompt and non-integers, naming the field", function()
    local eng = assert(rl.engine.start { model = STORIES, threads = 1, serve = false })
    local cases = {
      { 10, "logprob_start_len: 10 is not a position of the 10-token prompt" },
      { -2, "logprob_start_len: -2 is not a position of the 10-token prompt" },
      { 1.5, "logprob_start_len: expected an integer" },
      { "3", "logprob_start_len: expected an integer" },
    }
    for _, case in ipairs(cases) do
      local out, err = eng:generate { input_ids = PROMPT, return_logprob = true, logprob_start_len = case[1] }
      eq(out, nil)
      ok(err:find(case[2], 1, true), err)
    end
    local out, err = eng:generate { input_ids = { PROMPT, { 1, 2 } }, return_logprob = true,
                                    logprob_start_len = { 0, 2 } }
    eq(out, nil)
    ok(err:find("logprob_start_len[1]: 2 is not a position of the 2-token prompt", 1, true), err)
    eng:stop()
  end, { timeout = 120 })

  it("scores the tokens it sampled, and the trainer's log-probs, bit for bit", function()
    local eng = assert(rl.engine.start { model = STORIES, threads = 1, serve = false })
    local tr = rl.trainer.new { model = STORIES, micro_batch_size = 1 }
    local gen = assert(eng:generate { input_ids = PROMPT, return_logprob = true,
      sampling_params = { temperature = 1.0, max_new_tokens = 10, sampling_seed = 7, ignore_eos = true } })
    local all, sampled = {}, {}
    for j, t in ipairs(PROMPT) do all[j] = t end
    for j, e in ipairs(gen.meta_info.output_token_logprobs) do all[#PROMPT + j], sampled[j] = e[2], e[1] end
    local scored = assert(eng:generate { input_ids = all, return_logprob = true, logprob_start_len = 0,
      sampling_params = { temperature = 1.0, max_new_tokens = 0 } }).meta_info.input_token_logprobs
    eq(#scored, #all)
    -- teacher forcing: the sampled tokens' log-probs, exactly
    for j = 1, #sampled do eq(scored[#PROMPT + j][1], sampled[j]) end
    -- the trainer's, exactly, for every position after the first
    local mask = {}
    for j = 1, #all - 1 do mask[j] = 1 end
    local mine = tr:logprobs { tokens = { all }, response_lengths = { #all - 1 }, rewards = { 0 },
                               total_lengths = { #all }, loss_masks = { mask } }
    eq(#mine[1], #all - 1)
    for j = 2, #all do eq(scored[j][1], mine[1][j - 1]) end
    eng:stop()
  end, { timeout = 120 })
end)
