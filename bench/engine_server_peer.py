"""The peer of the engine server benchmark: a simple Python server (FastAPI +
uvicorn) around the same model, answering SGLang-style POST /generate with the
lean PyTorch KV-cache loop of engine_decode_torch.py, one request at a time
(PyTorch on the CPU gains nothing from running two forwards at once).

    python3 engine_server_peer.py MODEL_DIR PORT THREADS
"""
import asyncio
import json
import sys
import threading

import torch
import uvicorn
from fastapi import FastAPI, Request

sys.path.insert(0, __file__.rsplit("/", 1)[0])
from engine_decode_torch import LeanLlama, load_weights  # noqa: E402

model_dir, port, threads = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
torch.set_num_threads(threads)
cfg = json.load(open(model_dir + "/config.json"))
model = LeanLlama(cfg, load_weights(model_dir))
lock = threading.Lock()
stats = {"prefill_tokens": 0, "generated_tokens": 0}
app = FastAPI()


def generate(ids, max_new):
    with lock:
        T = len(ids) + max_new
        kc = [torch.zeros(1, model.KV, T, model.D) for _ in range(model.L)]
        vc = [torch.zeros(1, model.KV, T, model.D) for _ in range(model.L)]
        out = []
        tok = model.forward(torch.tensor([ids]), 0, kc, vc).argmax(-1, keepdim=True)
        stats["prefill_tokens"] += len(ids)
        out.append(int(tok))
        for s in range(max_new - 1):
            tok = model.forward(tok, len(ids) + s, kc, vc).argmax(-1, keepdim=True)
            out.append(int(tok))
        stats["generated_tokens"] += len(out)
        return out


@app.post("/generate")
async def gen(req: Request):
    body = await req.json()
    ids = body["input_ids"]
    n = body.get("sampling_params", {}).get("max_new_tokens", 16)
    out = await asyncio.get_running_loop().run_in_executor(None, generate, ids, n)
    return {"text": "", "output_ids": out,
            "meta_info": {"prompt_tokens": len(ids), "completion_tokens": len(out),
                          "finish_reason": {"type": "length", "length": n}}}


@app.get("/health")
async def health():
    return {}


@app.get("/stats")
async def get_stats():
    return stats


uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning")
