-- rl.trainer with a critic (advantage_estimator = "ppo", use_critic): the value model
-- learns the rewards, the policy moves the way GAE's advantages say, the warm-up trains
-- the critic alone, a checkpoint keeps the critic and its AdamW state, and bad
-- combinations are refused naming the option.
local rl = require "rl"

local TINY = {
  architectures = { "LlamaForCausalLM" }, model_type = "llama", vocab_size = 300, hidden_size = 32,
  intermediate_size = 48, num_hidden_layers = 2, num_attention_heads = 4, num_key_value_heads = 2,
  max_position_embeddings = 64, rms_norm_eps = 1e-6,
}

-- Two samples of 3 response tokens: the first rewarded (1), the second not (0).
local function batch()
  return { tokens = { { 5, 6, 7, 8, 9, 10 }, { 11, 12, 13, 14, 15, 16 } }, response_lengths = { 3, 3 },
           rewards = { 1, 0 }, loss_masks = { { 1, 1, 1 }, { 1, 1, 1 } } }
end

local function mean(t)
  local s = 0
  for _, v in ipairs(t) do s = s + v end
  return s / #t
end

local function finite(x) return type(x) == "number" and x == x and x ~= math.huge and x ~= -math.huge end

local function ppo_trainer(dir, extra)
  local o = { model = dir, loss = { advantage_estimator = "ppo" }, use_critic = true, optimizer = { lr = 1e-3 },
              critic_lr = 1e-2, micro_batch_size = 1 }
  for k, v in pairs(extra or {}) do o[k] = v end
  return rl.trainer.new(o)
end

describe("rl.trainer with a critic", function()
  it("ppo: the critic learns the rewards, the policy follows GAE's advantages", function()
    local dir = assert(rl.model.init { config = TINY, seed = 3, dir = tmpdir() })
    local tr = ppo_trainer(dir)
    local b = batch()
    local lp0 = tr:logprobs(b)
    local first, last
    for i = 1, 12 do
      local m = assert(tr:train(b))
      for _, k in ipairs { "train/value_loss", "train/value_clipfrac", "train/values", "train/returns",
                           "train/critic_grad_norm", "train/pg_loss", "train/grad_norm" } do
        ok(finite(m[k]), k .. " is a finite number: " .. tostring(m[k]))
      end
      eq(m["train/critic_only"], 0)
      -- returns = advantages + V_old: with gamma = lambd = 1, kl_coef = 0, the sequence's reward at every token
      near(m["train/returns"], 0.5, 1e-5, "returns are the rewards (sample_mean)")
      if i == 1 then first = m["train/value_loss"] end
      last = m["train/value_loss"]
    end
    ok(last < first * 0.5, ("value loss %g -> %g"):format(first, last))
    local v = tr:values(b)
    eq(#v, 2)
    eq(#v[1], 3)
    ok(mean(v[1]) > mean(v[2]) + 0.3, ("the rewarded sample is worth more: %g vs %g"):format(mean(v[1]), mean(v[2])))
    local lp1 = tr:logprobs(b)
    ok(mean(lp1[1]) > mean(lp0[1]) and mean(lp1[2]) < mean(lp0[2]), "PPO moves log-probs the advantages' way")
    os.execute("rm -rf '" .. dir .. "'")
  end, { timeout = 120 })

  it("kl_coef shapes ppo's token rewards against the reference model", function()
    local dir = assert(rl.model.init { config = TINY, seed = 3, dir = tmpdir() })
    local tr = ppo_trainer(dir, { ref = true, kl_coef = 0.5 })
    local b = batch()
    local m1 = assert(tr:train(b))
    near(m1["train/returns"], 0.5, 1e-6, "the first step: the policy is the reference, no KL")
    local m2 = assert(tr:train(b))
    ok(finite(m2["train/value_loss"]) and finite(m2["train/returns"]))
    ok(math.abs(m2["train/returns"] - 0.5) > 1e-6, "then the KL term moves the returns: " .. m2["train/returns"])
    os.execute("rm -rf '" .. dir .. "'")
  end, { timeout = 120 })

  it("num_critic_only_steps: the first rollouts train the critic alone", function()
    local dir = assert(rl.model.init { config = TINY, seed = 3, dir = tmpdir() })
    local tr = ppo_trainer(dir, { num_critic_only_steps = 2 })
    local b = batch()
    local lp0, v0 = tr:logprobs(b), tr:values(b)
    for _ = 1, 2 do
      local m = assert(tr:train(b))
      eq(m["train/critic_only"], 1)
      eq(m["train/grad_norm"], nil)
      ok(finite(m["train/value_loss"]))
    end
    eq(tr:logprobs(b), lp0, "the policy has not moved")
    eq(tr:step(), 0)
    ok(tr:values(b)[1][1] ~= v0[1][1], "the critic has")
    local m = assert(tr:train(b))
    eq(m["train/critic_only"], 0)
    ok(tr:logprobs(b)[1][1] ~= lp0[1][1], "the third rollout trains the policy")
    os.execute("rm -rf '" .. dir .. "'")
  end, { timeout = 120 })

  it("a checkpoint keeps the critic and its AdamW state: a resumed run continues it exactly", function()
    local dir = assert(rl.model.init { config = TINY, seed = 3, dir = tmpdir() })
    local ck = tmpdir()
    local tr = ppo_trainer(dir)
    local b = batch()
    local fresh = tr:values(b)
    for _ = 1, 2 do assert(tr:train(b)) end
    local saved = assert(tr:save(ck))
    local files = {}
    for _, f in ipairs(saved.files) do files[f] = true end
    ok(files["critic.safetensors"] and files["critic_optimizer.pt"], "the critic's files are in the checkpoint")
    local v = tr:values(b)
    ok(v[1][1] ~= fresh[1][1], "the critic trained")
    local tr2 = assert(rl.trainer.load(ck))
    eq(tr2.options.use_critic, true)
    eq(tr2:values(b), v, "the resumed critic's values")
    -- one more step each: equal only if the critic's AdamW state and step came back too
    local m1, m2 = assert(tr:train(b)), assert(tr2:train(b))
    eq(m2["train/value_loss"], m1["train/value_loss"])
    eq(m2["train/critic_lr"], m1["train/critic_lr"])
    eq(tr2:values(b), tr:values(b), "after a step from the restored AdamW state")
    os.execute("rm -rf '" .. dir .. "' '" .. ck .. "'")
  end, { timeout = 120 })

  it("refuses bad combinations, naming the option", function()
    local dir = assert(rl.model.init { config = TINY, seed = 3, dir = tmpdir() })
    raises(function() rl.trainer.new { model = dir, loss = { advantage_estimator = "ppo" } } end,
      "advantage_estimator = ppo needs a critic: set use_critic = true")
    raises(function() rl.trainer.new { model = dir, use_critic = true } end,
      "use_critic trains a value model for advantage_estimator = ppo, but the estimator is grpo")
    raises(function() rl.trainer.new { model = dir, critic = dir } end, "opts.critic is given without use_critic")
    raises(function() ppo_trainer(dir, { train_backend = "fsdp" }) end, "train_backend = fsdp")
    raises(function() ppo_trainer(dir, { lambd = 1.5 }) end, "lambd")
    raises(function() ppo_trainer(dir, { value_clip = -1 }) end, "value_clip")
    local plain = rl.trainer.new { model = dir }
    raises(function() plain:values(batch()) end, "has no critic")
    os.execute("rm -rf '" .. dir .. "'")
  end, { timeout = 60 })
end)
