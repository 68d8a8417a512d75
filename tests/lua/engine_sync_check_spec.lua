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

  it("checks a prefill/decode group through its router, one request per engine", function()
    -- the PD branch of the check (rl.recipe.pd: neither kind answers alone) against a real
    -- router over two engines; the pairing itself is the router's (tests/e2e/test_recipe_pd.py)
    local tr = rl.trainer.new { model = STORIES, optimizer = { lr = 5e-2 }, micro_batch_size = 2 }
    local es = { assert(rl.engine.start { model = STORIES, threads = 1 }), assert(rl.engine.start { model = STORIES, threads = 1 }) }
    local router = assert(rl.router.start { workers = { es[1].url, es[2].url }, policy = "round_robin" })
    local ok_run, err = pcall(function()
      local job = { engines = es, trainer = tr, tokenizer = assert(rl.tokenizer.load(STORIES)),
                    data = { prompts = { { prompt = "Once upon a time" } } },
                    opt = { rollout_temperature = 1.0, rollout_seed = 1 },
                    policy_group = { name = "default", pd = true, url = router.url, engines = es, backend = "native" } }
      ok(check.run(job, 1e-4) <= 1e-4)
      local b = { tokens = { { 1, 40, 47, 26, 50, 60, 70 }, { 1, 40, 47, 26, 30, 31, 32 } },
                  response_lengths = { 3, 3 }, rewards = { 1, -1 }, loss_masks = { { 1, 1, 1 }, { 1, 1, 1 } } }
      assert(tr:train(b))
      raises(function() check.run(job, 1e-4) end, "(a prefill/decode pair: http://127.0.0.1:")
      assert(tr:sync(es))
      ok(check.run(job, 1e-4) <= 1e-4)
    end)
    router:stop()
    for _, e in ipairs(es) do e:stop() end
    if not ok_run then error(err, 0) end
  end, { timeout = 120 })
end)
