#!/usr/bin/env python3
"""`rlhost engine` under hostile or careless clients (issue 21): its HTTP
server (pipelining, slow headers, a POST without Content-Length, the
connection cap), admission control (sequences per request, queued sequences,
tokens in flight: 400/429 with Retry-After, counted in /metrics), memory after
an aborted burst, and SIGTERM while requests run.

Real `rlhost engine` processes on stories260K, real sockets. Waits are bounded
by timeouts; nothing asserts how long something took.

    RLHOST_BIN=build/rlhost python3 tests/e2e/test_engine_hardening.py
"""
import json
import os
import signal
import socket
import sys
import threading
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from support import wait_for  # noqa: E402
import support  # noqa: E402
from engine_support import Engine, EngineTestCase  # noqa: E402


def rss_kib(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise AssertionError("no VmRSS for pid %d" % pid)


def connect(eng, timeout=30):
    s = socket.create_connection((eng.host, eng.port), timeout=timeout)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return s


def read_response(sock, buf=b""):
    """One HTTP/1.1 response with Content-Length from `sock`: (status, headers, body, rest of buf)."""
    while b"\r\n\r\n" not in buf:
        chunk = sock.recv(65536)
        if not chunk:
            raise AssertionError("connection closed before a response head; got %r" % buf[:200])
        buf += chunk
    head, buf = buf.split(b"\r\n\r\n", 1)
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    headers = {}
    for line in lines[1:]:
        k, v = line.split(":", 1)
        headers[k.strip().lower()] = v.strip()
    n = int(headers.get("content-length", "0"))
    while len(buf) < n:
        chunk = sock.recv(65536)
        if not chunk:
            raise AssertionError("connection closed inside a body")
        buf += chunk
    return status, headers, buf[:n], buf[n:]


def post_raw(path, body):
    data = json.dumps(body).encode()
    return (b"POST %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n"
            % (path.encode(), len(data))) + data


class EngineHttpServerTest(EngineTestCase):
    """The event-driven server: one engine with a small connection cap."""

    CAP = 12
    ENGINE_ARGS = ("--kv-cache-tokens", "4096", "--max-connections", str(CAP))

    def test_pipelined_requests_are_all_answered_in_order(self):
        s = connect(self.eng)
        try:
            reqs = [b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n",
                    post_raw("/generate", {"input_ids": [1, 2, 3], "sampling_params": {"max_new_tokens": 3,
                                                                                      "temperature": 0}}),
                    b"GET /get_model_info HTTP/1.1\r\nHost: x\r\n\r\n",
                    post_raw("/generate", {"input_ids": [1, 5], "sampling_params": {"max_new_tokens": 2,
                                                                                   "temperature": 0,
                                                                                   "ignore_eos": True}}),
                    b"GET /nope HTTP/1.1\r\nHost: x\r\n\r\n",
                    b"GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n"]
            s.sendall(b"".join(reqs))  # one write: the server sees them back to back
            got, buf = [], b""
            for _ in reqs:
                status, _, body, buf = read_response(s, buf)
                got.append((status, body))
        finally:
            s.close()
        self.assertEqual([g[0] for g in got], [200, 200, 200, 200, 404, 200], got)
        self.assertEqual(json.loads(got[1][1])["meta_info"]["completion_tokens"], 3)
        self.assertIn("model_path", json.loads(got[2][1]))
        self.assertEqual(len(json.loads(got[3][1])["output_ids"]), 2)
        self.assertIn("/nope", json.loads(got[4][1])["error"]["message"])
        self.assertEqual(json.loads(got[5][1])["object"], "list")

    def test_slow_header_connections_do_not_block_health(self):
        slow = []
        try:
            for _ in range(self.CAP - 3):  # more than the old server had threads, under the cap
                s = connect(self.eng)
                s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\nX-Slow: ")  # never finished
                slow.append(s)
            for _ in range(3):
                status, _ = self.eng.get("/health", timeout=10)
                self.assertEqual(status, 200)
        finally:
            for s in slow:
                s.close()

    def test_post_without_content_length_is_answered_at_once(self):
        s = connect(self.eng, timeout=3)  # bounds the wait: the old server stalled 5 s here
        try:
            s.sendall(b"POST /generate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n\r\n")
            status, _, body, _ = read_response(s)
        finally:
            s.close()
        self.assertEqual(status, 400)
        self.assertIn("empty", json.loads(body)["error"]["message"])

    def test_connection_cap(self):
        self.eng.get("/health")
        held = []
        try:
            # Fill the cap with idle keep-alive connections that each got an answer.
            for _ in range(self.CAP):
                s = connect(self.eng)
                s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
                status, _, _, _ = read_response(s)
                self.assertEqual(status, 200)
                held.append(s)
            # One more is accepted and closed at once.
            extra = connect(self.eng, timeout=10)
            try:
                extra.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
                try:
                    data = extra.recv(100)
                except ConnectionResetError:
                    data = b""
                self.assertEqual(data, b"")
            finally:
                extra.close()
            # The held ones still work.
            held[0].sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
            self.assertEqual(read_response(held[0])[0], 200)
        finally:
            for s in held:
                s.close()
        # Room again once they closed.
        wait_for(lambda: self.eng.get("/health", timeout=5)[0] == 200, timeout=30, what="/health after closing")


class AdmissionTest(EngineTestCase):
    """Caps on one small engine: 2 running, 4 queued, 8 sequences per request, 2000 tokens in flight."""

    ENGINE_ARGS = ("--kv-cache-tokens", "4096", "--max-running-requests", "2", "--max-queued-requests", "4",
                   "--max-sequences-per-request", "8", "--max-tokens-in-flight", "2000")

    def rejected(self, cap):
        _, text = self.eng.get("/metrics")
        for line in text.splitlines():
            if line.startswith("sglang:num_rejected_requests_total{") and 'cap="%s"' % cap in line:
                return float(line.rsplit(" ", 1)[1])
        raise AssertionError("no rejected counter for %s in /metrics" % cap)

    def test_too_many_sequences_names_the_cap(self):
        before = self.rejected("max_sequences_per_request")
        prompts = ["Once upon a time"] * 1000
        status, j = self.eng.post("/generate", {"text": prompts, "sampling_params": {"n": 1024, "max_new_tokens": 4}})
        self.assertEqual(status, 400, j)
        self.assertIn("max_sequences_per_request", j["error"]["message"])
        self.assertIn("--max-sequences-per-request", j["error"]["message"])
        status, j = self.eng.post("/v1/completions", {"prompt": ["hi"] * 3, "n": 3, "max_tokens": 2})
        self.assertEqual(status, 400, j)
        self.assertIn("max_sequences_per_request", j["error"]["message"])
        self.assertEqual(self.rejected("max_sequences_per_request"), before + 2)
        # Within the cap it is served.
        out = self.eng.generate({"text": "Once", "sampling_params": {"n": 2, "max_new_tokens": 2}})
        self.assertEqual(len(out), 2)

    def long_stream(self, seqs, started):
        """A streaming call of `seqs` long sequences in the background; returns its thread and events."""
        events = []

        def run():
            body = {"input_ids": [[1, 2, 3]] * seqs, "stream": True,
                    "sampling_params": {"max_new_tokens": 500, "ignore_eos": True}}
            events.extend(self.eng.stream("/generate", body))

        t = threading.Thread(target=run, daemon=True)
        t.start()
        wait_for(lambda: self.eng.loads() >= started, timeout=30, what="the background call to run")
        return t, events

    def test_queue_cap_answers_429_with_retry_after(self):
        before = self.rejected("max_queued_requests")
        # One call that alone would queue more than the cap.
        status, headers, body = self.raw_generate({"input_ids": [[1, 2]] * 7, "sampling_params": {"max_new_tokens": 2}})
        self.assertEqual(status, 429, body)
        self.assertEqual(self.rejected("max_queued_requests"), before + 1)
        t, _ = self.long_stream(6, 6)  # 2 running + 4 waiting: the queue is full
        try:
            conn_status, headers, body = self.raw_generate({"input_ids": [1, 2], "sampling_params": {"max_new_tokens": 2}})
            self.assertEqual(conn_status, 429, body)
            self.assertGreaterEqual(int(headers["retry-after"]), 1)
            self.assertIn("max_queued_requests", json.loads(body)["error"]["message"])
            self.assertEqual(self.rejected("max_queued_requests"), before + 2)
            # The server keeps serving what does not need the queue.
            self.assertEqual(self.eng.get("/health")[0], 200)
        finally:
            self.eng.post("/abort_request", {"abort_all": True})
            t.join(60)
        self.eng.wait_idle()
        self.eng.generate({"input_ids": [1, 2], "sampling_params": {"max_new_tokens": 2}})

    def test_tokens_in_flight_cap(self):
        before = self.rejected("max_tokens_in_flight")
        t, _ = self.long_stream(2, 2)  # 2 x (3 + 500) tokens in flight
        try:
            status, headers, body = self.raw_generate(  # 4 x 503 more: over 2000
                {"input_ids": [[1, 2, 3]] * 4, "sampling_params": {"max_new_tokens": 500, "ignore_eos": True}})
            self.assertEqual(status, 429, body)
            self.assertIn("retry-after", headers)
            self.assertIn("max_tokens_in_flight", json.loads(body)["error"]["message"])
            self.assertEqual(self.rejected("max_tokens_in_flight"), before + 1)
            status, _, body = self.raw_generate({"input_ids": [1, 2, 3], "sampling_params": {"max_new_tokens": 2}})
            self.assertEqual(status, 200, body)
        finally:
            self.eng.post("/abort_request", {"abort_all": True})
            t.join(60)

    def raw_generate(self, body):
        s = connect(self.eng, timeout=60)
        try:
            s.sendall(post_raw("/generate", body))
            status, headers, data, _ = read_response(s)
            return status, headers, data
        finally:
            s.close()


class BurstAndSignalTest(unittest.TestCase):
    def test_rss_returns_after_an_aborted_burst(self):
        eng = Engine(args=["--kv-cache-tokens", "8192"])
        try:
            eng.generate({"input_ids": [1, 2, 3], "sampling_params": {"max_new_tokens": 4}})  # warm
            eng.wait_idle()
            idle = rss_kib(eng.proc.pid)
            # A burst as big as the default caps allow: 4 calls x 4096 sequences.
            results = []

            def burst():
                results.append(eng.post("/generate", {"input_ids": [list(range(1, 40))] * 64,
                                                      "sampling_params": {"n": 64, "max_new_tokens": 200,
                                                                          "ignore_eos": True}}, timeout=300))

            threads = [threading.Thread(target=burst, daemon=True) for _ in range(4)]
            for t in threads:
                t.start()
            wait_for(lambda: eng.loads() >= 4 * 4096, timeout=120, what="the burst to be queued")
            peak = rss_kib(eng.proc.pid)
            status, j = eng.post("/abort_request", {"abort_all": True})
            self.assertEqual(status, 200, j)
            for t in threads:
                t.join(120)
            self.assertEqual([r[0] for r in results], [200] * 4)
            self.assertEqual(results[0][1][0]["meta_info"]["finish_reason"]["type"], "abort")
            eng.wait_idle()
            sys.stderr.write("\nRSS: idle %d KiB, burst %d KiB\n" % (idle, peak))
            wait_for(lambda: rss_kib(eng.proc.pid) <= idle * 1.2, timeout=30,
                     what="RSS back within 20%% of idle (%d KiB; now %d KiB)" % (idle, rss_kib(eng.proc.pid)))
            eng.generate({"input_ids": [1, 2, 3], "sampling_params": {"max_new_tokens": 4}})
        finally:
            eng.stop()

    def test_sigterm_with_requests_running_exits_0(self):
        eng = Engine(args=["--kv-cache-tokens", "8192", "--shutdown-timeout", "1"])
        events = []

        def stream():
            try:
                events.extend(eng.stream("/generate", {"input_ids": [[1, 2, 3]] * 64, "stream": True,
                                                       "sampling_params": {"max_new_tokens": 500,
                                                                           "ignore_eos": True}}))
            except Exception as e:  # the connection may close under it
                events.append("error: %s" % e)

        try:
            t = threading.Thread(target=stream, daemon=True)
            t.start()
            wait_for(lambda: eng.loads() >= 64, timeout=60, what="the stream to run")
            eng.proc.send_signal(signal.SIGTERM)
            rc = eng.proc.wait(timeout=20)  # bounds the wait; the engine aborts after --shutdown-timeout
            self.assertEqual(rc, 0, eng.output())
            t.join(20)
            self.assertFalse(t.is_alive(), "the streaming client was left hanging")
            # It got what was generated, ended as aborted, and a well-formed end.
            self.assertEqual(events[-1], "[DONE]", events[-3:])
            last = json.loads(events[-2])
            self.assertEqual(last["meta_info"]["finish_reason"]["type"], "abort")
        finally:
            eng.stop()


if __name__ == "__main__":
    support.main()
