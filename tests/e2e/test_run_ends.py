#!/usr/bin/env python3
"""End-to-end: every run ends (issue 31) — failure budgets and checkpoints that cannot
be written (issue 40 items 1, 2, 9). The GRPO recipe on a tiny model with a reward the
test writes; real processes and files, a real full filesystem.

- a reward that never returns (waiting) fails the step at --reward-timeout: exit 1,
  one message naming the reward, its file:line and where it hung;
- a reward in a busy loop (compiled by the JIT) is interrupted at its limit, and two of
  them fail the step (--max-busy-timeouts); SIGUSR1's hang report comes at the latest
  when the limit interrupts it;
- a reward failing on every sample from step 1 on: exit 1 naming the reward and its
  last error with traceback; the failed step's samples dumped, a metrics record, the
  checkpoint of the last completed step written; a resume continues at step 1 with the
  next sample indices;
- a reward failing on 10 % of the samples: the run completes, the failures counted;
- a filter that never keeps a group stops at --over-sampling-limit naming its drops;
- with the budgets off, a step where every sample failed says why (no "empty batch");
- a checkpoint that meets a full filesystem (a small tmpfs in a private mount
  namespace; else RLIMIT_FSIZE) reports the error, keeps the last good checkpoint,
  and stops (--on-save-failure stop) or trains on (continue).

    RLHOST_BIN=build/rlhost python3 tests/e2e/test_run_ends.py
"""
import glob
import os
import resource
import shutil
import signal
import subprocess
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from run_ends_support import RecipeRun, descendants  # noqa: E402
from support import read_jsonl, wait_for  # noqa: E402

STUCK = "rl.sleep(1e6)"                                  # a grader that never answers
BUSY = "local i = 0\nwhile true do\n  i = i + 1\nend"      # a busy loop the JIT compiles
GOOD = "return #s.response % 2"


class FailureBudgets(RecipeRun):
    def test_reward_that_never_returns(self):
        p = self.start("--num-rollout", "3", "--reward-timeout", "2", "--engine-mode", "process",
                       *self.reward(STUCK))
        self.wait_log(p, "Router launched")
        children = descendants(p.pid)
        code, text, took = self.finish(p, 120, "a reward that never returns")
        sys.stderr.write("\nstuck reward (2 s limit): exit %d after %.1f s from start\n" % (code, took))
        self.assertEqual(code, 1, text)
        self.assertIn("rlhost: rollout step 0 failed: ", text)
        self.assertIn("failing: reward: 8 failed (0 errors, 8 time-outs, 0 busy)", text)
        self.assertIn("reward.lua:1 timed out after 2 s (waiting: cancelled)", text)
        self.assertIn("stack traceback", text)
        self.assertNotIn("rollout 0 |", text)
        self.assert_none_left(children)

    def test_busy_reward_is_interrupted_and_two_fail_the_step(self):
        p = self.start("--num-rollout", "3", "--reward-timeout", "2", *self.reward(BUSY))
        code, text, took = self.finish(p, 120, "a busy reward")
        sys.stderr.write("\nbusy reward (2 s limit): exit %d after %.1f s from start\n" % (code, took))
        self.assertEqual(code, 1, text)
        self.assertRegex(text, r"\d rewards ran Lua code for their whole time limit \(--max-busy-timeouts 2")
        self.assertIn("running Lua code the whole time: interrupted", text)
        self.assertRegex(text, r"reward\.lua:[345]: in function")   # the loop, where it was stopped

    def test_busy_reward_leaves_room_for_sigusr1(self):
        # Before, a compiled busy loop was never stopped: SIGUSR1 (and attach, and the
        # hang watchdog, all served by the one event loop) never got a turn.
        mark = os.path.join(self.dir, "spinning")
        body = 'local f = io.open(os.getenv("MARK"), "w")\nf:close()\n' + BUSY
        p = self.start("--num-rollout", "3", "--reward-timeout", "4", *self.reward(body),
                       env=dict(self.env, MARK=mark))
        wait_for(lambda: p.poll() is not None or os.path.exists(mark), timeout=180, what="the reward spinning")
        self.assertIsNone(p.poll(), self.log_text()[-4000:])
        t0 = time.monotonic()
        p.send_signal(signal.SIGUSR1)
        wait_for(lambda: "hang report (SIGUSR1)" in self.log_text(), timeout=60, what="the SIGUSR1 report")
        took = time.monotonic() - t0
        sys.stderr.write("\nSIGUSR1 during a busy reward (4 s limit): report after %.1f s\n" % took)
        self.assertLess(took, 4 + 4, "at the latest when the reward's limit interrupts it (before: after every busy reward)")
        code, text, _ = self.finish(p, 120, "a busy reward")
        self.assertEqual(code, 1, text)

    def test_reward_failing_every_sample_then_resume(self):
        d = self.dir
        flaky = self.reward('if s.rollout_id >= 1 then error("grader down") end\n' + GOOD)
        p = self.start("--num-rollout", "3", "--save", d + "/ckpt", "--save-interval", "10", "--metrics-dir", d + "/m",
                       "--save-debug-rollout-data", d + "/dump/rollout_{rollout_id}.pt", *flaky)
        code, text, _ = self.finish(p, 180, "a reward failing from step 1")
        self.assertEqual(code, 1, text)
        self.assertIn("rlhost: rollout step 1 failed: 8 of 8 finished samples failed, more than 50 % of the batch's 8", text)
        self.assertIn("last reward error (sample", text)
        self.assertIn("reward.lua:2: grader down", text)
        self.assertIn("stack traceback", text)
        self.assertIn("written: dump " + d + "/dump/rollout_1.failed.pt", text)
        self.assertTrue(os.path.exists(d + "/dump/rollout_1.failed.pt"))
        failed = [m for m in read_jsonl(d + "/m/metrics.jsonl") if "rollout/failed_step" in m]
        self.assertEqual([m["rollout/failed_step"] for m in failed], [1])
        self.assertEqual(self.trained_steps(d + "/m/metrics.jsonl"), [0])
        _, st = self.latest(d + "/ckpt")
        self.assertEqual(st["extra"]["next_rollout"], 1, "the checkpoint of the last completed step, step 0")
        # Resume with the reward fixed: step 1 again, with the next sample indices.
        p = self.start("--num-rollout", "2", "--load", d + "/ckpt", "--save", d + "/ckpt", "--metrics-dir", d + "/m2",
                       "--save-debug-rollout-data", d + "/dump/rollout_{rollout_id}.pt", *self.reward(GOOD))
        code, text, _ = self.finish(p, 180, "the resumed run")
        self.assertEqual(code, 0, text)
        self.assertIn("next rollout 1", text)
        self.assertEqual(self.trained_steps(d + "/m2/metrics.jsonl"), [1])
        self.assert_indices_continue([d + "/dump/rollout_0.pt", d + "/dump/rollout_1.pt"])

    def test_reward_failing_on_a_tenth_completes(self):
        d = self.dir
        p = self.start("--num-rollout", "3", "--metrics-dir", d + "/m",
                       *self.reward('if s.index % 10 == 3 then error("flaky grader") end\n' + GOOD))
        code, text, _ = self.finish(p, 180, "a reward failing on 10 %")
        self.assertEqual(code, 0, text)
        rows = [m for m in read_jsonl(d + "/m/metrics.jsonl") if "rollout/step" in m]
        self.assertEqual([m["rollout/step"] for m in rows], [0, 1, 2])
        self.assertEqual(sum(m.get("rollout/reward/error", 0) for m in rows), 3)   # samples 3, 13 and 23 of 24
        self.assertEqual(sum(m["rollout/failed_samples"] for m in rows), 3)

    def test_over_sampling_is_bounded(self):
        # every reward equal: the filter drops every group; slime samples for ever
        p = self.start("--num-rollout", "2", "--dynamic-sampling-filter", "nonzero_std", "--over-sampling-limit", "3",
                       *self.reward("return 1"))
        code, text, _ = self.finish(p, 180, "a filter that keeps nothing")
        self.assertEqual(code, 1, text)
        self.assertIn("rollout step 0 failed: 6 prompts drawn (--over-sampling-limit 3 × --rollout-batch-size 2) "
                      "and only 0 of 2 groups kept (dynamic filter drops: zero_std_1.0 6)", text)
        self.assertIn("--dynamic-sampling-filter none", text)

    def test_every_sample_failed_with_budgets_off_says_why(self):
        p = self.start("--num-rollout", "2", "--max-failed-share", "1", "--max-busy-timeouts", "0",
                       *self.reward('error("no grader")'))
        code, text, _ = self.finish(p, 180, "a step where every sample failed")
        self.assertEqual(code, 1, text)
        self.assertIn("rollout step 0 failed: no sample to train on: 8 of the 8 finished samples failed", text)
        self.assertIn("failing: reward: 8 failed (8 errors, 0 time-outs, 0 busy)", text)
        self.assertIn("reward.lua:2: no grader", text)
        self.assertNotIn("empty batch", text)

    def test_bad_budget_flags_are_usage_errors(self):
        for flag, value, msg in (("--max-failed-share", "0", "--max-failed-share must be in (0, 1]"),
                                 ("--stop-grace", "-1", "--stop-grace must be a positive number of seconds"),
                                 ("--reward-timeout", "0", "--reward-timeout must be a positive number of seconds"),
                                 ("--max-busy-timeouts", "-2", "--max-busy-timeouts must be >= 0")):
            p = self.start("--num-rollout", "1", flag, value)
            code, text, _ = self.finish(p, 120, flag)
            self.assertEqual(code, 2, text)
            self.assertIn(msg, text)


def _tmpfs_prefix(mnt, size_kb):
    """A command prefix that runs the rest in a private mount namespace with a `size_kb`
    tmpfs at `mnt`, then copies what the tmpfs holds to `mnt`.after (the mount goes with
    the namespace); None when this machine allows no such namespace."""
    if not shutil.which("unshare") or os.environ.get("RLHOST_TEST_NO_TMPFS"):
        return None
    base = ["unshare", "-m"] if os.geteuid() == 0 else ["unshare", "-rm"]
    probe = subprocess.run([*base, "sh", "-c", "mount -t tmpfs -o size=64k tmpfs '%s'" % mnt], capture_output=True)
    if probe.returncode != 0:
        return None
    script = ('mount -t tmpfs -o size=%dk tmpfs "$0" || exit 99; "$@"; rc=$?; '
              'mkdir -p "$0.after" && cp -a "$0"/. "$0.after"/; exit $rc') % size_kb
    return [*base, "sh", "-c", script, mnt]


class CheckpointOnFullDisk(RecipeRun):
    def sizes(self):
        """Bytes of one checkpoint of this model, of its optimizer.pt and its weights."""
        d = self.dir
        p = self.start("--num-rollout", "1", "--save", d + "/probe", *self.reward(GOOD))
        code, text, _ = self.finish(p, 180, "the probe run")
        self.assertEqual(code, 0, text)
        it_dir = glob.glob(d + "/probe/iter_*")[0]
        total = sum(os.path.getsize(f) for f in glob.glob(it_dir + "/*"))
        return total, os.path.getsize(it_dir + "/optimizer.pt"), os.path.getsize(it_dir + "/model.safetensors")

    def run_full(self, policy):
        """Saves every step into a filesystem with room for one checkpoint and a half: the
        second save fails part-way (ENOSPC from a tmpfs; EFBIG under RLIMIT_FSIZE where no
        mount namespace can be made)."""
        d = self.dir
        total, optim, weights = self.sizes()
        mnt = d + "/ckpt"
        os.makedirs(mnt)
        size_kb = (total + total // 2) // 1024 + 8
        prefix = _tmpfs_prefix(mnt, size_kb)
        self.fault = "a %d KB tmpfs" % size_kb if prefix else "RLIMIT_FSIZE"
        self.saved = mnt + ".after" if prefix else mnt
        p = self.start("--num-rollout", "3", "--save", mnt, "--save-interval", "1", "--metrics-dir", d + "/m",
                       "--on-save-failure", policy, *self.reward(GOOD), prefix=prefix or (),
                       preexec_fn=lambda: signal.signal(signal.SIGXFSZ, signal.SIG_IGN))
        if prefix is None:   # after the first save, files may not grow past half of optimizer.pt
            self.wait_log(p, "checkpoint " + mnt + "/iter_")
            resource.prlimit(p.pid, resource.RLIMIT_FSIZE, (weights + (optim - weights) // 2, resource.RLIM_INFINITY))
        code, text, _ = self.finish(p, 240, "saves on a full disk")
        sys.stderr.write("\nfull disk (%s), --on-save-failure %s: exit %d\n" % (self.fault, policy, code))
        return code, text

    def assert_good_checkpoint_kept(self, text):
        self.assertNotIn("terminate called", text)
        self.assertIn("the checkpoint of step 1 was not written: ", text)
        self.assertRegex(text, r"(No space left on device|File too large)")
        it, st = self.latest(self.saved)
        self.assertEqual(st["extra"]["next_rollout"], 1, "the pointer still names step 0's checkpoint")
        self.assertFalse(glob.glob(self.saved + "/*.tmp-*"), "no half-written directory left")
        self.assertEqual(len(glob.glob(self.saved + "/iter_*")), 1)

    def test_stop_on_save_failure(self):
        code, text = self.run_full("stop")
        self.assertEqual(code, 1, text)
        self.assert_good_checkpoint_kept(text)
        self.assertIn("(--on-save-failure stop)", text)
        self.assertIn("is intact", text)
        self.assertEqual(self.trained_steps(self.dir + "/m/metrics.jsonl"), [0, 1], "stopped after step 1's save")
        self.assertIn("done:", text)

    def test_continue_on_save_failure(self):
        code, text = self.run_full("continue")
        self.assert_good_checkpoint_kept(text)
        self.assertIn("training goes on (--on-save-failure continue)", text)
        self.assertEqual(self.trained_steps(self.dir + "/m/metrics.jsonl"), [0, 1, 2], "trained every step")
        # the final save meets the same full disk: the run says so and exits 1
        self.assertEqual(code, 1, text)
        self.assertIn("save failures", text)


if __name__ == "__main__":
    unittest.main()
