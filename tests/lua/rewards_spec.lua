-- rl.rewards: GSM8K and math grading, protected evaluation, group normalisation,
-- the remote reward against a real local HTTP server.
local rl = require "rl"
local rewards = rl.rewards
local gsm8k = require "rl.rewards.gsm8k"
local mathr = require "rl.rewards.math"
local answer = require "rl.rewards.answer"


describe("answer extraction", function()
  it("last \\boxed{} with nested braces; \\fbox; none", function()
    eq(answer.last_boxed("a \\boxed{1} then \\boxed{\\frac{3}{4}} end"), "\\frac{3}{4}")
    eq(answer.last_boxed("\\fbox{7}"), "7")
    eq(answer.last_boxed("\\boxed {  12 }"), "  12 ")
    eq(answer.last_boxed("no box"), nil)
    eq(answer.last_boxed("\\boxed{unbalanced"), nil)
  end)
  it("#### lines and last numbers", function()
    eq(answer.after_hashes("work\n#### 1,234\n"), "1,234")
    eq(answer.after_hashes("#### 1\n#### 2"), "2")
    eq(answer.last_number("she has 3 cats and 1,250.50 dollars."), "1,250.50")
    eq(answer.last_number("x = -4."), "-4")
    eq(answer.last_number("about .5 of it"), ".5")
    eq(answer.last_number("none"), nil)
  end)
  it("reads numbers, refusing malformed separators", function()
    eq(answer.number("1,234"), 1234)
    eq(answer.number("$18"), 18)
    eq(answer.number("50%"), 50)
    eq(answer.number("\\frac{3}{4}"), 0.75)
    eq(answer.number("-7/2"), -3.5)
    eq(answer.number("12,34"), nil)
    eq(answer.number("abc"), nil)
  end)
end)

describe("rl.rewards.gsm8k", function()
  it("scores every GSM8K test answer as right and its neighbour as wrong", function()
    local n = 0
    for line in io.lines(test_data("gsm8k/test.jsonl")) do
      local row = rl.json.decode(line)
      local target = assert(gsm8k.target(row.answer))
      eq(gsm8k.score(row.answer, row.answer), 1, row.answer)
      eq(gsm8k.score("The answer is \\boxed{" .. target .. "}.", row.answer), 1)
      eq(gsm8k.score("The answer is \\boxed{" .. (target + 1) .. "}.", row.answer), 0)
      n = n + 1
    end
    ok(n > 1000, "read the whole test split")
  end)
  it("thousands separators, extraction modes, no answer", function()
    eq(gsm8k.score("so \\boxed{1234}", "... #### 1,234"), 1)
    eq(gsm8k.score("#### 5 but \\boxed{6}", "#### 6"), 1)
    eq(gsm8k.score("#### 5 but \\boxed{6}", "#### 6", { extract = "hash" }), 0)
    eq(gsm8k.score("total 40 then 42", "#### 42", { extract = "last_number" }), 1)
    eq(gsm8k.score("I don't know", "#### 42"), 0)
    local r, info = gsm8k.score("\\boxed{7.0}", 7)
    eq(r, 1)
    eq(info.pred, 7)
    raises(function() gsm8k.score("x", "no number here") end, "label has no number")
    raises(function() gsm8k.score("x", "#### 1", { extract = "nope" }) end, "unknown extract mode")
  end)
end)

describe("rl.rewards.math", function()
  it("Hendrycks normalisation", function()
    for _, pair in ipairs {
      { "\\dfrac{1}{2}", "\\frac{1}{2}" }, { "0.5", "\\frac{1}{2}" }, { "\\frac12", "\\frac{1}{2}" },
      { "x = 5", "5" }, { "10\\%", "10" }, { "90^\\circ", "90" }, { "5\\text{ cm}", "5" },
      { "3/4", "\\frac{3}{4}" }, { "\\left( 1, 2 \\right)", "(1,2)" }, { "\\sqrt3", "\\sqrt{3}" },
      { ".5", "\\frac{1}{2}" }, { "\\$12", "12" },
    } do
      ok(mathr.equal(pair[1], pair[2]), pair[1] .. " should equal " .. pair[2])
    end
    ok(not mathr.equal("\\frac{1}{3}", "0.3"))
    ok(mathr.equal("1,000", "1000"), "numeric fallback")
  end)
  it("scores the last box against the label (boxed labels too); no box is 0", function()
    eq(mathr.score("so \\boxed{\\dfrac{3}{4}}", "\\frac34"), 1)
    eq(mathr.score("so \\boxed{4}", "The answer is \\boxed{4}"), 1)
    eq(mathr.score("so 4", "4"), 0)
    eq(mathr.score("\\boxed{5}", ""), 0)
  end)
end)

describe("rl.rewards.get and evaluate", function()
  it("built-ins by name, boxed_ prefix, unknown names", function()
    local fn = rewards.get("gsm8k")
    eq(fn { response = "\\boxed{3}", label = "#### 3" }, 1)
    eq(rewards.get("boxed_gsm8k") { response = "3 \\boxed{4}", label = "#### 3" }, 0)
    raises(function() rewards.get("nope") end, "unknown reward 'nope'")
  end)
  it("ok, skip, error with a traceback, bad return type", function()
    eq({ rewards.evaluate(function(s) return s.x end, { x = 2 }) }, { 2, "ok" })
    eq({ rewards.evaluate(function() return nil end, {}) }, { nil, "skip" })
    local r, outcome, err = rewards.evaluate(function() error("boom") end, {})
    eq(r, nil)
    eq(outcome, "error")
    ok(err:find("boom") and err:find("stack traceback"), err)
    local _, o2, e2 = rewards.evaluate(function() return "1" end, {})
    eq(o2, "error")
    ok(e2:find("returned a string"), e2)
  end)
  it("times out a reward that waits, and a busy loop (JIT-compiled: the host interrupts it)", function()
    -- the outcome shows the limit held (without it the reward returns 1 after 600 s; the
    -- spec's timeout catches that): no timing assertion
    local _, outcome, _, info = rewards.evaluate(function() rl.sleep(600); return 1 end, {}, { timeout = 0.2 })
    eq(outcome, "timeout")
    ok(not info.busy, "it waited")
    local _, o2, e2, i2 = rewards.evaluate(function() local i = 0; while true do i = i + 1 end end, {}, { timeout = 0.2 })
    eq(o2, "timeout")
    ok(i2.busy, "it was busy")
    ok(e2:find("rewards_spec.lua", 1, true), e2)
  end)
end)

describe("rl.rewards.normalize", function()
  it("groups by group_index, mean and unbiased std, skipping nil rewards", function()
    local samples = {
      { group_index = 2, reward = 1 }, { group_index = 1, reward = 0 }, { group_index = 2, reward = 0 },
      { group_index = 1, reward = 1 }, { group_index = 1, reward = nil }, { group_index = 2, reward = 1 },
    }
    local out, raw = rewards.normalize(samples)
    eq(raw[5], nil)
    eq(out[5], nil)
    -- group 1: {0, 1}: mean .5, std .7071
    near(out[2], -0.5 / (math.sqrt(0.5) + 1e-6), 1e-9)
    near(out[4], 0.5 / (math.sqrt(0.5) + 1e-6), 1e-9)
    -- group 2: {1, 0, 1}: mean 2/3, std sqrt(1/3)
    near(out[1], (1 - 2 / 3) / (math.sqrt(1 / 3) + 1e-6), 1e-9)
    near(out[3], (0 - 2 / 3) / (math.sqrt(1 / 3) + 1e-6), 1e-9)
  end)
  it("estimators, reward_key, one-sample groups, bad input", function()
    local s = { { group_index = 0, reward = { score = 2 } }, { group_index = 0, reward = { score = 4 } } }
    eq(rewards.normalize(s, { estimator = "reinforce_plus_plus_baseline", reward_key = "score" }), { -1, 1 })
    eq(rewards.normalize(s, { estimator = "reinforce_plus_plus", reward_key = "score" }), { 2, 4 })
    eq(rewards.normalize({ { group_index = 0, reward = 3 } }), { 0 })
    eq(rewards.normalize(s, { estimator = function(_, raw) return { raw[2], raw[1] } end, reward_key = "score" }),
      { 4, 2 })
    raises(function() rewards.normalize(s) end, "set reward_key")
    raises(function() rewards.normalize({ { reward = 1 } }) end, "no group_index")
    -- ppo trains on raw rewards: its critic is the baseline (slime normalises no group for it)
    eq(rewards.normalize(s, { estimator = "ppo", reward_key = "score" }), { 2, 4 })
    raises(function() rewards.normalize(s, { estimator = "rloo" }) end, "unknown estimator")
  end)
  it("normalize_group: the library's per group, or a recipe's own", function()
    eq(rewards.normalize_group({ 2, 4 }, "reinforce_plus_plus_baseline"), { -1, 1 })
    eq(rewards.normalize_group({ 2, 4 }, "reinforce_plus_plus"), { 2, 4 })
    eq(rewards.normalize_group({ 3 }), { 0 })
    eq(rewards.normalize_group({ 1, 3 }, "grpo", { std = false }), { -1, 1 })
    eq(rewards.normalize_group({ 2, 4 }, "ppo"), { 2, 4 })
    raises(function() rewards.normalize_group({ 1 }, "rloo") end, "unknown estimator")
    -- the same numbers through normalize (groups by group_index, nil rewards skipped)
    local samples = { { group_index = 4, reward = 1 }, { group_index = 9, reward = 0.25 },
                      { group_index = 4, reward = 0 }, { group_index = 9, reward = nil }, { group_index = 4, reward = 1 },
                      { group_index = 9, reward = 0.75 } }
    local lib = rewards.normalize(samples, { estimator = "gspo" })
    local g4 = rewards.normalize_group({ 1, 0, 1 }, "gspo")
    eq({ lib[1], lib[3], lib[5] }, g4)
    eq(lib[4], nil)
    -- a recipe's function: called once per group with the group's rewards and the estimator
    local calls = {}
    local out = rewards.normalize(samples, { estimator = "cispo", normalize_group = function(rs, est)
      calls[#calls + 1] = { rs, est }
      local o = {}
      for i, r in ipairs(rs) do o[i] = 10 * r end
      return o
    end })
    eq(calls, { { { 1, 0, 1 }, "cispo" }, { { 0.25, 0.75 }, "cispo" } })
    eq(out, { 10, 2.5, 0, nil, 10, 7.5 })
    raises(function() rewards.normalize(samples, { normalize_group = function() return 1 end }) end,
      "normalize_group returned number for group 4")
    raises(function() rewards.normalize(samples, { normalize_group = function() return { 1 } end }) end,
      "normalize_group gave nil for reward 2 of group 4")
  end)
end)

describe("rl.rewards.remote", function()
  it("retries 5xx with backoff, then returns the JSON body; 4xx fails at once", function()
    local calls = 0
    local srv = assert(rl.http.serve { handler = function(req)
      calls = calls + 1
      local body = rl.json.decode(req.body)
      if body.label == "bad" then return { status = 422, body = "no" } end
      if calls < 3 then return { status = 503, body = "busy" } end
      return { status = 200, body = rl.json.encode { score = (body.response == "4") and 1 or 0 },
               headers = { ["content-type"] = "application/json" } }
    end })
    local fn = rewards.get("remote", { url = srv:url() .. "/reward", max_backoff = 0.05, retries = 5 })
    local r, outcome = rewards.evaluate(fn, { prompt = "2+2", response = "4", label = "4" }, { timeout = 20 })
    eq(outcome, "ok")
    eq(r, { score = 1 })
    eq(calls, 3)
    local _, o2, err = rewards.evaluate(fn, { prompt = "p", response = "r", label = "bad" })
    eq(o2, "error")
    ok(err:find("HTTP 422"), err)
    srv:stop()
    raises(function() rewards.get("remote", { url = "ftp://x" }) end, "opts.url")
  end)
end)
