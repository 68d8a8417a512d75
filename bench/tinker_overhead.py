#!/usr/bin/env python3
"""The Tinker API's overhead: one forward_backward + optim_step through the official `tinker`
SDK against `rlhost tinker`, against the same work called in process from Lua
(bench/tinker_inprocess.lua), on the default model, same machine, same run. Prints both
and the ratio (goal <= 1.1x at the cookbook's batch sizes).

    RLHOST_BIN=build/rlhost python3 bench/tinker_overhead.py [--batch 64] [--tokens 96] [--iters 5]
"""
import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import time

ap = argparse.ArgumentParser()
ap.add_argument("--batch", type=int, default=64, help="datums per forward_backward")
ap.add_argument("--tokens", type=int, default=96, help="tokens per datum")
ap.add_argument("--iters", type=int, default=5)
ap.add_argument("--warmup", type=int, default=2)
ap.add_argument("--rank", type=int, default=16)
args = ap.parse_args()
BIN = os.path.abspath(os.environ.get("RLHOST_BIN", "build/rlhost"))
SRC = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

import tinker  # noqa: E402
from tinker import types  # noqa: E402

model = subprocess.run([BIN, "-e", "print(rl.mathgen.default_model())"], capture_output=True, text=True,
                       check=True).stdout.strip().splitlines()[-1]
vocab = json.load(open(os.path.join(model, "config.json")))["vocab_size"]
rng = random.Random(0)
data = []
for _ in range(args.batch):
    toks = [rng.randrange(vocab) for _ in range(args.tokens + 1)]
    data.append({"tokens": toks[:-1], "loss_fn_inputs": {
        "target_tokens": {"dtype": "int64", "shape": [args.tokens], "data": toks[1:]},
        "weights": {"dtype": "float32", "shape": [args.tokens], "data": [1.0] * args.tokens}}})

with tempfile.TemporaryDirectory(prefix="rlhost-tinker-bench-") as tmp:
    data_file = os.path.join(tmp, "data.json")
    json.dump(data, open(data_file, "w"))
    def in_process():
        out = subprocess.run([BIN, "--no-control", os.path.join(SRC, "bench", "tinker_inprocess.lua"), model, data_file,
                              str(args.iters), str(args.warmup), str(args.rank), "32"],
                             capture_output=True, text=True, check=True).stdout
        return float(out.split("inprocess_seconds_per_step")[1].split()[0])

    # in process before and after the SDK's run: the machine's drift shows, the mean is the reference
    inproc_runs = [in_process()]

    ready = os.path.join(tmp, "ready")
    srv = subprocess.Popen([BIN, "tinker", "--base-model", model, "--port", "0", "--ready-file", ready,
                            "--api-key-file", os.path.join(tmp, "key"), "--checkpoint-dir", os.path.join(tmp, "ck")],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        while not os.path.exists(ready):
            time.sleep(0.1)
        sc = tinker.ServiceClient(base_url=open(ready).read().strip(), api_key=open(os.path.join(tmp, "key")).read().strip())
        tc = sc.create_lora_training_client(base_model=model, rank=args.rank, seed=1).result()
        sdk_data = [types.Datum(model_input=types.ModelInput.from_ints(d["tokens"]),
                                loss_fn_inputs={"target_tokens": d["loss_fn_inputs"]["target_tokens"]["data"],
                                                "weights": d["loss_fn_inputs"]["weights"]["data"]}) for d in data]
        adam = types.AdamParams(learning_rate=1e-4)

        def step():
            fb = tc.forward_backward(sdk_data, "cross_entropy")
            op = tc.optim_step(adam)
            fb.result()
            op.result()

        def server_cpu():  # the server's CPU seconds (utime + stime, USER_HZ ticks)
            fields = open("/proc/%d/stat" % srv.pid).read().rsplit(")", 1)[1].split()
            return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

        for _ in range(args.warmup):
            step()
        t0, c0, s0 = time.time(), time.process_time(), server_cpu()
        for _ in range(args.iters):
            step()
        sdk = (time.time() - t0) / args.iters
        client_cpu = (time.process_time() - c0) / args.iters
        srv_cpu = (server_cpu() - s0) / args.iters
    finally:
        srv.terminate()
        srv.wait()
    inproc_runs.append(in_process())
    inproc = sum(inproc_runs) / len(inproc_runs)

print("batch %d datums x %d tokens, LoRA rank %d, default model, %d iterations after %d warm-up"
      % (args.batch, args.tokens, args.rank, args.iters, args.warmup))
print("in process (Lua):     %.4f s/step (mean of %s, before and after)" % (inproc, ", ".join("%.4f" % x for x in inproc_runs)))
print("tinker SDK over HTTP: %.4f s/step" % sdk)
print("ratio SDK / in-process: %.3fx" % (sdk / inproc))
print("CPU per step: the SDK's process %.4f s, the server %.4f s (cores: %d; both share them)"
      % (client_cpu, srv_cpu, os.cpu_count()))
