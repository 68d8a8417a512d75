#!/usr/bin/env python3
"""rlhost's LoRA adapters against Hugging Face `peft` on a random tiny Qwen3 model.

rlhost writes a random model and a LoRA adapter with non-zero B (every projection and
lm_head) as PEFT files; peft loads them over transformers' model, and its logits and
the gradients of every lora_A / lora_B for a next-token cross-entropy loss must equal
rlhost's (rl.model:lora_grads) to 1e-5 in float32. The other way round, an adapter
peft makes and saves (get_peft_model + save_pretrained) loads in rlhost
(rl.model.load_lora) and gives peft's logits. Needs torch, transformers and peft in
python3; without them the test is skipped naming what to install (under CI=true it fails).

    RLHOST_BIN=build/rlhost python3 tests/e2e/test_lora_peft.py
"""
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from support import BIN, RlhostTestCase  # noqa: E402
import support  # noqa: E402

try:
    import torch
    import transformers
    import peft
except Exception as e:  # pragma: no cover - depends on the machine
    torch = transformers = peft = None
    IMPORT_ERROR = repr(e)

IDS = [1, 17, 42, 99, 250, 3, 3, 77, 180, 299, 0, 64, 128, 5]

CONFIG = {
    "vocab_size": 300, "hidden_size": 64, "intermediate_size": 96, "num_hidden_layers": 2,
    "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 256,
    "rms_norm_eps": 1e-6, "rope_theta": 10000.0, "architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3",
    "head_dim": 32, "tie_word_embeddings": False,
}

LUA = r"""
local mode, model_dir, adapter_dir = arg[1], arg[2], arg[3]
local ids = rl.json.decode(arg[4])
if mode == "make" then
  assert(rl.model.init{config = rl.json.decode(arg[5]), seed = 5, dir = model_dir})
end
local m = assert(rl.model.load(model_dir))
local a
if mode == "make" then
  a = m:new_lora{rank = 4, alpha = 8, seed = 3, identity = false,
                 target_modules = {"all-linear", "lm_head"}}
  assert(a:save_peft(adapter_dir, model_dir))
else
  a = assert(rl.model.load_lora(adapter_dir, m))
end
m:set_lora(a)
local out = {logits = m:logits(ids), config = a.config}
if mode == "make" then out.grads = m:lora_grads(ids) end
print(rl.json.encode(out))
"""


@support.requires(peft is not None,
                  "torch, transformers and peft (Python) are needed: %s" % (IMPORT_ERROR if peft is None else ""),
                  support.PIP_HINT % "'transformers==5.23.0' 'peft==0.21.2'")
class PeftParity(RlhostTestCase):
    def rlhost(self, *args):
        script = os.path.join(self.dir, "lora.lua")
        with open(script, "w") as f:
            f.write(LUA)
        p = subprocess.run([BIN, script] + list(args), capture_output=True, text=True, env=self.env, timeout=180)
        self.assertEqual(p.returncode, 0, p.stderr)
        return json.loads(p.stdout.strip().splitlines()[-1])

    def base(self, model_dir):
        return transformers.AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)

    def test_rlhost_adapter_in_peft(self):
        model_dir, adapter_dir = os.path.join(self.dir, "model"), os.path.join(self.dir, "adapter")
        ours = self.rlhost("make", model_dir, adapter_dir, json.dumps(IDS), json.dumps(CONFIG))
        with open(os.path.join(adapter_dir, "adapter_config.json")) as f:
            cfg = json.load(f)
        self.assertEqual((cfg["peft_type"], cfg["task_type"], cfg["r"], cfg["lora_alpha"]), ("LORA", "CAUSAL_LM", 4, 8))
        self.assertEqual(cfg["base_model_name_or_path"], model_dir)
        model = peft.PeftModel.from_pretrained(self.base(model_dir), adapter_dir, is_trainable=True)
        model.eval()  # no dropout (lora_dropout is 0 anyway)
        ids = torch.tensor([IDS])
        logits = model(ids).logits[0]
        diff = (torch.tensor(ours["logits"], dtype=torch.float32) - logits.detach()).abs().max().item()
        print("logits: max |rlhost - peft| = %.2e (peft %s)" % (diff, peft.__version__), file=sys.stderr)
        self.assertLess(diff, 1e-5)
        # The adapter is not the identity: with it disabled the logits move.
        with model.disable_adapter(), torch.no_grad():
            plain = model(ids).logits[0]
        self.assertGreater((plain - logits.detach()).abs().max().item(), 1e-3)
        # Gradients of the mean next-token cross-entropy for every lora_A / lora_B.
        loss = torch.nn.functional.cross_entropy(logits[:-1], ids[0, 1:])
        loss.backward()
        seen = 0
        worst = 0.0
        for name, p in model.named_parameters():
            if "lora_" not in name:
                continue
            key = name.replace(".default.", ".")
            self.assertIn(key, ours["grads"], "rlhost has no gradient for " + key)
            got = torch.tensor(ours["grads"][key], dtype=torch.float32).view_as(p)
            worst = max(worst, (got - p.grad).abs().max().item())
            self.assertGreater(p.grad.abs().max().item(), 0, key)
            seen += 1
        print("gradients: %d tensors, max |rlhost - peft| = %.2e" % (seen, worst), file=sys.stderr)
        self.assertEqual(seen, len(ours["grads"]))
        self.assertEqual(seen, 2 * (2 * 7 + 1))
        self.assertLess(worst, 1e-5)

    def test_peft_adapter_in_rlhost(self):
        model_dir, adapter_dir = os.path.join(self.dir, "model"), os.path.join(self.dir, "peft")
        self.rlhost("make", model_dir, os.path.join(self.dir, "unused"), json.dumps(IDS), json.dumps(CONFIG))
        torch.manual_seed(0)
        cfg = peft.LoraConfig(r=2, lora_alpha=3, target_modules=["q_proj", "v_proj", "down_proj"],
                              init_lora_weights=False, task_type="CAUSAL_LM")
        model = peft.get_peft_model(self.base(model_dir), cfg)
        model.eval()
        model.save_pretrained(adapter_dir)
        with torch.no_grad():
            want = model(torch.tensor([IDS])).logits[0]
        ours = self.rlhost("load", model_dir, adapter_dir, json.dumps(IDS))
        self.assertEqual(sorted(ours["config"]["target_modules"]), ["down_proj", "q_proj", "v_proj"])
        self.assertEqual(ours["config"]["rank"], 2)
        diff = (torch.tensor(ours["logits"], dtype=torch.float32) - want).abs().max().item()
        print("peft-saved adapter: max |rlhost - peft| = %.2e" % diff, file=sys.stderr)
        self.assertLess(diff, 1e-5)
        # What rlhost cannot apply is refused naming the file and the field.
        with open(os.path.join(adapter_dir, "adapter_config.json")) as f:
            j = json.load(f)
        j["use_dora"] = True
        with open(os.path.join(adapter_dir, "adapter_config.json"), "w") as f:
            json.dump(j, f)
        script = os.path.join(self.dir, "bad.lua")
        with open(script, "w") as f:
            f.write("local m = assert(rl.model.load(arg[1]))\nprint(select(2, rl.model.load_lora(arg[2], m)))\n")
        p = subprocess.run([BIN, script, model_dir, adapter_dir], capture_output=True, text=True, env=self.env,
                           timeout=120)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("adapter_config.json: use_dora", p.stdout)


if __name__ == "__main__":
    support.main()
