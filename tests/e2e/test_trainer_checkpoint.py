#!/usr/bin/env python3
"""Trainer checkpoints open in Hugging Face `transformers`.

rlhost trains a random tiny model for two steps and saves a checkpoint
(tr:save); transformers loads ROOT/iter_0000002 with AutoModelForCausalLM and
AutoTokenizer, and its logits equal rlhost's trained model's to 1e-4 (and differ
from the untrained model's, so the trained weights are what was saved). The
optimizer archive opens in Python too. Needs `torch` and `transformers` in
python3; without them it is skipped (ctest: Skipped) naming what to install, and
under CI=true it fails.

    RLHOST_BIN=build/rlhost python3 tests/e2e/test_trainer_checkpoint.py
"""
import json
import os
import subprocess
import sys
import unittest
import warnings

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from support import BIN, RlhostTestCase  # noqa: E402
import support  # noqa: E402

try:
    import torch
    import transformers
except Exception as e:  # pragma: no cover - depends on the machine
    torch = transformers = None
    IMPORT_ERROR = repr(e)

IDS = [1, 17, 42, 99, 250, 3, 3, 77, 180, 299, 0, 64]

BASE = {
    "vocab_size": 300, "hidden_size": 64, "intermediate_size": 96, "num_hidden_layers": 2,
    "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 128,
    "rms_norm_eps": 1e-6, "rope_theta": 10000.0,
}
FAMILIES = {
    "qwen2_tied": dict(architectures=["Qwen2ForCausalLM"], model_type="qwen2", tie_word_embeddings=True),
    "llama": dict(architectures=["LlamaForCausalLM"], model_type="llama", tie_word_embeddings=False),
}

LUA = r"""
local cfg, work, ids = rl.json.decode(arg[1]), arg[2], rl.json.decode(arg[3])
local init = assert(rl.model.init { config = cfg, seed = 9, dir = work .. "/init" })
local tr = rl.trainer.new { model = init, optimizer = { lr = 5e-2 }, micro_batch_size = 2 }
local batch = { tokens = { { 5, 6, 7, 8, 9 }, { 10, 11, 12, 13, 14 } }, response_lengths = { 3, 3 },
                rewards = { 1, -1 }, loss_masks = { { 1, 1, 1 }, { 1, 1, 1 } } }
for _ = 1, 2 do assert(tr:train(batch)) end
local saved = assert(tr:save(work .. "/ckpt", { extra = { note = "e2e" } }))
print(rl.json.encode { path = saved.path, logits = tr.model:logits(ids) })
"""


@support.requires(transformers is not None,
                  "torch and transformers (Python) are needed: %s" % (IMPORT_ERROR if transformers is None else ""),
                  support.PIP_HINT % "'transformers==5.23.0'")
class CheckpointInTransformers(RlhostTestCase):
    def save_checkpoint(self, name):
        work = os.path.join(self.dir, name)
        os.makedirs(work)
        script = os.path.join(self.dir, name + ".lua")
        with open(script, "w") as f:
            f.write(LUA)
        cfg = dict(BASE, **FAMILIES[name])
        p = subprocess.run([BIN, "--no-control", script, json.dumps(cfg), work, json.dumps(IDS)], capture_output=True,
                           text=True, env=self.env, timeout=180)
        self.assertEqual(p.returncode, 0, p.stderr)
        return work, json.loads(p.stdout.strip().splitlines()[-1])

    def check_family(self, name):
        work, ours = self.save_checkpoint(name)
        path = ours["path"]
        self.assertEqual(path, os.path.join(work, "ckpt", "iter_0000002"))
        with open(os.path.join(work, "ckpt", "latest_checkpointed_iteration.txt")) as f:
            self.assertEqual(f.read(), "2\n")
        with open(os.path.join(path, "trainer_state.json")) as f:
            state = json.load(f)
        self.assertEqual((state["step"], state["iteration"], state["extra"]), (2, 2, {"note": "e2e"}))

        model = transformers.AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
        init = transformers.AutoModelForCausalLM.from_pretrained(os.path.join(work, "init"), dtype=torch.float32).eval()
        with torch.no_grad():
            ref = model(torch.tensor([IDS])).logits[0].double()
            untrained = init(torch.tensor([IDS])).logits[0].double()
        got = torch.tensor(ours["logits"], dtype=torch.float64)
        diff = (got - ref).abs().max().item()
        moved = (untrained - ref).abs().max().item()
        print("%s: checkpoint in transformers %s: max |logit diff| %.2e (training moved logits by %.2e)"
              % (name, transformers.__version__, diff, moved), file=sys.stderr)
        self.assertLess(diff, 1e-4)
        self.assertGreater(moved, 1e-3)

        tok = transformers.AutoTokenizer.from_pretrained(path)
        self.assertEqual(tok.decode(tok.encode("Hi 42")), "Hi 42")

        # optimizer.pt is a LibTorch archive: TorchScript's loader opens it.
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)  # torch.jit is deprecated, still reads the format
            archive = torch.jit.load(os.path.join(path, "optimizer.pt"), map_location="cpu")
        buffers = dict(archive.named_buffers())
        names = [n for n, _ in model.named_parameters()]
        self.assertEqual(len([k for k in buffers if k.startswith("exp_avg/")]), len(names))

    def test_qwen2_tied_embeddings(self):
        self.check_family("qwen2_tied")

    def test_llama(self):
        self.check_family("llama")


if __name__ == "__main__":
    support.main()
