#!/usr/bin/env python3
"""End-to-end: `rlhost recipes/grpo_gsm8k.lua --advantage-estimator ppo --use-critic`.

- a short run on the tiny math model (tests/e2e/test_recipe_grpo.py builds it) logs the
  critic's metrics (train/value_loss finite, train/value_clipfrac, train/values,
  train/returns) every step and saves the critic with each checkpoint;
- the checkpoint keeps the critic: a trainer loaded from it computes the same values on a
  fixed input as one loaded from a second save of it, and not those of a fresh critic;
  --load resumes the recipe with it (the critic's rollout count goes on);
- bad flag combinations are usage errors (exit 2) naming the flag, found before
  anything starts.

    RLHOST_BIN=build/rlhost python3 tests/e2e/test_recipe_ppo.py
"""
import json
import math
import os
import subprocess
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from support import BIN, SOURCE_DIR, TEST_DATA, RlhostTestCase, lua_json, read_jsonl  # noqa: E402
import support  # noqa: E402
import test_recipe_grpo  # noqa: E402

RECIPE = os.path.join(SOURCE_DIR, "recipes", "grpo_gsm8k.lua")
PPO = ["--advantage-estimator", "ppo", "--use-critic", "--critic-lr", "1e-3"]

# The critic's values of a fixed batch (the first 3 response tokens of two fixed token
# lists) under the trainer of checkpoint arg[1]; with arg[2], that trainer saved to
# arg[2] and loaded again, and with arg[3] = "fresh", a new critic from the model arg[1]
# (a checkpoint's iter_ directory is one: the policy's weights).
CRITIC_VALUES = r"""
local b = { tokens = { { 5, 6, 7, 8, 9, 10 }, { 11, 12, 13, 14, 15, 16 } }, response_lengths = { 3, 3 },
            rewards = { 1, 0 }, loss_masks = { { 1, 1, 1 }, { 1, 1, 1 } } }
local out = {}
if arg[3] == "fresh" then
  local tr = rl.trainer.new { model = arg[1], loss = { advantage_estimator = "ppo" }, use_critic = true }
  out.values = tr:values(b)
else
  local tr = assert(rl.trainer.load(arg[1]))
  out.values = tr:values(b)
  local st = rl.json.decode(io.open(tr.checkpoint.path .. "/trainer_state.json"):read("*a"))
  out.critic = st.critic
  if arg[2] then
    assert(tr:save(arg[2]))
    out.reloaded = assert(rl.trainer.load(arg[2])):values(b)
  end
end
print(rl.json.encode(out))
"""


class PpoRecipe(test_recipe_grpo.TinyModel, RlhostTestCase):
    tmp_prefix = "rlhost-ppo-"
    flags = test_recipe_grpo.GrpoRecipe.flags
    run_recipe = test_recipe_grpo.GrpoRecipe.run_recipe

    def critic_values(self, *args):
        return lua_json(self, self.write("critic_values.lua", CRITIC_VALUES), *args)

    def test_ppo_logs_the_critic_and_resumes_with_it(self):
        d = self.dir
        self.run_recipe(*PPO, "--num-rollout", "2", "--save", d + "/ckpt", "--save-interval", "1",
                        "--metrics-dir", d + "/m", timeout=300)
        rows = [m for m in read_jsonl(d + "/m/metrics.jsonl") if "rollout/step" in m]
        self.assertEqual([m["rollout/step"] for m in rows], [0, 1])
        for m in rows:
            for key in ("train/value_loss", "train/value_clipfrac", "train/values", "train/returns",
                        "train/critic_grad_norm", "train/pg_loss"):
                self.assertIn(key, m)
                self.assertTrue(math.isfinite(m[key]), "%s = %r" % (key, m[key]))
            self.assertGreaterEqual(m["train/value_clipfrac"], 0)
            self.assertLessEqual(m["train/value_clipfrac"], 1)
            self.assertGreaterEqual(m["train/value_loss"], 0)
        ckpt = d + "/ckpt/" + sorted(x for x in os.listdir(d + "/ckpt") if x.startswith("iter_"))[-1]
        for name in ("critic.safetensors", "critic_optimizer.pt"):
            self.assertTrue(os.path.exists(os.path.join(ckpt, name)), name)

        # The checkpoint's critic, loaded, saved and loaded again: the same values. A new
        # critic made from the model, or from the checkpoint's policy weights (what a
        # resume that lost the critic would have), has other values.
        got = self.critic_values(d + "/ckpt", d + "/ckpt2")
        self.assertEqual(got["critic"]["rollouts"], 2)
        self.assertEqual(got["reloaded"], got["values"])
        for model in (self.model, ckpt):
            fresh = self.critic_values(model, "", "fresh")["values"]
            gap = max(abs(x - y) for a, b in zip(fresh, got["values"]) for x, y in zip(a, b))
            self.assertGreater(gap, 1e-4, "the checkpoint's critic is the trained one, not one made from " + model)

        # --load resumes the recipe with the critic: one more rollout, its count goes on.
        self.run_recipe(*PPO, "--num-rollout", "3", "--load", d + "/ckpt", "--save", d + "/ckpt",
                        "--save-interval", "1", "--metrics-dir", d + "/m2", timeout=300)
        rows = [m for m in read_jsonl(d + "/m2/metrics.jsonl") if "rollout/step" in m]
        self.assertEqual([m["rollout/step"] for m in rows], [2])
        self.assertTrue(math.isfinite(rows[0]["train/value_loss"]))
        self.assertEqual(self.critic_values(d + "/ckpt")["critic"]["rollouts"], 3)


class PpoFlags(RlhostTestCase):
    tmp_prefix = "rlhost-ppo-flags-"

    def refused(self, *extra, want):
        stories = os.path.join(TEST_DATA, "models", "stories260K")
        r = subprocess.run([BIN, "--no-control", RECIPE, "--hf-checkpoint", stories, "--prompt-data",
                            os.path.join(TEST_DATA, "gsm8k", "train.jsonl"), "--no-apply-chat-template",
                            "--threads", "1", "--no-progress", *extra],
                           capture_output=True, text=True, timeout=120, env=self.env, cwd=self.dir)
        log = r.stderr + r.stdout
        self.assertEqual(r.returncode, 2, log[-3000:])
        self.assertIn(want, log)
        self.assertNotIn("stack traceback", log)
        self.assertNotIn("rollout 0 |", log)

    def test_bad_combinations_name_the_flag(self):
        # slime's rule: ppo turns the critic on (so it meets the fsdp refusal, which only a critic gets)
        self.refused("--advantage-estimator", "ppo", "--train-backend", "fsdp",
                     want="--use-critic does not work with --train-backend fsdp yet")
        self.refused("--use-critic", want="--use-critic trains a value model for --advantage-estimator ppo, but it is grpo")
        self.refused(*PPO, "--train-backend", "fsdp",
                     want="--use-critic does not work with --train-backend fsdp yet")
        self.refused("--critic-lr", "1e-4", want="--critic-lr needs --use-critic")
        self.refused("--critic-load", self.dir, want="--critic-load needs --use-critic")
        self.refused("--num-critic-only-steps", "2", want="--num-critic-only-steps needs --use-critic")
        self.refused(*PPO, "--lambd", "1.5", want="--lambd must be in [0, 1]")
        self.refused(*PPO, "--value-clip", "-1", want="--value-clip must be >= 0")


if __name__ == "__main__":
    support.main()
