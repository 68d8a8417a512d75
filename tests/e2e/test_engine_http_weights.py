#!/usr/bin/env python3
"""POST /update_weights_from_safetensors on a real `rlhost engine` (real HTTP): the
weight update for engines on other hosts with no shared filesystem.

* A whole update in one request: the engine then answers as after
  /update_weights_from_disk of the same weights (tokens and log-probs), and reports the
  version.
* An update in parts (update_id, last=0 ... last=1), one tensor in row slices: nothing
  changes until the last part; a new update_id drops an unfinished one.
* Whole tensors stay in their request body (no copy) unless unaligned or past the
  bound on the bodies kept; either way the same weights (the install's log line counts
  both).
* Bad bodies (not safetensors, truncated, an unknown name, a wrong shape, an integer
  dtype, a tensor twice) and bad query values: 400 naming the problem, the engine
  unchanged; no token: 401.

Safetensors are read and written here with the standard library (the format is an
8-byte length, a JSON header, the bytes).

    RLHOST_BIN=build/rlhost python3 tests/e2e/test_engine_http_weights.py
"""
import json
import os
import shutil
import struct
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from engine_support import STORIES, Engine  # noqa: E402
import support  # noqa: E402

EP = "/update_weights_from_safetensors"
GREEDY = {"temperature": 0, "max_new_tokens": 6, "ignore_eos": True}


def read_safetensors(path):
    """{name: (dtype, shape, bytes)} in file order."""
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    base = 8 + n
    out = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        a, b = t["data_offsets"]
        out[name] = (t["dtype"], t["shape"], data[base + a:base + b])
    return out


def encode(tensors, metadata=None):
    """Safetensors bytes of [(name, dtype, shape, bytes)]."""
    header, offset = {}, 0
    if metadata:
        header["__metadata__"] = metadata
    for name, dtype, shape, raw in tensors:
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + len(raw)]}
        offset += len(raw)
    text = json.dumps(header).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    return struct.pack("<Q", len(text)) + text + b"".join(t[3] for t in tensors)


def reversed_rows(dtype, shape, raw):
    """The tensor with its rows in reverse order (other weights, same shape)."""
    row = len(raw) // shape[0]
    return b"".join(raw[i * row:(i + 1) * row] for i in reversed(range(shape[0])))


class HttpWeights(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.eng = Engine()
        cls.tmp = tempfile.mkdtemp(prefix="rlhost-http-weights-")
        cls.orig = read_safetensors(os.path.join(STORIES, "model.safetensors"))
        # Other weights: every matrix's rows reversed (the same names, shapes, dtypes).
        cls.other = {k: (d, s, reversed_rows(d, s, b) if len(s) == 2 else b) for k, (d, s, b) in cls.orig.items()}
        cls.other_dir = os.path.join(cls.tmp, "other")
        shutil.copytree(STORIES, cls.other_dir, ignore=shutil.ignore_patterns("*.gguf", "model.safetensors"))
        with open(os.path.join(cls.other_dir, "model.safetensors"), "wb") as f:
            f.write(encode([(k, *v) for k, v in cls.other.items()]))

    @classmethod
    def tearDownClass(cls):
        cls.eng.stop()
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def setUp(self):   # every test starts from stories260K's own weights
        status, r = self.eng.post("/update_weights_from_disk", {"model_path": STORIES, "weight_version": "orig"})
        self.assertEqual(status, 200, r)

    def send(self, body, query="", auth=True):
        return self.eng.request("POST", EP + ("?" + query if query else ""), raw=body, auth=auth,
                                headers={"Content-Type": "application/octet-stream"})

    def answer(self):
        out = self.eng.generate({"input_ids": [1, 403], "sampling_params": GREEDY, "return_logprob": True})
        return out["output_ids"], [x[0] for x in out["meta_info"]["output_token_logprobs"]], \
            out["meta_info"]["weight_version"]

    def version(self):
        return self.eng.get("/get_model_info")[1]["weight_version"]

    def test_one_request_equals_the_disk_path(self):
        before = self.answer()
        status, r = self.send(encode([(k, *v) for k, v in self.other.items()]), "weight_version=h1")
        self.assertEqual(status, 200, r)
        self.assertEqual((r["success"], r["installed"], r["weight_version"], r["staged"]), (True, True, "h1", 47))
        ids, lps, v = self.answer()
        self.assertEqual(v, "h1")
        self.assertNotEqual(ids, before[0], "other weights, other tokens")
        status, r = self.eng.post("/update_weights_from_disk", {"model_path": self.other_dir, "weight_version": "d1"})
        self.assertEqual(status, 200, r)
        self.assertEqual(self.answer(), (ids, lps, "d1"), "HTTP and disk install the same weights")

    def test_an_update_in_parts_installs_at_its_last(self):
        before = self.answer()
        names = sorted(self.other)
        embed = "model.embed_tokens.weight"
        d, s, raw = self.other[embed]
        row = len(raw) // s[0]
        rest = [n for n in names if n != embed]
        half = len(rest) // 2
        parts = [
            encode([(n, *self.other[n]) for n in rest[:half]]),
            # the embedding in two row slices, the second first
            encode([(embed, d, [s[0] - 100] + s[1:], raw[100 * row:])], {"rlhost.first_row." + embed: "100"}),
            encode([(embed, d, [100] + s[1:], raw[:100 * row])], {"rlhost.first_row." + embed: "0"}),
        ]
        for p in parts:
            status, r = self.send(p, "update_id=u1&last=0&weight_version=ignored")
            self.assertEqual(status, 200, r)
            self.assertFalse(r["installed"])
            self.assertEqual(r["weight_version"], "orig")
            self.assertEqual(self.answer(), before, "nothing changes before the last part")
        status, r = self.send(encode([(n, *self.other[n]) for n in rest[half:]]), "update_id=u1&last=1&weight_version=p1")
        self.assertEqual(status, 200, r)
        self.assertEqual((r["installed"], r["staged"], r["weight_version"]), (True, 47, "p1"))
        status, r = self.eng.post("/update_weights_from_disk", {"model_path": self.other_dir, "weight_version": "p1"})
        self.assertEqual(status, 200, r)
        after_disk = self.answer()
        self.setUp()
        for p in parts:
            self.assertEqual(self.send(p, "update_id=u2&last=0")[0], 200)
        self.assertEqual(self.send(encode([(n, *self.other[n]) for n in rest[half:]]), "update_id=u2&weight_version=p1")[0], 200)
        self.assertEqual(self.answer(), after_disk, "parts and slices install the same weights as the disk path")

        # A new update_id drops the unfinished one: only u4's tensor is installed (the
        # original's own), so the engine answers as before.
        self.setUp()
        self.assertEqual(self.send(parts[0], "update_id=u3&last=0")[0], 200)
        status, r = self.send(encode([(embed, *self.orig[embed])]), "update_id=u4&weight_version=n1")
        self.assertEqual(status, 200, r)
        self.assertEqual(r["staged"], 1)
        self.assertEqual(self.answer(), (before[0], before[1], "n1"))
        # the last part with a tensor's rows missing: 400, nothing installed
        status, r = self.send(parts[1], "update_id=u5&last=1")
        self.assertEqual(status, 400, r)
        self.assertIn("'model.embed_tokens.weight' has 412 of its 512 rows", r["message"])
        self.assertEqual(self.version(), "n1")

    def test_tensors_stay_in_their_body_unless_sliced_unaligned_or_past_the_bound(self):
        # The engine keeps a body whole tensors stay in (no copy) while the bodies it keeps
        # hold at most 8 bytes a model value (2.08 MB for stories260K); a tensor sliced,
        # unaligned in its body or past that bound is copied out. Each way installs the
        # same weights as the disk path.
        embed = "model.embed_tokens.weight"
        rest = [n for n in sorted(self.other) if n != embed]
        third = len(rest) // 3
        skipped = "model.layers.0.self_attn.rotary_emb.inv_freq"   # a name engines skip (old RoPE buffers)
        d, s, raw = self.other[embed]
        row = len(raw) // s[0]
        parts = [
            # kept: 0.6 MB skipped, then a third of the weights, aligned
            encode([(skipped, "F32", [150000], b"\0" * 600000)] + [(n, *self.other[n]) for n in rest[:third]]),
            # copied: 1001 F16 values before them leave every tensor 2 bytes off a 4-byte boundary
            encode([(skipped, "F16", [1001], b"\0" * 2002)] + [(n, *self.other[n]) for n in rest[third:2 * third]]),
            # copied: this body would take the bodies kept past 2.08 MB
            encode([(skipped, "F32", [300000], b"\0" * 1200000)] + [(n, *self.other[n]) for n in rest[2 * third:]]),
            encode([(embed, d, [s[0] - 7] + s[1:], raw[7 * row:])], {"rlhost.first_row." + embed: "7"}),
        ]
        for p in parts:
            status, r = self.send(p, "update_id=b1&last=0")
            self.assertEqual(status, 200, r)
        status, r = self.send(encode([(embed, d, [7] + s[1:], raw[:7 * row])], {"rlhost.first_row." + embed: "0"}),
                              "update_id=b1&last=1&weight_version=b1")
        self.assertEqual(status, 200, r)
        self.assertEqual((r["installed"], r["staged"]), (True, 47))
        support.wait_for(lambda: "47 tensors from HTTP installed" in self.eng.output(), timeout=10, what="the install's log line")
        line = [x for x in self.eng.output().splitlines() if "47 tensors from HTTP installed" in x][-1]
        self.assertIn("(%d read in their request bodies, %d copied out" % (third, 47 - third), line)
        by_http = self.answer()
        status, r = self.eng.post("/update_weights_from_disk", {"model_path": self.other_dir, "weight_version": "b1"})
        self.assertEqual(status, 200, r)
        self.assertEqual(self.answer(), by_http, "kept and copied tensors install the same weights as the disk path")

    def test_bad_bodies_are_400_naming_the_problem(self):
        before = self.answer()
        good = encode([("model.norm.weight", *self.other["model.norm.weight"])])
        norm = self.other["model.norm.weight"]
        cases = [
            (b"hello, not safetensors", "", "not a safetensors file"),
            (b"\x10\x00\x00\x00\x00\x00\x00\x00{not json}      ", "", "header"),
            (good[:-8], "", "truncated"),
            (b"", "", "too short"),
            (encode([("model.layers.9.mlp.up_proj.weight", *norm)]), "", "'model.layers.9.mlp.up_proj.weight' is not a weight"),
            (encode([("model.norm.weight", "F32", [32], norm[2][:128])]), "", "'model.norm.weight' has shape [32], the model's is [64]"),
            (encode([("model.norm.weight", "I32", [64], norm[2])]), "", "'model.norm.weight' has dtype I32"),
            (good, "last=maybe", "'last' must be 1 or 0"),
            (encode([("model.embed_tokens.weight", "F32", [10, 64], b"\0" * 2560)],
                    {"rlhost.first_row.model.embed_tokens.weight": "510"}), "", "do not fit the model's [512, 64]"),
        ]
        for body, query, want in cases:
            status, r = self.send(body, query)
            self.assertEqual(status, 400, (want, r))
            msg = r["message"] if "message" in r else r["error"]["message"]
            self.assertIn(want, msg)
        # the same tensor twice in one update
        self.assertEqual(self.send(good, "update_id=t&last=0")[0], 200)
        status, r = self.send(good, "update_id=t&last=1")
        self.assertEqual(status, 400, r)
        self.assertIn("'model.norm.weight' is sent twice in this update", r["message"])
        # no token
        status, r = self.send(good, auth=False)
        self.assertEqual(status, 401, r)
        self.assertIn("control endpoint", r["error"]["message"])
        status, r = self.eng.request("POST", EP, raw=good, auth=False, headers={"Authorization": "Bearer wrong"})
        self.assertEqual(status, 401, r)
        self.assertEqual(self.answer(), before, "no bad request changed the weights")
        self.assertEqual(self.version(), "orig")
        self.assertIsNone(self.eng.proc.poll(), "the engine is alive")


if __name__ == "__main__":
    support.main()
