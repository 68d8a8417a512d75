#!/usr/bin/env python3
"""A small real HTTP/1.1 worker for router tests and benchmarks (stdlib asyncio only).

Speaks enough of SGLang's surface for the router: GET /health, POST /generate
(text or input_ids; `stream` for SSE), POST /v1/completions and
/v1/chat/completions (OpenAI shape, `stream` too), GET /v1/models,
GET /metrics (a few sglang:* series), POST /flush_cache. Keep-alive; answers
say which worker served them ("worker": NAME).

Knobs: --slots N (generations at once), --prefill S (extra for an unseen
prompt prefix), --delay S (per response; per token when streaming), request field
"delay" overrides; "max_new_tokens" in sampling_params (or max_tokens) sets the
token count; POST /_fail {"status": 500, "count": N} makes the next N
generation requests fail with that status ("endless": true: a chunked error body
that goes on for 60 s, 64 KiB every 5 ms, or until the connection closes); POST /_health {"ok": false} makes
/health answer 503; a generation request with "drop": true closes the
connection without an answer (as a worker that crashed on it); a streaming request
with "hold": true sends its first event, then waits for POST /_release before the
rest (so a test can see an event relayed while the stream is still open). Prints
"PORT <n>" on stdout once listening.

    python3 router_worker.py --port 0 --name w1 [--delay 0.01]
"""
import argparse
import asyncio
import json
import sys
import time


class Worker:
    def __init__(self, name, delay, slots=0, prefill=0.0):
        self.name = name
        self.delay = delay
        # Capacity model for benchmarks: at most `slots` generations at once (the
        # rest queue, like a batch-limited engine), and `prefill` extra seconds
        # for a prompt this worker has not seen (a prefix-cache miss).
        self.slots = asyncio.Semaphore(slots) if slots else None
        self.prefill = prefill
        self.seen = set()
        self.fail_status = 0
        self.fail_count = 0
        self.fail_endless = False
        self.healthy = True
        self.running = 0
        self.requests = 0
        self.prompt_tokens = 0
        self.flushes = 0
        self.latencies = []
        self.release = None  # asyncio.Event, made on the loop: POST /_release sets it

    # ---- HTTP plumbing -------------------------------------------------------------
    async def handle(self, reader, writer):
        try:
            while True:
                line = await reader.readline()
                if not line:
                    return
                if line in (b"\r\n", b"\n"):
                    continue
                method, target, _ = line.decode("latin1").split(" ", 2)
                headers = {}
                while True:
                    h = await reader.readline()
                    if h in (b"\r\n", b"\n", b""):
                        break
                    k, _, v = h.decode("latin1").partition(":")
                    headers[k.strip().lower()] = v.strip()
                body = b""
                if "content-length" in headers:
                    body = await reader.readexactly(int(headers["content-length"]))
                keep = headers.get("connection", "").lower() != "close"
                await self.route(method, target, headers, body, writer)
                if not keep:
                    return
        except (ConnectionError, asyncio.IncompleteReadError, ValueError):
            pass
        finally:
            try:
                writer.close()
            except Exception:
                pass

    @staticmethod
    async def send(writer, status, body, ctype="application/json"):
        if not isinstance(body, (bytes, bytearray)):
            body = json.dumps(body).encode()
        writer.write(b"HTTP/1.1 %d X\r\nContent-Type: %s\r\nContent-Length: %d\r\n\r\n" % (status, ctype.encode(), len(body)) + body)
        await writer.drain()

    async def stream(self, writer, events, delay, hold=False):
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n")
        for i, ev in enumerate(events):
            if delay:
                await asyncio.sleep(delay)
            if hold and i == 1:
                await self.released().wait()
                self.release.clear()
            data = b"data: " + ev.encode() + b"\n\n"
            writer.write(b"%x\r\n%s\r\n" % (len(data), data))
            await writer.drain()
        writer.write(b"0\r\n\r\n")
        await writer.drain()

    @staticmethod
    async def endless_error(writer, status):
        writer.write(b"HTTP/1.1 %d X\r\nContent-Type: text/plain\r\nTransfer-Encoding: chunked\r\n\r\n" % status)
        chunk = b"%x\r\n%s\r\n" % (65536, b"e" * 65536)
        end = time.time() + 60
        try:
            while time.time() < end and not writer.is_closing():
                writer.write(chunk)
                await writer.drain()
                await asyncio.sleep(0.005)
        except (ConnectionError, OSError):
            pass

    # ---- endpoints -----------------------------------------------------------------
    async def route(self, method, target, headers, body, writer):
        path = target.split("?", 1)[0]
        if path == "/health":
            return await self.send(writer, 200 if self.healthy else 503, {"ok": self.healthy, "worker": self.name})
        if path == "/v1/models":
            return await self.send(writer, 200, {"object": "list", "data": [{"id": "stub-model", "object": "model", "owned_by": self.name}]})
        if path == "/metrics":
            return await self.send(writer, 200, self.metrics().encode(), "text/plain; version=0.0.4")
        if path == "/flush_cache":
            self.flushes += 1
            return await self.send(writer, 200, {"flushed": True, "worker": self.name, "flushes": self.flushes})
        if path == "/_fail":
            j = json.loads(body or b"{}")
            self.fail_status, self.fail_count = j.get("status", 500), j.get("count", 1)
            self.fail_endless = bool(j.get("endless"))
            return await self.send(writer, 200, {"ok": True})
        if path == "/_health":
            self.healthy = bool(json.loads(body or b"{}").get("ok", True))
            return await self.send(writer, 200, {"ok": True})
        if path == "/_release":
            self.released().set()
            return await self.send(writer, 200, {"ok": True})
        if path == "/_stats":
            return await self.send(writer, 200, {"worker": self.name, "requests": self.requests, "flushes": self.flushes})
        if path in ("/generate", "/v1/completions", "/v1/chat/completions") and method == "POST":
            return await self.generate(path, headers, body, writer)
        return await self.send(writer, 404, {"error": "no route %s %s" % (method, path)})

    async def generate(self, path, headers, body, writer):
        self.requests += 1
        if self.fail_count > 0:
            self.fail_count -= 1
            if self.fail_endless:
                return await self.endless_error(writer, self.fail_status)
            return await self.send(writer, self.fail_status, {"error": "injected failure", "worker": self.name})
        try:
            req = json.loads(body)
        except ValueError:
            return await self.send(writer, 400, {"error": "body is not JSON", "worker": self.name})
        if isinstance(req, dict) and req.get("drop"):
            writer.transport.abort()  # no answer, the connection reset: a worker killed by this request
            return
        sp = req.get("sampling_params") or {}
        n = int(sp.get("max_new_tokens", req.get("max_tokens", 4)))
        delay = float(req.get("delay", self.delay))
        prompt = req.get("text") or req.get("prompt") or req.get("input_ids") or req.get("messages") or ""
        self.prompt_tokens += len(str(prompt))
        t0 = time.time()
        if self.slots:
            await self.slots.acquire()
        if self.prefill:
            key = str(prompt)[:64]
            if key not in self.seen:
                self.seen.add(key)
                delay += self.prefill
        self.running += 1
        try:
            if req.get("stream"):
                events = []
                for i in range(n):
                    if path == "/generate":
                        events.append(json.dumps({"text": "t" * (i + 1), "worker": self.name,
                                                  "meta_info": {"completion_tokens": i + 1}}))
                    else:
                        events.append(json.dumps({"object": "text_completion", "worker": self.name,
                                                  "choices": [{"index": 0, "text": "t", "delta": {"content": "t"}}]}))
                events.append("[DONE]")
                await self.stream(writer, events, delay / max(n, 1) if delay else 0, bool(req.get("hold")))
                return
            if delay:
                await asyncio.sleep(delay)
            if path == "/generate":
                out = {"text": "t" * n, "worker": self.name,
                       "meta_info": {"id": str(self.requests), "finish_reason": {"type": "length", "length": n},
                                     "prompt_tokens": len(str(prompt)), "completion_tokens": n, "cached_tokens": 0,
                                     "e2e_latency": time.time() - t0}}
            elif path == "/v1/completions":
                out = {"object": "text_completion", "model": "stub-model", "worker": self.name,
                       "choices": [{"index": 0, "text": "t" * n, "finish_reason": "length"}],
                       "usage": {"prompt_tokens": 1, "completion_tokens": n, "total_tokens": n + 1}}
            else:
                out = {"object": "chat.completion", "model": "stub-model", "worker": self.name,
                       "choices": [{"index": 0, "message": {"role": "assistant", "content": "t" * n}, "finish_reason": "length"}],
                       "usage": {"prompt_tokens": 1, "completion_tokens": n, "total_tokens": n + 1}}
            await self.send(writer, 200, out)
        finally:
            if self.slots:
                self.slots.release()
            self.running -= 1
            self.latencies.append(time.time() - t0)

    def released(self):
        if self.release is None:
            self.release = asyncio.Event()
        return self.release

    def metrics(self):
        lat = self.latencies
        buckets = [0.01, 0.1, 1.0, 10.0]
        lines = [
            "# HELP sglang:num_running_reqs The number of running requests.",
            "# TYPE sglang:num_running_reqs gauge",
            'sglang:num_running_reqs{model_name="stub-model"} %d' % self.running,
            "# HELP sglang:prompt_tokens_total Number of prefill tokens processed.",
            "# TYPE sglang:prompt_tokens_total counter",
            'sglang:prompt_tokens_total{model_name="stub-model"} %d' % self.prompt_tokens,
            "# HELP sglang:e2e_request_latency_seconds Histogram of End-to-end request latency in seconds",
            "# TYPE sglang:e2e_request_latency_seconds histogram",
        ]
        for b in buckets:
            lines.append('sglang:e2e_request_latency_seconds_bucket{model_name="stub-model",le="%g"} %d'
                         % (b, sum(1 for x in lat if x <= b)))
        lines.append('sglang:e2e_request_latency_seconds_bucket{model_name="stub-model",le="+Inf"} %d' % len(lat))
        lines.append('sglang:e2e_request_latency_seconds_sum{model_name="stub-model"} %g' % sum(lat))
        lines.append('sglang:e2e_request_latency_seconds_count{model_name="stub-model"} %d' % len(lat))
        return "\n".join(lines) + "\n"


async def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--name", default="worker")
    ap.add_argument("--delay", type=float, default=0.0)
    ap.add_argument("--slots", type=int, default=0, help="generations at once (0: unlimited)")
    ap.add_argument("--prefill", type=float, default=0.0, help="extra seconds for an unseen prompt prefix")
    a = ap.parse_args()
    w = Worker(a.name, a.delay, a.slots, a.prefill)
    server = await asyncio.start_server(w.handle, "127.0.0.1", a.port, backlog=4096)
    port = server.sockets[0].getsockname()[1]
    print("PORT %d" % port, flush=True)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    try:
        asyncio.run(main())
    except KeyboardInterrupt:
        sys.exit(0)
