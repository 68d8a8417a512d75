"""Helpers for the engine server tests (tests/e2e/test_engine_*.py): start
`rlhost engine` on a free port and talk plain HTTP to it.

Python standard library only (the OpenAI test adds the `openai` client).
"""
import http.client
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
import unittest
import urllib.parse

from support import BIN, TEST_DATA, clean_env, wait_for

STORIES = os.path.join(TEST_DATA, "models", "stories260K")


class Engine:
    """One `rlhost engine` process; `url` once serving. stop() sends SIGTERM."""

    def __init__(self, model=STORIES, args=(), env=None, wait=True):
        if not BIN or not os.access(BIN, os.X_OK):
            raise AssertionError("RLHOST_BIN must name the rlhost binary (got %r)" % BIN)
        if not os.path.isdir(model):
            # missing data fails, never skips
            raise AssertionError("test model missing: %s (configuring the build unpacks tests/data into "
                                 "<build>/test-data; or set RLHOST_TEST_DATA)" % model)
        self.tmp = tempfile.mkdtemp(prefix="rlhost-engine-")
        self.ready = os.path.join(self.tmp, "ready")
        self.log_path = os.path.join(self.tmp, "engine.log")
        self.log = open(self.log_path, "w")
        # The engine's control endpoints need the run's admin token: this test's own.
        self.admin_token = "test-admin-" + os.urandom(12).hex()
        e = clean_env(XDG_RUNTIME_DIR=os.path.join(self.tmp, "xdg"), RLHOST_ADMIN_TOKEN=self.admin_token)
        e.update(env or {})
        self.admin_token = e["RLHOST_ADMIN_TOKEN"]
        self.proc = subprocess.Popen(
            [BIN, "engine", "--model", model, "--port", "0", "--ready-file", self.ready, "--threads", "1", *args],
            stdout=self.log, stderr=subprocess.STDOUT, env=e, cwd=self.tmp)
        self.url = None
        if wait:
            self.wait_ready()

    def wait_ready(self, timeout=120):
        def ready():
            if self.proc.poll() is not None:
                raise AssertionError("rlhost engine exited early (%s):\n%s" % (self.proc.returncode, self.output()))
            if os.path.exists(self.ready):
                with open(self.ready) as f:
                    return f.read().strip()
            return None
        self.url = wait_for(ready, timeout=timeout, what="rlhost engine --ready-file")
        u = urllib.parse.urlparse(self.url)
        self.host, self.port = u.hostname, u.port
        return self.url

    def output(self):
        self.log.flush()
        with open(self.log_path) as f:
            return f.read()

    def stop(self, timeout=30):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()
        shutil.rmtree(self.tmp, ignore_errors=True)
        return self.proc.returncode

    # ---- HTTP ------------------------------------------------------------------------
    def request(self, method, path, body=None, headers=None, timeout=120, raw=None, auth=True):
        """(status, parsed JSON or text). `raw` sends bytes as they are. With `auth`
        (and no Authorization in `headers`) the admin token goes along."""
        conn = http.client.HTTPConnection(self.host, self.port, timeout=timeout)
        h = {"Content-Type": "application/json"}
        if auth:
            h["Authorization"] = "Bearer " + self.admin_token
        h.update(headers or {})
        data = raw if raw is not None else (json.dumps(body) if body is not None else None)
        conn.request(method, path, body=data, headers=h)
        resp = conn.getresponse()
        text = resp.read().decode("utf-8", "replace")
        conn.close()
        if resp.getheader("Content-Type", "").startswith("application/json"):
            return resp.status, json.loads(text)
        return resp.status, text

    def post(self, path, body=None, **kw):
        return self.request("POST", path, body, **kw)

    def get(self, path, **kw):
        return self.request("GET", path, **kw)

    def generate(self, body, expect=200):
        status, out = self.post("/generate", body)
        if status != expect:
            raise AssertionError("POST /generate -> %s (wanted %s): %s" % (status, expect, out))
        return out

    def stream(self, path, body, max_events=None):
        """POSTs with stream: true; returns the list of `data:` payloads (strings)."""
        conn = http.client.HTTPConnection(self.host, self.port, timeout=120)
        conn.request("POST", path, body=json.dumps(body), headers={"Content-Type": "application/json"})
        resp = conn.getresponse()
        assert resp.status == 200, (resp.status, resp.read())
        assert resp.getheader("Content-Type", "").startswith("text/event-stream")
        events, buf = [], b""
        while True:
            chunk = resp.read1(65536) if hasattr(resp, "read1") else resp.read(1)
            if not chunk:
                break
            buf += chunk
            while b"\n\n" in buf:
                block, buf = buf.split(b"\n\n", 1)
                for line in block.decode().splitlines():
                    if line.startswith("data: "):
                        events.append(line[6:])
                if max_events and len(events) >= max_events:
                    conn.close()  # a client that goes away mid-stream
                    return events
        conn.close()
        return events

    def loads(self):
        status, j = self.get("/v1/loads")
        assert status == 200, j
        return j["loads"][0]["num_total_reqs"]

    def wait_idle(self, timeout=30):
        wait_for(lambda: self.loads() == 0, timeout=timeout, what="the engine to go idle")


class EngineTestCase(unittest.TestCase):
    """Tests sharing one `rlhost engine` started with ENGINE_ARGS; it must exit 0 on SIGTERM."""

    ENGINE_ARGS = ()

    @classmethod
    def setUpClass(cls):
        cls.eng = Engine(args=list(cls.ENGINE_ARGS))

    @classmethod
    def tearDownClass(cls):
        rc = cls.eng.stop()
        assert rc == 0, "rlhost engine exited %s on SIGTERM" % rc

    def setUp(self):
        self.eng.wait_idle()


def make_chat_model(dst, src=STORIES):
    """A copy of `src` whose tokenizer_config.json carries a ChatML template."""
    os.makedirs(dst, exist_ok=True)
    for name in ("config.json", "model.safetensors", "tokenizer.json"):
        shutil.copy(os.path.join(src, name), os.path.join(dst, name))
    with open(os.path.join(src, "tokenizer_config.json")) as f:
        cfg = json.load(f)
    cfg["chat_template"] = (
        "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + "
        "'<|im_end|>' + '\\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")
    with open(os.path.join(dst, "tokenizer_config.json"), "w") as f:
        json.dump(cfg, f)
    return dst
