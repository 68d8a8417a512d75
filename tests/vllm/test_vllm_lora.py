#!/usr/bin/env python3
"""`rlhost recipes/grpo_gsm8k.lua --rollout-backend vllm --lora-rank 8`: GRPO training a LoRA
adapter while a real vLLM server (CPU) serves it.

rlhost starts the server with LoRA enabled (--enable-lora, --max-lora-rank 8, run-time
loading); every sync writes the adapter as PEFT files on tmpfs and loads it into vLLM under
the trainer's name ("policy": unload + load, a fresh adapter id, from a new path), and every
rollout request names it (vLLM's model = the adapter's name). Checked, three steps on the
default model with every projection and the unembedding adapted: each sync took the "lora"
path and vLLM loaded a new adapter from a new path each time; after each sync the engine's
log-probs under the adapter match the trainer's (--check-weight-update-equal) and so do the
rollout's (train_rollout_logprob_abs_diff), while the last rollout's log-probs differ from the
base model's (training moved the adapter away from B = 0, and vLLM served it). And the fully
asynchronous recipe, whose syncs land while vLLM generates, runs through.

    RLHOST_BIN=build/rlhost python3 tests/vllm/test_vllm_lora.py
"""
import json
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import vllm_support as vs  # noqa: E402
import support  # noqa: E402
from support import read_jsonl  # noqa: E402

RECIPE = os.path.join(vs.SOURCE_DIR, "recipes", "grpo_gsm8k.lua")
BASE_LOGPROBS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "base_logprobs.lua")
TARGETS = "q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj,lm_head"

DUMP = r"""
local d = assert(rl.dump.load(arg[1]))
local out = {}
for i, s in ipairs(d.samples) do
  out[i] = { response_length = s.response_length, log_probs = #s.rollout_log_probs, versions = s.weight_versions }
end
print(rl.json.encode(out))
"""


class VllmLoraTest(vs.RlhostTestCase):
    def setUp(self):
        vs.require_vllm()
        super().setUp()

    def lua(self, script, *args):
        r = subprocess.run([vs.BIN, "--no-control", script, *args], capture_output=True, text=True,
                           env=self.env, timeout=300)
        self.assertEqual(r.returncode, 0, r.stderr[-4000:])
        return json.loads(r.stdout.strip().splitlines()[-1])

    def test_grpo_lora_on_vllm(self):
        d = self.dir
        args = [vs.BIN, "--no-control", RECIPE, "--rollout-backend", "vllm", "--num-engines", "1",
                "--lora-rank", "8", "--lora-alpha", "16", "--target-modules", TARGETS, "--lr", "5e-3",
                "--num-rollout", "3", "--rollout-batch-size", "4", "--n-samples-per-prompt", "4",
                "--over-sampling-batch-size", "4", "--dynamic-sampling-filter", "none",
                "--rollout-max-response-len", "32", "--eval-max-prompts", "4", "--check-weight-update-equal",
                "--save-debug-rollout-data", d + "/dump/rollout_{rollout_id}.pt", "--metrics-dir", d + "/m",
                "--no-progress"]
        p = subprocess.run(args, capture_output=True, text=True, env=self.env, cwd=d, timeout=1500)
        log = p.stderr + p.stdout
        self.assertEqual(p.returncode, 0, log[-8000:])
        self.assertIn("trainer: LoRA rank 8", log)

        # the server was started to take adapters at run time, up to the trainer's rank
        launch = re.search(r"Launching vLLM server: .* \(log: (\S+)\)", log)
        self.assertIsNotNone(launch, log[-4000:])
        for flag in ("--enable-lora", "--max-lora-rank 8", "--max-loras 1"):
            self.assertIn(flag, launch.group(0))
        # every sync took the adapter's path (the line is said again when the method changes)
        self.assertEqual(re.findall(r"weight sync to \d+ engine\(s\): (.*) \(", log), ["lora/disk"], log[-4000:])
        with open(launch.group(1), errors="replace") as f:
            vlog = f.read()
        loads = re.findall(r"Loaded new LoRA adapter: name 'policy', path '(\S+)'", vlog)
        # the first sync (before the first rollout) and one per step, each from its own files
        self.assertEqual(len(loads), 4, vlog[-4000:])
        self.assertEqual(len(set(loads)), 4, loads)
        self.assertTrue(all("rlhost-lora-" in x for x in loads), loads)
        self.assertEqual(vlog.count("Removed LoRA adapter: name 'policy'"), 3)

        steps = [m for m in read_jsonl(d + "/m/metrics.jsonl") if "rollout/step" in m]
        self.assertEqual([m["rollout/step"] for m in steps], [0, 1, 2])
        for m in steps:
            print("step %d: reward %.3f, grad norm %.3g, |vLLM - trainer| log-prob: after sync %.3g, rollout %.3g"
                  % (m["rollout/step"], m["rollout/raw_reward"], m["train/grad_norm"],
                     m["rollout/weight_sync_logprob_abs_diff"], m["train/train_rollout_logprob_abs_diff"]),
                  flush=True)
            # right after each sync vLLM answers with the trainer's new adapter (not bitwise: vLLM's kernels)
            self.assertLess(m["rollout/weight_sync_logprob_abs_diff"], 1e-3, m)
            self.assertLess(m["train/train_rollout_logprob_abs_diff"], 1e-3, m)
        self.assertGreater(max(m["train/grad_norm"] for m in steps), 0)

        for step in range(3):   # each rollout ran under the adapter of the last sync
            samples = self.lua(self.write("dump.lua", DUMP), d + "/dump/rollout_%d.pt" % step)
            self.assertEqual(len(samples), 16)
            for s in samples:
                self.assertEqual(s["log_probs"], s["response_length"], s)
                if step > 0:
                    self.assertEqual(s["versions"], [str(steps[step - 1]["rollout/weight_version"])], s)

        # the base model scores the last rollout differently: the served adapter is not B = 0
        base = self.lua(BASE_LOGPROBS, vs.default_model(self.env), d + "/dump/rollout_2.pt")
        print("last rollout: mean |vLLM under the adapter - base model| log-prob %.3g over %d tokens (max %.3g)"
              % (base["mean_abs_diff"], base["tokens"], base["max_abs_diff"]), flush=True)
        self.assertGreater(base["tokens"], 0)
        self.assertGreater(base["mean_abs_diff"], 10 * steps[2]["train/train_rollout_logprob_abs_diff"], base)
        self.assertGreater(base["max_abs_diff"], 1e-2, base)

        pid = re.search(r"Starting vLLM server on \S+ \(pid (\d+)\)", log)
        self.assertTrue(vs.wait_group_gone(int(pid.group(1)), 30), "vLLM processes left after the run")
        # the engine's copies of the adapter's files are gone with it
        self.assertEqual([x for x in loads if os.path.exists(x)], [])

    def test_engine_load_lora(self):
        """rl.engine's vLLM engine with max_lora_rank: its flags, load_lora and replacing under one
        name (own copies, gone at stop), the weight version, a request naming an adapter not loaded
        yet retried by the rollout until it is, a rank above the server's refused."""
        d = self.dir
        r = subprocess.run([vs.BIN, "--no-control", os.path.join(os.path.dirname(os.path.abspath(__file__)),
                            "lora_scenario.lua"), vs.default_model(self.env), d],
                           capture_output=True, text=True, env=self.env, cwd=d, timeout=1500)
        self.assertEqual(r.returncode, 0, r.stderr[-6000:])
        out = json.loads(r.stdout.strip().splitlines()[-1])
        log = r.stderr + r.stdout
        # rank 4 asked: vLLM's smallest --max-lora-rank at or above it
        self.assertIn("--enable-lora", log)
        self.assertIn("--max-lora-rank 8 --max-loras 1", log)
        ro = out["rollout"]
        self.assertTrue(ro["ok"], ro)
        self.assertTrue(ro["after_load"], ro)
        self.assertEqual(ro["response_length"], 4, ro)
        self.assertGreater(ro["waited"], 1.5, ro)   # it waited for the adapter (404, retried)
        self.assertEqual((out["first_load"]["weight_version"], out["second_load"]["weight_version"]), ("7", "8"))
        self.assertEqual(out["version"], "8")
        # a fresh adapter (B = 0) answers as the base model does
        self.assertEqual(out["adapter_ids"], out["base_ids"])
        self.assertEqual(len(set(out["copies"])), 2, out["copies"])
        self.assertEqual([c for c in out["copies"] if os.path.exists(c)], [])
        self.assertIn("LoRA rank 16 is greater than max_lora_rank 8", out["big_err"])
        self.assertTrue(out["serving_after"])

    def test_fully_async_swaps_the_adapter_under_running_requests(self):
        """recipes/grpo_gsm8k_async.lua --async-mode fully-async: the syncs land while vLLM
        generates, so requests still run under the adapter a sync replaced. vLLM reads an
        evicted adapter's files again for them: the engine's own copies of the files keep that
        working (the sync removes its directory), and no sample fails."""
        d = self.dir
        args = [vs.BIN, "--no-control", os.path.join(vs.SOURCE_DIR, "recipes", "grpo_gsm8k_async.lua"),
                "--async-mode", "fully-async", "--max-staleness", "2", "--rollout-backend", "vllm",
                "--num-engines", "1", "--lora-rank", "8", "--lr", "5e-3", "--num-rollout", "4",
                "--rollout-batch-size", "4", "--n-samples-per-prompt", "4", "--rollout-max-response-len", "32",
                "--eval-max-prompts", "4", "--metrics-dir", d + "/m", "--no-progress"]
        p = subprocess.run(args, capture_output=True, text=True, env=self.env, cwd=d, timeout=1500)
        log = p.stderr + p.stdout
        self.assertEqual(p.returncode, 0, log[-8000:])
        self.assertEqual(re.findall(r"weight sync to \d+ engine\(s\): (.*) \(", log), ["lora/disk"], log[-4000:])
        steps = [m for m in read_jsonl(d + "/m/metrics.jsonl") if "rollout/step" in m]
        self.assertEqual([m["rollout/step"] for m in steps], [0, 1, 2, 3])
        for m in steps:
            print("step %d: staleness max %s, failed samples %s" % (m["rollout/step"], m["async/staleness_max"],
                                                                   m["rollout/failed_samples"]), flush=True)
            self.assertEqual(m["rollout/failed_samples"], 0, m)
        # generation ran across syncs: some step trained on samples of an older adapter
        self.assertGreaterEqual(max(m["async/staleness_max"] for m in steps), 1)
        launch = re.search(r"Launching vLLM server: .* \(log: (\S+)\)", log)
        with open(launch.group(1), errors="replace") as f:
            loads = re.findall(r"Loaded new LoRA adapter: name 'policy', path '(\S+)'", f.read())
        self.assertEqual(len(loads), 5, loads)   # the first sync and one per step
        self.assertEqual([x for x in loads if os.path.exists(x)], [])


if __name__ == "__main__":
    support.main()
