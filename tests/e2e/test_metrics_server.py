#!/usr/bin/env python3
"""The trainer's Prometheus endpoint (`--metrics-port`, rl.metrics.serve) under slow and
hostile clients (issue 40): served from rlhost's event-driven server on a thread of its
own, so slowloris connections do not block a scrape, a request body over the limit is
refused from its head (413, nothing read), and a logged key that maps to the endpoint's
own gauge does not break the exposition.

A real rlhost process serving metrics, real sockets; waits are bounded by timeouts.

    RLHOST_BIN=build/rlhost python3 tests/e2e/test_metrics_server.py
"""
import os
import socket
import subprocess
import sys
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from support import BIN, RlhostTestCase, wait_for  # noqa: E402
from test_engine_hardening import read_response, rss_kib  # noqa: E402

SERVE = r"""
local srv = assert(rl.metrics.serve { port = 0 })
local lg = rl.metrics.logger { console = false }
lg:log({ ["train/step"] = 1, ["train/loss"] = 0.5, ["metrics/last_log_timestamp_seconds"] = 7 }, "train/step")
local f = assert(io.open(arg[1] .. ".tmp", "w")); f:write(srv:url()); f:close()
os.rename(arg[1] .. ".tmp", arg[1])
while true do rl.sleep(0.2) end
"""


class MetricsServer(RlhostTestCase):
    def setUp(self):
        super().setUp()
        script = self.write("serve.lua", SERVE)
        ready = os.path.join(self.dir, "url")
        self.proc = subprocess.Popen([BIN, "--no-control", script, ready], stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, env=self.env, cwd=self.dir)
        self.procs.append(self.proc)

        def url():
            if self.proc.poll() is not None:
                raise AssertionError("rlhost exited: %s" % self.proc.communicate()[1])
            if not os.path.exists(ready):
                return None
            with open(ready) as f:
                return f.read()
        self.url = wait_for(url, timeout=60, what="the metrics server")
        host, port = self.url[len("http://"):].split(":")
        self.addr = (host, int(port))

    def get(self, path, timeout=10):
        s = socket.create_connection(self.addr, timeout=timeout)
        try:
            s.sendall(b"GET %s HTTP/1.1\r\nHost: x\r\n\r\n" % path.encode())
            status, _, body, _ = read_response(s)
            return status, body.decode()
        finally:
            s.close()

    def test_slow_connections_do_not_block_a_scrape(self):
        stop = threading.Event()
        slow = []
        for _ in range(24):   # more than the old server had threads (8)
            s = socket.create_connection(self.addr, timeout=30)
            s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")
            slow.append(s)

        def trickle():   # a byte of header now and then: each connection stays "busy" for good
            while not stop.is_set():
                for s in slow:
                    try:
                        s.sendall(b"X")
                    except OSError:
                        pass
                time.sleep(0.5)
        t = threading.Thread(target=trickle, daemon=True)
        t.start()
        try:
            time.sleep(1.0)   # the slow ones are all in
            for _ in range(3):
                status, body = self.get("/metrics", timeout=10)
                self.assertEqual(status, 200)
                self.assertIn("rlhost_train_loss 0.5\n", body)
        finally:
            stop.set()
            t.join(10)
            for s in slow:
                s.close()

    def test_a_large_body_is_refused_from_its_head(self):
        before = rss_kib(self.proc.pid)
        for path in ("/metrics", "/nope", "/health"):
            s = socket.create_connection(self.addr, timeout=10)
            try:   # 200 MiB announced, none sent: the answer comes from the head alone
                s.sendall(b"POST %s HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % (path.encode(), 200 << 20))
                status, _, _, _ = read_response(s)
                self.assertEqual(status, 413, path)
            finally:
                s.close()
        s = socket.create_connection(self.addr, timeout=10)
        try:   # a small one to another method: 405, the text is for GET and HEAD
            s.sendall(b"POST /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\nhi")
            status, headers, _, _ = read_response(s)
            self.assertEqual((status, headers.get("allow")), (405, "GET, HEAD"))
        finally:
            s.close()
        self.assertEqual(self.get("/nope")[0], 404)
        self.assertLess(rss_kib(self.proc.pid), before + 64 * 1024)

    def test_a_logged_key_never_duplicates_the_servers_own_gauge(self):
        status, body = self.get("/metrics")
        self.assertEqual(status, 200)
        name = "rlhost_metrics_last_log_timestamp_seconds"
        self.assertEqual(body.count("# TYPE %s gauge" % name), 1, body)
        self.assertEqual(len([ln for ln in body.splitlines() if ln.startswith(name + " ")]), 1, body)
        self.assertNotIn("%s 7\n" % name, body)
        promtool = subprocess.run(["sh", "-c", "command -v promtool"], capture_output=True, text=True).stdout.strip()
        if promtool:
            r = subprocess.run([promtool, "check", "metrics"], input=body, capture_output=True, text=True, timeout=30)
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)


if __name__ == "__main__":
    unittest.main()
