#!/usr/bin/env python3
"""LoRA adapters in `rlhost engine`, SGLang's API, over real HTTP: --lora-paths at
start, POST /load_lora_adapter and /unload_lora_adapter (admin token), /generate's
lora_path (one per request, or a list per batch item), OpenAI's model
"<base>:<adapter>", /v1/models and /get_server_info listing them, and the adapter
sync (update_weights_from_disk with lora_name replacing an adapter in place).

Checks: greedy ids and log-probs under adapters X, Y, a B = 0 adapter and the base
in one concurrent batch equal each request run alone (bitwise: the engine's float32
CPU kernels are batch-invariant), more adapters at once than --max-loras-per-batch
still all finish with the same results, an adapter with B = 0 gives the base's tokens
and log-probs bit for bit, the prefix cache never serves one adapter's KV to another
(or to the base) nor across a replacement, unknown adapters and bad directories are
clear 400s that leave the server serving, unloading an adapter in use is refused.

The PEFT directories are written here from the standard library (adapter_config.json
+ adapter_model.safetensors in PEFT's names and layout), shapes from the stories260K
test model's config.json.

    RLHOST_BIN=build/rlhost python3 tests/e2e/test_engine_lora.py
"""
import json
import os
import random
import shutil
import struct
import sys
import tempfile
import threading
import time
import unittest
from array import array

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from support import lua_json, wait_for  # noqa: E402
from engine_support import STORIES, Engine  # noqa: E402

TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
PROMPT = [1, 403, 407, 261, 378, 259, 372, 267, 281, 311, 260, 341, 303, 414, 274, 345, 268, 291, 268, 309, 291, 1,
          300, 265, 310, 304, 262, 321, 276, 279, 295, 304, 262, 412, 266]  # 35 tokens: two full blocks of 16


def write_safetensors(path, tensors):
    """tensors: name -> (shape, list of floats); float32, little-endian."""
    header, blobs, offset = {"__metadata__": {"format": "pt"}}, [], 0
    for name, (shape, values) in tensors.items():
        data = array("f", values)
        if sys.byteorder != "little":
            data.byteswap()
        raw = data.tobytes()
        header[name] = {"dtype": "F32", "shape": list(shape), "data_offsets": [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def projection_shapes(cfg):
    """PEFT target -> (in, out) for a Llama layer."""
    h, i, hd = cfg["hidden_size"], cfg["intermediate_size"], cfg["head_dim"]
    q, kv = cfg["num_attention_heads"] * hd, cfg["num_key_value_heads"] * hd
    return {"q_proj": (h, q), "k_proj": (h, kv), "v_proj": (h, kv), "o_proj": (q, h),
            "gate_proj": (h, i), "up_proj": (h, i), "down_proj": (i, h)}


def make_peft(dst, seed, rank=4, alpha=8, zero_b=False, scale=0.3, config_overrides=None, rank_in_tensors=None):
    """A PEFT LoRA directory for stories260K: A and B uniform in [-scale, scale] from
    `seed` (B = 0 with zero_b, PEFT's fresh adapter)."""
    with open(os.path.join(STORIES, "config.json")) as f:
        cfg = json.load(f)
    rng = random.Random(seed)
    shapes = projection_shapes(cfg)
    r = rank_in_tensors or rank
    tensors = {}
    for layer in range(cfg["num_hidden_layers"]):
        for t in TARGETS:
            fan_in, fan_out = shapes[t]
            block = "self_attn" if t in ("q_proj", "k_proj", "v_proj", "o_proj") else "mlp"
            base = "base_model.model.model.layers.%d.%s.%s" % (layer, block, t)
            tensors[base + ".lora_A.weight"] = ((r, fan_in), [rng.uniform(-scale, scale) for _ in range(r * fan_in)])
            tensors[base + ".lora_B.weight"] = ((fan_out, r), [0.0 if zero_b else rng.uniform(-scale, scale)
                                                               for _ in range(fan_out * r)])
    os.makedirs(dst, exist_ok=True)
    conf = {"peft_type": "LORA", "task_type": "CAUSAL_LM", "base_model_name_or_path": STORIES, "r": rank,
            "lora_alpha": alpha, "target_modules": list(TARGETS), "lora_dropout": 0.0, "bias": "none",
            "fan_in_fan_out": False, "use_rslora": False, "use_dora": False, "inference_mode": True}
    conf.update(config_overrides or {})
    with open(os.path.join(dst, "adapter_config.json"), "w") as f:
        json.dump(conf, f)
    write_safetensors(os.path.join(dst, "adapter_model.safetensors"), tensors)
    return dst


def greedy(prompt, lora=None, n=24, logprobs=True):
    body = {"input_ids": prompt, "return_logprob": logprobs,
            "sampling_params": {"temperature": 0, "max_new_tokens": n, "ignore_eos": True}}
    if lora is not None:
        body["lora_path"] = lora
    return body


def result(out):
    return out["output_ids"], [e[0] for e in out["meta_info"].get("output_token_logprobs", [])]


class EngineLoraTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="rlhost-lora-")
        cls.dir_x = make_peft(os.path.join(cls.tmp, "x"), seed=1)
        cls.dir_y = make_peft(os.path.join(cls.tmp, "y"), seed=2, rank=8, alpha=4)
        cls.dir_zero = make_peft(os.path.join(cls.tmp, "zero"), seed=3, zero_b=True)
        cls.eng = Engine(args=["--served-model-name", "stories", "--kv-cache-tokens", "4096",
                               "--lora-paths", "x=" + cls.dir_x, "--max-loras-per-batch", "2"])
        status, out = cls.eng.post("/load_lora_adapter", {"lora_name": "y", "lora_path": cls.dir_y})
        assert status == 200 and out["success"], (status, out)
        status, out = cls.eng.post("/load_lora_adapter", {"lora_name": "zero", "lora_path": cls.dir_zero})
        assert status == 200 and out["success"], (status, out)

    @classmethod
    def tearDownClass(cls):
        rc = cls.eng.stop()
        shutil.rmtree(cls.tmp, ignore_errors=True)
        assert rc == 0, "rlhost engine exited %s on SIGTERM" % rc

    def setUp(self):
        self.eng.wait_idle()

    def load(self, name, path, expect=200, **kw):
        status, out = self.eng.post("/load_lora_adapter", {"lora_name": name, "lora_path": path}, **kw)
        self.assertEqual(status, expect, out)
        return out

    def unload(self, name, expect=200):
        status, out = self.eng.post("/unload_lora_adapter", {"lora_name": name})
        self.assertEqual(status, expect, out)
        return out

    def alone(self, prompt, lora):
        self.eng.wait_idle()
        return result(self.eng.generate(greedy(prompt, lora)))

    # ---- listing ---------------------------------------------------------------------
    def test_models_and_server_info_list_adapters(self):
        status, models = self.eng.get("/v1/models")
        self.assertEqual(status, 200)
        ids = [m["id"] for m in models["data"]]
        self.assertEqual(ids[0], "stories")
        for name in ("x", "y", "zero"):
            self.assertIn(name, ids)
        x = [m for m in models["data"] if m["id"] == "x"][0]
        self.assertEqual(x["parent"], "stories")
        self.assertEqual(x["root"], self.dir_x)
        status, info = self.eng.get("/get_server_info")
        self.assertEqual(status, 200)
        self.assertEqual(info["max_loras_per_batch"], 2)
        self.assertEqual(info["lora_paths"]["x"], self.dir_x)
        self.assertGreaterEqual(info["internal_states"][0]["lora_adapters"], 3)
        y = [a for a in info["lora_adapters"] if a["name"] == "y"][0]
        self.assertEqual((y["rank"], y["alpha"], y["version"]), (8, 4, "1"))
        self.assertEqual(y["targets"], list(TARGETS))

    # ---- results ---------------------------------------------------------------------
    def test_adapters_change_outputs_and_zero_b_is_the_base_bitwise(self):
        base = self.alone(PROMPT[:5], None)
        x = self.alone(PROMPT[:5], "x")
        y = self.alone(PROMPT[:5], "y")
        self.assertNotEqual(x[1], base[1], "adapter x left the log-probs unchanged")
        self.assertNotEqual(y[1], x[1])
        self.assertNotEqual(x[0], base[0], "adapter x left the greedy tokens unchanged (scale too small?)")
        zero = self.alone(PROMPT[:5], "zero")
        self.assertEqual(zero, base)  # ids and log-probs, bit for bit

    def test_one_batch_of_several_adapters_equals_each_alone(self):
        # x, y, zero and the base: three adapters, above --max-loras-per-batch 2, so one
        # of them waits for a place; every result still equals its request run alone.
        prompts = [PROMPT[:3], PROMPT[:7], PROMPT[:4], PROMPT[:6], PROMPT[:3], PROMPT[:5]]
        loras = ["x", "y", None, "zero", "y", "x"]
        want = [self.alone(p, l) for p, l in zip(prompts, loras)]
        self.eng.wait_idle()
        # One batched /generate with a lora_path per item ...
        body = greedy(prompts, None)
        body["lora_path"] = loras
        outs = self.eng.generate(body)
        self.assertEqual([result(o) for o in outs], want)
        # ... and the same requests as concurrent HTTP calls.
        got = [None] * len(prompts)

        def run(i):
            got[i] = result(self.eng.generate(greedy(prompts[i], loras[i])))
        threads = [threading.Thread(target=run, args=(i,)) for i in range(len(prompts))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        self.assertEqual(got, want)
        # One adapter for every item of a batch.
        body = greedy(prompts[:2], None)
        body["lora_path"] = "x"
        self.assertEqual([result(o) for o in self.eng.generate(body)],
                         [self.alone(prompts[0], "x"), self.alone(prompts[1], "x")])

    def test_prefix_cache_never_crosses_adapters(self):
        prompt = PROMPT[:33] + [random.randrange(3, 500)]  # fresh: nothing cached yet
        first = self.eng.generate(greedy(prompt, None, n=4))
        self.assertEqual(first["meta_info"]["cached_tokens"], 0)
        again = self.eng.generate(greedy(prompt, None, n=4))
        self.assertEqual(again["meta_info"]["cached_tokens"], 32)  # the base's blocks serve the base
        under_x = self.eng.generate(greedy(prompt, "x", n=4))
        self.assertEqual(under_x["meta_info"]["cached_tokens"], 0, "the base's KV was reused under adapter x")
        under_zero = self.eng.generate(greedy(prompt, "zero", n=4))
        self.assertEqual(under_zero["meta_info"]["cached_tokens"], 0, "x's or the base's KV reused under 'zero'")
        x_again = self.eng.generate(greedy(prompt, "x", n=4))
        self.assertEqual(x_again["meta_info"]["cached_tokens"], 32)
        self.assertEqual(result(x_again), result(under_x))  # x's cached prefix gives x's results

    # ---- OpenAI ----------------------------------------------------------------------
    def test_openai_model_names_the_adapter(self):
        want = self.eng.generate({"text": "Once upon a time", "lora_path": "x",
                                  "sampling_params": {"temperature": 0, "max_new_tokens": 8, "ignore_eos": True}})
        base = self.eng.generate({"text": "Once upon a time",
                                  "sampling_params": {"temperature": 0, "max_new_tokens": 8, "ignore_eos": True}})
        self.assertNotEqual(want["text"], base["text"])
        for model in ("stories:x", "x"):
            status, out = self.eng.post("/v1/completions", {"model": model, "prompt": "Once upon a time",
                                                            "max_tokens": 8, "temperature": 0, "ignore_eos": True})
            self.assertEqual(status, 200, out)
            self.assertEqual(out["choices"][0]["text"], want["text"], model)
            self.assertEqual(out["model"], "x")
        status, out = self.eng.post("/v1/completions", {"model": "stories", "prompt": "Once upon a time",
                                                        "max_tokens": 8, "temperature": 0, "ignore_eos": True})
        self.assertEqual(out["choices"][0]["text"], base["text"])
        status, out = self.eng.post("/v1/completions", {"model": "stories:nope", "prompt": "Once", "max_tokens": 2})
        self.assertEqual(status, 400, out)
        self.assertIn("'nope'", out["error"]["message"])
        self.assertIn("x", out["error"]["message"])

    # ---- errors ----------------------------------------------------------------------
    def test_unknown_adapter_is_a_400_naming_the_loaded_ones(self):
        status, out = self.eng.post("/generate", greedy(PROMPT[:3], "nope"))
        self.assertEqual(status, 400, out)
        msg = out["error"]["message"]
        self.assertIn("lora_path", msg)
        self.assertIn("'nope'", msg)
        for name in ("x", "y", "zero"):
            self.assertIn(name, msg)
        body = greedy([PROMPT[:3], PROMPT[:4]], None)
        body["lora_path"] = ["x", "nope"]
        status, out = self.eng.post("/generate", body)
        self.assertEqual(status, 400, out)
        self.assertIn("lora_path[1]", out["error"]["message"])
        body["lora_path"] = ["x"]
        status, out = self.eng.post("/generate", body)
        self.assertEqual(status, 400, out)
        self.assertIn("1 entries for 2 prompts", out["error"]["message"])

    def test_bad_adapters_are_clear_400s_and_the_server_keeps_serving(self):
        before = self.alone(PROMPT[:4], "x")
        missing = os.path.join(self.tmp, "no-such-dir")
        out = self.load("bad", missing, expect=400)
        self.assertFalse(out["success"])
        self.assertIn("'bad'", out["error_message"])
        self.assertIn(missing, out["error_message"])
        ia3 = make_peft(os.path.join(self.tmp, "ia3"), seed=4, config_overrides={"peft_type": "IA3"})
        out = self.load("bad", ia3, expect=400)
        self.assertIn("peft_type", out["error_message"])
        wrong = make_peft(os.path.join(self.tmp, "wrong-shape"), seed=5, rank=4, rank_in_tensors=3)
        out = self.load("bad", wrong, expect=400)
        self.assertIn("wrong-shape", out["error_message"])
        no_weights = os.path.join(self.tmp, "no-weights")
        os.makedirs(no_weights, exist_ok=True)
        shutil.copy(os.path.join(self.dir_x, "adapter_config.json"), no_weights)
        out = self.load("bad", no_weights, expect=400)
        self.assertIn("adapter_model.safetensors", out["error_message"])
        for body, field in (({"lora_path": self.dir_x}, "lora_name"), ({"lora_name": "b"}, "lora_path"),
                            ({"lora_name": "a b", "lora_path": self.dir_x}, "lora_name")):
            status, out = self.eng.post("/load_lora_adapter", body)
            self.assertEqual(status, 400, out)
            self.assertIn(field, json.dumps(out))
        # A failed replacement leaves the adapter as it was.
        out = self.load("x", ia3, expect=400)
        self.assertNotIn("bad", out["loaded_adapters"])
        self.assertEqual(self.alone(PROMPT[:4], "x"), before)
        self.assertEqual(self.eng.get("/health")[0], 200)

    def test_load_and_unload_need_the_admin_token(self):
        for path, body in (("/load_lora_adapter", {"lora_name": "t", "lora_path": self.dir_x}),
                           ("/unload_lora_adapter", {"lora_name": "x"})):
            status, out = self.eng.post(path, body, auth=False)
            self.assertIn(status, (401, 403), out)
            status, out = self.eng.post(path, body, headers={"Authorization": "Bearer wrong"})
            self.assertIn(status, (401, 403), out)
        status, models = self.eng.get("/v1/models")
        ids = [m["id"] for m in models["data"]]
        self.assertNotIn("t", ids)
        self.assertIn("x", ids)

    # ---- unloading and replacing --------------------------------------------------------
    def test_unload_refuses_while_in_use_then_unloads(self):
        self.load("w", self.dir_y)
        self.assertEqual(self.alone(PROMPT[:4], "w"), self.alone(PROMPT[:4], "y"))
        long = {"input_ids": PROMPT[:3], "rid": "lora-long", "lora_path": "w",
                "sampling_params": {"temperature": 0, "max_new_tokens": 500, "ignore_eos": True}}
        done = {}
        t = threading.Thread(target=lambda: done.setdefault("out", self.eng.generate(long)))
        t.start()
        wait_for(lambda: self.eng.loads() > 0, timeout=30, what="the long request to run")
        out = self.unload("w", expect=400)
        self.assertIn("in use by 1", out["error_message"])
        self.assertIn("w", out["loaded_adapters"])
        self.eng.post("/abort_request", {"rid": "lora-long"})
        t.join(60)
        self.assertEqual(done["out"]["meta_info"]["finish_reason"]["type"], "abort")
        self.eng.wait_idle()
        out = self.unload("w")
        self.assertNotIn("w", out["loaded_adapters"])
        status, out = self.eng.post("/generate", greedy(PROMPT[:3], "w"))
        self.assertEqual(status, 400, out)
        out = self.unload("w", expect=400)
        self.assertIn("'w'", out["error_message"])

    def test_sync_replaces_an_adapter_in_place(self):
        # update_weights_from_disk with lora_name: the trainer's adapter sync by directory.
        self.load("s", self.dir_x)
        prompt = PROMPT[:33] + [random.randrange(3, 500)]
        as_x = self.eng.generate(greedy(prompt, "s", n=4))
        self.assertEqual(self.eng.generate(greedy(prompt, "s", n=4))["meta_info"]["cached_tokens"], 32)
        status, out = self.eng.post("/update_weights_from_disk", {"model_path": self.dir_y, "lora_name": "s"})
        self.assertEqual(status, 200, out)
        self.assertEqual(out["weight_version"], "2")
        as_y = self.eng.generate(greedy(prompt, "s", n=4))
        self.assertEqual(as_y["meta_info"]["cached_tokens"], 0, "KV computed under the old adapter was reused")
        self.assertEqual((as_x["meta_info"]["lora_path"], as_x["meta_info"]["lora_version"]), ("s", "1"))
        self.assertEqual((as_y["meta_info"]["lora_path"], as_y["meta_info"]["lora_version"]), ("s", "2"))
        base = self.eng.generate(greedy(prompt, None, n=1))
        self.assertNotIn("lora_version", base["meta_info"])
        # the log-prob digest is of base + adapter by value: the same tensors under another
        # name give the same digest, other tensors (or none) another
        under_y = self.eng.generate(greedy(prompt, "y", n=4))
        digest = {name: out["meta_info"]["logprob_digest"] for name, out in
                  (("s1", as_x), ("s2", as_y), ("y", under_y), ("base", base),
                   ("x", self.eng.generate(greedy(prompt, "x", n=4))))}
        self.assertEqual(digest["s1"], digest["x"])
        self.assertEqual(digest["s2"], digest["y"])
        self.assertEqual(len(set(digest.values())), 3, digest)
        self.assertEqual(result(as_y), result(under_y))
        self.assertNotEqual(result(as_y), result(as_x))
        out = self.load("s", self.dir_x)
        self.assertEqual(out["weight_version"], "3")
        self.assertEqual(self.alone(PROMPT[:4], "s"), self.alone(PROMPT[:4], "x"))
        status, base_version = self.eng.get("/get_model_info")
        self.assertEqual(base_version["weight_version"], "default")  # the base weights did not move
        self.unload("s")

    # ---- Lua handles -----------------------------------------------------------------
    def test_lua_handles_load_and_unload_in_both_modes(self):
        script = os.path.join(self.tmp, "handles.lua")
        with open(script, "w") as f:
            f.write(LUA_HANDLES)
        want_x = self.alone(PROMPT[:4], "x")[0]
        want_y = self.alone(PROMPT[:4], "y")[0]
        for mode in ("thread", "process"):
            out = lua_json(self, script, STORIES, self.dir_x, self.dir_y, mode)
            self.assertEqual(out["x"], want_x, mode)
            self.assertEqual(out["y"], want_y, mode)
            self.assertTrue(out["loaded"], mode)
            self.assertEqual(out["count"], 2, mode)
            self.assertIn("no-such-dir", out["bad"], mode)
            self.assertIn("'y'", out["after_unload"], mode)
            self.assertEqual(out["unknown_unload"] is not None, True, mode)


# arg: model, dir_x, dir_y, mode. Prints what the handles did, as JSON.
LUA_HANDLES = r"""
local model, dir_x, dir_y, mode = arg[1], arg[2], arg[3], arg[4]
local eng = assert(rl.engine.start { model = model, mode = mode, threads = 1, lora_paths = { "x=" .. dir_x } })
local function ids(lora)
  local out, err = eng:generate { input_ids = { 1, 403, 407, 261 }, lora_path = lora,
    sampling_params = { temperature = 0, max_new_tokens = 24, ignore_eos = true } }
  return out and out.output_ids, err
end
local r = {}
r.x = assert(ids("x"))
r.loaded = assert(eng:load_lora("y", dir_y)).success
r.y = assert(ids("y"))
r.count = assert(eng:stats()).lora_adapters
local ok, err = eng:load_lora("bad", dir_x .. "/no-such-dir")
r.bad = ok == nil and err or "loaded?"
assert(eng:unload_lora("y"))
local _, gerr = ids("y")
r.after_unload = gerr
local _, uerr = eng:unload_lora("y")
r.unknown_unload = uerr
eng:stop()
print(rl.json.encode(r))
"""


if __name__ == "__main__":
    unittest.main()
