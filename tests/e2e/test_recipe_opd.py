#!/usr/bin/env python3
"""On-policy distillation (issue 35, slime's --use-opd): recipes/opd_gsm8k.lua with a tiny
student and a tiny teacher trained longer on the same data (the same tokenizer).

- The teacher's log-probs reach every sample the trainer gets (seen through a
  --custom-convert-samples-to-train-data-path hook, which composes with OPD) and are the
  teacher's own: equal to rl.model's log-probs of the same tokens.
- The trainer applies slime's formula: with every reward 0, a sample's advantage is
  −opd_kl_coef × mean over its tokens of (student log-prob − teacher log-prob), the
  student's log-probs taken before the step (checked through the trainer's per-sample stats).
- train/opd_reverse_kl is logged every step and falls as the student moves to the teacher.
- Misuse: --use-opd without a teacher, a teacher with another tokenizer, --opd-teacher-url
  with --opd-type megatron: usage errors naming the flags.

    RLHOST_BIN=build/rlhost python3 tests/e2e/test_recipe_opd.py
"""
import os
import subprocess
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from support import BIN, SOURCE_DIR, RlhostTestCase, lua_json, read_jsonl  # noqa: E402
from test_recipe_grpo import WARMUP  # noqa: E402

RECIPE = os.path.join(SOURCE_DIR, "recipes", "opd_gsm8k.lua")
MAIN = os.path.join(SOURCE_DIR, "recipes", "grpo_gsm8k.lua")


def build(out, steps):
    args = list(WARMUP)
    args[args.index("--steps") + 1] = str(steps)
    r = subprocess.run([BIN, os.path.join(SOURCE_DIR, "recipes", "sft_warmup.lua"), "--out", out, *args],
                       capture_output=True, text=True, timeout=600)
    if r.returncode != 0:
        raise AssertionError("sft_warmup failed (%d):\n%s\n%s" % (r.returncode, r.stdout, r.stderr))


# A --custom-convert-samples-to-train-data-path hook: the samples as the trainer gets them
# (scored by the teacher), written down, then slime's default conversion.
KEEP = r"""
return { convert = function(args, samples)
  local f = assert(io.open(os.getenv("SAMPLES_OUT"), "a"))
  for _, s in ipairs(samples) do
    f:write(rl.json.encode { tokens = s.tokens, response_length = s.response_length,
                             teacher_log_probs = s.teacher_log_probs }, "\n")
  end
  f:close()
  return rl.rollout.train_data.convert(samples, { estimator = args.advantage_estimator })
end }
"""

# Per sample: its teacher log-probs and the teacher's own, recomputed by a trainer over the
# teacher (the kernels engine and trainer share: equal to the bit).
TEACHER_CHECK = r"""
rl.spawn(function()
  local teacher = rl.trainer.new { model = arg[2] }
  local samples, b = {}, { tokens = {}, response_lengths = {}, rewards = {}, loss_masks = {} }
  for line in io.lines(arg[1]) do samples[#samples + 1] = rl.json.decode(line) end
  for i, s in ipairs(samples) do
    b.tokens[i], b.response_lengths[i], b.rewards[i], b.loss_masks[i] = s.tokens, s.response_length, 0, {}
    for j = 1, s.response_length do b.loss_masks[i][j] = 1 end
  end
  local lps = teacher:logprobs(b)
  local out = {}
  for i, s in ipairs(samples) do out[i] = { got = s.teacher_log_probs, want = lps[i] } end
  print(rl.json.encode(out))
end):wait()
"""

# The trainer's formula: rewards 0, so each sample's mean advantage over its tokens is
# -coef * mean(student - teacher), the student's log-probs before the step.
FORMULA = r"""
local student, teacher, coef = arg[1], arg[2], tonumber(arg[3])
rl.spawn(function()
  local tm = assert(rl.model.load(teacher))
  local tr = rl.trainer.new { model = student, use_opd = true, opd_kl_coef = coef, lr = 1e-3, global_batch_size = 2 }
  local b = { tokens = { { 5, 6, 7, 8, 9, 10 }, { 5, 7, 9, 11, 13 } }, response_lengths = { 3, 2 }, rewards = { 0, 0 },
              loss_masks = { { 1, 1, 1 }, { 1, 1 } }, teacher_log_probs = {} }
  for i, ids in ipairs(b.tokens) do
    local lps, r = tm:logprobs(ids), b.response_lengths[i]
    b.teacher_log_probs[i] = {}
    for j = 1, r do b.teacher_log_probs[i][j] = lps[#lps - r + j] end
  end
  local before = tr:logprobs(b)
  local m, stats = tr:train(b)
  local out = { reverse_kl = m["train/opd_reverse_kl"], samples = {} }
  local sum, n = 0, 0
  for i = 1, 2 do
    local d = 0
    for j = 1, b.response_lengths[i] do
      local x = before[i][j] - b.teacher_log_probs[i][j]
      d, sum, n = d + x, sum + x, n + 1
    end
    out.samples[i] = { advantage = stats[i].advantage, want = -coef * d / b.response_lengths[i] }
  end
  out.want_kl = sum / n
  local ok, err = pcall(tr.train, tr, { tokens = b.tokens, response_lengths = b.response_lengths, rewards = b.rewards,
                                        loss_masks = b.loss_masks })
  out.missing = tostring(err)
  print(rl.json.encode(out))
end):wait()
"""


class Opd(RlhostTestCase):
    tmp_prefix = "rlhost-opd-"

    @classmethod
    def setUpClass(cls):
        import tempfile
        cls._models = tempfile.TemporaryDirectory(prefix="rlhost-opd-models-")
        cls.student = os.path.join(cls._models.name, "student")
        cls.teacher = os.path.join(cls._models.name, "teacher")
        build(cls.student, 4)
        build(cls.teacher, 60)

    @classmethod
    def tearDownClass(cls):
        cls._models.cleanup()

    def flags(self, *extra):
        s = self.student
        return ["--hf-checkpoint", s, "--prompt-data", s + "/data/train.jsonl", "--rollout-batch-size", "4",
                "--n-samples-per-prompt", "4", "--rollout-max-response-len", "16", "--threads", "1", "--lr", "1e-2",
                "--no-progress", "--metrics-dir", self.dir + "/m", *extra]

    def run_recipe(self, recipe, *extra, code=0, env=None):
        r = subprocess.run([BIN, "--no-control", recipe, *self.flags(*extra)], capture_output=True, text=True,
                           timeout=600, env=dict(self.env, **(env or {})), cwd=self.dir)
        out = r.stderr + r.stdout
        self.assertEqual(r.returncode, code, out[-6000:])
        self.assertNotIn("stack traceback", out)
        return out

    def test_distills_the_teacher(self):
        hook = self.write("keep.lua", KEEP)
        kept = os.path.join(self.dir, "samples.jsonl")
        out = self.run_recipe(RECIPE, "--opd-teacher-load", self.teacher, "--num-rollout", "12",
                              "--custom-convert-samples-to-train-data-path", hook + ":convert",
                              env={"SAMPLES_OUT": kept})
        self.assertIn("on-policy distillation: teacher " + self.teacher, out)
        steps = [m for m in read_jsonl(self.dir + "/m/metrics.jsonl") if "rollout/step" in m]
        self.assertEqual(len(steps), 12)
        kl = [m["train/opd_reverse_kl"] for m in steps]
        print("train/opd_reverse_kl by step:", " ".join("%.3f" % k for k in kl), flush=True)
        self.assertTrue(all("perf/opd_teacher_time" in m for m in steps))
        first, last = sum(kl[:2]) / 2, sum(kl[-2:]) / 2
        self.assertGreater(first, 0)
        self.assertLess(last, 0.6 * first, "the student moves toward the teacher")
        # the samples the trainer got carry the teacher's own log-probs
        self.assert_teacher_scored(kept, 12 * 16)

    def assert_teacher_scored(self, kept, n):
        rows = lua_json(self, self.write("check.lua", TEACHER_CHECK), kept, self.teacher)
        self.assertEqual(len(rows), n)
        for r in rows:
            self.assertEqual(r["got"], r["want"])   # bit for bit

    def test_teacher_engine(self):
        """--opd-type sglang: an engine serving the teacher scores each sample (SGLang's prompt
        log-probs), the same numbers to the bit as the teacher in the trainer's process."""
        import socket
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        log = open(os.path.join(self.dir, "teacher.log"), "w")
        self.addCleanup(log.close)
        eng = subprocess.Popen([BIN, "engine", "--model", self.teacher, "--port", str(port), "--threads", "1"],
                               stdout=log, stderr=subprocess.STDOUT, env=self.env, cwd=self.dir)
        self.procs.append(eng)
        hook = self.write("keep.lua", KEEP)
        kept = os.path.join(self.dir, "samples.jsonl")
        out = self.run_recipe(RECIPE, "--opd-type", "sglang", "--opd-teacher-url", "http://127.0.0.1:%d" % port,
                              "--num-rollout", "2", "--custom-convert-samples-to-train-data-path", hook + ":convert",
                              env={"SAMPLES_OUT": kept})
        self.assertIn("on-policy distillation: teacher at http://127.0.0.1:%d" % port, out)
        self.assert_teacher_scored(kept, 2 * 16)
        steps = [m for m in read_jsonl(self.dir + "/m/metrics.jsonl") if "rollout/step" in m]
        self.assertTrue(all(m["train/opd_reverse_kl"] > 0 for m in steps))

    def test_trainer_formula(self):
        res = lua_json(self, self.write("formula.lua", FORMULA), self.student, self.teacher, "0.5")
        for s in res["samples"]:
            self.assertAlmostEqual(s["advantage"], s["want"], places=5)
            self.assertNotEqual(s["want"], 0)
        self.assertAlmostEqual(res["reverse_kl"], res["want_kl"], places=5)
        self.assertIn("use_opd needs batch.teacher_log_probs", res["missing"])

    def test_misuse(self):
        out = self.run_recipe(MAIN, "--use-opd", code=2)
        self.assertIn("--use-opd needs --opd-type megatron (--opd-teacher-load DIR) or sglang", out)
        out = self.run_recipe(MAIN, "--use-opd", "--opd-type", "megatron", "--opd-teacher-url", "http://127.0.0.1:1",
                              code=2)
        self.assertIn("--opd-type megatron needs --opd-teacher-load", out)
        out = self.run_recipe(MAIN, "--opd-teacher-load", self.teacher, code=2)
        self.assertIn("--opd-teacher-load is for on-policy distillation: add --use-opd", out)
        other = os.path.join(self.dir, "other")
        import shutil
        shutil.copytree(self.teacher, other)
        with open(other + "/tokenizer.json", "a") as f:
            f.write(" ")
        out = self.run_recipe(RECIPE, "--opd-teacher-load", other, code=2)
        self.assertIn("its tokenizer is not the student's", out)


if __name__ == "__main__":
    unittest.main()
