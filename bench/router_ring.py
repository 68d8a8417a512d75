#!/usr/bin/env python3
"""consistent_hashing, side by side: `rlhost router` and smg (sglang-router's successor,
PyPI `smg`; sglang-router 0.3.x has no consistent_hashing policy, only `manual`, a
table of keys) over the same stub workers and the same 10,000 routing keys.

For N = 3..16 workers (tests/e2e/router_worker.py on fixed ports BASE..BASE+16, the
URLs of tests/cpp/test_router_policies.cpp): each worker's share against 1/N (the
worst |share * N - 1|), the keys that move when worker N+1 joins (against 1/(N+1))
and when the middle worker leaves (against 1/N). Every figure comes from requests
through the running router (X-SMG-Routing-Key; the stub answers with its name).

    python3 bench/router_ring.py [--rlhost build/rlhost] [--smg PATH] [--keys 10000] [--base-port 30001]

smg: `pip install smg` (a venv is fine: --smg /venv/bin/smg); without it only
rlhost's column is printed. Not a test: nothing here is asserted.
"""
import argparse
import concurrent.futures
import http.client
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
WORKER = os.path.join(ROOT, "tests", "e2e", "router_worker.py")


def get(port, path, timeout=2):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        c.request("GET", path)
        r = c.getresponse()
        return r.status, r.read()
    finally:
        c.close()


def wait(pred, what, timeout=60):
    end = time.time() + timeout
    while time.time() < end:
        try:
            if pred():
                return
        except OSError:
            pass
        time.sleep(0.1)
    raise SystemExit("timed out waiting for " + what)


class Router:
    """One router process over `urls`; .port once it answers."""

    def __init__(self, kind, exe, urls, tmp):
        self.kind, self.urls = kind, urls
        env = dict(os.environ)
        if kind == "rlhost":
            ready = os.path.join(tmp, "ready-%d" % time.monotonic_ns())
            cmd = [exe, "router", "--port", "0", "--ready-file", ready, "--policy",
                   "consistent_hashing", "--health-interval", "0.5", "--worker", *urls]
            self.p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
            wait(lambda: os.path.exists(ready) and open(ready).read().strip(), "rlhost router ready file")
            self.port = int(open(ready).read().strip().rsplit(":", 1)[1])
            wait(lambda: all(w["status"] != "pending"
                             for w in json.loads(get(self.port, "/workers")[1])["workers"]), "first probes")
        else:
            import socket
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
            s.close()
            cmd = [exe, "launch", "--host", "127.0.0.1", "--port", str(self.port), "--policy", "consistent_hashing",
                   "--log-level", "warn", "--worker-urls", *urls]
            self.p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
            # every worker registered: a probe of 400 keys reaches all of them
            wait(lambda: len(set(self.route(["probe-%d" % i for i in range(400)]))) == len(urls), "smg workers", 90)

    def route(self, keys, threads=8):
        """The worker name that served each key."""
        local = threading.local()

        def one(key):
            c = getattr(local, "c", None)
            if c is None:
                c = local.c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
            body = json.dumps({"text": "x", "sampling_params": {"max_new_tokens": 1}})
            c.request("POST", "/generate", body=body, headers={"Content-Type": "application/json",
                                                               "X-SMG-Routing-Key": key})
            r = c.getresponse()
            data = r.read()
            if r.status != 200:
                raise OSError("%s: HTTP %d %s" % (self.kind, r.status, data[:200]))
            return json.loads(data)["worker"]

        with concurrent.futures.ThreadPoolExecutor(threads) as ex:
            return list(ex.map(one, keys))

    def stop(self):
        self.p.terminate()
        try:
            self.p.wait(10)
        except subprocess.TimeoutExpired:
            self.p.kill()


def measure(kind, exe, urls, keys, tmp):
    rows, cache = [], {}

    def route(ws):
        if tuple(ws) not in cache:
            r = Router(kind, exe, ws, tmp)
            try:
                cache[tuple(ws)] = r.route(keys)
            finally:
                r.stop()
        return cache[tuple(ws)]

    for n in range(3, 17):
        owners = {"n": route(urls[:n]), "add": route(urls[:n + 1]),
                  "remove": route(urls[:n // 2] + urls[n // 2 + 1:n])}
        counts = {}
        for w in owners["n"]:
            counts[w] = counts.get(w, 0) + 1
        worst = max(abs(c * n / len(keys) - 1) for c in counts.values()) if len(counts) == n else float("inf")
        moved_add = sum(a != b for a, b in zip(owners["n"], owners["add"]))
        moved_remove = sum(a != b for a, b in zip(owners["n"], owners["remove"]))
        rows.append((n, worst, moved_add * (n + 1) / len(keys), moved_remove * n / len(keys), len(counts)))
        print("  %-6s N=%2d  worst share off 1/N by %.3f  +1 moves %.3f x 1/(N+1)  -1 moves %.3f x 1/N"
              % (kind, *rows[-1][:4]), file=sys.stderr, flush=True)
    return rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rlhost", default=os.path.join(ROOT, "build", "rlhost"))
    ap.add_argument("--smg", default=shutil.which("smg"))
    ap.add_argument("--keys", type=int, default=10000)
    ap.add_argument("--base-port", type=int, default=30001)
    a = ap.parse_args()
    keys = ["session-%d" % k for k in range(a.keys)]
    urls = ["http://127.0.0.1:%d" % (a.base_port + i) for i in range(17)]
    workers = []
    tmp = tempfile.mkdtemp(prefix="router-ring-")
    try:
        for i, u in enumerate(urls):
            p = subprocess.Popen([sys.executable, WORKER, "--port", u.rsplit(":", 1)[1], "--name", u],
                                 stdout=subprocess.PIPE, text=True)
            line = p.stdout.readline()
            if not line.startswith("PORT "):
                raise SystemExit("worker %s did not start (port taken? --base-port)" % u)
            workers.append(p)
        results = {"rlhost": measure("rlhost", a.rlhost, urls, keys, tmp)}
        if a.smg:
            results["smg"] = measure("smg", a.smg, urls, keys, tmp)
        else:
            print("smg not found (pip install smg; --smg PATH): rlhost only", file=sys.stderr)
        kinds = list(results)
        print("\n%d keys; worst |share*N - 1| over the N workers; keys moved by one worker more / fewer, "
              "as a multiple of 1/(N+1) / 1/N" % a.keys)
        print("  N | " + " | ".join("%-30s" % k for k in kinds))
        for i, n in enumerate(range(3, 17)):
            cells = ["worst %.3f  +1 %.3f  -1 %.3f" % results[k][i][1:4] for k in kinds]
            print(" %2d | " % n + " | ".join("%-30s" % c for c in cells))
        for k in kinds:
            print("%s: worst share off 1/N by at most %.3f; moves %.3f-%.3f x 1/N"
                  % (k, max(r[1] for r in results[k]), min(min(r[2], r[3]) for r in results[k]),
                     max(max(r[2], r[3]) for r in results[k])))
    finally:
        for p in workers:
            p.terminate()
        for p in workers:
            p.wait(10)
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
