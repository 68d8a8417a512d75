#!/usr/bin/env python3
"""The peer of bench_forward: the same model directory in transformers (PyTorch),
same ids (torch.randint with generator seed 0), same loss (mean negative
log-likelihood of the next token), forward+backward, best of `iters` steps.

    python3 bench/forward_torch.py MODEL_DIR [batch] [seq] [iters] [threads]
"""
import sys
import time

import torch
import transformers


def main():
    model_dir = sys.argv[1]
    batch, seq, iters = (int(a) for a in (sys.argv[2:5] + ["2", "256", "3"][len(sys.argv[2:5]):]))
    threads = int(sys.argv[5]) if len(sys.argv) > 5 else 0
    if threads > 0:
        torch.set_num_threads(threads)
    model = transformers.AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    model.train()
    n_params = sum(p.numel() for p in model.parameters())
    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(0, model.config.vocab_size, (batch, seq), generator=gen)

    def step():
        logits = model(ids).logits[:, :-1].float()
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.size(-1)), ids[:, 1:].reshape(-1))
        loss.backward()
        model.zero_grad(set_to_none=True)
        return loss.item()

    first_loss = step()
    best = 1e30
    for _ in range(iters):
        t0 = time.perf_counter()
        step()
        best = min(best, time.perf_counter() - t0)
    print("RESULT impl=pytorch params=%d tokens=%d threads=%d best_step_s=%.4f tok_per_s=%.1f loss=%.6f"
          % (n_params, batch * seq, torch.get_num_threads(), best, batch * seq / best, first_loss))


if __name__ == "__main__":
    main()
