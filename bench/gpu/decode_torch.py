"""Peers of bench/gpu/decode.lua on the same GPU, same model directory, same shapes:
(a) Hugging Face transformers' generate() (bf16, greedy), and (b) a plain PyTorch decode
loop (Llama / Qwen2 / Qwen3 forward over a static [B, KV, T, D] cache) with each decode
step captured in one CUDA graph and replayed; optionally (c) the same step with every
layer through torch.compile before the capture. Also the device's copy bandwidth and
each peer's GPU-busy fraction from a torch.profiler trace.

    python3 decode_torch.py MODEL_DIR BATCH[,BATCH...] [new=128] [prompt=16] [--only hf,graph,compile (default hf,graph)] [--trace DIR]
Prints RESULT lines like decode.lua.
"""
import json
import os
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from trace_busy import busy_fraction  # noqa: E402
from engine_decode_torch import layer_weights  # noqa: E402  (bench/: the CPU peers' fused layer weights)

DEV = os.environ.get("RLHOST_BENCH_DEVICE", "cuda")  # cpu: to check the loop's forward against transformers


def load_weights(model_dir, dtype):
    from safetensors.torch import load_file
    import glob
    w = {}
    for f in sorted(glob.glob(model_dir + "/*.safetensors")):
        w.update({k: v.to(DEV, dtype) for k, v in load_file(f).items()})
    return w


class StaticDecoder:
    """The model's forward for decoding over a static cache, fused qkv and gate/up weights."""

    def __init__(self, cfg, w, batch, max_len):
        self.L, self.H = cfg["num_hidden_layers"], cfg["num_attention_heads"]
        self.KV = cfg.get("num_key_value_heads", self.H)
        self.D = cfg.get("head_dim") or cfg["hidden_size"] // self.H
        self.eps = cfg["rms_norm_eps"]
        self.embed = w["model.embed_tokens.weight"]
        self.lm_head = w.get("lm_head.weight", self.embed)
        self.norm = w["model.norm.weight"]
        self.layers = [layer_weights(w, i) for i in range(self.L)]
        dt = self.embed.dtype
        inv = 1.0 / (cfg.get("rope_theta", 10000.0) ** (torch.arange(0, self.D, 2, dtype=torch.float32) / self.D))
        f = torch.outer(torch.arange(max_len, dtype=torch.float32), inv)
        emb = torch.cat([f, f], -1)
        self.cos, self.sin = emb.cos().to(DEV, dt), emb.sin().to(DEV, dt)
        self.B, self.T = batch, max_len
        self.kc = [torch.zeros(batch, self.KV, max_len, self.D, device=DEV, dtype=dt) for _ in range(self.L)]
        self.vc = [torch.zeros_like(k) for k in self.kc]
        self.layer_fn = self.layer

    def rms(self, x, w):
        xf = x.float()
        return w * (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)).to(x.dtype)

    def rope(self, x, c, s):
        x1, x2 = x[..., : self.D // 2], x[..., self.D // 2:]
        return x * c + torch.cat([-x2, x1], -1) * s

    def layer(self, x, i, pos, c, s, mask):
        l, B, T = self.layers[i], x.shape[0], x.shape[1]
        qd, kd = self.H * self.D, self.KV * self.D
        h = self.rms(x, l["ln1"])
        qkv = h @ l["qkv"].t()
        if l["qkv_b"] is not None:
            qkv = qkv + l["qkv_b"]
        q = qkv[..., :qd].view(B, T, self.H, self.D)
        k = qkv[..., qd:qd + kd].view(B, T, self.KV, self.D)
        v = qkv[..., qd + kd:].view(B, T, self.KV, self.D)
        if l["qn"] is not None:
            q, k = self.rms(q, l["qn"]), self.rms(k, l["kn"])
        q = self.rope(q, c, s).transpose(1, 2)
        k = self.rope(k, c, s).transpose(1, 2)
        self.kc[i].index_copy_(2, pos, k)
        self.vc[i].index_copy_(2, pos, v.transpose(1, 2))
        a = torch.nn.functional.scaled_dot_product_attention(q, self.kc[i], self.vc[i], attn_mask=mask,
                                                             enable_gqa=self.KV != self.H)
        x = x + a.transpose(1, 2).reshape(B, T, qd) @ l["o"].t()
        g, u = (self.rms(x, l["ln2"]) @ l["gu"].t()).chunk(2, -1)
        return x + (torch.nn.functional.silu(g) * u) @ l["down"].t()

    @torch.inference_mode()
    def forward(self, ids, pos):
        """ids [B, T] at positions pos [T] (shared by the batch); greedy next tokens [B, 1]."""
        c, s = self.cos[pos].unsqueeze(0).unsqueeze(2), self.sin[pos].unsqueeze(0).unsqueeze(2)
        keys = torch.arange(self.T, device=DEV)
        mask = (keys.view(1, -1) <= pos.view(-1, 1)).view(1, 1, pos.numel(), self.T)
        x = self.embed[ids]
        for i in range(self.L):
            x = self.layer_fn(x, i, pos, c, s, mask)
        return (self.rms(x[:, -1], self.norm) @ self.lm_head.t()).argmax(-1, keepdim=True)


def prompts(batch, n_prompt, vocab, salt):
    return torch.tensor([[(salt * 7919 + b * 131 + i * 17) % vocab for i in range(n_prompt)] for b in range(batch)],
                        device=DEV)


def run_graph(cfg, w, batch, n_new, n_prompt, compiled, trace_dir):
    m = StaticDecoder(cfg, w, batch, n_prompt + n_new)
    if compiled:
        m.layer_fn = torch.compile(m.layer, dynamic=False)
    ids = prompts(batch, n_prompt, cfg["vocab_size"], batch)
    tok = m.forward(ids, torch.arange(n_prompt, device=DEV))  # the prefill, eager
    static_tok, static_pos = tok.clone(), torch.full((1,), n_prompt, device=DEV, dtype=torch.long)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):  # warm-up (and compilation) outside the capture
            m.forward(static_tok, static_pos)
    torch.cuda.current_stream().wait_stream(side)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        out = m.forward(static_tok, static_pos)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for s in range(n_new - 1):
        static_pos.fill_(n_prompt + s)
        g.replay()
        static_tok.copy_(out)
    torch.cuda.synchronize()
    rate = batch * (n_new - 1) / (time.perf_counter() - t0)
    busy = None
    if trace_dir:
        from torch.profiler import profile, ProfilerActivity
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            for s in range(32):
                static_pos.fill_(n_prompt + s)
                g.replay()
                static_tok.copy_(out)
            torch.cuda.synchronize()
        path = os.path.join(trace_dir, "torch_%s_b%d.json" % ("compile" if compiled else "graph", batch))
        prof.export_chrome_trace(path)
        busy = busy_fraction(path)
    del g, m
    torch.cuda.empty_cache()
    return rate, busy


def run_hf(hf, batch, n_new, n_prompt, vocab):
    ids = prompts(batch, n_prompt, vocab, batch)
    with torch.inference_mode():
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        hf(ids)  # the prefill alone, to take it out of the decode rate
        torch.cuda.synchronize()
        prefill = time.perf_counter() - t0
        t0 = time.perf_counter()
        hf.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=n_new, min_new_tokens=n_new,
                    do_sample=False, pad_token_id=0)
        torch.cuda.synchronize()
        total = time.perf_counter() - t0
    return batch * (n_new - 1) / (total - prefill)


def copy_bandwidth():
    """Device-to-device copy, bytes read + written per second (the HBM ceiling used for the roofline)."""
    a = torch.empty(1 << 30, dtype=torch.uint8, device=DEV)
    b = torch.empty_like(a)
    for _ in range(3):
        b.copy_(a)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(10):
        b.copy_(a)
    torch.cuda.synchronize()
    return 2 * a.numel() * 10 / (time.perf_counter() - t0)


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    opt = {k: sys.argv[sys.argv.index(k) + 1] for k in ("--only", "--trace") if k in sys.argv}
    for v in opt.values():
        args.remove(v)
    model_dir, batches = args[0], [int(b) for b in args[1].split(",")]
    n_new = int(args[2]) if len(args) > 2 else 128
    n_prompt = int(args[3]) if len(args) > 3 else 16
    only, trace_dir = opt.get("--only"), opt.get("--trace")
    if trace_dir:
        os.makedirs(trace_dir, exist_ok=True)
    cfg = json.load(open(model_dir + "/config.json"))
    print("RESULT impl=bandwidth copy_gb_s=%.0f device=%s torch=%s"
          % (copy_bandwidth() / 1e9, torch.cuda.get_device_name().replace(" ", "_"), torch.__version__), flush=True)
    picked = set(only.split(",")) if only else {"graph", "hf"}
    modes = [m for m in ("graph", "compile") if m in picked]
    if modes:
        w = load_weights(model_dir, torch.bfloat16)
        for mode in modes:
            for b in batches:
                rate, busy = run_graph(cfg, w, b, n_new, n_prompt, mode == "compile", trace_dir)
                print("RESULT impl=torch_%s batch=%d new=%d decode_tok_s=%.1f gpu_busy=%s"
                      % (mode, b, n_new, rate, "%.3f" % busy if busy is not None else "-"), flush=True)
        del w
        torch.cuda.empty_cache()
    if "hf" in picked:
        from transformers import AutoModelForCausalLM
        hf = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.bfloat16).to(DEV).eval()
        run_hf(hf, 1, 8, n_prompt, cfg["vocab_size"])
        for b in batches:
            rate = run_hf(hf, b, n_new, n_prompt, cfg["vocab_size"])
            print("RESULT impl=hf_generate batch=%d new=%d decode_tok_s=%.1f" % (b, n_new, rate), flush=True)


if __name__ == "__main__":
    main()
