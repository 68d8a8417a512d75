"""Scaffolding of tests/e2e/test_run_ends.py and test_run_stops.py: the GRPO recipe on
a tiny math model (built once per test class by recipes/sft_warmup.lua), with a reward
written by the test (--custom-rm-path), run as a user runs it; processes, signals,
files and filesystems are real.

Not a test module itself (CMake runs tests/e2e/test_*.py).
"""
import glob
import json
import os
import subprocess
import time

from support import BIN, SOURCE_DIR, RlhostTestCase, read_jsonl, wait_for
from test_recipe_grpo import TinyModel, descendants, live_in_groups, running  # noqa: F401 (re-exported)

RECIPE = os.path.join(SOURCE_DIR, "recipes", "grpo_gsm8k.lua")

# Sample indices of every sample of a dump, in order.
DUMP_INDICES = r"""
local d = assert(rl.dump.load(arg[1]))
local out = {}
for i, s in ipairs(d.samples) do out[i] = s.index end
print(rl.json.encode(out))
"""


class RecipeRun(TinyModel, RlhostTestCase):
    tmp_prefix = "rlhost-ends-"

    def flags(self, *extra):
        m = self.model
        return ["--hf-checkpoint", m, "--prompt-data", m + "/data/train.jsonl", "--eval-interval", "1000",
                "--eval-prompt-data", "heldout", m + "/data/test.jsonl", "--eval-max-prompts", "4",
                "--rollout-batch-size", "2", "--n-samples-per-prompt", "4", "--rollout-max-response-len", "12",
                "--dynamic-sampling-filter", "none", "--threads", "1", "--lr", "1e-3", "--no-progress", *extra]

    def reward(self, body, name="reward.lua"):
        """A reward module in the test's directory: `body` is the function's body (sample
        `s`); returns the --custom-rm-path flag pair."""
        path = self.write(name, "return { reward = function(s)\n" + body + "\nend }\n")
        return ["--custom-rm-path", path + ":reward"]

    def start(self, *extra, recipe=RECIPE, env=None, prefix=(), preexec_fn=None):
        """Starts the recipe (its log: DIR/recipe.log); `prefix`: a command that runs
        it; returns the process."""
        log = open(os.path.join(self.dir, "recipe.log"), "w")
        self.addCleanup(log.close)
        self.t_start = time.monotonic()
        p = subprocess.Popen([*prefix, BIN, "--no-control", recipe, *self.flags(*extra)], stdout=log,
                             stderr=subprocess.STDOUT, env=env or self.env, cwd=self.dir, preexec_fn=preexec_fn)
        self.procs.append(p)
        return p

    def log_text(self):
        with open(os.path.join(self.dir, "recipe.log")) as f:
            return f.read()

    def finish(self, p, timeout, what):
        """Waits for the run to end (a bound: failing it means it did not end); returns
        (exit status, log, seconds since start)."""
        try:
            p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
            self.fail("%s: still running after %d s\n%s" % (what, timeout, self.log_text()[-6000:]))
        return p.returncode, self.log_text(), time.monotonic() - self.t_start

    def wait_log(self, p, text, timeout=180):
        wait_for(lambda: p.poll() is not None or text in self.log_text(), timeout=timeout, what=repr(text))
        self.assertIsNone(p.poll(), "exited before %r:\n%s" % (text, self.log_text()[-6000:]))

    def steps_logged(self, text):
        return text.count("\nrollout ") + (1 if text.startswith("rollout ") else 0)

    def latest(self, root):
        """(iteration, trainer_state.json) of the checkpoint `root` points at."""
        with open(os.path.join(root, "latest_checkpointed_iteration.txt")) as f:
            it = int(f.read())
        with open(os.path.join(root, "iter_%07d" % it, "trainer_state.json")) as f:
            return it, json.load(f)

    def dump_indices(self, path):
        script = self.write("dump_indices.lua", DUMP_INDICES)
        r = subprocess.run([BIN, "--no-control", script, path], capture_output=True, text=True, timeout=60)
        self.assertEqual(r.returncode, 0, r.stderr)
        return json.loads(r.stdout)

    def trained_steps(self, metrics_path):
        return [m["rollout/step"] for m in read_jsonl(metrics_path) if "rollout/step" in m]

    def assert_none_left(self, pids):
        groups = set()
        for c in pids:
            try:
                groups.add(os.getpgid(c))
            except OSError:
                pass
        wait_for(lambda: not any(running(c) for c in pids) and not live_in_groups(groups), timeout=20,
                 what="no child process left (%s)" % sorted(pids))

    def assert_indices_continue(self, dumps):
        """The sample indices of the dumps' steps, in order, follow each other: each step's
        first index is the last step's last + 1 (n × batch per step, no gap, no repeat)."""
        seen = []
        for path in dumps:
            idx = self.dump_indices(path)
            self.assertEqual(idx, list(range(idx[0], idx[0] + len(idx))), path)
            if seen:
                self.assertEqual(idx[0], seen[-1] + 1, "%s continues where the step before ended" % path)
            seen += idx
        self.assertEqual(len(seen), len(set(seen)), "no sample twice")
        return seen


def glob_one(pattern):
    found = glob.glob(pattern)
    return found[0] if len(found) == 1 else None
