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
- fully-async: the engines generate on while the trainer trains; with a reward that makes
  every third group slow, --staleness-policy wait keeps every token within K versions (the
  trainer waits for the slow group, the engines fill their places), drop keeps within K by
  dropping the over-stale groups, keep trains them (and says so); after kill -9 and a
  resume, the sample indices trained form one range, with no gap and no repeat;

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

DUMP_INDICES = r"""
local d = assert(rl.dump.load(arg[1]))
local out = {}
for i, s in ipairs(d.samples) do out[i] = s.index end
print(rl.json.encode(out))
"""

# Every third prompt's group is slow to score (its reward waits 1 s).
SLOW_THIRD = """return { reward = function(s)
  if s.group_index % 3 == 0 then rl.sleep(1.0) end
  return #s.response % 2
end }
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

    def kill_after_checkpoints(self, ckpt, n, *extra):
        """Runs the recipe (dumps in DIR/b) until n steps are checkpointed, then kills it
        with SIGKILL; returns the steps its last checkpoint holds."""
        p = self.start_recipe("--num-rollout", "1000", "--save", ckpt, "--save-interval", "1", *extra,
                              "--save-debug-rollout-data", self.dir + "/b/rollout_{rollout_id}.pt")
        latest = ckpt + "/latest_checkpointed_iteration.txt"

        def steps_saved():
            if not os.path.exists(latest):
                return 0
            with open(latest) as f:
                return int(f.read() or 0)
        support.wait_for(lambda: steps_saved() >= n, timeout=180, what="%d checkpointed steps" % n)
        p.kill()
        p.wait(timeout=30)
        return steps_saved()

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
        done = self.kill_after_checkpoints(ckpt, 2)
        self.run_recipe("--num-rollout", "5", "--load", ckpt, "--save", ckpt,
                        "--save-debug-rollout-data", self.dir + "/c/rollout_{rollout_id}.pt")
        got = [self.prompts(self.dir + "/b/rollout_%d.pt" % k) for k in range(done)] + \
              [self.prompts(self.dir + "/c/rollout_%d.pt" % k) for k in range(done, 5)]
        self.assertEqual(got, want, "resumed at step %d: every prompt trained once, in the uninterrupted order" % done)

    def fully_async(self, policy, k, *extra):
        rm = self.write("slow.lua", SLOW_THIRD)
        return self.run_recipe("--async-mode", "fully-async", "--max-staleness", str(k), "--staleness-policy", policy,
                               "--custom-rm-path", rm + ":reward", *extra)

    def test_fully_async_wait_never_exceeds_k(self):
        rows = self.fully_async("wait", 1, "--num-rollout", "6", "--use-tis")
        self.assertEqual([m["rollout/step"] for m in rows], list(range(6)))
        for m in rows:
            self.assertTrue(0 < m["train/tis_ess"] <= 1 + 1e-6, m)   # the decoupled loss's weights
            self.assertLessEqual(m["async/staleness_max"], 1, m)
            self.assertEqual(m["async/dropped_stale_groups"], 0, m)
            self.assertEqual(m["async/kept_stale_groups"], 0, m)
            for k in ("async/engine_idle_fraction", "async/trainer_idle_fraction", "perf/rollout_wait_time"):
                self.assertIn(k, m)
        # The trainer waited for the slow groups (about 1 s) while the engines had work:
        # every place (2 groups × (K + 1)) was taken when it got them.
        waits = [m for m in rows if m["perf/rollout_wait_time"] > 0.5]
        self.assertTrue(waits, [m["perf/rollout_wait_time"] for m in rows])
        for m in waits:
            self.assertEqual(m["async/groups_held"], 4, m)
            self.assertLess(m["async/engine_idle_fraction"], 0.5, m)
        self.assertGreater(max(m["async/staleness_max"] for m in rows), 0, "the engines generated ahead")

    def test_fully_async_drop_and_keep(self):
        rows = self.fully_async("drop", 1, "--num-rollout", "6")
        self.assertTrue(all(m["async/staleness_max"] <= 1 for m in rows), [m["async/staleness_max"] for m in rows])
        self.assertGreater(sum(m["async/dropped_stale_groups"] for m in rows), 0, "the slow groups are over-stale")
        os.rename(self.dir + "/m/metrics.jsonl", self.dir + "/drop.jsonl")
        rows = self.fully_async("keep", 1, "--num-rollout", "6")
        self.assertEqual(sum(m["async/dropped_stale_groups"] for m in rows), 0)
        kept = [m for m in rows if m["async/kept_stale_groups"] > 0]
        self.assertTrue(kept, "the slow groups are trained though over-stale")
        self.assertTrue(all(m["async/staleness_max"] > 1 for m in kept), kept)

    def test_fully_async_resume_after_kill_9_trains_every_sample_once(self):
        ckpt = self.dir + "/ckpt"
        rm = self.write("slow.lua", SLOW_THIRD)
        flags = ["--async-mode", "fully-async", "--max-staleness", "2", "--staleness-policy", "wait",
                 "--custom-rm-path", rm + ":reward"]
        # groups generating, done and waiting, and taken by the next step are lost with it
        done = self.kill_after_checkpoints(ckpt, 3, *flags)
        self.run_recipe("--num-rollout", str(done + 4), "--load", ckpt, *flags,
                        "--save-debug-rollout-data", self.dir + "/c/rollout_{rollout_id}.pt")
        script = self.write("indices.lua", DUMP_INDICES)
        trained = []
        for k in range(done + 4):
            trained += lua_json(self, script, self.dir + ("/b" if k < done else "/c") + "/rollout_%d.pt" % k)
        self.assertEqual(len(trained), len(set(trained)), "no sample trained twice")
        self.assertEqual(sorted(trained), list(range(len(trained))), "no sample lost: one range from 0")

    def test_fully_async_survives_a_killed_engine(self):
        # --use-fault-tolerance as in lock-step: engine 2 of 2 gets SIGKILL as step 2's
        # weight sync starts, while groups generate on both; its requests move, it restarts
        # and is refit, and every step trains a full batch of samples trained once.
        rows = self.run_recipe("--async-mode", "fully-async", "--max-staleness", "1", "--num-rollout", "6",
                               "--engine-mode", "process", "--num-engines", "2", "--use-fault-tolerance",
                               "--rollout-health-check-interval", "0.5", "--rollout-health-check-timeout", "4",
                               "--fault-injection", "kill:2:2:sync")
        self.assertEqual([m["rollout/step"] for m in rows], list(range(6)))
        self.assertEqual(rows[-1]["rollout/engines/restarts"], 1)
        script = self.write("indices.lua", DUMP_INDICES)
        seen = []
        for k in range(6):
            ids = lua_json(self, script, self.dir + "/dump/rollout_%d.pt" % k)
            self.assertEqual(len(ids), 8, "step %d: a full batch" % k)
            seen += ids
        self.assertEqual(len(seen), len(set(seen)), "no sample trained twice")

    def test_cpu_placement(self):
        # engine and trainer on separate cores; the log says where each runs
        cpus = sorted(os.sched_getaffinity(0))
        first, last = cpus[0], cpus[-1]
        r = subprocess.run([BIN, "--no-control", RECIPE, *self.flags("--num-rollout", "2", "--async-mode", "fully-async",
                            "--max-staleness", "1", "--engine-mode", "process", "--engine-cpus", str(last),
                            "--trainer-cpus", str(first))], capture_output=True, text=True, timeout=240, env=self.env,
                           cwd=self.dir)
        self.assertEqual(r.returncode, 0, r.stderr[-4000:])
        self.assertIn("trainer pinned to CPUs %d (1 LibTorch threads); engines on %d" % (first, last), r.stderr)
        # shared cores: the engine process at nice 19 runs on what the trainer leaves idle
        r = subprocess.run([BIN, "--no-control", RECIPE, *self.flags("--num-rollout", "2", "--async-mode", "fully-async",
                            "--max-staleness", "1", "--engine-mode", "process", "--engine-nice", "19")],
                           capture_output=True, text=True, timeout=240, env=self.env, cwd=self.dir)
        self.assertEqual(r.returncode, 0, r.stderr[-4000:])
        self.assertIn("engine processes at nice 19", r.stderr)
        # a thread engine shares the trainer's process: a usage error that says so
        r = subprocess.run([BIN, "--no-control", RECIPE, *self.flags("--num-rollout", "1", "--engine-cpus", str(last))],
                           capture_output=True, text=True, timeout=60, env=self.env, cwd=self.dir)
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn("--engine-cpus needs --engine-mode process", r.stderr)
        r = subprocess.run([BIN, "--no-control", RECIPE, *self.flags("--num-rollout", "1", "--trainer-cpus", "4096")],
                           capture_output=True, text=True, timeout=60, env=self.env, cwd=self.dir)
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn("--trainer-cpus", r.stderr)
        # --engine-nice: a process engine's priority, 0-19, each misuse a usage error naming the flag
        for flags, want in ((("--engine-nice", "10"), "--engine-nice needs --engine-mode process"),
                            (("--engine-mode", "process", "--engine-nice", "20"), "--engine-nice must be in [0, 19]")):
            r = subprocess.run([BIN, "--no-control", RECIPE, *self.flags("--num-rollout", "1", *flags)],
                               capture_output=True, text=True, timeout=60, env=self.env, cwd=self.dir)
            self.assertEqual(r.returncode, 2, r.stderr)
            self.assertIn(want, r.stderr)

    def test_off_is_lock_step(self):
        rows = self.run_recipe("--num-rollout", "3", "--async-mode", "off")
        self.assertEqual([m["rollout/step"] for m in rows], [0, 1, 2])
        self.assertFalse([k for k in rows[0] if k.startswith("async/")])
        versions = [self.spans(step)[0][0][1] for step in range(3)]
        self.assertEqual(versions[1:], [str(int(m["rollout/weight_version"])) for m in rows[:2]])


if __name__ == "__main__":
    support.main()
