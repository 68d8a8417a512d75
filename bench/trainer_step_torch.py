"""Peer of bench/trainer_step.lua: the same GRPO optimiser step in Python PyTorch
with Hugging Face transformers' Llama (sdpa attention): log-probs of the response
tokens, ratio exp(logp - logp.detach()), PPO-clip loss averaged per sample then
over samples, backward, clip_grad_norm_(1.0), AdamW. Same shapes, same threads.
  python3 bench/trainer_step_torch.py MODEL_DIR THREADS [batch] [tokens] [steps] [device=cpu] [bf16=0]
On CUDA with bf16=1: float32 master weights under torch.autocast(bfloat16), as rlhost's --bf16.
RAGGED=1: sample i (from 1) holds T/4 prompt and 3T/4 * i/B response tokens, right-padded
to T (as transformers batches them; no attention mask: under causal attention padding after
a sequence changes none of its outputs, and the loss mask leaves it out); tok/s counts real
tokens."""
import os, sys, time
import torch
from transformers import AutoModelForCausalLM

model_dir, threads = sys.argv[1], int(sys.argv[2])
B = int(sys.argv[3]) if len(sys.argv) > 3 else 8
T = int(sys.argv[4]) if len(sys.argv) > 4 else 256
steps = int(sys.argv[5]) if len(sys.argv) > 5 else 3
device = sys.argv[6] if len(sys.argv) > 6 else "cpu"
bf16 = len(sys.argv) > 7 and sys.argv[7] == "1"
prompt = T // 4
torch.set_num_threads(threads)
torch.manual_seed(0)
model = AutoModelForCausalLM.from_pretrained(model_dir, torch_dtype=torch.float32, attn_implementation="sdpa").to(device)
model.train()
V = model.config.vocab_size
ids = torch.randint(0, V, (B, T)).to(device)
adv = torch.tensor([1.0 if (i + 1) % 2 == 0 else -1.0 for i in range(B)]).unsqueeze(1).to(device)
ragged = os.environ.get("RAGGED") == "1"
resp = [max(1, (T - prompt) * (i + 1) // B) if ragged else T - prompt for i in range(B)]
mask = torch.zeros(B, T - 1, device=device)
for i, r in enumerate(resp):
    mask[i, prompt - 1:prompt - 1 + r] = 1.0
real = sum(prompt + r for r in resp)
opt = torch.optim.AdamW(model.parameters(), lr=1e-6)

def step():
    opt.zero_grad(set_to_none=True)
    with torch.autocast(device_type=torch.device(device).type, dtype=torch.bfloat16, enabled=bf16):
        logits = model(ids).logits[:, :-1].float()
    logp = torch.log_softmax(logits, -1).gather(-1, ids[:, 1:].unsqueeze(-1)).squeeze(-1)
    ratio = torch.exp(logp - logp.detach())
    pg = torch.maximum(-ratio * adv, -ratio.clamp(0.8, 1.2) * adv)
    loss = ((pg * mask).sum(1) / mask.sum(1).clamp_min(1)).mean()
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()

def sync():
    if device.startswith("cuda"): torch.cuda.synchronize()

step()
sync()
t0 = time.perf_counter()
for _ in range(steps):
    step()
sync()
dt = (time.perf_counter() - t0) / steps
print(f"RESULT impl=torch threads={threads} batch={B} tokens={T} device={device} bf16={int(bf16)} ragged={int(ragged)} "
      f"step_s={dt:.3f} tok_s={real / dt:.1f}")
