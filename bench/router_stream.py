#!/usr/bin/env python3
"""Streaming relay: SSE events/s over 64 concurrent streams through nginx
(proxy_buffering off) and through `rlhost router`, same worker, same client.
The worker (tests/e2e/router_worker.py, Python) and this client share the
2-core machine with the proxy, so absolute numbers are bounded by them; the
ratio is what matters."""
import argparse
import asyncio
import os
import subprocess
import tempfile
import time

from router_benchlib import free_port, post, start_rlhost_router, start_worker, wait_http

STREAMS, TOKENS = 64, 1000


async def run(port):
    events = 0
    tails = {}

    def counter(i):
        def on_chunk(b):  # an event may be split across chunks: count on the joined stream
            nonlocal events
            joined = tails.get(i, b"") + b
            events += joined.count(b"data: ")
            tails[i] = joined[-5:]
        return on_chunk

    t0 = time.time()
    res = await asyncio.gather(*[post("127.0.0.1", port, "/generate",
                                      {"text": "s%d" % i, "stream": True, "sampling_params": {"max_new_tokens": TOKENS}},
                                      counter(i)) for i in range(STREAMS)])
    dt = time.time() - t0
    assert all(st == 200 for st, _ in res), [st for st, _ in res]
    return events, dt


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rlhost", required=True)
    a = ap.parse_args()
    procs = []
    try:
        wp, wurl = start_worker("s1")
        procs.append(wp)
        wport = int(wurl.rsplit(":", 1)[1])
        tmp = tempfile.mkdtemp()
        ngx = free_port()
        with open(os.path.join(tmp, "nginx.conf"), "w") as f:
            f.write("""worker_processes 1; daemon off; pid %(t)s/nginx.pid; error_log %(t)s/err warn;
events { worker_connections 4096; }
http { access_log off; client_body_temp_path %(t)s/cb; proxy_temp_path %(t)s/px; fastcgi_temp_path %(t)s/fc;
  uwsgi_temp_path %(t)s/uw; scgi_temp_path %(t)s/sc;
  upstream w { server 127.0.0.1:%(w)d; keepalive 128; }
  server { listen 127.0.0.1:%(n)d; location / { proxy_pass http://w; proxy_http_version 1.1;
    proxy_set_header Connection ""; proxy_buffering off; } } }
""" % {"t": tmp, "w": wport, "n": ngx})
        procs.append(subprocess.Popen(["nginx", "-c", os.path.join(tmp, "nginx.conf"), "-p", tmp]))
        wait_http("http://127.0.0.1:%d/health" % ngx)
        rp, rurl = start_rlhost_router(a.rlhost, [wurl], "round_robin")
        procs.append(rp)
        rport = int(rurl.rsplit(":", 1)[1])
        asyncio.run(run(wport))  # warm-up
        out = {}
        for name, port in [("direct", wport)] + [("nginx", ngx), ("rlhost", rport)] * 3:
            ev, dt = asyncio.run(run(port))
            out.setdefault(name, []).append(ev / dt)
            print("%-8s %6d events in %.2f s = %8.0f events/s" % (name, ev, dt, ev / dt))
        best = {k: max(v) for k, v in out.items()}
        print("ratio: rlhost / nginx events/s = %.2fx (best of 3 each, interleaved; goal >= 1)" % (best["rlhost"] / best["nginx"]))
    finally:
        for p in procs:
            p.terminate()  # SIGTERM: nginx's master takes its worker down with it (SIGKILL would orphan it)
            p.wait()


if __name__ == "__main__":
    main()
