"""Helpers for the router benchmarks: process start-up and a minimal asyncio
HTTP/1.1 client (stdlib only, so the client costs the same for every peer)."""
import asyncio
import json
import os
import socket
import subprocess
import sys
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
WORKER = os.path.join(os.path.dirname(HERE), "tests", "e2e", "router_worker.py")


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def wait_http(url, timeout=20):
    end = time.time() + timeout
    while time.time() < end:
        try:
            urllib.request.urlopen(url, timeout=1).read()
            return
        except Exception:
            time.sleep(0.05)
    raise RuntimeError("not up: " + url)


def start_worker(name, *args):
    p = subprocess.Popen([sys.executable, WORKER, "--port", "0", "--name", name, *args], stdout=subprocess.PIPE, text=True)
    return p, "http://127.0.0.1:" + p.stdout.readline().split()[1]


def start_rlhost_router(rlhost, workers, policy, *extra):
    port = free_port()
    p = subprocess.Popen([rlhost, "router", "--port", str(port), "--policy", policy, "--log-level", "warn", *extra,
                          "--worker", *workers], stdout=subprocess.DEVNULL)
    url = "http://127.0.0.1:%d" % port
    wait_http(url + "/health")
    return p, url


async def post(host, port, path, body, on_chunk=None, headers=None):
    """One POST on a fresh connection; returns (status, body bytes). Streams
    the body to on_chunk(bytes) when given (chunked or not)."""
    r, w = await asyncio.open_connection(host, port)
    data = json.dumps(body).encode()
    extra = "".join("%s: %s\r\n" % kv for kv in (headers or {}).items())
    w.write(("POST %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n%sConnection: close\r\n\r\n"
             % (path, len(data), extra)).encode() + data)
    await w.drain()
    status = int((await r.readline()).split()[1])
    hdrs = {}
    while True:
        line = await r.readline()
        if line in (b"\r\n", b""):
            break
        k, _, v = line.decode().partition(":")
        hdrs[k.strip().lower()] = v.strip()
    out = b""
    if hdrs.get("transfer-encoding", "").lower() == "chunked":
        while True:
            size = int((await r.readline()).split(b";")[0], 16)
            if size == 0:
                break
            chunk = await r.readexactly(size)
            await r.readexactly(2)
            if on_chunk:
                on_chunk(chunk)
            else:
                out += chunk
    else:
        n = int(hdrs.get("content-length", "-1"))
        out = await (r.readexactly(n) if n >= 0 else r.read())
        if on_chunk:
            on_chunk(out)
    w.close()
    return status, out
