"""`rlhost tinker` for the Tinker tests (test_tinker_sdk.py, test_tinker_cookbook.py)."""
import os
import subprocess
import time
import urllib.error
import urllib.request

from support import BIN


def default_model():
    """rl.mathgen.default_model()'s directory (built on first use, then cached)."""
    out = subprocess.run([BIN, "-e", "print(rl.mathgen.default_model())"], capture_output=True, text=True, timeout=900)
    if out.returncode != 0:
        raise AssertionError("building the default model failed: " + out.stderr[-2000:])
    return out.stdout.strip().splitlines()[-1]


class Server:
    """`rlhost tinker` in a child process serving `base` (a path, relative to `cwd` if
    given: the name the server serves it under), its URL and key; checkpoints in tmp/ckpt."""

    def __init__(self, base, tmp, extra=(), cwd=None):
        self.ready = os.path.join(tmp, "ready")
        self.ckpt = os.path.join(tmp, "ckpt")
        self.key_file = os.path.join(tmp, "api_key")
        self.log = open(os.path.join(tmp, "server.log"), "w")
        self.proc = subprocess.Popen(
            [BIN, "tinker", "--base-model", base, "--port", "0", "--ready-file", self.ready, "--api-key-file",
             self.key_file, "--checkpoint-dir", self.ckpt, "--poll", "5", *extra],
            stdout=self.log, stderr=subprocess.STDOUT, cwd=cwd)
        t0 = time.time()
        while not os.path.exists(self.ready):
            if self.proc.poll() is not None or time.time() - t0 > 120:
                raise AssertionError("rlhost tinker did not start: " + open(self.log.name).read()[-3000:])
            time.sleep(0.1)
        self.url = open(self.ready).read().strip()
        self.key = open(self.key_file).read().strip()
        self.base = base

    def stop(self):
        self.proc.terminate()
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()

    def post(self, path, body, content_type="application/json", key=None, method="POST"):
        req = urllib.request.Request(self.url + path, data=body, method=method,
                                     headers={"Content-Type": content_type, "X-API-Key": key or self.key})
        try:
            with urllib.request.urlopen(req, timeout=30) as r:
                return r.status, r.read()
        except urllib.error.HTTPError as e:
            return e.code, e.read()
