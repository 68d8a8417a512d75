-- sft_warmup.lua: builds the embedded default model — a small Llama trained from scratch by
-- SFT on generated GSM8K-format problems with a tokenizer derived from them — and reports its
-- held-out accuracy. `rl.mathgen.default_model()` runs the same build and caches the result.
--
--   rlhost recipes/sft_warmup.lua --out /tmp/math-model            # the default model
--   rlhost recipes/sft_warmup.lua --out /tmp/m --steps 50 --hidden-size 128
--   rlhost recipes/sft_warmup.lua --out /tmp/tools-model --tools   # the tool-using model (calculator chats)
local warmup = require "rl.mathgen.warmup"

-- --tools builds the tool-using model (recipes/gsm8k_tools.lua's): its defaults differ.
local tools = false
for _, a in ipairs(rl.argv) do tools = tools or a == "--tools" end
local opt = rl.args(warmup.options({
  description = "SFT warm-up: a small math model from scratch (the default model of the GSM8K recipes)",
  { name = "out", type = "string", required = true, help = "model directory to write (replaced if it holds a model)" },
}, tools))
if opt.steps < 1 or opt.batch_size < 1 then rl.args.usage_error("--steps and --batch-size must be >= 1") end
if opt.final_noise < 0 or opt.final_noise > 1 then rl.args.usage_error("--final-noise is a share: 0..1") end
if opt.tool_rate < 0 or opt.tool_rate > 1 then rl.args.usage_error("--tool-rate is a share: 0..1") end
if #opt.step_weights ~= 3 then rl.args.usage_error("--step-weights takes three weights (1-, 2- and 3-step problems)") end

-- Problems → tokenizer → random Llama → SFT on the answers → held-out accuracy
-- (the steps are in rl.mathgen.warmup.build, shared with the cache).
local report = warmup.build_into(opt, opt.out)

print(("model        %s"):format(opt.out))
print(("parameters   %.2fM (vocab %d)"):format(report.parameters / 1e6, report.vocab_size))
print(("loss         %.3f -> %.3f over %d steps"):format(report.loss_curve[1].loss,
  report.loss_curve[#report.loss_curve].loss, opt.steps))
print(("accuracy     %.3f greedy, %.3f at temperature 1 (%d held-out problems)"):format(
  report.accuracy.greedy, report.accuracy.temperature_1, report.accuracy.problems))
print(("final off    %.2f greedy, %.2f at temperature 1 (final line is not the last worked result)"):format(
  report.final_mismatch_rate.greedy, report.final_mismatch_rate.temperature_1))
if report.tool_calls then
  local g, t = report.tool_calls.greedy, report.tool_calls.temperature_1
  print(("calculator   %.2f greedy, %.2f at temperature 1 of the answers call it (%d, %d calls; %d, %d failed)"):format(
    g.with_tool, t.with_tool, g.calls, t.calls, g.failed, t.failed))
end
print(("time         %.0f s (training %.0f s, %.0f tok/s; evaluation %.0f s)"):format(report.seconds,
  report.train_seconds, report.tokens_per_second, report.eval_seconds))
