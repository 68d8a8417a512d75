#!/usr/bin/env python3
"""`rlhost recipes/grpo_gsm8k.lua --rollout-backend vllm` with 2 real vLLM engines.

Three GRPO steps on the default model, with no vLLM flag about its context (rlhost
derives max_model_len from the model): the engines are vLLM servers behind rlhost's
router (/v1/completions, token ids in and out, per-token log-probs), the trainer
syncs its weights to them each step (safetensors on tmpfs, reload_weights in place)
and --check-weight-update-equal has every engine's log-probs of a sampled response
match the trainer's after every sync. The policy's vLLM group runs next to a frozen
native group (--sglang-config: `ref`, stories260K, backend native) that the reward asks
(recipes/rewards/frozen_judge.lua): every sample carries its answer at the frozen
group's own weight version. Checked: rewards and log-prob metrics per step
(engine and trainer agree: train_rollout_logprob_abs_diff), the sync check's metric,
the debug dumps (tokens, rollout log-probs, finish reasons, the synced weight
version), the router's launch line and /workers naming the vLLM servers (what
tools/profile_rollout.lua reads), and no vLLM process left when the run ends.

    RLHOST_BIN=build/rlhost python3 tests/vllm/test_vllm_recipe.py
"""
import json
import os
import re
import subprocess
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import vllm_support as vs  # noqa: E402
import support  # noqa: E402
from support import frozen_group_config, read_jsonl  # noqa: E402

RECIPE = os.path.join(vs.SOURCE_DIR, "recipes", "grpo_gsm8k.lua")
JUDGE = os.path.join(vs.SOURCE_DIR, "recipes", "rewards", "frozen_judge.lua")
STORIES = os.path.join(vs.TEST_DATA, "models", "stories260K")

DUMP = r"""
local d = assert(rl.dump.load(arg[1]))
local out = {}
for i, s in ipairs(d.samples) do
  local lps = s.rollout_log_probs
  out[i] = { tokens = #s.tokens, response_length = s.response_length, log_probs = type(lps) == "table" and #lps or -1,
             max_lp = type(lps) == "table" and math.max(unpack(lps)) or 0,
             status = s.status, versions = s.weight_versions, reward = s.reward, judge = s.metadata.judge }
end
print(rl.json.encode(out))
"""


class VllmRecipeTest(vs.RlhostTestCase):
    def setUp(self):
        vs.require_vllm()
        super().setUp()

    def test_grpo_with_two_vllm_engines(self):
        d = self.dir
        # the policy's group takes the flags' backend (vllm); the frozen one says native
        cfg = self.write("groups.yaml", frozen_group_config(STORIES, ref_backend="native"))
        args = [vs.BIN, "--no-control", RECIPE, "--rollout-backend", "vllm", "--sglang-config", cfg,
                "--custom-rm-path", JUDGE + ":reward",
                "--num-rollout", "3", "--rollout-batch-size", "4", "--n-samples-per-prompt", "4",
                "--over-sampling-batch-size", "4", "--dynamic-sampling-filter", "none",
                "--rollout-max-response-len", "48", "--eval-max-prompts", "4", "--eval-interval", "3",
                "--check-weight-update-equal", "--vllm-max-num-seqs", "32",
                "--save-debug-rollout-data", d + "/dump/rollout_{rollout_id}.pt", "--metrics-dir", d + "/m",
                "--no-progress"]
        p = subprocess.run(args, capture_output=True, text=True, env=self.env, cwd=d, timeout=3000)
        log = p.stderr + p.stdout
        self.assertEqual(p.returncode, 0, log[-8000:])

        # the launch lines: vime's "Launching vLLM server", the router's line the seed greps
        launches = re.findall(r"Launching vLLM server: (\S+) -m vllm.entrypoints.openai.api_server .*", log)
        self.assertEqual(len(launches), 2, log[-4000:])
        # no --vllm-max-model-len: rlhost derives it from the default model (its max_position_embeddings,
        # 384); the old fixed 2048 made vLLM refuse to start on the default model
        self.assertIn("--max-model-len 384", log)
        self.assertIn("--max-num-seqs 32", log)
        servers = re.findall(r"Starting vLLM server on (http://\S+) \(pid (\d+)\)", log)
        self.assertEqual(len(servers), 2, log[-4000:])
        self.assertNotEqual(servers[0][0], servers[1][0])
        self.assertRegex(log, r"Router launched at 127\.0\.0\.1:\d+")
        self.assertIn("weight sync to 2 engine(s): disk, disk", log)
        self.assertRegex(log, r"engine group 'actor': 2 vllm engine\(s\) of .* \(takes weight updates\)")
        self.assertRegex(log, r"engine group 'ref': 1 native engine\(s\) of .*stories260K behind \S+ \(frozen\)")

        rows = read_jsonl(d + "/m/metrics.jsonl")
        steps = [m for m in rows if "rollout/step" in m]
        self.assertEqual([m["rollout/step"] for m in steps], [0, 1, 2])
        for m in steps:
            print("step %d: reward %.3f, engine-trainer log-prob |diff|: rollout %.3g, after sync %.3g, sync %.2f s"
                  % (m["rollout/step"], m["rollout/raw_reward"],
                     next(v for k, v in m.items() if k.endswith("train_rollout_logprob_abs_diff")),
                     m["rollout/weight_sync_logprob_abs_diff"], m["perf/update_weights_time"]), flush=True)
            for key in ("rollout/raw_reward", "rollout/response_len/mean", "train/loss", "train/grad_norm",
                        "perf/rollout_time", "perf/update_weights_time"):
                self.assertIn(key, m)
            # every engine answered with the trainer's new weights after each sync
            self.assertLess(m["rollout/weight_sync_logprob_abs_diff"], 1e-3, m)
            diff = [v for k, v in m.items() if k.endswith("train_rollout_logprob_abs_diff")]
            self.assertEqual(len(diff), 1, sorted(m))
            self.assertLess(diff[0], 1e-3, m)
        self.assertTrue(any("eval/heldout" in m for m in rows))

        for step in range(3):
            path = d + "/dump/rollout_%d.pt" % step
            self.assertTrue(os.path.exists(path), path)
            script = os.path.join(d, "dump.lua")
            with open(script, "w") as f:
                f.write(DUMP)
            r = subprocess.run([vs.BIN, "--no-control", script, path], capture_output=True, text=True,
                               env=self.env, timeout=120)
            self.assertEqual(r.returncode, 0, r.stderr)
            samples = json.loads(r.stdout)
            self.assertEqual(len(samples), 16)
            for s in samples:
                self.assertGreater(s["response_length"], 0)
                self.assertEqual(s["log_probs"], s["response_length"], s)
                self.assertLessEqual(s["max_lp"], 0)
                self.assertIn(s["status"], ("completed", "truncated"))
                # the weights the samples were generated with: the initial ones, then each sync's
                want = "default" if step == 0 else str(steps[step - 1]["rollout/weight_version"])
                self.assertEqual(s["versions"], [want], s)
                self.assertIsNotNone(s["reward"])
                # the frozen native group answered the reward, with its own weights all run long
                self.assertEqual((s["judge"]["group"], s["judge"]["backend"]), ("ref", "native"), s)
                self.assertEqual(s["judge"]["weight_version"], "default", s)
                self.assertIsInstance(s["judge"]["text"], str)

        for url, pid in servers:   # each server's process group (API server, EngineCore, worker) is gone
            self.assertTrue(vs.wait_group_gone(int(pid), 30), "vLLM processes of %s left after the run" % url)


    def test_vime_launch_script(self):
        """The seed's vime script (003: train.py with vLLM engines), flag for flag on this machine's paths,
        the sleep rollout swapped for vime's default so that it runs 2 steps: no unknown option; the
        Megatron/Ray flags each get their one not-applicable line; --vllm-<flag> reach vLLM's argv;
        the requests' perf/request/* keys are recorded (vLLM's completions carry no timings)."""
        d = self.dir
        model = vs.default_model(self.env)
        profile = json.dumps({"profiler": "torch", "torch_profiler_dir": d + "/vllm_profile", "max_iterations": 3,
                              "ignore_frontend": True})
        args = [vs.BIN, "--no-control", RECIPE, "--rollout-backend", "vllm",
                "--train-backend", "megatron", "--colocate", "--actor-num-nodes", "1", "--actor-num-gpus-per-node", "1",
                "--rollout-num-gpus", "1", "--rollout-num-gpus-per-engine", "1",
                "--rollout-function-path", "vime.rollout.vllm_rollout.generate_rollout",
                "--hf-checkpoint", model, "--ref-load", model, "--prompt-data", model + "/data/train.jsonl",
                "--input-key", "question", "--label-key", "answer", "--apply-chat-template", "--rm-type", "deepscaler",
                "--num-rollout", "2", "--rollout-batch-size", "4", "--n-samples-per-prompt", "1",
                "--rollout-max-response-len", "32", "--global-batch-size", "4",
                "--vllm-gpu-memory-utilization", "0.7", "--vllm-profiler-config", profile,
                "--metrics-dir", d + "/m", "--no-progress"]
        p = subprocess.run(args, capture_output=True, text=True, env=self.env, cwd=d, timeout=1800)
        log = p.stderr + p.stdout
        self.assertEqual(p.returncode, 0, log[-8000:])
        self.assertNotIn("unknown option", log)
        self.assertIn("--gpu-memory-utilization 0.7", log)
        self.assertIn("--profiler-config", log)
        for flag in ("--actor-num-nodes", "--actor-num-gpus-per-node", "--ref-load"):
            self.assertEqual(log.count(flag + ": not applicable in rlhost: "), 1, flag)
        self.assertIn("Args parsed: Namespace(", log)
        self.assertRegex(log, r"Router launched at 127\.0\.0\.1:\d+, Prometheus port: \d+")
        steps = [m for m in read_jsonl(d + "/m/metrics.jsonl") if "rollout/step" in m]
        self.assertEqual([m["rollout/step"] for m in steps], [0, 1])
        for m in steps:
            self.assertEqual(m["perf/request/profiled_count"], m["perf/request/count"], m)
            self.assertGreater(m["perf/request/e2e_latency/mean"], 0)


    def test_external_vllm_engine(self):
        """--rollout-external against a vLLM server another process started: rlhost names it vLLM
        (/v1/models), routes the rollout's completions to it, syncs its weights each step
        (reload_weights: VLLM_SERVER_DEV_MODE=1 where it runs) and leaves it running."""
        d = self.dir
        model = vs.default_model(self.env)
        url_file = os.path.join(d, "vllm.url")
        env = dict(self.env, VLLM_SERVER_DEV_MODE="1")
        log = open(os.path.join(d, "serve.log"), "w")
        self.addCleanup(log.close)
        server = subprocess.Popen([vs.BIN, "--no-control", os.path.join(os.path.dirname(__file__), "serve_vllm.lua"),
                                   model, url_file], stdout=log, stderr=subprocess.STDOUT, env=env, cwd=d,
                                  start_new_session=True)
        self.addCleanup(lambda: (server.poll() is None) and vs.kill_group(server.pid))
        deadline = time.time() + 1500
        while not os.path.exists(url_file):
            self.assertIsNone(server.poll(), "the vLLM server exited; see %s/serve.log" % d)
            self.assertLess(time.time(), deadline, "vLLM did not serve")
            time.sleep(1)
        with open(url_file) as f:
            url = f.read().strip()
        addr = url.replace("http://", "")
        args = [vs.BIN, "--no-control", RECIPE, "--hf-checkpoint", model, "--prompt-data", model + "/data/train.jsonl",
                "--rollout-external",
                "--rollout-external-engine-addrs", addr, "--num-rollout", "2", "--rollout-batch-size", "4",
                "--n-samples-per-prompt", "4", "--rollout-max-response-len", "32", "--dynamic-sampling-filter", "none",
                "--check-weight-update-equal", "--metrics-dir", d + "/m", "--no-progress", "--eval-interval", "1000"]
        p = subprocess.run(args, capture_output=True, text=True, env=self.env, cwd=d, timeout=1800)
        out = p.stderr + p.stdout
        self.assertEqual(p.returncode, 0, out[-8000:])
        self.assertIn("external engine 0: %s (vllm" % url, out)
        self.assertNotIn("Launching vLLM server", out)   # it started none of its own
        self.assertIn("weight sync to 1 engine(s): disk", out)
        steps = [m for m in read_jsonl(d + "/m/metrics.jsonl") if "rollout/step" in m]
        self.assertEqual(len(steps), 2)
        for m in steps:
            self.assertLess(m["rollout/weight_sync_logprob_abs_diff"], 1e-3, m)   # it took each sync
        self.assertIsNone(server.poll(), "rlhost leaves an external engine running")


if __name__ == "__main__":
    support.main()
