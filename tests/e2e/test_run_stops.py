#!/usr/bin/env python3
"""End-to-end: a bounded stop (issue 31). One SIGTERM ends the run within the stop
grace whatever it is doing, with exit 143, a checkpoint of the last completed step and
no process left behind; a resume continues with no step or sample lost or repeated.

- a reward that never returns (waiting) from step 2 on: SIGTERM during step 2;
- a reward in a busy loop (JIT-compiled, holding the one event loop) from step 2 on:
  the host interrupts it when the grace is over;
- a process engine SIGSTOPped, without --use-fault-tolerance: SIGTERM;
- a second SIGTERM aborts at once, without waiting out the grace;
- code the host cannot interrupt (a recipe spinning in its main loop): the process
  still exits, at 2 × --stop-grace, killing its children;
- Ctrl-C lets the step finish and runs the final eval when there is time (exit 130).

    RLHOST_BIN=build/rlhost python3 tests/e2e/test_run_stops.py
"""
import os
import signal
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from run_ends_support import RecipeRun, descendants  # noqa: E402
from support import read_jsonl  # noqa: E402

GOOD = "return #s.response % 2"
# From the rollout step in $STUCK_FROM on, the reward hangs: waiting, or busy.
STUCK_FROM = 'local from = tonumber(os.getenv("STUCK_FROM") or "")\nif from and s.rollout_id >= from then\n  HANG\nend\n' + GOOD
WAITS = STUCK_FROM.replace("HANG", "rl.sleep(1e6)")
SPINS = STUCK_FROM.replace("HANG", "local i = 0\n  while true do i = i + 1 end")


class BoundedStop(RecipeRun):
    def signal_and_time(self, p, what, sig=signal.SIGTERM):
        """Sends `sig`; returns the exit status, the log and the seconds from the signal
        to the exit, and prints those seconds."""
        t0 = time.monotonic()
        p.send_signal(sig)
        code, text, _ = self.finish(p, 120, what)
        took = time.monotonic() - t0
        sys.stderr.write("\n%s: exit %d %.1f s after the signal\n" % (what, code, took))
        return code, text, took

    def sigterm_during_step_2(self, reward, *extra, grace=3):
        """Runs until step 1 is logged, lets step 2 hang, sends one SIGTERM; returns the
        exit status, log, seconds from the signal to the exit."""
        d = self.dir
        env = dict(self.env, STUCK_FROM="2")
        p = self.start("--num-rollout", "100", "--save", d + "/ckpt", "--save-interval", "100", "--metrics-dir", d + "/m",
                       "--save-debug-rollout-data", d + "/dump/rollout_{rollout_id}.pt", "--stop-grace", str(grace),
                       "--reward-timeout", "600", *extra, *self.reward(reward), env=env)
        self.wait_log(p, "rollout 1 |")
        time.sleep(1)   # step 2's rewards hang now
        children = descendants(p.pid)
        code, text, took = self.signal_and_time(p, "SIGTERM, reward hanging (grace %g s)" % grace)
        self.assert_none_left(children)
        return code, text, took

    def assert_saved_step_1_and_resume(self, text):
        d = self.dir
        self.assertIn("the 3 s stop grace is over: aborting the rollout in flight", text)
        self.assertIn("step 2 did not train (stopped in rollout): its samples are dropped", text)
        self.assertEqual(self.trained_steps(d + "/m/metrics.jsonl"), [0, 1])
        _, st = self.latest(d + "/ckpt")
        self.assertEqual(st["extra"]["next_rollout"], 2, "the checkpoint of the last completed step, step 1")
        # Resume: step 2 again, with the sample indices that follow step 1's.
        p = self.start("--num-rollout", "3", "--load", d + "/ckpt", "--metrics-dir", d + "/m2",
                       "--save-debug-rollout-data", d + "/dump/rollout_{rollout_id}.pt", *self.reward(GOOD))
        code, text, _ = self.finish(p, 180, "the resumed run")
        self.assertEqual(code, 0, text)
        self.assertEqual(self.trained_steps(d + "/m2/metrics.jsonl"), [2])
        self.assert_indices_continue([d + "/dump/rollout_%d.pt" % i for i in range(3)])

    def test_sigterm_while_the_reward_waits(self):
        code, text, took = self.sigterm_during_step_2(WAITS, "--engine-mode", "process")
        self.assertEqual(code, 143, text)
        self.assertLess(took, 2 * 3 + 1, "within 2 × the grace (+1 s for the kernel)")
        self.assert_saved_step_1_and_resume(text)

    def test_sigterm_while_the_reward_spins(self):
        code, text, took = self.sigterm_during_step_2(SPINS)
        self.assertEqual(code, 143, text)
        self.assertLess(took, 2 * 3 + 1)
        self.assert_saved_step_1_and_resume(text)

    def test_second_sigterm_aborts_at_once(self):
        d = self.dir
        p = self.start("--num-rollout", "100", "--save", d + "/ckpt", "--stop-grace", "60", "--reward-timeout", "600",
                       *self.reward(WAITS), env=dict(self.env, STUCK_FROM="1"))
        self.wait_log(p, "rollout 0 |")
        time.sleep(1)
        t0 = time.monotonic()
        p.send_signal(signal.SIGTERM)
        self.wait_log(p, "SIGTERM: stopping after this step")
        p.send_signal(signal.SIGTERM)
        code, text, _ = self.finish(p, 120, "two SIGTERMs")
        took = time.monotonic() - t0
        sys.stderr.write("\ntwo SIGTERMs (grace 60 s): exit %d %.1f s after the first\n" % (code, took))
        self.assertEqual(code, 143, text)
        self.assertLess(took, 60, "did not wait out the grace")
        self.assertIn("SIGTERM again: aborting the rollout in flight", text)
        _, st = self.latest(d + "/ckpt")
        self.assertEqual(st["extra"]["next_rollout"], 1)

    def test_sigterm_with_a_stopped_engine(self):
        # No --use-fault-tolerance: nothing notices the engine; its requests hang.
        d = self.dir
        p = self.start("--num-rollout", "100", "--save", d + "/ckpt", "--save-interval", "100", "--metrics-dir", d + "/m",
                       "--engine-mode", "process", "--stop-grace", "3", *self.reward(GOOD))
        self.wait_log(p, "rollout 0 |")
        children = descendants(p.pid)
        def cmdline(pid):
            with open("/proc/%d/cmdline" % pid) as f:
                return f.read()
        engine = [c for c in children if "engine" in cmdline(c)][0]
        os.kill(engine, signal.SIGSTOP)
        time.sleep(1)
        code, text, took = self.signal_and_time(p, "SIGTERM, engine SIGSTOPped (grace 3 s)")
        self.assertEqual(code, 143, text)
        self.assertLess(took, 2 * 3 + 1)
        self.assert_none_left(children)
        steps = self.trained_steps(d + "/m/metrics.jsonl")
        _, st = self.latest(d + "/ckpt")
        self.assertEqual(st["extra"]["next_rollout"], len(steps), "the checkpoint holds every trained step")

    def test_the_host_exits_when_nothing_can_be_interrupted(self):
        # The recipe itself spins (no guard, no yield): at 2 × --stop-grace the host
        # kills the children and exits.
        recipe = self.write("spin.lua", """
            local opt = rl.args(rl.recipe.options { description = "spins" })
            local job = rl.recipe.setup(opt, {})
            io.stderr:write("spinning\\n")
            local i = 0
            while true do i = i + 1 end
        """)
        p = self.start("--stop-grace", "2", "--engine-mode", "process", recipe=recipe)
        self.wait_log(p, "spinning")
        children = descendants(p.pid)
        code, text, took = self.signal_and_time(p, "SIGTERM, recipe spinning (grace 2 s)")
        self.assertEqual(code, 143, text)
        self.assertIn("rlhost: still running 4 s after the stop signal", text)
        self.assertLess(took, 2 * 2 + 2)
        self.assert_none_left(children)

    def test_ctrl_c_runs_the_final_eval(self):
        d = self.dir
        p = self.start("--num-rollout", "100", "--save", d + "/ckpt", "--metrics-dir", d + "/m", "--stop-grace", "60",
                       *self.reward(GOOD))
        self.wait_log(p, "rollout 0 |")
        p.send_signal(signal.SIGINT)
        code, text, _ = self.finish(p, 120, "Ctrl-C")
        self.assertEqual(code, 130, text)
        rows = read_jsonl(d + "/m/metrics.jsonl")
        steps = [m["rollout/step"] for m in rows if "rollout/step" in m]
        evals = [m["eval/step"] for m in rows if "eval/step" in m]
        self.assertEqual(evals, [0, steps[-1] + 1], "the first eval and the final one")
        _, st = self.latest(d + "/ckpt")
        self.assertEqual(st["extra"]["next_rollout"], len(steps))


if __name__ == "__main__":
    unittest.main()
