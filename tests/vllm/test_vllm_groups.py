#!/usr/bin/env python3
"""A frozen vLLM engine group next to a native policy (--sglang-config, backend: vllm).

`rlhost recipes/grpo_gsm8k.lua` for 2 steps on the default model: the policy group
`actor` runs 2 native process engines, synced every step; the group `ref` is one real
vLLM server with update_weights: false, asked by the reward
(recipes/rewards/frozen_judge.lua through --custom-rm-path, wrapped here so that each
reward also reads vLLM's own weight record, GET /weight_info, from the engine that
answered). Checked: both groups served (the policy's samples carry each sync's version,
every sample has the vLLM judge's answer), the vLLM group never got a weight sync (its
/weight_info never moves; its access log has no weight-update request) while the
policy's version moved every step, the judge's rewards arrived, and no vLLM process is
left when the run ends (its process group, and any process naming its port).

    RLHOST_BIN=build/rlhost python3 tests/vllm/test_vllm_groups.py
"""
import json
import os
import re
import subprocess
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import vllm_support as vs  # noqa: E402
import support  # noqa: E402
from support import frozen_group_config, read_jsonl  # noqa: E402

RECIPE = os.path.join(vs.SOURCE_DIR, "recipes", "grpo_gsm8k.lua")
JUDGE = os.path.join(vs.SOURCE_DIR, "recipes", "rewards", "frozen_judge.lua")
PROMPTS, N = 2, 4

# frozen_judge's reward, plus vLLM's own weight version of the engine that answered
REWARD = r"""
local judge = assert(dofile(%r))
return { reward = function(sample)
  local r = judge.reward(sample)
  local resp, err = rl.http.get(sample.metadata.judge.worker .. "/weight_info", { timeout = 30 })
  sample.metadata.vllm_weight_info = resp and resp.status == 200 and rl.json.decode(resp.body) or tostring(err)
  return r
end }
"""

DUMP = r"""
local rows = {}
for _, s in ipairs(assert(rl.dump.load(arg[1])).samples) do
  rows[#rows + 1] = { versions = s.weight_versions, judge = s.metadata.judge, info = s.metadata.vllm_weight_info,
                      reward = s.reward, status = s.status }
end
print(rl.json.encode(rows))
"""


def processes_naming(text):
    """Pids of live processes whose command line contains `text`."""
    out = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open("/proc/%s/cmdline" % pid, "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if text in cmd:
            out.append(int(pid))
    return out


class VllmGroupsTest(vs.RlhostTestCase):
    def setUp(self):
        vs.require_vllm()
        super().setUp()

    def test_frozen_vllm_group_next_to_a_native_policy(self):
        d = self.dir
        # the policy 'actor' on 2 native engines, synced each step; 'ref' the same model, frozen, on vLLM
        cfg = self.write("groups.yaml", frozen_group_config(ref_backend="vllm"))
        reward = self.write("judge_with_version.lua", REWARD % JUDGE)
        args = [vs.BIN, "--no-control", RECIPE, "--sglang-config", cfg, "--engine-mode", "process",
                "--custom-rm-path", reward + ":reward", "--num-rollout", "2", "--rollout-batch-size", str(PROMPTS),
                "--n-samples-per-prompt", str(N), "--rollout-max-response-len", "32", "--dynamic-sampling-filter",
                "none", "--threads", "1", "--eval-interval", "1000", "--eval-max-prompts", "2",
                "--use-fault-tolerance", "--rollout-health-check-interval", "1",
                "--vllm-max-model-len", "384", "--vllm-max-num-seqs", "16", "--no-progress",
                "--metrics-dir", d + "/m", "--save-debug-rollout-data", d + "/dump/r_{rollout_id}.pt"]
        p = subprocess.run(args, capture_output=True, text=True, env=self.env, cwd=d, timeout=800)
        log = p.stderr + p.stdout
        servers = re.findall(r"Starting vLLM server on (http://\S+) \(pid (\d+)\)", log)
        try:
            self.check_run(d, p.returncode, log, servers)
        except AssertionError as e:
            raise AssertionError("%s\n--- the run's log (end):\n%s" % (e, log[-6000:])) from None
        finally:
            for _, pid in servers:
                if not vs.wait_group_gone(int(pid), 30):
                    vs.kill_group(int(pid))

    def check_run(self, d, code, log, servers):
        self.assertEqual(code, 0)
        self.assertRegex(log, r"engine group 'actor': 2 native engine\(s\) of .* \(takes weight updates\)")
        self.assertRegex(log, r"engine group 'ref': 1 vllm engine\(s\) of .* \(frozen\)")
        self.assertEqual(len(servers), 1, "one vLLM server: the ref group's")
        vllm_url, vllm_pid = servers[0][0], int(servers[0][1])
        self.assertIn("ref engine 1 %s" % vllm_url, log)   # probed by the health monitor too
        self.assertIn("weight sync to 2 engine(s)", log)     # the policy's two, never the vLLM one

        rows = [m for m in read_jsonl(d + "/m/metrics.jsonl") if "rollout/step" in m]
        self.assertEqual([m["rollout/step"] for m in rows], [0, 1])
        v0, v1 = rows[0]["rollout/weight_version"], rows[1]["rollout/weight_version"]
        self.assertLess(v0, v1)   # the policy synced every step
        script = self.write("dump.lua", DUMP)
        infos = set()
        for step, want in ((0, None), (1, str(v0))):
            r = subprocess.run([vs.BIN, "--no-control", script, d + "/dump/r_%d.pt" % step], capture_output=True,
                               text=True, env=self.env, timeout=120)
            self.assertEqual(r.returncode, 0, r.stderr)
            samples = json.loads(r.stdout)
            self.assertEqual(len(samples), PROMPTS * N)
            for s in samples:
                self.assertIsNotNone(s["reward"], s)   # the judge's reward arrived
                j = s["judge"]
                self.assertEqual((j["group"], j["backend"], j["worker"]), ("ref", "vllm", vllm_url), s)
                self.assertEqual(j["weight_version"], "default", s)
                self.assertIsInstance(j["text"], str)
                self.assertIsInstance(s["info"], dict, s)   # vLLM's GET /weight_info answered
                infos.add(json.dumps(s["info"], sort_keys=True))
                if want is not None:   # the policy's engines served the trainer's weights of the step before
                    self.assertEqual(s["versions"], [want], s)
        # vLLM's own record never moved: the same before the first sync and after the last
        self.assertEqual(len(infos), 1, infos)
        print("frozen vLLM group: /weight_info %s all run long; policy weight versions %s -> %s"
              % (infos.pop(), v0, v1), flush=True)

        logf = re.search(r"Launching vLLM server: .* \(log: (\S+)\)", log).group(1)
        with open(logf) as f:
            vlog = f.read()
        self.assertIn('"POST /v1/completions HTTP', vlog)
        updates = re.findall(r'"POST /(collective_rpc|update_weights|start_weight_update|finish_weight_update|'
                             r'update_weight_version|init_weight_transfer_engine)\b', vlog)
        self.assertEqual(updates, [], "the frozen vLLM server got weight updates")

        # no vLLM process left: its process group (API server, EngineCore, worker), or any naming its port
        self.assertTrue(vs.wait_group_gone(vllm_pid, 30), "vLLM processes of %s left after the run" % vllm_url)
        port = vllm_url.rsplit(":", 1)[1]
        self.assertEqual(processes_naming("--port %s " % port), [])


if __name__ == "__main__":
    support.main()
