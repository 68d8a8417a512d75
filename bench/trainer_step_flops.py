"""Where bench/trainer_step.sh stands against the machine: the arithmetic of one GRPO
optimiser step (forward + backward = 3x the forward's multiply-adds) as each side does
it, and the roof: MKL's sgemm (torch.mm, same threads) on the step's own GEMM shapes,
weighted by their share of the step's arithmetic.
  python3 bench/trainer_step_flops.py MODEL_DIR THREADS BATCH TOKENS
Prints one line: FLOPS rlhost=<flop> torch=<flop> roof_gflops=<GFLOP/s>.
rlhost sends only the response positions (TOKENS - TOKENS/4 per sequence) through the
lm_head; the PyTorch peer all of them (as such steps are usually written)."""
import json, sys, time
import torch

model_dir, threads, B, T = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
c = json.load(open(f"{model_dir}/config.json"))
H, I, L, V = c["hidden_size"], c["intermediate_size"], c["num_hidden_layers"], c["vocab_size"]
heads = c["num_attention_heads"]
D = c.get("head_dim") or H // heads
kv = c.get("num_key_value_heads") or heads
M = B * T
R = B * (T - T // 4)
# per token, multiply-adds: q, o (H x heads*D); k, v (H x kv*D); gate, up, down (H x I)
layer_macs = H * heads * D * 2 + H * kv * D * 2 + 3 * H * I
attn_macs = L * B * 2 * heads * D * T * (T + 1) // 2  # causal QK^T and PV
def step_flops(head_rows):
    return 3 * 2 * (L * layer_macs * M + attn_macs + head_rows * H * V)
shapes = [((M, H), (H, heads * D), 2 * L), ((M, H), (H, kv * D), 2 * L), ((M, H), (H, I), 2 * L),
          ((M, I), (I, H), L), ((R, H), (H, V), 1)]
torch.set_num_threads(threads)
flop = secs = 0.0
for (a, b), (_, n), count in shapes:
    x, w = torch.randn(a, b), torch.randn(b, n)
    x @ w
    reps = max(1, int(2e9 // (2 * a * b * n)))
    t0 = time.perf_counter()
    for _ in range(reps):
        x @ w
    dt = (time.perf_counter() - t0) / reps
    flop += 2 * a * b * n * count
    secs += dt * count
print(f"FLOPS rlhost={step_flops(R)} torch={step_flops(M)} roof_gflops={flop / secs / 1e9:.1f}")
