-- sft_warmup.lua: builds the embedded default model — a small Llama trained from scratch by
-- SFT on generated GSM8K-format problems with a tokenizer derived from them — and reports its
-- held-out accuracy. `rl.mathgen.default_model()` runs the same build and caches the result.
--
--   rlhost recipes/sft_warmup.lua --out /tmp/math-model            # the default model
--   rlhost recipes/sft_warmup.lua --out /tmp/m --steps 50 --hidden-size 128
local warmup = require "rl.mathgen.warmup"

local opt = rl.args(warmup.options {
  description = "SFT warm-up: a small math model from scratch (the default model of the GSM8K recipe)",
  { name = "out", type = "string", required = true, help = "model directory to write (replaced if it holds a model)" },
})
if opt.steps < 1 or opt.batch_size < 1 then rl.args.usage_error("--steps and --batch-size must be >= 1") end
if opt.final_noise < 0 or opt.final_noise > 1 then rl.args.usage_error("--final-noise is a share: 0..1") end
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
print(("time         %.0f s (training %.0f s, %.0f tok/s; evaluation %.0f s)"):format(report.seconds,
  report.train_seconds, report.tokens_per_second, report.eval_seconds))
