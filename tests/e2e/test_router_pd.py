"""`rlhost router --pd-disaggregation`: prefill/decode disaggregation through the router.

TestPdRouterSurface: bad flags (exit 2 naming the flag), POST /workers with worker_type and
bootstrap_port (400s naming the field), /health and /workers showing the pools, 503 naming
the empty pool.

TestPdOverEngines: real `rlhost engine` processes on the default model, one started with
`--disaggregation-mode prefill --disaggregation-bootstrap-port <free port>`, one with
`--disaggregation-mode decode`, behind a PD router that reads the prefill's bootstrap port
from its /server_info; a greedy /generate with return_logprob and logprob_start_len 0
through it equals a unified engine's answer bit for bit (output_ids, output and input
token log-probs), single and batched, and streams.
"""
import json
import os
import socket
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import support  # noqa: E402
from engine_support import Engine  # noqa: E402
from test_router import RouterCase, jget, request  # noqa: E402


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def default_model():
    """rl.mathgen.default_model()'s directory (built on first use, then cached)."""
    out = subprocess.run([support.BIN, "-e", "print(rl.mathgen.default_model())"], capture_output=True, text=True,
                         timeout=900)
    if out.returncode != 0:
        raise AssertionError("building the default model failed: " + out.stderr[-2000:])
    return out.stdout.strip().splitlines()[-1]


class TestPdRouterSurface(RouterCase):
    tmp_prefix = "rlhost-router-pd-"

    def router_cli(self, *args):
        return subprocess.run([support.BIN, "router", "--port", "0", *args], env=self.env, capture_output=True,
                              text=True, timeout=30)

    def test_bad_flags(self):
        p = self.router_cli("--prefill", "http://127.0.0.1:1")
        self.assertEqual(p.returncode, 2, p.stderr)
        self.assertIn("--prefill", p.stderr)
        self.assertIn("--pd-disaggregation", p.stderr)
        p = self.router_cli("--decode", "http://127.0.0.1:1")
        self.assertEqual(p.returncode, 2, p.stderr)
        self.assertIn("--decode", p.stderr)
        p = self.router_cli("--pd-disaggregation", "--prefill", "http://127.0.0.1:1", "70000")
        self.assertEqual(p.returncode, 2, p.stderr)
        self.assertIn("bootstrap port", p.stderr)
        self.assertIn("70000", p.stderr)
        p = self.router_cli("--pd-disaggregation", "--prefill", "8998")
        self.assertEqual(p.returncode, 2, p.stderr)
        self.assertIn("must follow a URL", p.stderr)
        p = self.router_cli("--pd-disaggregation", "--worker", "http://127.0.0.1:1")
        self.assertEqual(p.returncode, 2, p.stderr)
        self.assertIn("do not mix", p.stderr)
        p = self.router_cli("--pd-disaggregation", "--decode-policy", "fastest")
        self.assertEqual(p.returncode, 2, p.stderr)
        self.assertIn("--decode-policy", p.stderr)

    def test_workers_pools_and_empty_pools(self):
        r = self.start_router([], "round_robin", "--pd-disaggregation")
        st, j = jget(r + "/generate", method="POST", body={"text": "x"})
        self.assertEqual(st, 503, j)
        self.assertIn("no prefill worker", j["error"]["message"])
        self.assertIn("--prefill URL", j["error"]["message"])
        add = lambda body: jget(r + "/workers", method="POST", body=body, headers=self.admin)  # noqa: E731
        st, j = add({"url": "http://127.0.0.1:9", "worker_type": "both"})
        self.assertEqual(st, 400, j)
        self.assertIn("'worker_type'", j["error"]["message"])
        st, j = add({"url": "http://127.0.0.1:9", "worker_type": "prefill", "bootstrap_port": 70000})
        self.assertEqual(st, 400, j)
        self.assertIn("'bootstrap_port'", j["error"]["message"])
        st, j = add({"url": "http://127.0.0.1:9"})
        self.assertEqual(st, 400, j)
        self.assertIn("PD mode", j["error"]["message"])
        st, j = add({"url": "http://127.0.0.1:9", "worker_type": "prefill", "bootstrap_port": 9000})
        self.assertEqual(st, 201, j)
        self.assertEqual((j["worker_type"], j["bootstrap_port"]), ("prefill", 9000))
        st, j = jget(r + "/workers")
        self.assertEqual([(w["worker_type"], w["bootstrap_port"]) for w in j["workers"]], [("prefill", 9000)])
        # The prefill pool has a worker (unhealthy: nothing listens there); the decode pool none.
        support.wait_for(lambda: jget(r + "/workers")[1]["workers"][0]["status"] == "unhealthy", what="probe")
        st, j = jget(r + "/generate", method="POST", body={"text": "x"})
        self.assertEqual(st, 503, j)
        self.assertIn("no prefill worker", j["error"]["message"])
        st, j = jget(r + "/health")
        self.assertEqual((j["prefill_workers"], j["decode_workers"], j["healthy_decode_workers"]), (1, 0, 0))
        st, _ = jget(r + "/readiness")
        self.assertEqual(st, 503)
        # A router without PD mode refuses prefill and decode workers, with the hint.
        plain = self.start_router([], "round_robin")
        st, j = jget(plain + "/workers", method="POST", body={"url": "http://127.0.0.1:9", "worker_type": "decode"},
                     headers=self.admin)
        self.assertEqual(st, 400, j)
        self.assertIn("--pd-disaggregation", j["error"]["message"])


class TestPdOverEngines(RouterCase):
    tmp_prefix = "rlhost-router-pd-engines-"

    @classmethod
    def setUpClass(cls):
        cls.model = default_model()
        cls.bootstrap_port = free_port()
        cls.engines = []
        try:
            cls.unified = Engine(model=cls.model, wait=False)
            # a prefill and its decode call each other's control endpoints with the run's token
            env = {"RLHOST_ADMIN_TOKEN": "pd-router-test-" + os.urandom(8).hex()}
            cls.prefill = Engine(model=cls.model, wait=False, env=env, args=[
                "--disaggregation-mode", "prefill", "--disaggregation-bootstrap-port", str(cls.bootstrap_port)])
            cls.decode = Engine(model=cls.model, wait=False, env=env, args=["--disaggregation-mode", "decode"])
            cls.engines = [cls.unified, cls.prefill, cls.decode]
            for e in cls.engines:
                e.wait_ready(timeout=300)
        except BaseException:
            for e in cls.engines:
                print(e.output()[-3000:], file=sys.stderr)
                e.stop()
            raise

    @classmethod
    def tearDownClass(cls):
        for e in cls.engines:
            e.stop()

    def setUp(self):
        super().setUp()
        self.url = self.start_router([], "cache_aware", "--pd-disaggregation", "--prefill", self.prefill.url,
                                     "--decode", self.decode.url, "--health-interval", "0.3")

        def bootstrap_known():
            ws = jget(self.url + "/workers")[1]["workers"]
            return all(w["is_healthy"] for w in ws) and ws[0]["bootstrap_port"] is not None and ws
        ws = support.wait_for(bootstrap_known, timeout=30,
                              what="both engines healthy and the prefill's bootstrap port read from its /server_info")
        self.assertEqual([w["worker_type"] for w in ws], ["prefill", "decode"])
        self.assertEqual(ws[0]["bootstrap_port"], self.bootstrap_port)

    def test_greedy_generate_equals_the_unified_engine_bitwise(self):
        body = {"text": "12+7=", "return_logprob": True, "logprob_start_len": 0,
                "sampling_params": {"max_new_tokens": 12, "temperature": 0}}
        want = self.unified.generate(body)
        st, got = jget(self.url + "/generate", method="POST", body=body, timeout=120)
        self.assertEqual(st, 200, got)
        self.assertEqual(got["output_ids"], want["output_ids"])
        self.assertEqual(got["text"], want["text"])
        for key in ("output_token_logprobs", "input_token_logprobs"):
            # json floats parse to the same doubles only when the bits agree
            self.assertEqual(got["meta_info"][key], want["meta_info"][key], key)
        self.assertEqual(len(got["meta_info"]["input_token_logprobs"]), want["meta_info"]["prompt_tokens"])

        # A batch: one room per item, merged item by item.
        batch = dict(body, text=["3+4=", "20-9="])
        want = self.unified.generate(batch)
        st, got = jget(self.url + "/generate", method="POST", body=batch, timeout=120)
        self.assertEqual(st, 200, got)
        self.assertEqual(len(got), 2)
        for g, w in zip(got, want):
            self.assertEqual(g["output_ids"], w["output_ids"])
            self.assertEqual(g["meta_info"]["output_token_logprobs"], w["meta_info"]["output_token_logprobs"])
            self.assertEqual(g["meta_info"]["input_token_logprobs"], w["meta_info"]["input_token_logprobs"])

        # Streaming: the decode's SSE relayed, ending as the unified engine's text.
        st, _, raw = request(self.url + "/generate", method="POST", timeout=120,
                             body={"text": "12+7=", "stream": True, "sampling_params": {"max_new_tokens": 12,
                                                                                       "temperature": 0}})
        self.assertEqual(st, 200)
        events = [l[6:] for l in raw.decode().split("\n") if l.startswith("data: ")]
        self.assertEqual(events[-1], "[DONE]")
        self.assertEqual(json.loads(events[-2])["text"], self.unified.generate(
            {"text": "12+7=", "sampling_params": {"max_new_tokens": 12, "temperature": 0}})["text"])

        # Both engines saw the requests, and the router counted them per pool.
        st, _, metrics = request(self.url + "/metrics")
        text = metrics.decode()
        self.assertIn('rlhost_router_pd_requests_total{role="prefill",worker="%s"}' % self.prefill.url, text)
        self.assertIn('rlhost_router_pd_requests_total{role="decode",worker="%s"}' % self.decode.url, text)


if __name__ == "__main__":
    support.main()
