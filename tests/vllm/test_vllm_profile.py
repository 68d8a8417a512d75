#!/usr/bin/env python3
"""The seed's vLLM profiling workflow (vime) against a real vLLM (CPU) registered on an
rlhost router, and its metrics through the router:

- vLLM starts as vime starts it for profiling: `--profiler-config` with the seed's
  config (torch profiler, torch_profiler_dir, max_iterations 3, ignore_frontend) and
  VLLM_RPC_TIMEOUT raised;
- tools/profile_rollout.lua finds it through the router's /workers, starts the
  profiler with vLLM's body while completions flow through the router, and stops it;
- vLLM's trace (<prefix>_rank0.<ns>.pt.trace.json.gz) is summarised by
  tools/analyze_profile.lua --all-ranks: real ops (ATen, vLLM's attention), engine
  step times from vLLM's execute_* annotations, the cross-rank table;
- the router's /engine_metrics carries vLLM's vllm:* samples labelled with the worker,
  and Prometheus (tools/prometheus.lua --start) scrapes them (when `prometheus` is
  installed).

Skipped (ctest: Skipped) only when vLLM's venv is missing; under CI=true that fails.

    RLHOST_BIN=build/rlhost python3 tests/vllm/test_vllm_profile.py
"""
import glob
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import unittest
import urllib.parse
import urllib.request
from concurrent.futures import ThreadPoolExecutor

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "e2e"))
from support import BIN, SOURCE_DIR, clean_env, wait_for  # noqa: E402
import support  # noqa: E402

VENV = os.environ.get("RLHOST_VLLM_VENV") or os.path.expanduser("~/.cache/rlhost/vllm-venv")
PYTHON = os.environ.get("RLHOST_VLLM_PYTHON") or os.path.join(VENV, "bin", "python")
START_TIMEOUT = 900  # vLLM takes 1-2 minutes to start on 2 busy cores


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http(url, body=None, timeout=120):
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return r.status, r.read().decode()


def read_ready(path):
    """The URL a --ready-file holds, or None while it is not written."""
    if not os.path.exists(path):
        return None
    with open(path) as f:
        return f.read().strip() or None


def tool(name, *args, timeout=600):
    r = subprocess.run([BIN, "--no-control", os.path.join(SOURCE_DIR, "tools", name + ".lua"), *args],
                       capture_output=True, text=True, timeout=timeout, env=clean_env())
    return r.returncode, r.stdout + r.stderr


class VllmProfile(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        if not os.access(PYTHON, os.X_OK):
            support.missing("vllm test: no vLLM python at %s" % PYTHON,
                            "scripts/install_vllm.sh (or scripts/bootstrap.sh --test-deps) installs it")
        if not BIN or not os.access(BIN, os.X_OK):
            raise AssertionError("RLHOST_BIN must name the rlhost binary (got %r)" % BIN)
        cls.tmp = tempfile.mkdtemp(prefix="rlhost-vllm-profile-")
        cls.prof_dir = os.path.join(cls.tmp, "vllm_profile")
        cls.procs = []
        try:
            cls._start()
        except BaseException:
            cls.tearDownClass()
            raise

    @classmethod
    def _start(cls):
        r = subprocess.run([BIN, "--no-control", "-e", "print(rl.mathgen.default_model())"], capture_output=True,
                           text=True, timeout=1800, env=clean_env())
        assert r.returncode == 0, r.stderr
        cls.model = r.stdout.strip().splitlines()[-1]
        port = free_port()
        cls.worker = "http://127.0.0.1:%d" % port
        # The seed's profiler config, as vime passes --vllm-profiler-config through.
        config = {"profiler": "torch", "torch_profiler_dir": cls.prof_dir, "max_iterations": 3, "ignore_frontend": True}
        env = clean_env(VLLM_TARGET_DEVICE="cpu", VLLM_CPU_KVCACHE_SPACE="1", VLLM_SERVER_DEV_MODE="1",
                        VLLM_RPC_TIMEOUT="1800000", VLLM_CPU_OMP_THREADS_BIND="nobind", OMP_NUM_THREADS="1")
        cls.vllm_log = open(os.path.join(cls.tmp, "vllm.log"), "w")
        cls.vllm = subprocess.Popen(
            [PYTHON, "-m", "vllm.entrypoints.openai.api_server", "--model", cls.model, "--dtype", "float32",
             "--max-model-len", "384", "--enforce-eager", "--port", str(port), "--profiler-config", json.dumps(config)],
            stdout=cls.vllm_log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        ready = os.path.join(cls.tmp, "router.url")
        cls.router_proc = subprocess.Popen(
            [BIN, "router", "--port", "0", "--policy", "round_robin", "--worker", cls.worker,
             "--health-interval", "1", "--ready-file", ready],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=clean_env(), start_new_session=True)
        cls.procs.append(cls.router_proc)

        def router_up():
            if cls.router_proc.poll() is not None:
                raise AssertionError("the router exited: %s" % cls.router_proc.communicate()[0])
            return read_ready(ready)
        cls.router = wait_for(router_up, 60, "the router")

        def vllm_up():
            if cls.vllm.poll() is not None:
                raise AssertionError("vLLM exited (%s); log:\n%s" % (cls.vllm.returncode, cls.log_tail()))
            try:
                return http(cls.worker + "/health", timeout=5)[0] == 200
            except OSError:
                return False
        wait_for(vllm_up, START_TIMEOUT, "vLLM at " + cls.worker)
        # vLLM's log names the routes: /start_profile exists only with --profiler-config
        assert "/start_profile" in open(cls.vllm_log.name).read(), cls.log_tail()

        def healthy():
            workers = json.loads(http(cls.router + "/workers")[1])["workers"]
            return any(w["url"] == cls.worker and w["is_healthy"] for w in workers)
        wait_for(healthy, 60, "the router to see vLLM healthy")

    @classmethod
    def log_tail(cls):
        with open(cls.vllm_log.name) as f:
            return f.read()[-4000:]

    @classmethod
    def tearDownClass(cls):
        vllm = getattr(cls, "vllm", None)
        if vllm is not None:
            try:
                os.killpg(vllm.pid, signal.SIGTERM)  # the API server, EngineCore and its worker
                vllm.wait(timeout=30)
            except (ProcessLookupError, subprocess.TimeoutExpired):
                pass
            try:
                os.killpg(vllm.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            vllm.wait()
            cls.vllm_log.close()
        for p in cls.procs:
            if p.poll() is None:
                p.kill()
            p.communicate(timeout=10)
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def completions(self, n, max_tokens=16):
        """n completions at once through the router; returns the completion token count."""
        def one(i):
            status, body = http(self.router + "/v1/completions",
                                {"prompt": "Tom has %d apples" % i, "max_tokens": max_tokens, "ignore_eos": True})
            self.assertEqual(status, 200, body)
            return json.loads(body)["usage"]["completion_tokens"]
        with ThreadPoolExecutor(n) as ex:
            return sum(ex.map(one, range(n)))

    def test_1_profile_rollout_and_analyze(self):
        code, out = tool("profile_rollout", "--router-url", self.router, "--action", "start", "--num-steps", "3")
        self.assertEqual(code, 0, out)
        self.assertIn(self.worker, out)
        self.assertIn("vLLM: started for 3 iterations", out)
        self.assertIn("1 worker: 1 ok, 0 failed", out)
        # a second start while the session is open: vLLM answers 409, the tool says what to do
        code, again = tool("profile_rollout", "--worker-urls", self.worker, "--action", "start")
        self.assertEqual(code, 1, again)
        self.assertIn("FAIL 409", again)
        self.assertIn("run --action stop", again)

        self.assertEqual(self.completions(4), 64)  # requests flow while the profiler records
        code, out = tool("profile_rollout", "--router-url", self.router, "--action", "stop")
        self.assertEqual(code, 0, out)
        self.assertIn("vLLM: stopped", out)

        pattern = os.path.join(self.prof_dir, "*.pt.trace.json.gz")
        traces = wait_for(lambda: glob.glob(pattern), 300, "a vLLM trace in " + self.prof_dir)
        self.assertTrue(os.path.basename(traces[0]).startswith("rank0."), traces)

        code, out = tool("analyze_profile", "--profile-dir", self.prof_dir, "--all-ranks", "--top-n", "30")
        self.assertEqual(code, 0, out)
        self.assertIn("(rank 0, cpu trace", out)
        self.assertIn("vllm::unified_attention", out)  # vLLM's attention op, by name
        self.assertIn("aten::", out)
        self.assertRegex(out, r"\n(gemm|attention) +\d+ ")  # categories of real ops
        self.assertIn("engine steps", out)  # from vLLM's execute_context_N(..)_generation_M(..) annotations
        self.assertRegex(out, r"\n(prefill|decode) +\d+ +\d+\.\d+ ")
        self.assertIn("cross-rank summary", out)

        # --per-worker-dirs: vLLM keeps its directory, the files get the worker's name as prefix
        code, out = tool("profile_rollout", "--router-url", self.router, "--action", "start", "--num-steps", "2",
                         "--per-worker-dirs")
        self.assertEqual(code, 0, out)
        self.completions(2)
        code, out = tool("profile_rollout", "--router-url", self.router, "--action", "stop")
        self.assertEqual(code, 0, out)
        prefix = self.worker.split("://")[1].replace(":", "_")
        wait_for(lambda: glob.glob(os.path.join(self.prof_dir, prefix + "_rank0.*.pt.trace.json.gz")), 300,
                 "a trace named after the worker")
        code, out = tool("analyze_profile", "--profile-dir", self.prof_dir, "--all-ranks")
        self.assertEqual(code, 0, out)
        self.assertEqual(out.count("\n== "), 2, out)  # both traces, one report each

    def test_2_engine_metrics(self):
        self.completions(2)
        status, text = http(self.router + "/engine_metrics")
        self.assertEqual(status, 200)
        label = 'worker="%s"' % self.worker
        self.assertIn("vllm:num_requests_running{%s," % label, text)
        self.assertIn('rlhost_router_engine_metrics_up{%s} 1' % label, text)
        gen = [line for line in text.splitlines() if line.startswith("vllm:generation_tokens_total{%s," % label)]
        self.assertEqual(len(gen), 1, text[:2000])
        self.assertGreater(float(gen[0].rsplit(" ", 1)[1]), 0)
        self.assertIn("# TYPE vllm:generation_tokens_total counter", text)

    def test_3_prometheus_scrapes_vllm(self):
        if not shutil.which("prometheus"):
            support.missing("prometheus is not installed", "apt-get install prometheus, or scripts/bootstrap.sh --test-deps")
        ready = os.path.join(self.tmp, "prom.url")
        listen = "127.0.0.1:%d" % free_port()
        prom = subprocess.Popen(
            [BIN, "--no-control", os.path.join(SOURCE_DIR, "tools", "prometheus.lua"), "--router-url", self.router,
             "--out", os.path.join(self.tmp, "prometheus.yml"), "--scrape-interval", "1s", "--start",
             "--storage", os.path.join(self.tmp, "tsdb"), "--listen", listen, "--ready-file", ready],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=clean_env(), start_new_session=True)
        self.procs.append(prom)  # killed in tearDownClass if this test fails; Prometheus dies with it
        url = wait_for(lambda: read_ready(ready), 120, "prometheus")

        def scraped():
            q = urllib.parse.quote("vllm:num_requests_running")
            res = json.loads(http(url + "/api/v1/query?query=" + q)[1])["data"]["result"]
            return [r for r in res if r["metric"].get("worker") == self.worker]
        found = wait_for(scraped, 120, "vllm:num_requests_running in Prometheus")
        self.assertEqual(found[0]["metric"]["job"], "rlhost_engines")
        prom.send_signal(signal.SIGINT)  # the tool stops Prometheus and exits
        prom.communicate(timeout=30)


if __name__ == "__main__":
    support.main()
