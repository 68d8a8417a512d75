#!/usr/bin/env python3
"""End-to-end: `rlhost recipes/grpo_gsm8k.lua` on a tiny math model.

The model is built by recipes/sft_warmup.lua with tiny sizes (seconds), then the
GRPO recipe runs as a user runs it, with a real engine behind a real router:

- a short run writes debug dumps, metrics JSONL, TensorBoard events (read back
  with EventAccumulator when tensorboard is importable) and checkpoints;
- --load resumes at the next rollout step with the data source where it was: the
  resumed step's prompts equal those of an uninterrupted run's same step;
- Ctrl-C stops after the step in flight, saves a checkpoint and exits 130;
- the reward module reloads while the job runs: a syntax error is logged with
  file:line and the old version keeps running; a good edit takes effect at the
  next step, and its hash shows in the metrics and in each sample's trace;
- data parallel (`rlhost --nproc 2`): rank 0 runs engines and rollout, both ranks
  train; replaying one run's rollouts (--load-debug-rollout-data), 2 ranks end with
  the weights of 1 process (1e-5) and the same grad norms.

    RLHOST_BIN=build/rlhost python3 tests/e2e/test_recipe_grpo.py
"""
import glob
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from support import BIN, SOURCE_DIR, RlhostTestCase, lua_json, read_jsonl, wait_for  # noqa: E402
import support  # noqa: E402
from test_trainer_dist import max_diff, read_safetensors  # noqa: E402

try:
    from tensorboard.backend.event_processing import event_accumulator
except Exception:  # pragma: no cover - depends on the machine
    event_accumulator = None

RECIPE = os.path.join(SOURCE_DIR, "recipes", "grpo_gsm8k.lua")
WARMUP = ["--steps", "4", "--train-size", "200", "--test-size", "8", "--hidden-size", "32", "--num-layers", "1",
          "--num-heads", "2", "--intermediate-size", "64", "--max-merges", "60", "--batch-size", "8",
          "--micro-batch-size", "8", "--max-new-tokens", "8", "--threads", "1", "--max-position-embeddings", "128"]

# Prompts (first 60 chars) of every sample of a dump, in order.
DUMP_PROMPTS = r"""
local d = assert(rl.dump.load(arg[1]))
local out = {}
for i, s in ipairs(d.samples) do
  local mods
  for _, e in ipairs(s.trace and s.trace.events or {}) do
    if e.name == "modules" then mods = e.attrs["module.rewards.gsm8k_reward"] end
  end
  out[i] = { prompt = type(s.prompt) == "string" and s.prompt or rl.json.encode(s.prompt), module = mods }
end
print(rl.json.encode(out))
"""

# Per sample of a dump: the verdict of the recipe's dynamic_filter span and the recipe's version.
FILTER_SPANS = r"""
local d = assert(rl.dump.load(arg[1]))
local out = {}
for i, s in ipairs(d.samples) do
  local row = {}
  for _, e in ipairs(s.trace and s.trace.events or {}) do
    if e.name == "dynamic_filter" and e.type == "span_end" then row.keep = e.attrs.keep end
    if e.name == "modules" then row.module = e.attrs["module.grpo_gsm8k"] end
  end
  out[i] = row
end
print(rl.json.encode(out))
"""


def _stat(pid):
    """(state, ppid, pgid) of a process, or None when it is gone."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return fields[0], int(fields[1]), int(fields[2])
    except (OSError, ValueError, IndexError):
        return None


def _pids():
    return [int(n) for n in os.listdir("/proc") if n.isdigit()]


def running(pid):
    st = _stat(pid)
    return st is not None and st[0] not in ("Z", "X")


def descendants(pid):
    """Every live process below `pid`."""
    found, frontier = [], {pid}
    while frontier:
        below = [q for q in _pids() if (_stat(q) or ("X", 0, 0))[1] in frontier]
        found += below
        frontier = set(below)
    return found


def live_in_groups(groups):
    return [q for q in _pids() if running(q) and (_stat(q) or ("X", 0, 0))[2] in groups]


class TinyModel:
    """A test class mixin: the tiny math model, built once per class into cls.model."""
    model = None

    @classmethod
    def setUpClass(cls):
        import tempfile
        cls._models = tempfile.TemporaryDirectory(prefix="rlhost-grpo-model-")
        cls.model = os.path.join(cls._models.name, "model")
        r = subprocess.run([BIN, os.path.join(SOURCE_DIR, "recipes", "sft_warmup.lua"), "--out", cls.model, *WARMUP],
                           capture_output=True, text=True, timeout=240)
        if r.returncode != 0:
            raise AssertionError("sft_warmup failed (%d):\n%s\n%s" % (r.returncode, r.stdout, r.stderr))

    @classmethod
    def tearDownClass(cls):
        cls._models.cleanup()


class GrpoRecipe(TinyModel, RlhostTestCase):
    tmp_prefix = "rlhost-grpo-"

    def flags(self, *extra):
        m = self.model
        return ["--hf-checkpoint", m, "--prompt-data", m + "/data/train.jsonl",
                "--eval-prompt-data", "heldout", m + "/data/test.jsonl", "--eval-interval", "2",
                "--rollout-batch-size", "2", "--n-samples-per-prompt", "4", "--rollout-max-response-len", "12",
                "--dynamic-sampling-filter", "none", "--threads", "1", "--lr", "1e-3", "--no-progress", *extra]

    def recipe_copy(self):
        """recipes/ copied into the test's directory, with a reward that varies within groups."""
        shutil.copytree(os.path.join(SOURCE_DIR, "recipes"), self.dir + "/recipes")
        with open(self.dir + "/recipes/rewards/gsm8k_reward.lua", "w") as f:
            f.write("return { reward = function(s) return #s.response % 2 end }\n")
        return self.dir + "/recipes/grpo_gsm8k.lua"

    def run_recipe(self, *extra, recipe=RECIPE, timeout=180, host_args=("--no-control",)):
        r = subprocess.run([BIN, *host_args, recipe, *self.flags(*extra)], capture_output=True, text=True,
                           timeout=timeout, env=self.env, cwd=self.dir)
        if r.returncode != 0:
            self.fail("recipe exited %d\n%s\n%s" % (r.returncode, r.stdout, r.stderr[-6000:]))
        return r

    def start_recipe(self, *extra, recipe=RECIPE, host_args=("--no-control",)):
        log = open(os.path.join(self.dir, "recipe.log"), "w")
        self.addCleanup(log.close)
        p = subprocess.Popen([BIN, *host_args, recipe, *self.flags(*extra)], stdout=log, stderr=subprocess.STDOUT,
                             env=self.env, cwd=self.dir)
        self.procs.append(p)
        return p

    def log_text(self):
        with open(os.path.join(self.dir, "recipe.log")) as f:
            return f.read()

    def stop_with(self, p, sig, code, *logged):
        """Sends `sig`, waits for exit status `code` and the `logged` lines."""
        p.send_signal(sig)
        p.wait(timeout=120)
        text = self.log_text()
        self.assertEqual(p.returncode, code, text)
        for line in logged:
            self.assertIn(line, text)

    def assert_checkpoint_holds_every_step(self, d):
        with open(d + "/ckpt/latest_checkpointed_iteration.txt") as f:
            it = int(f.read())
        steps = [m["rollout/step"] for m in self.metrics(d + "/m/metrics.jsonl") if "rollout/step" in m]
        self.assertEqual(it, len(steps), "the checkpoint holds every finished step")

    def metrics(self, path):
        return read_jsonl(path)

    def dump_prompts(self, path):
        return lua_json(self, self.write("dump_prompts.lua", DUMP_PROMPTS), path)

    def test_run_then_resume(self):
        d = self.dir
        r = self.run_recipe("--num-rollout", "2", "--save", d + "/ckpt", "--save-interval", "1",
                            "--save-debug-rollout-data", d + "/dump/rollout_{rollout_id}.pt",
                            "--metrics-dir", d + "/m", "--use-tensorboard", "--tensorboard-dir", d + "/tb")
        lines = r.stderr.strip().splitlines()
        self.assertIn("Args parsed: Namespace(", lines[0])   # slime's first line
        self.assertIn("GRPO on " + self.model, lines[1])
        for name in ("rollout_0.pt", "rollout_1.pt", "rollout_eval_0.pt", "rollout_eval_2.pt"):
            self.assertTrue(os.path.exists(d + "/dump/" + name), name)
        rows = self.metrics(d + "/m/metrics.jsonl")
        steps = [m["rollout/step"] for m in rows if "rollout/step" in m]
        self.assertEqual(steps, [0, 1])
        self.assertEqual([m["eval/step"] for m in rows if "eval/step" in m], [0, 2])
        step0 = next(m for m in rows if m.get("rollout/step") == 0)
        for key in ("rollout/raw_reward", "rollout/response_len/mean", "train/loss", "train/pg_loss", "train/grad_norm",
                    "perf/rollout_time", "perf/actor_train_time", "perf/update_weights_time", "perf/total_step_time",
                    "reload/rewards.gsm8k_reward/version"):
            self.assertIn(key, step0)
        self.assertIn("eval/heldout", rows[0])
        with open(d + "/ckpt/latest_checkpointed_iteration.txt") as f:
            self.assertEqual(f.read().strip(), "2")
        self.assertTrue(os.path.exists(d + "/ckpt/iter_0000002/model.safetensors"))
        self.assertIn("done:", r.stderr)
        self.assertIn("weight sync to 1 engine(s): memory", r.stderr)
        self.assertIn(d + "/m/metrics.jsonl", r.stderr)
        events = glob.glob(d + "/tb/events.out.tfevents.*")
        self.assertEqual(len(events), 1, events)
        if event_accumulator is not None:
            acc = event_accumulator.EventAccumulator(events[0], size_guidance={event_accumulator.SCALARS: 0})
            acc.Reload()
            self.assertEqual([e.step for e in acc.Scalars("rollout/raw_reward")], [0, 1])
            self.assertIn("eval/heldout", acc.Tags()["scalars"])

        # Resume: one more step, from the data position the checkpoint saved.
        r = self.run_recipe("--num-rollout", "3", "--load", d + "/ckpt", "--save", d + "/ckpt",
                            "--save-debug-rollout-data", d + "/dump/rollout_{rollout_id}.pt", "--metrics-dir", d + "/m2")
        self.assertIn("resumed from " + d + "/ckpt: trainer step 2, next rollout 2", r.stderr)
        self.assertEqual([m["rollout/step"] for m in self.metrics(d + "/m2/metrics.jsonl") if "rollout/step" in m], [2])
        with open(d + "/ckpt/latest_checkpointed_iteration.txt") as f:
            self.assertEqual(f.read().strip(), "3")

        # The same three steps without interruption draw the same prompts at step 2.
        r = self.run_recipe("--num-rollout", "3", "--save-debug-rollout-data", d + "/dump_a/rollout_{rollout_id}.pt")
        resumed = [s["prompt"] for s in self.dump_prompts(d + "/dump/rollout_2.pt")]
        straight = [s["prompt"] for s in self.dump_prompts(d + "/dump_a/rollout_2.pt")]
        self.assertEqual(resumed, straight)
        self.assertEqual(len(resumed), 8)

    def test_rollout_shuffle_orders_prompts_by_seed(self):
        # --rollout-shuffle (the default) orders --prompt-data as slime does each epoch:
        # random.Random(--rollout-seed + epoch).shuffle of the row indices; off, the file's order.
        import random
        d = self.dir
        with open(self.model + "/data/train.jsonl") as f:
            questions = [json.loads(line)["question"] for line in f if line.strip()]
        drawn = {}
        for name, extra in (("seed1", ["--rollout-seed", "1"]), ("seed2", ["--rollout-seed", "2"]),
                            ("off", ["--no-rollout-shuffle"])):
            self.run_recipe("--num-rollout", "1", "--save-debug-rollout-data",
                            d + "/" + name + "/rollout_{rollout_id}.pt", *extra)
            drawn[name] = [s["prompt"] for s in self.dump_prompts(d + "/" + name + "/rollout_0.pt")][::4]
            self.assertEqual(len(drawn[name]), 2, name)
        for seed in (1, 2):
            order = list(range(len(questions)))
            random.Random(seed).shuffle(order)
            for prompt, row in zip(drawn["seed%d" % seed], order):
                self.assertIn(questions[row], prompt, "seed %d draws row %d first" % (seed, row))
        self.assertNotEqual(drawn["seed1"], drawn["seed2"])
        for prompt, question in zip(drawn["off"], questions):
            self.assertIn(question, prompt)

    def test_process_engines_take_weights_through_shared_memory(self):
        d = self.dir
        r = self.run_recipe("--num-rollout", "2", "--engine-mode", "process", "--num-engines", "2",
                            "--metrics-dir", d + "/m")
        self.assertIn("weight sync to 2 engine(s): shm, shm", r.stderr)
        rows = [m for m in self.metrics(d + "/m/metrics.jsonl") if "rollout/step" in m]
        self.assertEqual([m["rollout/weight_version"] for m in rows], [1, 2])

    def test_lora_trains_the_adapter_the_engines_serve(self):
        # --lora-rank: the trainer trains an adapter over the frozen model; each sync hands
        # it to the engines (a process engine: its own shared-memory file, under "policy") and every rollout
        # request names it. The engine answers with the trainer's log-probs exactly
        # (--check-weight-update-equal), a process engine included, and proves it with the
        # digest of base + adapter, so the rollout's log-probs serve as the old ones
        # (--old-logprobs check also recomputes them and compares); a resume continues.
        d = self.dir
        r = self.run_recipe("--num-rollout", "2", "--lora-rank", "8", "--lora-alpha", "16", "--lr", "5e-3",
                            "--engine-mode", "process", "--check-weight-update-equal", "--use-kl-loss",
                            "--old-logprobs", "check", "--global-batch-size", "4",
                            "--save", d + "/ck", "--metrics-dir", d + "/m")
        text = r.stdout + r.stderr
        self.assertIn("trainer: LoRA rank 8", text)
        self.assertIn("weight sync to 1 engine(s): lora/shm", text)
        steps = [m for m in self.metrics(d + "/m/metrics.jsonl") if "rollout/step" in m]
        self.assertEqual(len(steps), 2)
        for m in steps:
            self.assertEqual(m["rollout/weight_sync_logprob_abs_diff"], 0.0)
            self.assertEqual(m["train/old_logprobs_from_rollout"], 1.0)
            self.assertEqual(m["train/train_rollout_logprob_abs_diff"], 0.0)
        ck = glob.glob(d + "/ck/iter_*/adapter_model.safetensors")
        self.assertTrue(ck, os.listdir(d + "/ck"))
        self.assertFalse(glob.glob(d + "/ck/iter_*/model.safetensors"), "a LoRA checkpoint holds no model weights")
        self.assertNotEqual(read_safetensors(ck[-1]), {}, "the adapter was written")
        r = self.run_recipe("--num-rollout", "3", "--lora-rank", "8", "--lora-alpha", "16", "--load", d + "/ck",
                            "--save", d + "/ck", "--check-weight-update-equal", "--metrics-dir", d + "/m2")
        self.assertIn("resumed from", r.stdout + r.stderr)
        rows = [m for m in self.metrics(d + "/m2/metrics.jsonl") if "rollout/step" in m]
        self.assertEqual([m["rollout/weight_sync_logprob_abs_diff"] for m in rows], [0.0])

    def test_lora_refused_where_it_cannot_go(self):
        # vLLM serves adapters up to rank 512 (its --max-lora-rank): a usage error before anything starts
        r = subprocess.run([BIN, "--no-control", RECIPE, *self.flags("--lora-rank", "1024", "--rollout-backend", "vllm")],
                           capture_output=True, text=True, timeout=60, env=self.env, cwd=self.dir)
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn("--lora-rank 1024 with --rollout-backend vllm: rank 1024 is above the largest vLLM serves (512)",
                      r.stderr)
        self.assertIn("hint: a smaller --lora-rank", r.stderr)
        self.assertNotIn("Launching vLLM server", r.stderr)

    def test_data_parallel_two_ranks(self):
        d = self.dir
        recipe = self.recipe_copy()
        # live: rank 0 runs the engine, router, rollout, eval and checkpoint; rank 1 trains
        r = self.run_recipe("--num-rollout", "2", "--save", d + "/live", "--metrics-dir", d + "/mlive",
                            "--save-debug-rollout-data", d + "/dump/rollout_{rollout_id}.pt", recipe=recipe,
                            host_args=("--nproc", "2"))
        self.assertIn("[rank 1]", r.stdout + r.stderr)
        self.assertIn("rank 1: done after trainer step 2", r.stdout + r.stderr)
        self.assertTrue(glob.glob(d + "/live/iter_*/model.safetensors"))
        # replay the same rollouts on 1 and on 2 ranks: the same training
        out = {}
        for n in (1, 2):
            self.run_recipe("--num-rollout", "2", "--lr", "1e-4", "--save", d + "/p%d" % n,
                            "--metrics-dir", d + "/m%d" % n,
                            "--load-debug-rollout-data", d + "/dump/rollout_{rollout_id}.pt", recipe=recipe,
                            host_args=("--nproc", str(n)))
            out[n] = (read_safetensors(glob.glob(d + "/p%d/iter_*/model.safetensors" % n)[0]),
                      [m["train/grad_norm"] for m in self.metrics(d + "/m%d/metrics.jsonl" % n) if "rollout/step" in m])
        self.assertLess(max_diff(out[1][0], out[2][0]), 1e-5)
        # A no-op update leaves the weights bit-identical (0); two AdamW steps at lr 1e-4 move
        # the largest weight by up to ~2e-4, but by how much depends on the sampled rollouts
        # (a repeat run once saw 7.4e-5), so "moved" is any change above float32 noise.
        self.assertGreater(max_diff(out[1][0], read_safetensors(self.model + "/model.safetensors")), 1e-6,
                           "the replayed steps moved the weights")
        self.assertEqual(len(out[1][1]), 2)
        for a, b in zip(out[1][1], out[2][1]):
            self.assertAlmostEqual(a, b, delta=1e-5 * max(1.0, a))

    def test_sharded_trainer_ranks(self):
        # --train-backend fsdp: both ranks hold half the trainer state and join rank 0's
        # syncs (shared memory to a process engine), weight checks and checkpoints; the
        # engine answers with the trainer's log-probs exactly, its rollout log-probs serve
        # as the old ones (--old-logprobs check), and a resume continues.
        d = self.dir
        r = self.run_recipe("--num-rollout", "2", "--train-backend", "fsdp", "--engine-mode", "process",
                            "--check-weight-update-equal", "--use-kl-loss", "--global-batch-size", "4",
                            "--old-logprobs", "check", "--save", d + "/ck",
                            "--metrics-dir", d + "/m", host_args=("--nproc", "2"))
        self.assertIn("weight sync to 1 engine(s): shm", r.stdout + r.stderr)
        self.assertIn("rank 1: done after trainer step 4", r.stdout + r.stderr)   # 2 optimiser steps a rollout
        steps = [m for m in self.metrics(d + "/m/metrics.jsonl") if "rollout/step" in m]
        self.assertEqual(len(steps), 2)
        for m in steps:
            self.assertEqual(m["train/train_rollout_logprob_abs_diff"], 0.0)
            self.assertEqual(m["rollout/weight_sync_logprob_abs_diff"], 0.0)
            self.assertGreater(m["perf/fsdp_gathers"], 0)
            # two optimiser steps per rollout: the behaviour log-probs are the engine's, proved
            # by the weights digest the sharded trainer adds up unit by unit (and checked equal)
            self.assertEqual(m["train/old_logprobs_from_rollout"], 1.0)
        for rank in range(2):
            self.assertTrue(os.path.exists(d + "/ck/iter_0000004/optimizer.shard_%d_of_2.pt" % rank))
        # the same checkpoint resumed sharded (thread engine: the weights in memory)
        r = self.run_recipe("--num-rollout", "3", "--train-backend", "fsdp", "--use-kl-loss", "--load", d + "/ck",
                            "--save", d + "/ck", "--metrics-dir", d + "/m2", host_args=("--nproc", "2"))
        self.assertIn("rank 1: done after trainer step 6", r.stdout + r.stderr)
        self.assertTrue(os.path.exists(d + "/ck/iter_0000006/optimizer.shard_1_of_2.pt"))

    def test_lora_over_sharded_trainer_ranks(self):
        # --lora-rank with --train-backend fsdp: the frozen base sharded over both ranks,
        # the adapter replicated (its replicas compared after every step) and synced alone;
        # the engine's log-probs under it are the trainer's exactly and serve as the old ones.
        d = self.dir
        r = self.run_recipe("--num-rollout", "2", "--train-backend", "fsdp", "--lora-rank", "8", "--lr", "5e-3",
                            "--engine-mode", "process", "--check-weight-update-equal", "--use-kl-loss",
                            "--global-batch-size", "4", "--old-logprobs", "check", "--save", d + "/ck",
                            "--metrics-dir", d + "/m", host_args=("--nproc", "2"))
        text = r.stdout + r.stderr
        self.assertIn("weight sync to 1 engine(s): lora/shm", text)
        self.assertIn("rank 1: done after trainer step 4", text)
        steps = [m for m in self.metrics(d + "/m/metrics.jsonl") if "rollout/step" in m]
        self.assertEqual(len(steps), 2)
        for m in steps:
            self.assertEqual(m["train/train_rollout_logprob_abs_diff"], 0.0)
            self.assertEqual(m["rollout/weight_sync_logprob_abs_diff"], 0.0)
            self.assertEqual(m["train/old_logprobs_from_rollout"], 1.0)
            self.assertEqual(m["train/replica_weights_equal"], 1)
            self.assertGreater(m["perf/fsdp_gathers"], 0)
        self.assertTrue(glob.glob(d + "/ck/iter_0000004/adapter_model.safetensors"))

    def test_ctrl_c_saves_and_exits_130(self):
        d = self.dir
        p = self.start_recipe("--num-rollout", "100000", "--save", d + "/ckpt", "--metrics-dir", d + "/m",
                              "--metrics-port", "0")
        wait_for(lambda: p.poll() is not None or "rollout 1 |" in self.log_text(), timeout=120, what="two steps")
        self.assertIsNone(p.poll(), self.log_text())
        # the trainer's live /metrics, as Prometheus scrapes it
        import re
        import urllib.request
        url = re.search(r"trainer metrics for Prometheus: (\S+)", self.log_text()).group(1)
        with urllib.request.urlopen(url, timeout=10) as r:
            text = r.read().decode()
        self.assertIn("rlhost_train_loss ", text)
        self.assertIn("rlhost_rollout_raw_reward ", text)
        self.stop_with(p, signal.SIGINT, 130, "stopping after this step", "stopped by Ctrl-C")
        self.assert_checkpoint_holds_every_step(d)

    def test_sigterm_saves_and_exits_143_leaving_no_engine(self):
        # What timeout, systemd and Kubernetes send: like Ctrl-C (finish the step,
        # checkpoint), exit 143, and the process-mode engines and router go too.
        # SIGTERM lands right after step 0's line, i.e. while step 1 runs. The
        # time from the signal to the exit is printed (issue 21 asks for < 10 s);
        # only a generous bound is asserted.
        d = self.dir
        p = self.start_recipe("--num-rollout", "100000", "--save", d + "/ckpt", "--metrics-dir", d + "/m",
                              "--engine-mode", "process", "--num-engines", "2")
        wait_for(lambda: p.poll() is not None or "rollout 0 |" in self.log_text(), timeout=120, what="one step")
        self.assertIsNone(p.poll(), self.log_text())
        children = descendants(p.pid)
        self.assertGreaterEqual(len(children), 2, "the two engine processes")
        groups = {os.getpgid(c) for c in children}
        self.assertNotIn(os.getpgid(p.pid), groups, "engines run in their own process groups")
        t0 = time.monotonic()
        p.send_signal(signal.SIGTERM)
        p.wait(timeout=120)
        took = time.monotonic() - t0
        sys.stderr.write("\nSIGTERM to exit: %.2f s (%d child processes in %d groups)\n" % (took, len(children), len(groups)))
        text = self.log_text()
        self.assertEqual(p.returncode, 143, text)
        for line in ("SIGTERM: stopping after this step", "stopped by SIGTERM"):
            self.assertIn(line, text)
        # A guard, not a speed check: the drain is bounded (engines get stop_within(20));
        # a missed bound waits for the step to end on its own. Measured: ~1.5 s.
        self.assertLess(took, 60, "SIGTERM took %.1f s to end the run" % took)
        self.assert_checkpoint_holds_every_step(d)
        self.assertGreaterEqual(len(glob.glob(d + "/ckpt/iter_*")), 1, "a checkpoint was written")
        # Nothing left running: not the children, nor anything in their process groups.
        wait_for(lambda: not live_in_groups(groups) and not any(running(c) for c in children), timeout=20,
                 what="no process left in the engines' groups (%s)" % sorted(groups))

    def test_reward_hot_reload(self):
        d = self.dir
        shutil.copytree(os.path.join(SOURCE_DIR, "recipes"), d + "/recipes")
        reward = d + "/recipes/rewards/gsm8k_reward.lua"
        # (also runs the trainer's flags that change the loss and precision: per-token loss, bf16)
        p = self.start_recipe("--num-rollout", "100000", "--metrics-dir", d + "/m", "--calculate-per-token-loss",
                              "--bf16", "--save-debug-rollout-data", d + "/dump/rollout_{rollout_id}.pt",
                              recipe=d + "/recipes/grpo_gsm8k.lua")
        wait_for(lambda: p.poll() is not None or "rollout 0 |" in self.log_text(), timeout=120, what="a step")
        with open(reward, "a") as f:
            f.write("\nthis is not lua\n")
        wait_for(lambda: p.poll() is not None or "failed to load" in self.log_text(), timeout=60, what="the error")
        self.assertIsNone(p.poll(), self.log_text())
        self.assertIn("gsm8k_reward.lua:", self.log_text().split("failed to load", 1)[1])
        with open(reward, "w") as f:
            f.write("return { reward = function(s) return #s.response % 2 end }\n")

        def reloaded():
            rows = self.metrics(d + "/m/metrics.jsonl")
            return [m for m in rows if m.get("reload/rewards.gsm8k_reward/version") == 2]
        new = wait_for(reloaded, timeout=120, what="a step with the new reward")[0]
        p.send_signal(signal.SIGINT)
        p.wait(timeout=120)
        self.assertEqual(p.returncode, 130, self.log_text())
        rows = self.metrics(d + "/m/metrics.jsonl")
        old = next(m for m in rows if "rollout/step" in m)
        self.assertEqual(old["reload/rewards.gsm8k_reward/version"], 1)
        self.assertNotEqual(old["reload/rewards.gsm8k_reward/hash"], new["reload/rewards.gsm8k_reward/hash"])
        # each sample's trace names the reward version that scored it
        first = self.dump_prompts(d + "/dump/rollout_0.pt")
        later = self.dump_prompts(d + "/dump/rollout_%d.pt" % new["rollout/step"])
        self.assertEqual(len({s["module"] for s in first}), 1)
        self.assertEqual(len({s["module"] for s in later}), 1)
        self.assertNotEqual(first[0]["module"], later[0]["module"])
        self.assertEqual(int(later[0]["module"][:12], 16), new["reload/rewards.gsm8k_reward/hash"])

    def test_recipe_functions_reload(self):
        # The recipe's own filter and normalisation (above rl.reload.inline) reload like the reward.
        d = self.dir
        recipe = self.recipe_copy()
        sock = d + "/recipe.sock"
        p = self.start_recipe("--num-rollout", "100000", "--metrics-dir", d + "/m", "--dynamic-sampling-filter",
                              "nonzero_std", "--save-debug-rollout-data", d + "/dump/rollout_{rollout_id}.pt",
                              recipe=recipe, host_args=("--control", sock))
        wait_for(lambda: p.poll() is not None or "rollout 0 |" in self.log_text(), timeout=120, what="a step")
        with open(recipe) as f:
            text = f.read()
        head = "function edit.normalize(rewards, estimator)\n"
        self.assertIn(head, text)
        with open(recipe, "w") as f:   # every advantage 7: visible in the trained batch
            f.write(text.replace(head, head + "  do local o = {} for i = 1, #rewards do o[i] = 7 end return o end\n"))

        def reloaded():
            rows = self.metrics(d + "/m/metrics.jsonl")
            return [m for m in rows if m.get("reload/grpo_gsm8k/version") == 2]
        new = wait_for(reloaded, timeout=120, what="a step with the edited recipe")[0]
        sevens = ("local n, b = 0, rl.recipe.current.last_batch; "
                  "for _, v in ipairs(b.rewards) do if v == 7 then n = n + 1 end end; return n + 1000 * b.size")
        r = subprocess.run([BIN, "attach", sock, "-e", sevens], capture_output=True, text=True, timeout=60, env=self.env)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout.strip(), "8008", "all 8 rewards of the last batch are the edited function's 7")
        p.send_signal(signal.SIGINT)
        p.wait(timeout=120)
        self.assertEqual(p.returncode, 130, self.log_text())
        self.assertIn("rl.reload: grpo_gsm8k reloaded: version 2", self.log_text())
        first = next(m for m in self.metrics(d + "/m/metrics.jsonl") if "rollout/step" in m)
        self.assertEqual(first["reload/grpo_gsm8k/version"], 1)
        # each kept sample's trace: the filter's span (the recipe's custom span) and the recipe's version
        script = self.write("filter_spans.lua", FILTER_SPANS)
        for step, version in ((0, first), (new["rollout/step"], new)):
            r = subprocess.run([BIN, "--no-control", script, d + "/dump/rollout_%d.pt" % step], capture_output=True,
                               text=True, timeout=60)
            self.assertEqual(r.returncode, 0, r.stderr)
            rows = json.loads(r.stdout)
            self.assertEqual(len(rows), 8)
            for row in rows:
                self.assertEqual(row["keep"], True)
                self.assertEqual(int(row["module"][:12], 16), version["reload/grpo_gsm8k/hash"])

    def test_attach_inspect_pause_change_resume(self):
        d = self.dir
        sock = d + "/recipe.sock"
        p = self.start_recipe("--num-rollout", "100000", "--metrics-dir", d + "/m", host_args=("--control", sock))
        wait_for(lambda: p.poll() is not None or "rollout 0 |" in self.log_text(), timeout=120, what="a step")

        def attach(code):
            r = subprocess.run([BIN, "attach", sock, "-e", code], capture_output=True, text=True, timeout=60,
                               env=self.env)
            self.assertEqual(r.returncode, 0, r.stderr)
            return r.stdout.strip()
        job = "rl.recipe.current"
        self.assertEqual(attach("return %s.last_batch.size" % job), "8")
        self.assertEqual(attach("return #%s.last_samples[1].response > 0" % job), "true")
        attach(job + ":pause()")
        wait_for(lambda: "paused between steps" in self.log_text(), timeout=60, what="the pause")
        steps = self.log_text().count("] rollout ")
        time.sleep(1.5)
        self.assertEqual(self.log_text().count("] rollout "), steps, "no step while paused")
        attach(job + ".rollout.rollout_temperature = 0.5; " + job + ".rollout.reward = function(s) return 1 end")
        attach(job + ":resume()")

        def changed():
            rows = [m for m in self.metrics(d + "/m/metrics.jsonl") if "rollout/step" in m]
            return [m for m in rows if m["rollout/step"] >= steps and m["rollout/raw_reward"] == 1]
        wait_for(changed, timeout=120, what="a step with the new reward")
        p.send_signal(signal.SIGINT)
        p.wait(timeout=120)
        self.assertEqual(p.returncode, 130, self.log_text())

    def test_sleep_rollout_serves_until_ctrl_c(self):
        import re
        import urllib.request
        p = self.start_recipe("--rollout-function", "sleep")
        m = wait_for(lambda: p.poll() is not None or re.search(r"\(router (http://127.0.0.1:\d+)\)", self.log_text()),
                     timeout=120, what="the sleep rollout")
        self.assertIsNone(p.poll(), self.log_text())
        with urllib.request.urlopen(m.group(1) + "/workers", timeout=10) as r:
            self.assertEqual(len(json.loads(r.read())["workers"]), 1)
        p.send_signal(signal.SIGINT)
        p.wait(timeout=60)
        self.assertEqual(p.returncode, 0, self.log_text())
        self.assertIn("rollout sleep: stopped", self.log_text())

    def test_bad_flags(self):
        r = subprocess.run([BIN, "--no-control", RECIPE, "--hf-checkpoint", self.dir + "/nope"], capture_output=True,
                           text=True, timeout=60, env=self.env)
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn("--hf-checkpoint", r.stderr)
        r = subprocess.run([BIN, "--no-control", RECIPE, "--hf-checkpoint", self.model, "--rollout-batch-size", "0"],
                           capture_output=True, text=True, timeout=60, env=self.env)
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn("--rollout-batch-size must be >= 1", r.stderr)
        r = subprocess.run([BIN, "--no-control", RECIPE, "--hf-checkpoint", self.model], capture_output=True,
                           text=True, timeout=60, env=self.env)
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn("--prompt-data is required", r.stderr)

    def test_placement_flags(self):
        # A GPU this build or machine lacks is a usage error naming the flag, with a hint.
        base = [BIN, "--no-control", RECIPE, "--hf-checkpoint", self.model, "--prompt-data", self.model + "/data/train.jsonl"]
        cuda = subprocess.run([BIN, "-e", "print(rl.torch.info().cuda_available)"], capture_output=True, text=True,
                              timeout=60, env=self.env).stdout.strip() == "true"
        if not cuda:
            r = subprocess.run(base + ["--device", "cuda"], capture_output=True, text=True, timeout=60, env=self.env)
            self.assertEqual(r.returncode, 2, r.stderr)
            self.assertIn("--device: cuda asked for", r.stderr)
            self.assertIn("hint:", r.stderr)
        r = subprocess.run(base + ["--device", "tpu"], capture_output=True, text=True, timeout=60, env=self.env)
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn("--device: 'tpu' is not a device (use cpu, cuda, cuda:N or auto)", r.stderr)
        r = subprocess.run(base + ["--device", "cpu", "--rollout-device", "auto", "--colocate", "--rollout-device", "cuda:7"],
                           capture_output=True, text=True, timeout=60, env=self.env)
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn("--rollout-device", r.stderr)


if __name__ == "__main__":
    support.main()
