#!/usr/bin/env python3
"""rlhost's transformer against Hugging Face `transformers` on random tiny models.

rl.model.init writes a random-initialised model directory; rlhost and
transformers each load it and compute logits for the same ids, which must agree
to 1e-4 in float32. This also proves that directories rlhost writes load in
transformers. Needs `torch` and `transformers` in python3 (scripts/test.sh
installs them); without them it is skipped (ctest: Skipped) naming what to install,
and under CI=true it fails.

    RLHOST_BIN=build/rlhost python3 tests/e2e/test_model_parity.py
"""
import json
import os
import subprocess
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from support import BIN, RlhostTestCase  # noqa: E402
import support  # noqa: E402

try:
    import torch
    import transformers
except Exception as e:  # pragma: no cover - depends on the machine
    torch = transformers = None
    IMPORT_ERROR = repr(e)

IDS = [1, 17, 42, 99, 250, 3, 3, 77, 180, 299, 0, 64, 128, 5]

BASE = {
    "vocab_size": 300, "hidden_size": 64, "intermediate_size": 96, "num_hidden_layers": 3,
    "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 256,
    "rms_norm_eps": 1e-6, "rope_theta": 10000.0, "initializer_range": 0.2,
}

FAMILIES = {
    "qwen3": dict(architectures=["Qwen3ForCausalLM"], model_type="qwen3", head_dim=32, tie_word_embeddings=False),
    "qwen2": dict(architectures=["Qwen2ForCausalLM"], model_type="qwen2", tie_word_embeddings=True),
    "llama_llama3_rope": dict(architectures=["LlamaForCausalLM"], model_type="llama", attention_bias=True,
                              mlp_bias=True, rope_scaling={"rope_type": "llama3", "factor": 8.0,
                                                           "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                                           "original_max_position_embeddings": 8}),
    "llama_linear_rope": dict(architectures=["LlamaForCausalLM"], model_type="llama",
                              rope_scaling={"type": "linear", "factor": 2.0}, rope_theta=500.0),
}

LUA = r"""
local cfg = rl.json.decode(arg[1])
local dir = assert(rl.model.init{config = cfg, seed = 5, dir = arg[2]})
local m = assert(rl.model.load(dir))
local ids = rl.json.decode(arg[3])
print(rl.json.encode({logits = m:logits(ids), logprobs = m:logprobs(ids), generated = m:generate(ids, {max_new_tokens = 6, stop_token_ids = {}})}))
"""


@support.requires(transformers is not None,
                  "torch and transformers (Python) are needed: %s" % (IMPORT_ERROR if transformers is None else ""),
                  support.PIP_HINT % "'transformers==5.23.0'")
class TransformersParity(RlhostTestCase):
    def run_rlhost(self, cfg, model_dir):
        script = os.path.join(self.dir, "parity.lua")
        with open(script, "w") as f:
            f.write(LUA)
        p = subprocess.run([BIN, script, json.dumps(cfg), model_dir, json.dumps(IDS)], capture_output=True,
                           text=True, env=self.env, timeout=120)
        self.assertEqual(p.returncode, 0, p.stderr)
        return json.loads(p.stdout.strip().splitlines()[-1])

    def check_family(self, name):
        cfg = dict(BASE, **FAMILIES[name])
        model_dir = os.path.join(self.dir, name)
        ours = self.run_rlhost(cfg, model_dir)
        model = transformers.AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
        model.eval()
        with torch.no_grad():
            ref = model(torch.tensor([IDS])).logits[0].double()
            got = torch.tensor(ours["logits"], dtype=torch.float64)
            diff = (got - ref).abs().max().item()
            print("%s: max |logit diff| vs transformers %s = %.2e" % (name, transformers.__version__, diff),
                  file=sys.stderr)
            self.assertLess(diff, 1e-4)
            ref_lp = torch.log_softmax(ref, -1)[:-1].gather(1, torch.tensor(IDS[1:]).unsqueeze(1)).squeeze(1)
            self.assertLess((torch.tensor(ours["logprobs"], dtype=torch.float64) - ref_lp).abs().max().item(), 1e-4)
            # Greedy continuation through rlhost's KV cache vs transformers' own decoding.
            seq = list(IDS)
            for _ in range(6):
                seq.append(int(model(torch.tensor([seq])).logits[0, -1].argmax()))
            self.assertEqual(ours["generated"], seq[len(IDS):])

    def test_qwen3(self):
        self.check_family("qwen3")

    def test_qwen2(self):
        self.check_family("qwen2")

    def test_llama_llama3_rope(self):
        self.check_family("llama_llama3_rope")

    def test_llama_linear_rope(self):
        self.check_family("llama_linear_rope")

    def test_written_tokenizer_loads_in_transformers(self):
        model_dir = os.path.join(self.dir, "tok")
        self.run_rlhost(dict(BASE, **FAMILIES["qwen2"]), model_dir)
        tok = transformers.AutoTokenizer.from_pretrained(model_dir)
        self.assertEqual(tok.encode("Hi 42"), [ord(c) for c in "Hi 42"][:2] + [tok.convert_tokens_to_ids("Ġ"), 52, 50])
        text = tok.apply_chat_template([{"role": "user", "content": "2+2?"}], tokenize=False,
                                       add_generation_prompt=True)
        self.assertEqual(text, "<|im_start|>user\n2+2?<|im_end|>\n<|im_start|>assistant\n")


if __name__ == "__main__":
    support.main()
