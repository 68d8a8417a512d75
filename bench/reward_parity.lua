-- rlhost's side of bench/reward_parity.sh: grades each case of the JSONL that
-- bench/reward_parity.py wrote with rl.rewards.math, rl.rewards.deepscaler and
-- rl.rewards.dapo (its score and its pred both), and prints the agreement with slime's
-- verdicts per set (and the first disagreements).
--   rlhost bench/reward_parity.lua CASES.jsonl [shown=10]
local path = assert(arg[1], "usage: rlhost bench/reward_parity.lua CASES.jsonl [shown]")
local shown = tonumber(arg[2]) or 10
local dapo = require("rl.rewards.dapo").score
local graders = {
  math = require("rl.rewards.math").score, deepscaler = require("rl.rewards.deepscaler").score,
  -- slime's dapo gives {score, acc, pred}: both the score and the extracted answer must agree
  dapo = function(response, label)
    local r = dapo(response, label)
    return rl.json.encode { r.score, r.pred }
  end,
}
local stats, order, listed = {}, {}, 0
for line in io.lines(path) do
  local c = rl.json.decode(line)
  for _, g in ipairs { "math", "deepscaler", "dapo" } do
    local want = c[g]
    if g == "dapo" and c.dapo_pred ~= nil then want = rl.json.encode { c.dapo, c.dapo_pred } end
    if type(want) == "string" and want:find("^error:") then want = "error" end   -- slime raised: so must we
    if want ~= nil and want ~= rl.json.null then
      local key = c.set .. " " .. g
      local st = stats[key]
      if not st then st = { n = 0, agree = 0 }; stats[key] = st; order[#order + 1] = key end
      local ok, got = pcall(graders[g], c.response, c.label)
      got = ok and got or "error"
      st.n = st.n + 1
      if got == want then
        st.agree = st.agree + 1
      elseif listed < shown then
        listed = listed + 1
        print(("DIFF %s rlhost=%s slime=%s response=%q label=%q"):format(g, tostring(got), tostring(want),
          c.response, tostring(c.label)))
      end
    end
  end
end
local tn, ta = 0, 0
for _, key in ipairs(order) do
  local st = stats[key]
  tn, ta = tn + st.n, ta + st.agree
  print(("RESULT set=%s cases=%d agree=%d pct=%.2f"):format(key:gsub(" ", " grader="), st.n, st.agree,
    100 * st.agree / st.n))
end
print(("RESULT set=all cases=%d agree=%d pct=%.2f"):format(tn, ta, 100 * ta / math.max(tn, 1)))
