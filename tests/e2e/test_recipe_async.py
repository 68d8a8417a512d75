#!/usr/bin/env python3
"""End-to-end: `rlhost recipes/grpo_gsm8k_async.lua`, one step off policy.

On a tiny math model (recipes/sft_warmup.lua, seconds), with a real engine behind a
real router:

- one-step-off: the rollout of step k+1 is sampled under the weights the engines had
  before step k's update, so every trained token is exactly one version old from step 1
  on (async/staleness_min = max = 1), none at step 0; every sample is sampled under one
  version (one span of weight_version_spans), and the version of step k+1's samples is
  the one the engines reported after step k-1's sync;
- --async-mode off runs the same recipe lock-step: step k+1 samples under step k's update;

    RLHOST_BIN=build/rlhost python3 tests/e2e/test_recipe_async.py
"""
import os
import subprocess
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from support import BIN, SOURCE_DIR, RlhostTestCase, lua_json, read_jsonl  # noqa: E402
import support  # noqa: E402
from test_recipe_grpo import TinyModel  # noqa: E402

RECIPE = os.path.join(SOURCE_DIR, "recipes", "grpo_gsm8k_async.lua")

# Per sample of a dump: its weight-version spans.
DUMP_SPANS = r"""
local d = assert(rl.dump.load(arg[1]))
local out = {}
for i, s in ipairs(d.samples) do out[i] = s.weight_version_spans or rl.json.array() end
print(rl.json.encode(out))
"""

DUMP_PROMPTS = r"""
local d = assert(rl.dump.load(arg[1]))
local out = {}
for i, s in ipairs(d.samples) do
  out[i] = { prompt = type(s.prompt) == "string" and s.prompt or rl.json.encode(s.prompt) }
end
print(rl.json.encode(out))
"""


class AsyncRecipe(TinyModel, RlhostTestCase):
    tmp_prefix = "rlhost-async-"

    def flags(self, *extra):
        m = self.model
        return ["--hf-checkpoint", m, "--prompt-data", m + "/data/train.jsonl", "--rollout-batch-size", "2",
                "--n-samples-per-prompt", "4", "--rollout-max-response-len", "12", "--dynamic-sampling-filter", "none",
                "--threads", "1", "--lr", "1e-3", "--no-progress", *extra]

    def run_recipe(self, *extra, timeout=240):
        dump = () if "--save-debug-rollout-data" in extra else \
            ("--save-debug-rollout-data", self.dir + "/dump/rollout_{rollout_id}.pt")
        r = subprocess.run([BIN, "--no-control", RECIPE, *self.flags("--metrics-dir", self.dir + "/m", *dump, *extra)],
                           capture_output=True, text=True, timeout=timeout, env=self.env, cwd=self.dir)
        if r.returncode != 0:
            self.fail("recipe exited %d\n%s\n%s" % (r.returncode, r.stdout, r.stderr[-6000:]))
        return [m for m in read_jsonl(self.dir + "/m/metrics.jsonl") if "rollout/step" in m]

    def start_recipe(self, *extra):
        log = open(os.path.join(self.dir, "recipe.log"), "w")
        self.addCleanup(log.close)
        p = subprocess.Popen([BIN, "--no-control", RECIPE, *self.flags(*extra)],
                             stdout=log, stderr=subprocess.STDOUT, env=self.env, cwd=self.dir)
        self.procs.append(p)
        return p

    def prompts(self, path):
        return [s["prompt"] for s in lua_json(self, self.write("prompts.lua", DUMP_PROMPTS), path)]

    def spans(self, step):
        return lua_json(self, self.write("spans.lua", DUMP_SPANS), self.dir + "/dump/rollout_%d.pt" % step)

    def test_one_step_off_trains_every_token_one_version_late(self):
        rows = self.run_recipe("--num-rollout", "4")
        self.assertEqual([m["rollout/step"] for m in rows], [0, 1, 2, 3])
        self.assertEqual((rows[0]["async/staleness_min"], rows[0]["async/staleness_max"]), (0, 0))
        for m in rows[1:]:
            self.assertEqual((m["async/staleness_min"], m["async/staleness_mean"], m["async/staleness_max"]), (1, 1, 1), m)
        for m in rows:
            self.assertIn("perf/rollout_wait_time", m)
            self.assertIn("perf/rollout_time", m)
            self.assertIn("async/engine_idle_time", m)
        versions = []
        for step in range(4):
            spans = self.spans(step)
            self.assertEqual(len(spans), 8)
            self.assertTrue(all(len(s) == 1 and s[0][0] == 0 for s in spans), spans)   # one version per sample
            self.assertEqual(len({s[0][1] for s in spans}), 1, spans)                    # one per step
            versions.append(spans[0][0][1])
        # steps 0 and 1 were both sampled under the first weights; step k+1 (k >= 1) under
        # the version the engines reported after step k-1's sync
        self.assertEqual(versions[0], versions[1])
        synced = [str(int(m["rollout/weight_version"])) for m in rows]
        self.assertEqual(versions[2:], synced[:2])
        tokens = sum(v for k, v in rows[1].items() if k.startswith("async/tokens_version_"))
        self.assertEqual(list(k for k in rows[1] if k.startswith("async/tokens_version_")),
                         ["async/tokens_version_" + versions[1]])
        self.assertGreater(tokens, 0)

    def test_resume_after_kill_9_trains_every_prompt_once(self):
        # An uninterrupted run's prompts, step by step.
        self.run_recipe("--num-rollout", "5", "--save-debug-rollout-data", self.dir + "/a/rollout_{rollout_id}.pt")
        want = [self.prompts(self.dir + "/a/rollout_%d.pt" % k) for k in range(5)]
        # The same run killed with SIGKILL once two steps are checkpointed (the rollout of the
        # next step is in flight or done, its prompts drawn), then resumed.
        ckpt = self.dir + "/ckpt"
        p = self.start_recipe("--num-rollout", "1000", "--save", ckpt, "--save-interval", "1",
                              "--save-debug-rollout-data", self.dir + "/b/rollout_{rollout_id}.pt")
        latest = ckpt + "/latest_checkpointed_iteration.txt"
        def steps_saved():
            if not os.path.exists(latest):
                return 0
            with open(latest) as f:
                return int(f.read() or 0)
        support.wait_for(lambda: steps_saved() >= 2, timeout=180, what="two checkpointed steps")
        p.kill()
        p.wait(timeout=30)
        with open(latest) as f:
            done = int(f.read())
        self.run_recipe("--num-rollout", "5", "--load", ckpt, "--save", ckpt,
                        "--save-debug-rollout-data", self.dir + "/c/rollout_{rollout_id}.pt")
        got = [self.prompts(self.dir + "/b/rollout_%d.pt" % k) for k in range(done)] + \
              [self.prompts(self.dir + "/c/rollout_%d.pt" % k) for k in range(done, 5)]
        self.assertEqual(got, want, "resumed at step %d: every prompt trained once, in the uninterrupted order" % done)

    def test_off_is_lock_step(self):
        rows = self.run_recipe("--num-rollout", "3", "--async-mode", "off")
        self.assertEqual([m["rollout/step"] for m in rows], [0, 1, 2])
        self.assertFalse([k for k in rows[0] if k.startswith("async/")])
        versions = [self.spans(step)[0][0][1] for step in range(3)]
        self.assertEqual(versions[1:], [str(int(m["rollout/weight_version"])) for m in rows[:2]])


if __name__ == "__main__":
    support.main()
