#!/usr/bin/env python3
"""End-to-end: a recipe logs metrics through rl.metrics; the TensorBoard event files
rlhost writes natively are read back with the `tensorboard` package's
EventAccumulator (tags, steps, values within float32 precision, wall times), while
the run is still going and after it ends; the JSONL file and console lines too.

    RLHOST_BIN=build/rlhost python3 tests/e2e/test_metrics_tensorboard.py

Needs `tensorboard` (scripts/bootstrap.sh --test-deps installs it); without it the
test is skipped (ctest: Skipped) naming what to install, and under CI=true it fails.
"""
import json
import math
import os
import subprocess
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from support import BIN, RlhostTestCase, wait_for  # noqa: E402
import support  # noqa: E402

try:
    from tensorboard.backend.event_processing import event_accumulator
except Exception as e:  # pragma: no cover - depends on the machine
    event_accumulator = None
    IMPORT_ERROR = repr(e)

TIMEOUT = 60

# Logs steps 0..2, writes `ready`, waits for `go`, logs steps 3..4 and a train step.
RECIPE = r"""
local opt = rl.args(rl.metrics.add_options {
  description = "metrics e2e",
  { name = "ready", type = "string" },
  { name = "go", type = "string" },
})
local lg = assert(rl.metrics.configure(opt))
print("TB_FILE " .. tostring(lg.tensorboard_file))

local function rollout(step)
  rl.metrics.log({
    ["rollout/step"] = step,
    ["rollout/raw_reward"] = 0.1 * step + 1 / 3,
    ["rollout/response_len/mean"] = 100 + step * 7.5,
    ["rollout/truncated_ratio"] = step / 8,
    ["perf/rollout_time"] = 1.25 * (step + 1),
    ["rollout/nan_metric"] = step == 1 and 0 / 0 or step,
    ["rollout/label"] = "text is not a scalar",
  }, "rollout/step")
end

for step = 0, 2 do rollout(step) end
if opt.ready then
  local f = assert(io.open(opt.ready, "w")); f:write("1"); f:close()
  while not io.open(opt.go) do rl.sleep(0.02) end
end
for step = 3, 4 do rollout(step) end
rl.metrics.log({ ["train/step"] = 40, ["train/loss"] = -0.5, ["train/grad_norm"] = 2.5e-3 }, "train/step")
rl.metrics.close()
"""


def expected_rollout(step):
    return {
        "rollout/raw_reward": 0.1 * step + 1 / 3,
        "rollout/response_len/mean": 100 + step * 7.5,
        "rollout/truncated_ratio": step / 8,
        "perf/rollout_time": 1.25 * (step + 1),
        "rollout/nan_metric": float("nan") if step == 1 else float(step),
    }


def load(path):
    acc = event_accumulator.EventAccumulator(path, size_guidance={event_accumulator.SCALARS: 0})
    acc.Reload()
    return acc


@support.requires(event_accumulator is not None,
                  "tensorboard (Python) is needed to read the event files back: %s"
                  % (IMPORT_ERROR if event_accumulator is None else ""), support.PIP_HINT % "tensorboard")
class TensorBoardEvents(RlhostTestCase):
    tmp_prefix = "rlhost-metrics-"

    def start(self, *args, env=None):
        recipe = self.write("recipe.lua", RECIPE)
        p = subprocess.Popen([BIN, "--no-control", recipe, *args], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, env=env or self.env, cwd=self.dir)
        self.procs.append(p)
        return p

    def finish(self, p):
        out, err = p.communicate(timeout=TIMEOUT)
        self.assertEqual(p.returncode, 0, "rlhost failed\n--- stdout\n%s\n--- stderr\n%s" % (out, err))
        return out, err

    def check_scalars(self, acc, steps):
        tags = set(acc.Tags()["scalars"])
        want = {"rollout/raw_reward", "rollout/response_len/mean", "rollout/truncated_ratio",
                "perf/rollout_time", "rollout/nan_metric"}
        self.assertTrue(want <= tags, "tags %s" % sorted(tags))
        self.assertNotIn("rollout/step", tags, "the step key is the step, not a scalar")
        self.assertNotIn("rollout/label", tags, "non-numeric values are not scalars")
        now = time.time()
        for tag in want:
            events = acc.Scalars(tag)
            exp_steps = [s for s in steps if not (tag == "rollout/nan_metric" and s == 1)]
            self.assertEqual([e.step for e in events], exp_steps, tag)
            for e in events:
                want_v = expected_rollout(e.step)[tag]
                self.assertTrue(math.isclose(e.value, want_v, rel_tol=1e-6, abs_tol=1e-7),
                                "%s at step %d: %r vs %r" % (tag, e.step, e.value, want_v))
                self.assertLess(abs(e.wall_time - now), 120, "wall_time is seconds since the epoch")
        return tags

    def test_event_file_read_while_running_and_after(self):
        tb_dir = os.path.join(self.dir, "tb")
        ready, go = os.path.join(self.dir, "ready"), os.path.join(self.dir, "go")
        p = self.start("--use-tensorboard", "--tensorboard-dir", tb_dir, "--metrics-dir",
                       os.path.join(self.dir, "m"), "--ready", ready, "--go", go)

        def is_ready():
            if p.poll() is not None:
                out, err = p.communicate()
                raise AssertionError("rlhost exited early (%s)\n%s\n%s" % (p.returncode, out, err))
            return os.path.exists(ready)
        wait_for(is_ready, timeout=TIMEOUT, what="the recipe's first steps")

        # The run is still going: what is on disk already reads back.
        files = [f for f in os.listdir(tb_dir) if f.startswith("events.out.tfevents.")]
        self.assertEqual(len(files), 1, files)
        self.check_scalars(load(tb_dir), [0, 1, 2])

        with open(go, "w") as f:
            f.write("1")
        out, err = self.finish(p)

        acc = load(tb_dir)
        tags = self.check_scalars(acc, [0, 1, 2, 3, 4])
        self.assertIn("train/loss", tags)
        loss = acc.Scalars("train/loss")
        self.assertEqual([(e.step, e.value) for e in loss], [(40, -0.5)])
        self.assertAlmostEqual(acc.Scalars("train/grad_norm")[0].value, 2.5e-3, places=9)
        self.assertIn("TB_FILE " + os.path.join(tb_dir, files[0]), out)
        # the file_version record comes first
        self.assertEqual(acc.file_version, 2.0)  # parsed from "brain.Event:2"

        # JSONL: every call, whole, with NaN as null
        with open(os.path.join(self.dir, "m", "metrics.jsonl")) as f:
            recs = [json.loads(line) for line in f]
        self.assertEqual([r.get("rollout/step", r.get("train/step")) for r in recs], [0, 1, 2, 3, 4, 40])
        self.assertIsNone(recs[1]["rollout/nan_metric"])
        self.assertEqual(recs[0]["rollout/label"], "text is not a scalar")
        self.assertLess(abs(recs[0]["time"] - time.time()), 120)

        # console: one line per step, at the recipe's call site
        self.assertRegex(err, r"recipe\.lua:\d+\] rollout 2 \| reward 0\.533 \| resp_len 115 \| truncated 0\.25 \| 3\.8 s")
        self.assertRegex(err, r"train 40 \| loss -0\.5 \| grad_norm 0\.0025")

    def test_default_directory_and_env(self):
        # tensorboard_log/<project>/<experiment> under the working directory
        p = self.start("--use-tensorboard", "--tb-project-name", "proj", "--tb-experiment-name", "exp",
                       "--no-metrics-console")
        out, err = self.finish(p)
        d = os.path.join(self.dir, "tensorboard_log", "proj", "exp")
        self.check_scalars(load(d), [0, 1, 2, 3, 4])
        self.assertNotIn("rollout 2 |", err)

        # $TENSORBOARD_DIR wins over the names (as in slime)
        env_dir = os.path.join(self.dir, "from_env")
        p = self.start("--use-tensorboard", "--tb-project-name", "proj",
                       env=dict(self.env, TENSORBOARD_DIR=env_dir))
        self.finish(p)
        self.check_scalars(load(env_dir), [0, 1, 2, 3, 4])

    def test_unwritable_directory_is_a_clear_error(self):
        blocker = self.write("blocker", "x")
        p = self.start("--use-tensorboard", "--tensorboard-dir", os.path.join(blocker, "tb"))
        out, err = p.communicate(timeout=TIMEOUT)
        self.assertNotEqual(p.returncode, 0)
        self.assertIn("tensorboard: cannot create directory '%s'" % os.path.join(blocker, "tb"), err)
        self.assertIn("hint:", err)


if __name__ == "__main__":
    support.main()
