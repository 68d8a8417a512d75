#!/usr/bin/env python3
"""End-to-end: engine groups (slime's --sglang-config server groups) and --offload-rollout.

- A GRPO run (recipes/grpo_gsm8k.lua, 2 steps, process engines) with a second, frozen
  model group (stories260K, update_weights: false) served next to the policy and asked
  by the reward (recipes/rewards/frozen_judge.lua through --custom-rm-path), with
  --offload-rollout and --use-fault-tolerance: the policy's weight version moves each
  step, the frozen group answers with its own version all run long, the engines release
  their memory around training.
- --fault-injection on the frozen group (kill:ref:1:1:0): a real SIGKILL to the ref
  group's engine 1 as rollout step 1 starts; the run finishes its 3 steps with full
  batches, the health monitor restarts that engine without a refit and puts it back in
  the ref group's router, where it serves the judge again in step 2, while the policy
  syncs every step and loses nothing. A drill naming an unknown group is a usage error.
- Offload measured: a process engine on a random 6M-parameter Llama releases its weights
  and KV cache (its RSS drops by about their size, every time, not only the first) and
  answers the same greedy tokens after resuming.
- A bad config stops the run before anything starts, naming the file and the field.

    RLHOST_BIN=build/rlhost python3 tests/e2e/test_engine_groups.py
"""
import json
import os
import re
import subprocess
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from support import BIN, SOURCE_DIR, TEST_DATA, RlhostTestCase, alive, frozen_group_config, read_jsonl  # noqa: E402
import support  # noqa: E402

RECIPE = os.path.join(SOURCE_DIR, "recipes", "grpo_gsm8k.lua")
JUDGE = os.path.join(SOURCE_DIR, "recipes", "rewards", "frozen_judge.lua")
STORIES = os.path.join(TEST_DATA, "models", "stories260K")
PROMPTS, N = 2, 4

# Per sample of a dump: the policy's weight versions and what the frozen judge said.
DUMP_SAMPLES = r"""
local rows = {}
for _, s in ipairs(assert(rl.dump.load(arg[1])).samples) do
  rows[#rows + 1] = { versions = s.weight_versions, judge = s.metadata.judge }
end
print(rl.json.encode(rows))
"""

# frozen_judge's reward, plus what the ref group looked like when it ran: its router's
# workers and an answer straight from its engine 1 (the restarted one, once restarted).
JUDGE_AND_LOOK = r"""
local judge = assert(dofile(%r))
return { reward = function(sample)
  local r = judge.reward(sample)
  local g = rl.recipe.current.groups.ref
  local urls = {}
  for i, w in ipairs(g.router:workers()) do urls[i] = w.url end
  local e1 = g.engines[1].url
  local resp = rl.http.post(e1 .. "/generate", { text = "1+1=", sampling_params = { max_new_tokens = 2, temperature = 0 } },
                            { timeout = 10 })
  sample.metadata.ref = { router = urls, engine1 = e1, engine1_status = resp and resp.status or 0 }
  return r
end }
"""

DUMP_REF = r"""
local rows = {}
for _, s in ipairs(assert(rl.dump.load(arg[1])).samples) do
  rows[#rows + 1] = { versions = s.weight_versions, judge = s.metadata.judge, ref = s.metadata.ref, reward = s.reward,
                      status = s.status }
end
print(rl.json.encode(rows))
"""


# A process engine on a random Llama: VmRSS (MiB) around release/resume, twice.
OFFLOAD = r"""
local function rss(pid)
  local f = assert(io.open("/proc/" .. pid .. "/status"))
  local s = f:read("*a")
  f:close()
  return tonumber(s:match("VmRSS:%s*(%d+)")) / 1024
end
local dir = assert(rl.model.init { config = { architectures = { "LlamaForCausalLM" }, model_type = "llama",
  hidden_size = 256, intermediate_size = 1024, num_hidden_layers = 4, num_attention_heads = 4,
  num_key_value_heads = 4, vocab_size = 4096, max_position_embeddings = 512, rms_norm_eps = 1e-5,
  rope_theta = 10000.0, tie_word_embeddings = false, torch_dtype = "float32" }, seed = 3, dir = arg[1] })
local out = { rounds = {} }
local t = rl.spawn(function()
  local eng = assert(rl.engine.start { model = dir, mode = "process", threads = 1, kv_cache_tokens = 16384 })
  local function greedy()
    local r = assert(eng:generate { input_ids = { 1, 2, 3 }, sampling_params = { max_new_tokens = 8, temperature = 0,
      ignore_eos = true } })
    return r.output_ids
  end
  out.first = greedy()
  for round = 1, 2 do
    local r = { start = rss(eng.pid) }
    assert(eng:release_memory { "weights" })
    r.no_weights = rss(eng.pid)
    assert(eng:release_memory { "kv_cache" })
    r.released = rss(eng.pid)
    r.memory_released = eng:stats().memory_released
    assert(eng:resume_memory())
    r.resumed = rss(eng.pid)
    r.ids = greedy()
    out.rounds[round] = r
  end
  out.kv_bytes = eng:stats().kv_tokens_total * 2 * 4 * 256 * 4
  eng:stop()
end)
t:wait()
print(rl.json.encode(out))
"""


class EngineGroups(RlhostTestCase):
    tmp_prefix = "rlhost-groups-"

    def run_recipe(self, *args, timeout=400):
        r = subprocess.run([BIN, "--no-control", RECIPE, *args], capture_output=True, text=True, timeout=timeout,
                           env=self.env, cwd=self.dir)
        return r.returncode, r.stdout + r.stderr

    def dump(self, path):
        script = self.write("dump_samples.lua", DUMP_SAMPLES)
        r = subprocess.run([BIN, "--no-control", script, path], capture_output=True, text=True, timeout=60)
        self.assertEqual(r.returncode, 0, r.stderr)
        return json.loads(r.stdout)

    def test_frozen_group_serves_a_grpo_run(self):
        self.assertTrue(os.path.isdir(STORIES), STORIES)
        cfg = self.write("groups.yaml", """\
            # the policy (the default model, synced each step) and a frozen model next to it
            sglang:
              - name: actor
                server_groups:
                  - worker_type: regular
                    num_gpus: 2
              - name: ref
                model_path: %s
                update_weights: false
                server_groups:
                  - num_gpus: 1
                    overrides: {max-running-requests: 8}
            """ % STORIES)
        d = self.dir
        code, log = self.run_recipe(
            "--num-rollout", "2", "--engine-mode", "process", "--sglang-config", cfg,
            "--custom-rm-path", JUDGE + ":reward", "--offload-rollout", "--use-fault-tolerance",
            "--rollout-health-check-interval", "0.5", "--rollout-batch-size", str(PROMPTS),
            "--n-samples-per-prompt", str(N), "--rollout-max-response-len", "32", "--dynamic-sampling-filter", "none",
            "--threads", "1", "--no-progress", "--eval-interval", "1000", "--eval-max-prompts", "4",
            "--metrics-dir", d + "/m", "--save-debug-rollout-data", d + "/dump/r_{rollout_id}.pt")
        try:
            self.assertEqual(code, 0)
            self.assertRegex(log, r"engine group 'actor': 2 native engine\(s\) of .* \(takes weight updates\), "
                                  r"offloaded while training")
            self.assertRegex(log, r"engine group 'ref': 1 native engine\(s\) of .*stories260K behind \S+ \(frozen\)")
            self.assertIn("ref engine 1", log)   # watched by the health monitor too
            self.assertRegex(log, r"--offload-rollout: 3 engine\(s\) released kv_cache and weights for training")
            rows = [m for m in read_jsonl(d + "/m/metrics.jsonl") if "rollout/step" in m]
            self.assertEqual([m["rollout/step"] for m in rows], [0, 1])
            v0, v1 = rows[0]["rollout/weight_version"], rows[1]["rollout/weight_version"]
            self.assertLess(v0, v1)
            self.assertIn("perf/offload_time", rows[0])
            self.assertIn("perf/onload_time", rows[0])
            judged = set()
            for step, want in ((0, None), (1, str(v0))):
                samples = self.dump(d + "/dump/r_%d.pt" % step)
                self.assertEqual(len(samples), PROMPTS * N)
                for s in samples:
                    # the frozen group answered each reward with its own, unchanged weights
                    self.assertEqual(s["judge"]["group"], "ref")
                    self.assertEqual(s["judge"]["weight_version"], "default")
                    self.assertIsInstance(s["judge"]["text"], str)
                    judged.add(s["judge"]["text"])
                    # the policy's engines served the trainer's weights of the step before
                    if want is not None:
                        self.assertEqual(s["versions"], [want])
            self.assertTrue(judged)
        except AssertionError as e:
            raise AssertionError("%s\n--- the run's log (end):\n%s" % (e, log[-6000:])) from None

    def test_kill_a_frozen_engine_mid_run(self):
        cfg = self.write("groups.yaml", frozen_group_config(STORIES, ref_engines=2))
        reward = self.write("judge_and_look.lua", JUDGE_AND_LOOK % JUDGE)
        d = self.dir
        code, log = self.run_recipe(
            "--num-rollout", "3", "--engine-mode", "process", "--sglang-config", cfg,
            "--custom-rm-path", reward + ":reward", "--use-fault-tolerance", "--rollout-health-check-interval", "0.5",
            "--rollout-health-check-timeout", "4", "--fault-injection", "kill:ref:1:1:0",
            "--rollout-batch-size", str(PROMPTS), "--n-samples-per-prompt", str(N), "--rollout-max-response-len", "32",
            "--dynamic-sampling-filter", "none", "--threads", "1", "--no-progress", "--eval-interval", "1000",
            "--eval-max-prompts", "2", "--metrics-dir", d + "/m", "--save-debug-rollout-data", d + "/dump/r_{rollout_id}.pt")
        try:
            self.assertEqual(code, 0)
            killed = re.search(r"fault injection: SIGKILL to ref engine 1 \(pid (\d+)\)", log)
            self.assertTrue(killed)
            self.assertRegex(log, r"ref engine 1 \(\S+\): \w+ -> dead: its process exited")
            restarted = re.search(r"ref engine 1 restarted in [\d.]+ s: (\S+) \(pid (\d+)\)", log)
            self.assertTrue(restarted)
            new_url, new_pid = restarted.group(1), int(restarted.group(2))
            self.assertNotEqual(int(killed.group(1)), new_pid)
            self.assertFalse(alive(int(killed.group(1))))
            self.assertRegex(log, r"ref engine 1 \(frozen\) serves its own model, weight version default; back in the router")
            self.assertNotIn("ref engine 1 refit", log)   # a frozen engine takes no weights
            self.assertNotRegex(log, r"(?m)^.*\] engine [12] \(\S+\): \w+ -> (suspect|dead)")   # the policy's engines: fine
            rows = [m for m in read_jsonl(d + "/m/metrics.jsonl") if "rollout/step" in m]
            self.assertEqual([m["rollout/step"] for m in rows], [0, 1, 2])
            versions = [m["rollout/weight_version"] for m in rows]
            self.assertEqual(versions, sorted(set(versions)))   # the policy synced every step
            self.assertEqual(rows[-1]["rollout/engines/restarts"], 1)
            script = self.write("dump_ref.lua", DUMP_REF)
            for step in range(3):
                r = subprocess.run([BIN, "--no-control", script, d + "/dump/r_%d.pt" % step], capture_output=True,
                                   text=True, timeout=60)
                self.assertEqual(r.returncode, 0, r.stderr)
                samples = json.loads(r.stdout)
                self.assertEqual(len(samples), PROMPTS * N, "step %d" % step)   # nothing lost
                for s in samples:
                    self.assertIsNotNone(s["reward"], s)   # the judge answered, through the other engine meanwhile
                    self.assertEqual(s["judge"]["weight_version"], "default", s)
                    if step > 0:
                        self.assertEqual(s["versions"], [str(versions[step - 1])], s)
                    if step == 2:   # the restarted engine is the group's engine 1, in its router, and serves
                        self.assertEqual(s["ref"]["engine1"], new_url, s)
                        self.assertIn(new_url, s["ref"]["router"], s)
                        self.assertEqual(len(s["ref"]["router"]), 2, s)
                        self.assertEqual(s["ref"]["engine1_status"], 200, s)
        except AssertionError as e:
            raise AssertionError("%s\n--- the run's log (end):\n%s" % (e, log[-6000:])) from None

    def test_offload_frees_memory_and_answers_the_same(self):
        script = self.write("offload.lua", OFFLOAD)
        r = subprocess.run([BIN, "--no-control", script, self.dir + "/model"], capture_output=True, text=True,
                           timeout=240, env=self.env)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        out = json.loads(r.stdout.strip().splitlines()[-1])
        weights_mib = os.path.getsize(self.dir + "/model/model.safetensors") / 2**20
        kv_mib = out["kv_bytes"] / 2**20
        for i, rd in enumerate(out["rounds"]):
            print("round %d: RSS %.0f MiB -> %.0f without weights (%.0f MiB of them) -> %.0f released "
                  "(KV %.0f MiB) -> %.0f resumed" % (i + 1, rd["start"], rd["no_weights"], weights_mib,
                                                     rd["released"], kv_mib, rd["resumed"]))
            self.assertTrue(rd["memory_released"])
            # most of each part's bytes go back to the system, in both rounds
            self.assertGreater(rd["start"] - rd["no_weights"], 0.5 * weights_mib, rd)
            self.assertGreater(rd["no_weights"] - rd["released"], 0.5 * kv_mib, rd)
            self.assertGreater(rd["resumed"] - rd["released"], 0.5 * (weights_mib + kv_mib), rd)
            self.assertEqual(rd["ids"], out["first"])

    def test_bad_config_names_file_and_field(self):
        cfg = self.write("bad.yaml", """\
            sglang:
              - name: actor
                server_groups: [{num_gpus: 1}]
              - name: ref
                update_weights: true
                server_groups: [{num_gpus: 1}]
            """)
        code, log = self.run_recipe("--sglang-config", cfg, "--num-rollout", "1", timeout=120)
        self.assertEqual(code, 2, log[-3000:])
        self.assertIn("--sglang-config %s: at most one model may take weight updates" % cfg, log)
        self.assertNotRegex(log, re.escape("engine server: serving"))
        cfg = self.write("bad2.yaml", "sglang:\n  - name: ref\n    server_groups: [{num_gpus: 1, overrides: {no_such_option: 1}}]\n")
        code, log = self.run_recipe("--sglang-config", cfg, "--num-rollout", "1", timeout=120)
        self.assertEqual(code, 2, log[-3000:])
        self.assertIn("--sglang-config %s: sglang[1] (ref).server_groups[1]: " % cfg, log)
        self.assertIn("opts.no_such_option", log)
        # --fault-injection naming a group the config does not have: before any engine starts
        code, log = self.run_recipe("--sglang-config", cfg, "--num-rollout", "1", "--use-fault-tolerance",
                                    "--fault-injection", "kill:judge:1:0", timeout=120)
        self.assertEqual(code, 2, log[-3000:])
        self.assertIn("--fault-injection kill:judge:1:0: no engine group 'judge' (the job's groups: ref;", log)
        self.assertNotRegex(log, re.escape("engine server: serving"))


if __name__ == "__main__":
    support.main()
