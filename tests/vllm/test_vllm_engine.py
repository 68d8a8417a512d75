#!/usr/bin/env python3
"""vLLM as an rl.engine backend, against a real vLLM (CPU) on the default model.

rl.engine.start{backend = "vllm"} starts `python -m vllm.entrypoints.openai.api_server`
as a child; the scenario (engine_scenario.lua) then checks:

- misuse: an unknown backend and a native-only option raise naming the option; a
  missing python is a clear error with the install hint, and starts nothing;
- generate in SGLang's shape with token ids in and out, one log-prob per token;
- weights reloaded in place (/collective_rpc reload_weights) change the log-probs,
  and reloading the original weights gives back the first run's log-probs;
- an aborted request ends with finish reason "abort" and the tokens it had;
- stop() leaves no process of the server's group (API server, EngineCore, worker), nor
  does a ready timeout; a server that exits before serving is an error with its log;
- a SIGKILLed rlhost takes its vLLM servers' whole process groups with it.

    RLHOST_BIN=build/rlhost python3 tests/vllm/test_vllm_engine.py
"""
import json
import os
import re
import shutil
import subprocess
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import vllm_support as vs  # noqa: E402
import support  # noqa: E402

SCENARIO = os.path.join(vs.HERE, "engine_scenario.lua")

# Scales lm_head (or the embeddings when tied) by 1.5: same shapes, other log-probs.
ALTER = r"""
import sys, torch
from safetensors.torch import load_file, save_file
src, dst = sys.argv[1], sys.argv[2]
t = load_file(src)
key = "lm_head.weight" if "lm_head.weight" in t else "model.embed_tokens.weight"
t[key] = (t[key].float() * 1.5).to(t[key].dtype).contiguous()
save_file(t, dst, metadata={"format": "pt"})
print(key)
"""


class VllmEngineTest(vs.RlhostTestCase):
    def setUp(self):
        vs.require_vllm()
        super().setUp()

    def test_engine(self):
        model = vs.default_model(self.env)
        altered = os.path.join(self.dir, "altered")
        os.makedirs(altered)
        for name in os.listdir(model):
            p = os.path.join(model, name)
            if os.path.isfile(p) and not name.endswith(".safetensors"):
                shutil.copy(p, altered)
        st = [n for n in os.listdir(model) if n.endswith(".safetensors")]
        self.assertEqual(len(st), 1, st)
        subprocess.run([vs.PYTHON, "-c", ALTER, os.path.join(model, st[0]), os.path.join(altered, st[0])],
                       check=True, timeout=600, capture_output=True)

        r = subprocess.run([vs.BIN, "--no-control", SCENARIO, model, altered], capture_output=True, text=True,
                           env=self.env, timeout=2400)
        if r.returncode != 0:
            self.fail("scenario failed (%d):\n%s\n%s" % (r.returncode, r.stdout[-3000:], r.stderr[-6000:]))
        out = json.loads(r.stdout.strip().splitlines()[-1])
        try:
            self.check(out)
        finally:
            if out.get("pid"):
                vs.kill_group(out["pid"])

    def check(self, out):
        self.assertIn("opts.backend", out["bad_backend"])
        self.assertIn("'native' or 'vllm'", out["bad_backend"])
        self.assertIn("opts.kv_cache_tokens", out["bad_option"])
        self.assertIn("vllm_args", out["bad_option"])
        self.assertIn("did not serve within 1 s (ready_timeout; pid", out["timeout_err"])
        stopped = int(re.search(r"ready_timeout; pid (\d+) stopped", out["timeout_err"]).group(1))
        self.assertTrue(vs.wait_group_gone(stopped, 30), "processes left after a ready timeout")
        self.assertIn("exited with status", out["exit_err"])
        self.assertIn("no-such-model", out["exit_err"])
        self.assertFalse(out["bad_python"]["eng"])
        self.assertIn("/nonexistent/bin/python", out["bad_python"]["err"])
        self.assertIn("install_vllm.sh", out["bad_python"]["err"])

        first, altered, back = out["first"], out["altered"], out["back"]
        self.assertEqual(len(first["ids"]), 8)
        self.assertEqual(len(first["lps"]), 8)
        self.assertEqual(first["finish"], "length")
        self.assertGreater(first["prompt_tokens"], 5)
        self.assertTrue(all(lp <= 0 for lp in first["lps"]), first["lps"])
        # the first token has the same context in every run: its log-prob tells the weights apart
        self.assertGreater(abs(first["lps"][0] - altered["lps"][0]), 1e-3, (first, altered))
        self.assertEqual(first["ids"], back["ids"])
        for a, b in zip(first["lps"], back["lps"]):
            self.assertAlmostEqual(a, b, places=4)
        self.assertEqual(out["update_altered"]["weight_version"], "1")
        self.assertEqual(altered["version"], "1")
        self.assertEqual(back["version"], "2")
        self.assertEqual(out["stats"]["weight_version"], "2")

        ab = out["aborted"]
        self.assertEqual(ab["finish"], "abort", ab)
        self.assertLess(ab["tokens"], 300)
        self.assertEqual(ab["lps"], ab["tokens"])
        self.assertGreaterEqual(out["aborted_count"], 1)

        self.assertFalse(out["stopped_pid"])
        self.assertTrue(vs.wait_group_gone(out["pid"], 60), "vLLM processes left after stop()")


HOLD = r"""
local rl = require "rl"
rl.spawn(function()
  local e = assert(rl.engine.start { model = arg[1], backend = "vllm", ready_timeout = 1200,
                                     vllm_args = { max_model_len = 384 } })
  print("PID " .. e.pid)
  io.stdout:flush()
  rl.sleep(3600)
end):wait()
"""


class VllmChildrenTest(vs.RlhostTestCase):
    """A vLLM server's whole process group dies with rlhost, even on SIGKILL (vLLM's
    EngineCore and worker outlive a killed API server: rlhost's supervisor takes them)."""

    def setUp(self):
        vs.require_vllm()
        super().setUp()

    def test_children_die_with_rlhost(self):
        model = vs.default_model(self.env)
        p = subprocess.Popen([vs.BIN, "--no-control", self.write("hold.lua", HOLD), model], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, env=self.env)
        self.procs.append(p)
        line = p.stdout.readline()
        self.assertTrue(line.startswith("PID "), line + p.stderr.read()[-3000:] if not line else line)
        pgid = int(line.split()[1])
        try:
            self.assertTrue(vs.group_alive(pgid))
            rpc = rpc_dir_of_group(pgid)  # vLLM's sockets: in the supervisor's own directory
            self.assertIsNotNone(rpc, "no VLLM_RPC_BASE_PATH in the server's environment")
            self.assertIn("rlhost-vllm-rpc-", rpc)
            self.assertTrue(os.listdir(rpc), "no sockets in " + rpc)
            p.kill()
            p.wait(timeout=30)
            self.assertTrue(vs.wait_group_gone(pgid, 60), "vLLM processes left after rlhost was killed")
            self.assertFalse(os.path.exists(rpc), "vLLM's socket directory left behind: " + rpc)
        finally:
            vs.kill_group(pgid)


def rpc_dir_of_group(pgid):
    """VLLM_RPC_BASE_PATH as a process of the group (not its leader, the supervisor) has it."""
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if int(pid) == pgid or os.getpgid(int(pid)) != pgid:
                continue
            with open("/proc/%s/environ" % pid, "rb") as f:
                env = f.read().split(b"\0")
        except OSError:
            continue
        for kv in env:
            if kv.startswith(b"VLLM_RPC_BASE_PATH="):
                return kv.split(b"=", 1)[1].decode()
    return None


if __name__ == "__main__":
    support.main()
