#!/usr/bin/env python3
"""Prefill/decode disaggregation on one host (bench/pd.sh runs it):

1. K/V transfer speed: a prefill and a decode `rlhost engine` (one core each), the
   decode taking K/V over /dev/shm and over HTTP/TCP, for prompts of several lengths;
   the decode's pd_transfer_speed_gb_s (bytes / (received - sent)) against memcpy of
   the same bytes in this process (numpy), the same run.
2. PD vs two unified engines at equal cores: a router over 1 prefill + 1 decode vs a
   router over 2 unified engines, one core per engine, the same requests; tokens/s and
   where a PD request's time goes (the pd_* timings in meta_info).

    python3 bench/pd_bench.py BIN MODEL_DIR [transfer|throughput|all]
"""
import json
import os
import random
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

import numpy as np

BIN, MODEL = sys.argv[1], sys.argv[2]
WHAT = sys.argv[3] if len(sys.argv) > 3 else "all"
TOKEN = "pd-bench-" + os.urandom(8).hex()
TMP = tempfile.mkdtemp(prefix="rlhost-pd-bench-")
CFG = json.load(open(os.path.join(MODEL, "config.json")))
HEAD_DIM = CFG.get("head_dim") or CFG["hidden_size"] // CFG["num_attention_heads"]
TOKEN_BYTES = CFG["num_hidden_layers"] * 2 * CFG.get("num_key_value_heads", CFG["num_attention_heads"]) * HEAD_DIM * 4
CTX = CFG["max_position_embeddings"]
procs = []


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def engine(cpu, *args):
    ready = os.path.join(TMP, "e%d.url" % len(procs))
    log = open(os.path.join(TMP, "e%d.log" % len(procs)), "w")
    p = subprocess.Popen([BIN, "engine", "--model", MODEL, "--port", "0", "--threads", "1", "--cpus", str(cpu),
                          "--ready-file", ready, *args], stdout=log, stderr=subprocess.STDOUT,
                         env=dict(os.environ, RLHOST_ADMIN_TOKEN=TOKEN))
    procs.append(p)
    for _ in range(600):
        if os.path.exists(ready) and open(ready).read().strip().startswith("http"):
            return open(ready).read().strip()
        if p.poll() is not None:
            sys.exit("engine failed: " + open(log.name).read()[-2000:])
        time.sleep(0.1)
    sys.exit("engine did not start")


def post(url, body, timeout=600):
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    return json.loads(urllib.request.urlopen(req, timeout=timeout).read())


def get(url):
    return json.loads(urllib.request.urlopen(url, timeout=30).read())


def prompt(n, seed):
    r = random.Random(seed)
    return [1] + [r.randrange(3, min(CFG["vocab_size"], 30000)) for _ in range(n - 1)]


def pd_pair(p, d, bport, body):
    b = dict(body, bootstrap_host="127.0.0.1", bootstrap_port=bport, bootstrap_room=random.randrange(2 ** 63))
    out = {}
    ts = [threading.Thread(target=lambda n=n, u=u: out.__setitem__(n, post(u + "/generate", b))) for n, u in (("p", p), ("d", d))]
    [t.start() for t in ts]
    [t.join() for t in ts]
    return out["d"]


def memcpy_gb_s(nbytes):
    src = np.random.bytes(nbytes)
    a = np.frombuffer(src, dtype=np.uint8)
    dst = np.empty_like(a)
    best = []
    for _ in range(7):
        t0 = time.perf_counter()
        np.copyto(dst, a)
        best.append(time.perf_counter() - t0)
    return nbytes / 1e9 / statistics.median(best)


def transfer():
    p = engine(0, "--disaggregation-mode", "prefill", "--disaggregation-bootstrap-port", "0")
    bport = get(p + "/get_server_info")["disaggregation_bootstrap_port"]
    decs = {"shm": engine(1, "--disaggregation-mode", "decode", "--disaggregation-transfer-backend", "shm"),
            "tcp": engine(1, "--disaggregation-mode", "decode", "--disaggregation-transfer-backend", "tcp")}
    print("K/V per token: %d bytes (%d layers, float32); P and D one core each" % (TOKEN_BYTES, CFG["num_hidden_layers"]))
    print("%8s %9s %12s %12s %12s %10s %10s" % ("tokens", "MB", "shm GB/s", "tcp GB/s", "memcpy GB/s", "shm/memcpy", "tcp/memcpy"))
    for n in [x for x in (32, 128, CTX // 2, CTX - 8) if x < CTX]:
        row = {}
        for name, d in decs.items():
            speeds = []
            for k in range(5):
                m = pd_pair(p, d, bport, {"input_ids": prompt(n, seed=1000 * n + k + (0 if name == "shm" else 500)),
                                          "sampling_params": {"max_new_tokens": 1}})["meta_info"]
                speeds.append(m["pd_transfer_speed_gb_s"])
            row[name] = statistics.median(speeds)
        mc = memcpy_gb_s(n * TOKEN_BYTES)
        print("%8d %9.3f %12.3f %12.3f %12.2f %10.3f %10.3f" % (n, n * TOKEN_BYTES / 1e6, row["shm"], row["tcp"], mc,
                                                                 row["shm"] / mc, row["tcp"] / mc))


def router(*args):
    port = free_port()
    log = open(os.path.join(TMP, "router%d.log" % port), "w")
    procs.append(subprocess.Popen([BIN, "router", "--port", str(port), "--health-interval", "0.5", *args],
                                  stdout=log, stderr=subprocess.STDOUT, env=dict(os.environ, RLHOST_ADMIN_TOKEN=TOKEN)))
    url = "http://127.0.0.1:%d" % port
    for _ in range(300):
        try:
            ws = get(url + "/workers")["workers"]
            if ws and all(w.get("is_healthy") for w in ws) and all(w.get("bootstrap_port") or w.get("worker_type") != "prefill" for w in ws):
                return url
        except Exception:
            pass
        time.sleep(0.1)
    sys.exit("router did not become ready: " + open(log.name).read()[-2000:])


def load(url, n_req=256, conc=16, plen=96, new=128):
    bodies = [{"input_ids": prompt(plen, seed=7 + i), "sampling_params": {"max_new_tokens": new, "ignore_eos": True,
                                                                            "temperature": 1.0, "seed": i}}
              for i in range(n_req)]
    outs, lock, it = [], threading.Lock(), iter(bodies)

    def worker():
        while True:
            with lock:
                b = next(it, None)
            if b is None:
                return
            o = post(url + "/generate", b)
            with lock:
                outs.append(o)
    t0 = time.perf_counter()
    ts = [threading.Thread(target=worker) for _ in range(conc)]
    [t.start() for t in ts]
    [t.join() for t in ts]
    dt = time.perf_counter() - t0
    return sum(len(o["output_ids"]) for o in outs) / dt, outs, dt


def throughput():
    u1, u2 = engine(0), engine(1)
    r_uni = router("--worker", u1, "--worker", u2, "--policy", "round_robin")
    p = engine(0, "--disaggregation-mode", "prefill", "--disaggregation-bootstrap-port", "0")
    d = engine(1, "--disaggregation-mode", "decode")
    r_pd = router("--pd-disaggregation", "--prefill", p, "--decode", d)
    load(r_uni, n_req=8)  # warm up
    load(r_pd, n_req=8)
    tps_u, _, dt_u = load(r_uni)
    tps_pd, outs, dt_pd = load(r_pd)
    print("256 requests, 96-token prompts, 128 new tokens, 16 at once; one core per engine")
    print("  2 unified engines: %.0f tokens/s (%.1f s)" % (tps_u, dt_u))
    print("  1 prefill + 1 decode: %.0f tokens/s (%.1f s)   PD/unified = %.2f" % (tps_pd, dt_pd, tps_pd / tps_u))
    keys = sorted({k for o in outs for k in o["meta_info"] if k.startswith("pd_")})
    print("  where a PD request's time goes (mean over requests):")
    for k in keys:
        vals = [o["meta_info"][k] for o in outs if k in o["meta_info"]]
        unit = "" if not k.endswith("duration") else " ms"
        scale = 1e3 if k.endswith("duration") else 1
        print("    %-40s %10.3f%s" % (k, statistics.mean(vals) * scale, unit))
    e2e = statistics.mean(o["meta_info"]["e2e_latency"] for o in outs)
    print("    %-40s %10.3f ms" % ("decode e2e_latency", e2e * 1e3))


try:
    if WHAT in ("transfer", "all"):
        transfer()
    if WHAT in ("throughput", "all"):
        throughput()
finally:
    for p in procs:
        p.terminate()
    for p in procs:
        try:
            p.wait(10)
        except subprocess.TimeoutExpired:
            p.kill()
