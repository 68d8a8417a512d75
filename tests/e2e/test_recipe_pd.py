#!/usr/bin/env python3
"""End-to-end: prefill/decode disaggregation in a GRPO run (slime's --prefill-num-servers).

`rlhost recipes/grpo_gsm8k.lua --prefill-num-servers 1 --num-engines 2` on the default
small model, engines as processes: engine 1 prefills, engine 2 decodes, the group's
router sends every request to the pair.

- the run finishes its steps with full batches;
- every rollout request carried the PD phases (pd_prefill_*, pd_decode_* timings) into
  its sglang_generate span, the flat keys slime's viewer draws as [P]/[D] lanes;
- the weight sync reaches both pools: asked from the reward during each step, the
  prefill and the decode engine serve the same weight version, and it advances from
  step to step with the trainer's; --check-weight-update-equal (through the router)
  finds the pair answering with the trainer's log-probs after each sync;
- --use-fault-tolerance with a drill that kills the prefill engine as step 1's weight
  sync starts: it restarts as a prefill engine (a bootstrap port again), is refit and
  rejoins the router, and the next steps are served by the pair again;
- a split that leaves no decode engine stops the run before anything starts, naming
  the flag.

Needs the native engine's disaggregation options and the router's PD mode; without
them the run test is a visible skip (a failure under CI=true).

    RLHOST_BIN=build/rlhost python3 tests/e2e/test_recipe_pd.py
"""
import json
import os
import subprocess
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from support import BIN, SOURCE_DIR, RlhostTestCase, read_jsonl  # noqa: E402
import support  # noqa: E402

RECIPE = os.path.join(SOURCE_DIR, "recipes", "grpo_gsm8k.lua")
PROMPTS, N, STEPS = 2, 4, 3

# GSM8K's reward, plus what the policy group's engines serve when the reward runs:
# each engine's role, weight version (the trainer does not sync during a rollout), URL,
# and what its /get_server_info says of disaggregation.
REWARD = r"""
local gsm8k = require "rl.rewards.gsm8k"
return { reward = function(sample)
  local g = rl.recipe.current.groups.default
  local seen = {}
  for i, e in ipairs(g.engines) do
    local s = e:stats()
    local info = rl.http.json(rl.http.get(e.url .. "/get_server_info", { timeout = 10 })) or {}
    seen[i] = { role = g.roles and g.roles[i] or "?", version = type(s) == "table" and tostring(s.weight_version) or "?",
                url = e.url, mode = info.disaggregation_mode, bootstrap_port = info.disaggregation_bootstrap_port }
  end
  sample.metadata = sample.metadata or {}
  sample.metadata.pd_engines = seen
  return (gsm8k.score(sample.response, sample.label))
end }
"""

# Per sample of a dump: what the reward saw, the weight versions, and the pd_* keys of
# its sglang_generate span's end attrs.
DUMP = r"""
local rows = {}
for _, s in ipairs(assert(rl.dump.load(arg[1])).samples) do
  local keys = {}
  for _, e in ipairs(s.trace and s.trace.events or {}) do
    if e.name == "sglang_generate" and e.type == "span_end" then
      for k, v in pairs(e.attrs or {}) do
        if type(k) == "string" and k:match("^pd_") then keys[#keys + 1] = k end
      end
    end
  end
  table.sort(keys)
  rows[#rows + 1] = { engines = s.metadata.pd_engines, versions = s.weight_versions, pd_keys = keys,
                      status = s.status }
end
print(rl.json.encode(rows))
"""

# Whether this rlhost's engine and router know prefill/decode disaggregation.
SUPPORT = r"""
local function has(list, name) for _, o in ipairs(list) do if o.name == name then return true end end return false end
print(rl.json.encode { engine = has(require("rl.engine.options").NATIVE, "disaggregation_mode"),
                       router = has(require("rl.router.options").ROUTER, "pd_disaggregation") })
"""


class RecipePD(RlhostTestCase):
    tmp_prefix = "rlhost-pd-"

    def run_recipe(self, *args, timeout=500):
        r = subprocess.run([BIN, "--no-control", RECIPE, *args], capture_output=True, text=True, timeout=timeout,
                           env=self.env, cwd=self.dir)
        return r.returncode, r.stdout + r.stderr

    def lua(self, name, text, *args):
        script = self.write(name, text)
        r = subprocess.run([BIN, "--no-control", script, *args], capture_output=True, text=True, timeout=60,
                           env=self.env)
        self.assertEqual(r.returncode, 0, r.stderr)
        return json.loads(r.stdout)

    def need_pd(self):
        have = self.lua("support.lua", SUPPORT)
        if not (have["engine"] and have["router"]):
            support.missing("prefill/decode disaggregation in this rlhost (engine: %s, router: %s)"
                            % (have["engine"], have["router"]),
                            "an rlhost whose native engine takes disaggregation_mode and whose router takes "
                            "pd_disaggregation")

    def run_pd(self, *extra):
        """A GRPO run of STEPS steps on 1 prefill + 1 decode process engine; checks what every
        run must show and returns (log, per step the engines the reward saw)."""
        reward = self.write("pd_reward.lua", REWARD)
        d = self.dir
        code, log = self.run_recipe(
            "--prefill-num-servers", "1", "--num-engines", "2", "--engine-mode", "process",
            "--num-rollout", str(STEPS), "--custom-rm-path", reward + ":reward",
            "--rollout-batch-size", str(PROMPTS), "--n-samples-per-prompt", str(N), "--rollout-max-response-len", "32",
            "--dynamic-sampling-filter", "none", "--threads", "1", "--no-progress", "--eval-interval", "1000",
            "--eval-max-prompts", "2", "--metrics-dir", d + "/m", "--save-debug-rollout-data", d + "/dump/r_{rollout_id}.pt",
            *extra)
        try:
            self.assertEqual(code, 0)
            self.assertRegex(log, r"engine group 'default': 2 native engine\(s\) of .* behind \S+ "
                                  r"\(1 prefill \+ 1 decode\) \(takes weight updates\)")
            rows = [m for m in read_jsonl(d + "/m/metrics.jsonl") if "rollout/step" in m]
            self.assertEqual([m["rollout/step"] for m in rows], list(range(STEPS)))
            seen = []
            for step in range(STEPS):
                samples = self.lua("dump.lua", DUMP, d + "/dump/r_%d.pt" % step)
                self.assertEqual(len(samples), PROMPTS * N)
                for s in samples:
                    self.assertIn(s["status"], ("completed", "truncated"))   # answered, not failed or aborted
                    # the request went through a prefill and a decode engine: both phases' timings
                    self.assertTrue(any(k.startswith("pd_prefill_") for k in s["pd_keys"]), s["pd_keys"])
                    self.assertTrue(any(k.startswith("pd_decode_") for k in s["pd_keys"]), s["pd_keys"])
                    # both pools serve the same weights: the sync reached the prefill and the decode engine
                    self.assertEqual([e["role"] for e in s["engines"]], ["prefill", "decode"])
                    self.assertEqual(len({e["version"] for e in s["engines"]}), 1, s["engines"])
                    # the prefill engine has a bootstrap port, the decode engine none
                    self.assertGreater(s["engines"][0].get("bootstrap_port") or 0, 0, s["engines"])
                    self.assertFalse(s["engines"][1].get("bootstrap_port"), s["engines"])
                seen.append(samples[0]["engines"])
            # the versions advance with the trainer's: step k serves what step k-1's sync sent
            served = [e[0]["version"] for e in seen]
            self.assertEqual(len(set(served)), STEPS, served)
            for step in range(1, STEPS):
                self.assertEqual(served[step], str(rows[step - 1]["rollout/weight_version"]), served)
        except AssertionError as e:
            raise AssertionError("%s\n--- the run's log (end):\n%s" % (e, log[-6000:])) from None
        return log, seen

    def test_grpo_run_with_a_prefill_and_a_decode_engine(self):
        self.need_pd()
        self.run_pd("--check-weight-update-equal")
        # after each sync the pair answers with the trainer's log-probs (through the router)
        rows = [m for m in read_jsonl(self.dir + "/m/metrics.jsonl") if "rollout/step" in m]
        for m in rows:
            self.assertLessEqual(m["rollout/weight_sync_logprob_abs_diff"], 1e-3, m)

    def test_a_dead_prefill_engine_restarts_as_prefill(self):
        self.need_pd()
        log, seen = self.run_pd("--use-fault-tolerance", "--rollout-health-check-interval", "0.5",
                                "--rollout-health-check-timeout", "4", "--fault-injection", "kill:1:1:sync")
        try:
            self.assertRegex(log, r"fault injection: SIGKILL to engine 1 \(pid \d+\)")
            self.assertRegex(log, r"engine 1 restarted in [\d.]+ s: \S+ \(pid \d+\)")
            self.assertRegex(log, r"engine 1 refit: serves weight version \S+ \(trainer's \S+\); back in the router")
            self.assertNotIn("back into the router failed", log)
            # step 2 ran on a new prefill engine (a new URL), a prefill engine again
            self.assertNotEqual(seen[2][0]["url"], seen[1][0]["url"])
            self.assertEqual(seen[2][1]["url"], seen[1][1]["url"])
            for e in (seen[1][0], seen[2][0]):
                if e.get("mode") is not None:   # where /get_server_info reports it
                    self.assertEqual(e["mode"], "prefill", e)
        except AssertionError as e:
            raise AssertionError("%s\n--- the run's log (end):\n%s" % (e, log[-6000:])) from None

    def test_a_split_without_a_decode_engine_is_a_usage_error(self):
        code, log = self.run_recipe("--prefill-num-servers", "2", "--num-engines", "2", "--num-rollout", "1",
                                    timeout=120)
        self.assertEqual(code, 2, log[-3000:])
        self.assertIn("--prefill-num-servers 2 leaves no decode engine: 2 engine(s) in all", log)
        self.assertNotIn("Traceback", log)
        self.assertNotIn("stack traceback", log)


if __name__ == "__main__":
    support.main()
