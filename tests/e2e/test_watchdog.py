#!/usr/bin/env python3
"""End-to-end: the hang watchdog (rl.watchdog, --hang-timeout).

A recipe whose reward never returns (its timeout off) stalls the rollout: after
--hang-timeout seconds without progress the host logs one report, and writes it next
to the metrics, naming the stuck reward tasks, what they wait on and the samples they
hold. `rlhost attach` prints the same report on demand, and SIGUSR1 logs it.

    RLHOST_BIN=build/rlhost python3 tests/e2e/test_watchdog.py
"""
import glob
import os
import signal
import subprocess
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from support import BIN, RlhostTestCase, wait_for  # noqa: E402
import support  # noqa: E402

HANG = """\
local opt = rl.args(rl.recipe.options { description = "a reward that never returns" })
local function stuck_reward(sample) rl.sleep(1e9) return 0 end
local job = rl.recipe.setup(opt, { reward = stuck_reward, reward_timeout = 1e9 })
for id = job.start_rollout, opt.num_rollout - 1 do job:rollout_step(id) end
job:finish()
"""


class Watchdog(RlhostTestCase):
    tmp_prefix = "rlhost-watchdog-"

    def test_stuck_reward_is_reported_in_time_on_demand_and_on_sigusr1(self):
        d = self.dir
        recipe = self.write("hang.lua", HANG)
        sock = d + "/hang.sock"
        log_path = d + "/hang.log"
        out = open(log_path, "w")
        self.addCleanup(out.close)
        p = subprocess.Popen(
            [BIN, "--control", sock, recipe, "--num-rollout", "1", "--rollout-batch-size", "1",
             "--n-samples-per-prompt", "2", "--rollout-max-response-len", "16", "--dynamic-sampling-filter", "none",
             "--threads", "1", "--no-progress", "--eval-interval", "1000", "--hang-timeout", "3",
             "--metrics-dir", d + "/m"], stdout=out, stderr=subprocess.STDOUT, env=self.env, cwd=d)
        self.procs.append(p)

        def text():
            with open(log_path) as f:
                return f.read()

        def reported():
            if p.poll() is not None:
                raise AssertionError("the recipe exited (%s):\n%s" % (p.returncode, text()[-4000:]))
            return "hang report (no progress for 3 s)" in text()
        wait_for(reported, timeout=180, what="the watchdog's report")
        log = text()
        report = log[log.index("hang report (no progress for 3 s)"):]
        # the stuck tasks: the reward, what it waits on, the sample it holds, the recipe's frame
        self.assertRegex(report, r"task \d+ 'reward' running waits on rl\.sleep for [\d.]+ s\n  holds sample 0 ")
        self.assertRegex(report, r"'reward' running waits on rl\.sleep[^\n]*\n  holds sample \d[^\n]*\n  \S*hang\.lua:2: ")
        self.assertRegex(report, r"task \d+ 'sample' running waits on task \d+ 'reward'")
        self.assertIn("job: rollout for", report)
        self.assertIn("== HTTP requests in flight", report)
        self.assertRegex(report, r"engine 1 http://127\.0\.0\.1:\d+: running \d+, queued \d+")
        files = glob.glob(d + "/m/hang_report_*.txt")
        self.assertEqual(len(files), 1, "one report per stall")
        with open(files[0]) as f:
            self.assertIn("'reward' running waits on rl.sleep", f.read())

        # on demand, from attach
        r = subprocess.run([BIN, "attach", sock, "-e", "print(rl.watchdog.text())"], capture_output=True, text=True,
                           timeout=60, env=self.env)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("rlhost hang report (on demand)", r.stdout)
        self.assertRegex(r.stdout, r"task \d+ 'reward' running waits on rl\.sleep")

        # SIGUSR1: logged
        os.kill(p.pid, signal.SIGUSR1)
        wait_for(lambda: "hang report (SIGUSR1)" in text(), timeout=60, what="the SIGUSR1 report")
        self.assertEqual(len(glob.glob(d + "/m/hang_report_*.txt")), 2)
        p.kill()
        p.wait(timeout=30)


if __name__ == "__main__":
    support.main()
