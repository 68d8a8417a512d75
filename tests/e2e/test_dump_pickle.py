#!/usr/bin/env python3
"""Debug dumps (.pt) between rlhost and Python's torch, both ways:

  (a) rlhost writes a dump (rl.dump.save: samples with rl.trace spans) and Python's
      torch.load(path, weights_only=False) returns plain dicts with the right values
      and types (ints stay int, floats float, None, nested lists, unicode);
  (b) Python's torch.save writes slime-like dumps (tensors, OrderedDict, one-element
      list and tuple, empty list/dict, big ints, unicode; protocol 2, pickle_protocol=4
      and the legacy non-zip format) and rlhost loads them exactly;
  (c) rlhost re-saves a slime dump (replay) and Python reads it back.

    RLHOST_BIN=build/rlhost python3 tests/e2e/test_dump_pickle.py

Needs torch (bootstrap installs it); without it the test is skipped (ctest: Skipped)
naming what to install, and under CI=true it fails.
"""
import collections
import json
import math
import os
import subprocess
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from support import BIN, RlhostTestCase  # noqa: E402
import support  # noqa: E402

try:
    import torch
except Exception as e:  # pragma: no cover - depends on the machine
    torch = None
    IMPORT_ERROR = repr(e)

TIMEOUT = 60

SAVE_LUA = r"""
local json = rl.json
local samples = {}
for i = 0, 3 do
  local s = rl.sample.new { prompt = "h\u{e9}llo \u{2603} \u{1F600} #" .. i, label = "42", group_index = math.floor(i / 2), index = i }
  rl.trace.span(s, "generate_and_rm", { max_new_tokens = 8 }, function(span)
    rl.trace.span(s, "sglang_generate", nil, function(inner)
      s:append_response({ 100 + i, 7 }, { -0.25, 0 }, { text = " ok", meta_info = {
        finish_reason = { type = "length" }, weight_version = "3", prompt_tokens = 5, cached_tokens = 2 } })
      inner:update(rl.trace.sglang_meta_attrs { prompt_tokens = 5, completion_tokens = 2, queue_time = 0,
                                                e2e_latency = 0.5, finish_reason = { type = "length" } })
    end)
    rl.trace.event(s, "scored", { ok = true })
    span:set("reward", 1)
  end)
  s.reward = i % 2          -- 0 or 1: floats in Python (reward is a float field)
  s.metadata = { none = json.null, nested = { { 1, 2 }, { 3 } }, empty_list = json.array(), empty_dict = {},
                 big = 2 ^ 53, neg = -2 ^ 40, f = 0.1, yes = true, raw = "\255\254" }
  samples[#samples + 1] = s
end
local path = assert(rl.dump.save(arg[1] .. "/dumps/rollout_{rollout_id}.pt", 5, samples))
print(path)
"""

LOAD_LUA = r"""
local d, err = rl.dump.load(arg[1], { raw = true })
if not d then io.stderr:write(err, "\n"); os.exit(3) end
print(rl.json.encode(d))
-- the same dump as rl.Sample objects, re-saved (replay)
local r = assert(rl.dump.load(arg[1]))
assert(getmetatable(r.samples[1]) == rl.sample.Sample)
assert(rl.dump.save(arg[2], r.rollout_id, r.samples))
"""


def jsonable(v):
    """What rlhost's Lua view of a Python value encodes to: tensors as nested lists,
    tuples as lists, ints beyond 2^53 as the nearest double."""
    if isinstance(v, torch.Tensor):
        return jsonable(v.tolist())
    if isinstance(v, dict):
        return {str(k): jsonable(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [jsonable(x) for x in v]
    if isinstance(v, bytes):
        return v.decode("utf-8")
    if isinstance(v, bool) or v is None or isinstance(v, str):
        return v
    if isinstance(v, int) and abs(v) > 2 ** 53:
        return float(v)
    return v


def slime_dump():
    """A dump as slime writes it: Sample.to_dict() of each sample, with a trace."""
    trace = {"version": 1, "trace_id": "ab" * 16, "sample_id": 0, "group_id": 0, "attempt": 0, "events": [
        {"type": "span_start", "name": "generate_and_rm", "ts": 1700000000.25, "trace_id": "ab" * 16,
         "sample_id": 0, "group_id": 0, "attempt": 0, "span_id": "cd" * 16, "parent_span_id": None,
         "attrs": {"max_new_tokens": 8}},
        {"type": "span_end", "name": "generate_and_rm", "ts": 1700000001.5, "trace_id": "ab" * 16,
         "sample_id": 0, "group_id": 0, "attempt": 0, "span_id": "cd" * 16, "attrs": {"reward": 1.0}},
    ]}
    sample = {
        "group_index": 0, "index": 0, "rollout_id": None, "prompt": "日本語 \U0001F600 héllo",
        "tokens": [1, 2, 3, 4], "response": " four", "response_length": 2, "label": "4", "reward": 1.0,
        "loss_mask": [1, 1], "weight_versions": [], "rollout_log_probs": [-0.5, 0.0], "status": "completed",
        "metadata": {}, "spec_info": {"spec_accept_token_num": 0, "spec_draft_token_num": 0, "spec_verify_ct": 0,
                                      "completion_token_num": 0},
        "prefix_cache_info": {"cached_tokens": 1, "total_prompt_tokens": 2}, "non_generation_time": 0.0,
        "rollout_routed_experts": torch.tensor([[1, 2], [3, 4]], dtype=torch.int32),
        "teacher_log_probs": torch.tensor([0.5, -0.25]),
        "extras": collections.OrderedDict([("a", 1), ("b", [2])]), "one": [7], "tup": (8,), "empty_list": [],
        "empty_dict": {}, "big": 2 ** 62, "huge": 2 ** 70, "neg": -(2 ** 40), "none": None, "bytes": b"abc",
        "bools": torch.tensor([True, False]), "half": torch.tensor([1.5, -2.0], dtype=torch.float16),
        "bf16": torch.tensor([0.5], dtype=torch.bfloat16), "i64": torch.tensor([-(2 ** 40), 5]),
        "view": torch.arange(10.0)[2:8:2], "expanded": torch.tensor([2.5]).expand(3), "scalar": torch.tensor(3.5), "matrix": torch.ones(2, 3, dtype=torch.float64),
        "trace": trace,
    }
    second = {"group_index": 0, "index": 1, "prompt": "p", "tokens": [9], "status": "truncated", "reward": 0.0}
    return {"rollout_id": 4, "samples": [sample, second]}


@support.requires(torch is not None, "torch (Python) is needed: %s" % (IMPORT_ERROR if torch is None else ""),
                  support.PIP_HINT % "torch")
class DumpPickleTest(RlhostTestCase):
    tmp_prefix = "rlhost-dump-"

    def rlhost(self, script, *args):
        path = os.path.join(self.dir, "script.lua")
        with open(path, "w") as f:
            f.write(script)
        p = subprocess.run([BIN, "--no-control", path, *args], capture_output=True, text=True, env=self.env,
                           cwd=self.dir, timeout=TIMEOUT)
        self.assertEqual(p.returncode, 0, "rlhost failed\n--- stdout\n%s\n--- stderr\n%s" % (p.stdout, p.stderr))
        return p.stdout

    def test_rlhost_dump_loads_in_torch(self):
        path = self.rlhost(SAVE_LUA, self.dir).strip().splitlines()[-1]
        self.assertEqual(path, os.path.join(self.dir, "dumps", "rollout_5.pt"))
        d = torch.load(path, weights_only=False)
        self.assertIs(type(d), dict)
        self.assertEqual(list(d), ["rollout_id", "samples"])
        self.assertEqual(d["rollout_id"], 5)
        self.assertIs(type(d["rollout_id"]), int)
        self.assertEqual(len(d["samples"]), 4)
        for i, s in enumerate(d["samples"]):
            self.assertIs(type(s), dict)
            self.assertEqual(list(s)[:2], ["group_index", "index"], "slime's field order first")
            self.assertEqual((s["index"], s["group_index"]), (i, i // 2))
            self.assertIs(type(s["index"]), int)
            self.assertEqual(s["prompt"], "h\u00e9llo \u2603 \U0001F600 #%d" % i)
            self.assertEqual(s["tokens"], [100 + i, 7])
            self.assertTrue(all(type(t) is int for t in s["tokens"]))
            self.assertEqual(s["rollout_log_probs"], [-0.25, 0.0])
            self.assertTrue(all(type(x) is float for x in s["rollout_log_probs"]))
            self.assertEqual(s["loss_mask"], [1, 1])
            self.assertEqual(s["reward"], float(i % 2))
            self.assertIs(type(s["reward"]), float)
            self.assertEqual(s["status"], "truncated")
            self.assertEqual(s["response"], " ok")
            self.assertEqual(s["weight_versions"], ["3"])
            self.assertEqual(s["prefix_cache_info"], {"cached_tokens": 2, "total_prompt_tokens": 5})
            self.assertIs(type(s["non_generation_time"]), float)
            self.assertEqual(s["apply_chat_template_kwargs"], {})
            m = s["metadata"]
            self.assertEqual(m, {"none": None, "nested": [[1, 2], [3]], "empty_list": [], "empty_dict": {},
                                 "big": 2 ** 53, "neg": -(2 ** 40), "f": 0.1, "yes": True, "raw": b"\xff\xfe"})
            self.assertIs(type(m["big"]), int)
            self.assertIs(type(m["f"]), float)
            # The trace carrier and its events, as slime's trace_utils writes them.
            tr = s["trace"]
            self.assertEqual(list(tr)[:3], ["version", "trace_id", "events"])
            self.assertEqual((tr["version"], tr["sample_id"], tr["group_id"], tr["attempt"]), (1, i, i // 2, 0))
            self.assertEqual(len(tr["trace_id"]), 32)
            kinds = [(e["type"], e["name"]) for e in tr["events"]]
            self.assertEqual(kinds, [("span_start", "generate_and_rm"), ("span_start", "sglang_generate"),
                                     ("span_end", "sglang_generate"), ("event", "scored"),
                                     ("span_end", "generate_and_rm")])
            outer, inner = tr["events"][0], tr["events"][1]
            self.assertEqual(inner["parent_span_id"], outer["span_id"])
            self.assertEqual(tr["events"][4]["span_id"], outer["span_id"])
            self.assertEqual(outer["attrs"], {"max_new_tokens": 8})
            self.assertEqual(tr["events"][4]["attrs"], {"reward": 1})
            self.assertEqual(tr["events"][3]["attrs"], {"ok": True})
            end_attrs = tr["events"][2]["attrs"]
            self.assertEqual(end_attrs["queue_time"], 0.0)
            self.assertIs(type(end_attrs["queue_time"]), float)
            self.assertEqual(end_attrs["finish_reason"], "length")
            for e in tr["events"]:
                self.assertIs(type(e["ts"]), float)
                self.assertLess(abs(e["ts"] - tr["events"][0]["ts"]), 60)

    def test_torch_save_dumps_load_in_rlhost(self):
        src = slime_dump()
        want = jsonable(src)
        for name, kwargs in [("proto2", {}), ("proto4", {"pickle_protocol": 4}),
                             ("legacy", {"_use_new_zipfile_serialization": False})]:
            with self.subTest(name):
                path = os.path.join(self.dir, name + ".pt")
                torch.save(src, path, **kwargs)
                replay = os.path.join(self.dir, name + "_replay.pt")
                got = json.loads(self.rlhost(LOAD_LUA, path, replay))
                self.assertEqual(got, want)
                # (c) replayed through rl.Sample and saved again: Python reads it back.
                back = torch.load(replay, weights_only=False)
                s, orig = back["samples"][0], src["samples"][0]
                for key in ("prompt", "tokens", "status", "label", "loss_mask", "trace", "one", "empty_list",
                            "empty_dict", "extras", "neg", "prefix_cache_info"):
                    self.assertEqual(s[key], jsonable(orig[key]) if key != "extras" else dict(orig[key]), key)
                self.assertIs(type(s["reward"]), float)
                self.assertEqual(s["teacher_log_probs"], [0.5, -0.25])
                self.assertEqual(s["rollout_routed_experts"], [[1, 2], [3, 4]])
                self.assertEqual(back["samples"][1]["status"], "truncated")
                self.assertNotIn("rollout_id", s, "None fields are dropped by from_dict, as slime's defaults")

    def test_bad_files_are_errors_not_crashes(self):
        path = os.path.join(self.dir, "bad.pt")
        torch.save({"rollout_id": 1, "samples": [{"x": torch.nn.Linear(1, 1)}]}, path)
        out = self.rlhost("local d, e = rl.dump.load(arg[1]); assert(d == nil); print(e)", path)
        self.assertIn("bad.pt", out)
        self.assertIn("torch.nn.modules.linear.Linear", out)
        with open(path, "r+b") as f:  # a flipped byte inside data.pkl: its CRC fails
            f.seek(100)
            b = f.read(1)
            f.seek(100)
            f.write(bytes([b[0] ^ 0x55]))
        out = self.rlhost("local d, e = rl.dump.load(arg[1]); assert(d == nil); print(e)", path)
        self.assertIn("bad.pt: zip entry bad/data.pkl fails its CRC check", out)


if __name__ == "__main__":
    support.main()
