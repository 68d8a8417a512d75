-- --check-weight-update-equal (lua/rl/recipe/sync_check.lua) on real parts: a native
-- engine agrees with the trainer's log-probs, stops agreeing once the trainer takes a
-- step the engine has not received (the check raises naming the engine), and agrees
-- again after the sync. vLLM engines: tests/vllm/test_vllm_recipe.py.
local rl = require "rl"
local check = require "rl.recipe.sync_check"

local STORIES = test_data("models/stories260K")

describe("rl.recipe.sync_check", function()
  it("catches an engine that did not take the trainer's weights", function()
    local tr = rl.trainer.new { model = STORIES, optimizer = { lr = 5e-2 }, micro_batch_size = 2 }
    local eng = assert(rl.engine.start { model = STORIES, serve = false })
    local job = { engines = { eng }, trainer = tr, tokenizer = assert(rl.tokenizer.load(STORIES)),
                  data = { prompts = { { prompt = "Once upon a time" } } },
                  opt = { rollout_temperature = 1.0, rollout_seed = 1 } }
    ok(check.run(job, 1e-4) <= 1e-4)
    local b = { tokens = { { 1, 40, 47, 26, 50, 60, 70 }, { 1, 40, 47, 26, 30, 31, 32 } },
                response_lengths = { 3, 3 }, rewards = { 1, -1 }, loss_masks = { { 1, 1, 1 }, { 1, 1, 1 } } }
    assert(tr:train(b))
    raises(function() check.run(job, 1e-4) end, "engine 1 (nil) does not answer with the trainer's weights")
    assert(tr:sync(eng))
    ok(check.run(job, 1e-4) <= 1e-4)
    eng:stop()
  end, { timeout = 120 })
end)
