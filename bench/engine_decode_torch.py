"""Peers of bench_engine_decode: decode tokens/s of the same model directory with
(a) Hugging Face transformers' generate() and (b) a lean PyTorch KV-cache loop (a
hand-written Llama forward over a preallocated cache, greedy), same thread count.

    python3 engine_decode_torch.py MODEL_DIR THREADS BATCH[,BATCH...] [new=128] [prompt=16] [--only hf|loop]
Prints RESULT lines like bench_engine_decode.
"""
import json
import math
import sys
import time

import torch


def load_weights(model_dir):
    from safetensors.torch import load_file
    import glob
    w = {}
    for f in sorted(glob.glob(model_dir + "/*.safetensors")):
        w.update(load_file(f))
    return w


def layer_weights(w, i):
    """Layer i's weights with q/k/v and gate/up fused (qkv_b, qn, kn: None where the model has none)."""
    p = "model.layers.%d." % i
    bias = [w.get(p + "self_attn.%s_proj.bias" % n) for n in "qkv"]
    return dict(
        ln1=w[p + "input_layernorm.weight"], ln2=w[p + "post_attention_layernorm.weight"],
        qkv=torch.cat([w[p + "self_attn.%s_proj.weight" % n] for n in "qkv"]).contiguous(),
        qkv_b=torch.cat(bias) if bias[0] is not None else None,
        qn=w.get(p + "self_attn.q_norm.weight"), kn=w.get(p + "self_attn.k_norm.weight"),
        o=w[p + "self_attn.o_proj.weight"],
        gu=torch.cat([w[p + "mlp.gate_proj.weight"], w[p + "mlp.up_proj.weight"]]).contiguous(),
        down=w[p + "mlp.down_proj.weight"])


class LeanLlama:
    """Llama forward for decoding: fused QKV and gate/up weights, a [B, T] KV cache."""

    def __init__(self, cfg, w):
        self.cfg = cfg
        self.L = cfg["num_hidden_layers"]
        self.H = cfg["num_attention_heads"]
        self.KV = cfg.get("num_key_value_heads", self.H)
        self.D = cfg.get("head_dim") or cfg["hidden_size"] // self.H
        self.eps = cfg["rms_norm_eps"]
        self.embed = w["model.embed_tokens.weight"]
        self.lm_head = w.get("lm_head.weight", self.embed)
        self.norm = w["model.norm.weight"]
        self.layers = [layer_weights(w, i) for i in range(self.L)]
        inv = 1.0 / (cfg.get("rope_theta", 10000.0) ** (torch.arange(0, self.D, 2, dtype=torch.float32) / self.D))
        t = torch.arange(cfg["max_position_embeddings"], dtype=torch.float32)
        f = torch.outer(t, inv)
        emb = torch.cat([f, f], -1)
        self.cos, self.sin = emb.cos(), emb.sin()

    def rms(self, x, w):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * w

    def rope(self, x, pos):  # x [B, h, T, D]
        c, s = self.cos[pos], self.sin[pos]
        x1, x2 = x[..., : self.D // 2], x[..., self.D // 2:]
        return x * c + torch.cat([-x2, x1], -1) * s

    @torch.inference_mode()
    def forward(self, ids, start, kc, vc):
        B, T = ids.shape
        pos = torch.arange(start, start + T)
        x = self.embed[ids]
        qd, kd = self.H * self.D, self.KV * self.D
        for i, l in enumerate(self.layers):
            h = self.rms(x, l["ln1"])
            qkv = h @ l["qkv"].t()
            q = qkv[..., :qd].view(B, T, self.H, self.D).transpose(1, 2)
            k = qkv[..., qd:qd + kd].view(B, T, self.KV, self.D).transpose(1, 2)
            v = qkv[..., qd + kd:].view(B, T, self.KV, self.D).transpose(1, 2)
            q, k = self.rope(q, pos), self.rope(k, pos)
            kc[i][:, :, start:start + T] = k
            vc[i][:, :, start:start + T] = v
            K, V = kc[i][:, :, : start + T], vc[i][:, :, : start + T]
            a = torch.nn.functional.scaled_dot_product_attention(q, K, V, is_causal=T > 1,
                                                                 enable_gqa=self.KV != self.H)
            x = x + a.transpose(1, 2).reshape(B, T, qd) @ l["o"].t()
            h = self.rms(x, l["ln2"])
            g, u = (h @ l["gu"].t()).chunk(2, -1)
            x = x + (torch.nn.functional.silu(g) * u) @ l["down"].t()
        return self.rms(x[:, -1], self.norm) @ self.lm_head.t()


def prompts(batch, n_prompt, vocab, salt):
    return torch.tensor([[(salt * 7919 + b * 131 + i * 17) % vocab for i in range(n_prompt)] for b in range(batch)])


def run_loop(model, batch, n_new, n_prompt, vocab):
    T = n_prompt + n_new
    kc = [torch.zeros(batch, model.KV, T, model.D) for _ in range(model.L)]
    vc = [torch.zeros(batch, model.KV, T, model.D) for _ in range(model.L)]
    ids = prompts(batch, n_prompt, vocab, batch)
    t0 = time.perf_counter()
    tok = model.forward(ids, 0, kc, vc).argmax(-1, keepdim=True)
    t1 = time.perf_counter()
    for s in range(n_new - 1):
        tok = model.forward(tok, n_prompt + s, kc, vc).argmax(-1, keepdim=True)
    t2 = time.perf_counter()
    return t2 - t0, batch * (n_new - 1) / (t2 - t1)


def run_hf(model, batch, n_new, n_prompt, vocab):
    ids = prompts(batch, n_prompt, vocab, batch)
    with torch.inference_mode():
        t0 = time.perf_counter()
        model(ids)  # the prefill alone, to take it out of the decode rate
        prefill = time.perf_counter() - t0
        t0 = time.perf_counter()
        model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=n_new, min_new_tokens=n_new,
                       do_sample=False, pad_token_id=0)
        total = time.perf_counter() - t0
    return total, batch * (n_new - 1) / (total - prefill)


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    only = sys.argv[sys.argv.index("--only") + 1] if "--only" in sys.argv else None
    if only:
        args.remove(only)
    model_dir, threads, batches = args[0], int(args[1]), [int(b) for b in args[2].split(",")]
    n_new = int(args[3]) if len(args) > 3 else 128
    n_prompt = int(args[4]) if len(args) > 4 else 16
    torch.set_num_threads(threads)
    cfg = json.load(open(model_dir + "/config.json"))
    vocab = cfg["vocab_size"]
    if only in (None, "loop"):
        lean = LeanLlama(cfg, load_weights(model_dir))
        run_loop(lean, 1, 8, n_prompt, vocab)
        for b in batches:
            total, rate = run_loop(lean, b, n_new, n_prompt, vocab)
            print("RESULT impl=torch_loop threads=%d batch=%d new=%d total_s=%.3f decode_tok_s=%.1f"
                  % (threads, b, n_new, total, rate), flush=True)
        del lean
    if only in (None, "hf"):
        from transformers import AutoModelForCausalLM
        hf = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
        run_hf(hf, 1, 8, n_prompt, vocab)
        for b in batches:
            total, rate = run_hf(hf, b, n_new, n_prompt, vocab)
            print("RESULT impl=hf_generate threads=%d batch=%d new=%d total_s=%.3f decode_tok_s=%.1f"
                  % (threads, b, n_new, total, rate), flush=True)


if __name__ == "__main__":
    main()
