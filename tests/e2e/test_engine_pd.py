"""Prefill/decode disaggregation between two `rlhost engine` processes, driven the
way a PD router drives them (the same body to both, with bootstrap_host, _port and
_room): output equal to a unified engine's bit for bit, the bytes moved, KV blocks
back to baseline, the checksum, and every failure ending with a clear error within
its timeout.

Run: RLHOST_BIN=build/rlhost python3 tests/e2e/test_engine_pd.py
"""
import json
import os
import random
import signal
import threading
import time
import unittest

import subprocess
import sys

import netns
from engine_support import STORIES, Engine
from support import BIN, main, requires, wait_for

CFG = json.load(open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data", "models",
                                  "stories260K", "config.json")))
# Bytes one prompt token's K/V take: layers x (K, V) x kv heads x head dim x float32.
TOKEN_BYTES = CFG["num_hidden_layers"] * 2 * CFG["num_key_value_heads"] * CFG["head_dim"] * 4
BLOCK = 16
TOKEN = "pd-test-" + os.urandom(8).hex()  # both sides share the run's admin token


def engine(*args, env=None):
    e = {"RLHOST_ADMIN_TOKEN": TOKEN}
    e.update(env or {})
    return Engine(args=("--block-size", str(BLOCK), *args), env=e)


def prompt(n, seed=0):
    r = random.Random(seed)
    return [1] + [r.randrange(3, CFG["vocab_size"]) for _ in range(n - 1)]


class Pair:
    """One prefill and one decode engine; pd_generate() plays the router."""

    def __init__(self, p_args=(), d_args=(), p_env=None, d_env=None):
        self.p = engine("--disaggregation-mode", "prefill", "--disaggregation-bootstrap-port", "0", *p_args, env=p_env)
        self.d = engine("--disaggregation-mode", "decode", *d_args, env=d_env)
        status, info = self.p.get("/get_server_info")
        assert status == 200, info
        self.bootstrap_port = info["disaggregation_bootstrap_port"]
        assert self.bootstrap_port > 0, info

    def stop(self):
        for e in (self.p, self.d):
            if e.proc.poll() is None:
                e.stop()

    def pd_generate(self, body, send_prefill=True, expect=200):
        room = random.randrange(2 ** 63)
        b = dict(body, bootstrap_host="127.0.0.1", bootstrap_port=self.bootstrap_port, bootstrap_room=room)
        res = {}

        def call(name, e):
            res[name] = e.post("/generate", b, timeout=60)
        threads = [threading.Thread(target=call, args=("d", self.d))]
        if send_prefill:
            threads.append(threading.Thread(target=call, args=("p", self.p)))
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        status, d = res["d"]
        if status != expect:
            raise AssertionError("decode /generate -> %s (wanted %s): %s" % (status, expect, d))
        if send_prefill and status == 200 and body.get("return_logprob"):
            # The router's merge: the prefill's prompt log-probs in front of the decode's.
            p = res["p"][1]
            assert res["p"][0] == 200, res["p"]
            d["meta_info"]["input_token_logprobs"] = (p["meta_info"].get("input_token_logprobs") or []) + \
                (d["meta_info"].get("input_token_logprobs") or [])
            if "input_top_logprobs" in p["meta_info"]:
                d["meta_info"]["input_top_logprobs"] = p["meta_info"]["input_top_logprobs"] + \
                    (d["meta_info"].get("input_top_logprobs") or [])
        return d, res.get("p")


def kv_used(e):
    status, info = e.get("/get_server_info")
    assert status == 200, info
    return info["internal_states"][0]["kv_tokens_used"] if "internal_states" in info else info["kv_tokens_used"]


def same(case, unified, pd, what):
    for key in ("output_ids",):
        case.assertEqual(unified[key], pd[key], what + ": " + key)
    mu, mp = unified["meta_info"], pd["meta_info"]
    for key in ("output_token_logprobs", "output_top_logprobs", "input_token_logprobs", "input_top_logprobs"):
        case.assertEqual(mu.get(key), mp.get(key), what + ": " + key)  # floats through JSON: bit for bit
    case.assertEqual(mu["finish_reason"], mp["finish_reason"], what)


class PdParity(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.unified = engine("--max-prefill-tokens", "64")
        cls.shm = Pair(p_args=("--max-prefill-tokens", "64"))
        cls.tcp = Pair(p_args=("--max-prefill-tokens", "64"), d_args=("--disaggregation-transfer-backend", "tcp",
                                                                       "--disaggregation-kv-checksum"))

    @classmethod
    def tearDownClass(cls):
        cls.unified.stop()
        cls.shm.stop()
        cls.tcp.stop()

    def body(self, ids, **kw):
        b = {"input_ids": ids, "sampling_params": {"max_new_tokens": 24, "temperature": 0, "ignore_eos": True},
             "return_logprob": True, "logprob_start_len": 0, "top_logprobs_num": 3}
        b.update(kw)
        return b

    def test_plain_greedy_and_sampled_equal_unified_bitwise(self):
        for k, (pair, name) in enumerate(((self.shm, "shm"), (self.tcp, "tcp"))):
            for j, sp in enumerate(({"temperature": 0}, {"temperature": 1.0, "top_p": 0.9, "seed": 7})):
                sp = dict(sp, max_new_tokens=24, ignore_eos=True)
                # a prompt the decode has not seen: every token's K/V travels
                b = self.body(prompt(37, seed=100 + 2 * k + j), sampling_params=sp)
                u = self.unified.generate(b)
                d, _ = pair.pd_generate(b)
                same(self, u, d, "%s %s" % (name, sp))
                m = d["meta_info"]
                self.assertAlmostEqual(m["pd_transfer_total_mb"], 37 * TOKEN_BYTES / 1e6, places=9)
                for key in ("pd_prefill_forward_duration", "pd_decode_transfer_duration", "pd_decode_forward_duration",
                            "pd_decode_prealloc_duration"):
                    self.assertIn(key, m)
                self.assertGreater(m["pd_decode_forward_duration"], 0)
        self.assertEqual(kv_used(self.shm.p), 0)
        self.assertEqual(kv_used(self.shm.d), 0)
        self.assertEqual(kv_used(self.tcp.d), 0)

    def test_long_prompt_over_the_prefill_budget(self):
        # 150 tokens > --max-prefill-tokens 64: rlhost runs such a prompt alone in one step
        # (it has no chunked prefill); PD must match it all the same.
        b = self.body(prompt(150, seed=2))
        u = self.unified.generate(b)
        d, _ = self.tcp.pd_generate(b)
        same(self, u, d, "long prompt")

    def test_prefix_cached_turn_moves_only_the_new_suffix(self):
        turn1 = prompt(40, seed=3)
        b1 = self.body(turn1, logprob_start_len=-1, return_logprob=False)
        d1, _ = self.shm.pd_generate(b1)
        self.assertAlmostEqual(d1["meta_info"]["pd_transfer_total_mb"], 40 * TOKEN_BYTES / 1e6, places=9)
        turn2 = turn1 + d1["output_ids"] + prompt(9, seed=4)[1:]
        b2 = self.body(turn2, logprob_start_len=-1, return_logprob=False)
        u2 = self.unified.generate(b2)
        d2, _ = self.shm.pd_generate(b2)
        self.assertEqual(u2["output_ids"], d2["output_ids"])
        # The decode's prefix cache holds turn 1's prompt and output in whole blocks:
        # only the tokens after them travel.
        cached = (len(turn1) + len(d1["output_ids"]) - 1) // BLOCK * BLOCK
        moved = len(turn2) - cached
        self.assertLess(moved, len(turn2))
        self.assertAlmostEqual(d2["meta_info"]["pd_transfer_total_mb"], moved * TOKEN_BYTES / 1e6, places=9)
        self.assertEqual(kv_used(self.shm.d), 0)

    def test_batched_rooms(self):
        prompts = [prompt(20, seed=10 + i) for i in range(3)]
        b = {"input_ids": prompts, "sampling_params": {"max_new_tokens": 8, "temperature": 0, "ignore_eos": True}}
        u = self.unified.generate(b)
        rooms = [random.randrange(2 ** 63) for _ in prompts]
        bb = dict(b, bootstrap_host=["127.0.0.1"] * 3, bootstrap_port=[self.shm.bootstrap_port] * 3, bootstrap_room=rooms)
        res = {}
        ts = [threading.Thread(target=lambda n=n, e=e: res.__setitem__(n, e.post("/generate", bb)))
              for n, e in (("p", self.shm.p), ("d", self.shm.d))]
        [t.start() for t in ts]
        [t.join() for t in ts]
        self.assertEqual(res["d"][0], 200, res["d"])
        self.assertEqual([x["output_ids"] for x in u], [x["output_ids"] for x in res["d"][1]])

    def test_openai_completions(self):
        b = {"prompt": prompt(25, seed=6), "max_tokens": 10, "temperature": 0, "logprobs": 2}
        u = self.unified.post("/v1/completions", b)
        room = random.randrange(2 ** 63)
        bb = dict(b, bootstrap_host="127.0.0.1", bootstrap_port=self.tcp.bootstrap_port, bootstrap_room=room)
        res = {}
        ts = [threading.Thread(target=lambda n=n, e=e: res.__setitem__(n, e.post("/v1/completions", bb)))
              for n, e in (("p", self.tcp.p), ("d", self.tcp.d))]
        [t.start() for t in ts]
        [t.join() for t in ts]
        self.assertEqual(u[0], 200, u)
        self.assertEqual(res["d"][0], 200, res["d"])
        self.assertEqual(u[1]["choices"][0]["text"], res["d"][1]["choices"][0]["text"])
        self.assertEqual(u[1]["choices"][0]["logprobs"], res["d"][1]["choices"][0]["logprobs"])

    def test_streaming_decode(self):
        b = self.body(prompt(33, seed=14), return_logprob=False, logprob_start_len=-1)
        u = self.unified.generate(b)
        room = random.randrange(2 ** 63)
        bb = dict(b, stream=True, bootstrap_host="127.0.0.1", bootstrap_port=self.shm.bootstrap_port, bootstrap_room=room)
        t = threading.Thread(target=lambda: self.shm.p.post("/generate", dict(bb, stream=False)))
        t.start()
        events = self.shm.d.stream("/generate", bb)
        t.join()
        self.assertEqual(events[-1], "[DONE]")
        chunks = [json.loads(e) for e in events[:-1]]
        self.assertGreater(len(chunks), 1)
        self.assertEqual(chunks[-1]["output_ids"], u["output_ids"])

    def test_metrics(self):
        self.shm.pd_generate(self.body(prompt(12, seed=5)))
        _, text = self.shm.d.get("/metrics")
        for name in ("sglang:num_decode_prealloc_queue_reqs", "sglang:num_decode_transfer_queue_reqs",
                     "sglang:kv_transfer_speed_gb_s_bucket", "sglang:kv_transfer_latency_ms_bucket",
                     "sglang:kv_transfer_total_mb_bucket"):
            self.assertIn(name, text)
        _, text = self.shm.p.get("/metrics")
        self.assertIn("sglang:num_prefill_bootstrap_queue_reqs", text)
        self.assertIn("sglang:num_prefill_inflight_queue_reqs", text)


class PdFailures(unittest.TestCase):
    TIMEOUT = "3"

    def ok_after(self, pair):
        """Neither side is left broken: a normal PD request still works."""
        d, _ = pair.pd_generate({"input_ids": prompt(10, seed=9), "sampling_params": {"max_new_tokens": 4}})
        self.assertEqual(len(d["output_ids"]), 4)
        self.assertEqual(kv_used(pair.p), 0)
        self.assertEqual(kv_used(pair.d), 0)

    def test_corrupted_row_is_caught_by_the_checksum(self):
        pair = Pair(p_env={"RLHOST_PD_FAULT": "corrupt"},
                    d_args=("--disaggregation-kv-checksum", "--disaggregation-transfer-timeout", self.TIMEOUT))
        try:
            d, _ = pair.pd_generate({"input_ids": prompt(30), "sampling_params": {"max_new_tokens": 4}})
            self.assertEqual(d["meta_info"]["finish_reason"]["type"], "abort")
            self.assertIn("changed in transit", d["meta_info"]["finish_reason"]["message"])
            self.assertEqual(d["output_ids"], [])
            wait_for(lambda: kv_used(pair.d) == 0, timeout=5, what="decode blocks back")
            self.assertEqual(kv_used(pair.p), 0)
        finally:
            pair.stop()

    def test_prefill_down_at_bootstrap(self):
        pair = Pair(d_args=("--disaggregation-transfer-timeout", self.TIMEOUT))
        try:
            pair.p.stop()
            t0 = time.time()
            d, _ = pair.pd_generate({"input_ids": prompt(10), "sampling_params": {"max_new_tokens": 4}}, send_prefill=False)
            self.assertLess(time.time() - t0, float(self.TIMEOUT) + 2)
            msg = d["meta_info"]["finish_reason"]["message"]
            self.assertIn("bootstrap server at 127.0.0.1:%d is unreachable" % pair.bootstrap_port, msg)
            self.assertEqual(kv_used(pair.d), 0)
            # the decode still serves
            out = pair.d.generate({"input_ids": prompt(10), "sampling_params": {"max_new_tokens": 3}})
            self.assertEqual(len(out["output_ids"]), 3)
        finally:
            pair.stop()

    def test_decode_cache_released_waits_then_fails(self):
        pair = Pair(d_args=("--disaggregation-transfer-timeout", self.TIMEOUT))
        try:
            status, out = pair.d.post("/release_memory_occupation", {"tags": ["kv_cache"]})
            self.assertEqual(status, 200, out)
            t0 = time.time()
            d, _ = pair.pd_generate({"input_ids": prompt(20), "sampling_params": {"max_new_tokens": 4}})
            self.assertLess(time.time() - t0, float(self.TIMEOUT) + 2)
            fr = d["meta_info"]["finish_reason"]
            self.assertEqual(fr["type"], "abort")
            self.assertIn("no KV blocks for the prompt within", fr["message"])
            status, out = pair.d.post("/resume_memory_occupation", {"tags": ["kv_cache"]})
            self.assertEqual(status, 200, out)
            wait_for(lambda: kv_used(pair.p) == 0, timeout=5, what="prefill blocks back")
            self.ok_after(pair)
        finally:
            pair.stop()

    def test_transferred_kv_is_what_the_decode_attends_to(self):
        # Without the checksum a changed row goes through: the output then differs from
        # the unified engine's, so the decode really computes on the rows it received.
        unified = engine()
        pair = Pair(p_env={"RLHOST_PD_FAULT": "corrupt"})
        try:
            b = {"input_ids": prompt(30, seed=8), "return_logprob": True,
                 "sampling_params": {"max_new_tokens": 8, "temperature": 0, "ignore_eos": True}}
            u = unified.generate(b)
            d, _ = pair.pd_generate(b)
            self.assertEqual(d["meta_info"]["finish_reason"]["type"], "length")
            self.assertNotEqual(u["meta_info"]["output_token_logprobs"][1:], d["meta_info"]["output_token_logprobs"][1:])
        finally:
            unified.stop()
            pair.stop()

    def test_prefill_and_decode_at_different_weight_versions_is_flagged(self):
        pair = Pair(p_args=("--weight-version", "7"), d_args=("--weight-version", "8"))
        try:
            b = {"input_ids": prompt(40, seed=12), "return_logprob": True,
                 "sampling_params": {"max_new_tokens": 5, "temperature": 0, "ignore_eos": True}}
            d, _ = pair.pd_generate(b)
            m = d["meta_info"]
            # the first token was sampled under the prefill's weights, the rest under the decode's
            self.assertEqual(m["weight_version_spans"], [[0, "7"], [1, "8"]])
            # (the weights' digest is of their contents, the same here: it stays)
            # K/V computed under other weights never serve another request from the cache
            d2, _ = pair.pd_generate(b)
            self.assertAlmostEqual(d2["meta_info"]["pd_transfer_total_mb"], 40 * TOKEN_BYTES / 1e6, places=9)
        finally:
            pair.stop()

    def test_abort_while_waiting_for_kv(self):
        pair = Pair(d_args=("--disaggregation-transfer-timeout", "20"))
        try:
            room = random.randrange(2 ** 63)
            body = {"input_ids": prompt(30), "sampling_params": {"max_new_tokens": 4}, "rid": "pd-abort-1",
                    "bootstrap_host": "127.0.0.1", "bootstrap_port": pair.bootstrap_port, "bootstrap_room": room}
            res = []
            t = threading.Thread(target=lambda: res.append(pair.d.post("/generate", body)))
            t.start()
            wait_for(lambda: kv_used(pair.d) > 0, timeout=10, what="the decode to reserve blocks")
            status, _ = pair.d.post("/abort_request", {"rid": "pd-abort-1"})
            self.assertEqual(status, 200)
            t.join(10)
            self.assertEqual(res[0][1]["meta_info"]["finish_reason"]["type"], "abort")
            self.assertEqual(kv_used(pair.d), 0)
            # The prefill runs the room late: its push finds nothing and it stays healthy.
            status, p = pair.p.post("/generate", dict(body, rid="pd-abort-p"))
            self.assertEqual(status, 200, p)
            wait_for(lambda: kv_used(pair.p) == 0, timeout=5, what="prefill blocks back")
            self.ok_after(pair)
        finally:
            pair.stop()

    def test_prefill_sigkilled_mid_transfer(self):
        pair = Pair(d_args=("--disaggregation-transfer-timeout", self.TIMEOUT))
        try:
            room = random.randrange(2 ** 63)
            body = {"input_ids": prompt(30), "sampling_params": {"max_new_tokens": 4},
                    "bootstrap_host": "127.0.0.1", "bootstrap_port": pair.bootstrap_port, "bootstrap_room": room}
            res = []
            t = threading.Thread(target=lambda: res.append(pair.d.post("/generate", body)))
            t0 = time.time()
            t.start()
            # The decode has registered with the prefill; the prefill dies before it sends.
            wait_for(lambda: kv_used(pair.d) > 0, timeout=10, what="the decode to reserve blocks")
            time.sleep(0.3)
            pair.p.proc.send_signal(signal.SIGKILL)
            pair.p.proc.wait()
            t.join(20)
            self.assertLess(time.time() - t0, float(self.TIMEOUT) + 3)
            fr = res[0][1]["meta_info"]["finish_reason"]
            self.assertEqual(fr["type"], "abort")
            self.assertIn("no K/V from the prefill at 127.0.0.1:%d" % pair.bootstrap_port, fr["message"])
            self.assertEqual(kv_used(pair.d), 0)
            out = pair.d.generate({"input_ids": prompt(10), "sampling_params": {"max_new_tokens": 3}})
            self.assertEqual(len(out["output_ids"]), 3)
        finally:
            pair.stop()

    def test_bad_input(self):
        pair = Pair()
        try:
            status, out = pair.d.post("/generate", {"input_ids": [1, 5, 6], "bootstrap_room": 5})
            self.assertEqual(status, 400)
            self.assertIn("bootstrap_host", json.dumps(out))
            status, out = pair.d.post("/generate", {"input_ids": [1, 5, 6], "bootstrap_room": -1,
                                                    "bootstrap_host": "127.0.0.1", "bootstrap_port": 1})
            self.assertEqual(status, 400)
            self.assertIn("bootstrap_room", json.dumps(out))
            unified = engine()
            try:
                status, out = unified.post("/generate", {"input_ids": [1, 5, 6], "bootstrap_room": 5})
                self.assertEqual(status, 400)
                self.assertIn("disaggregation-mode", json.dumps(out))
            finally:
                unified.stop()
            status, out = pair.d.post("/disagg/kv", raw=b"\x01", headers={"Content-Type": "application/octet-stream"})
            self.assertEqual(status, 400)
            status, out = pair.d.post("/disagg/kv", raw=b"\x01", auth=False)
            self.assertEqual(status, 401)
        finally:
            pair.stop()


# Run inside host 0's namespace: the router's part, to the two hosts' engines.
CLIENT = r"""
import json, random, sys, threading, urllib.request
p, d, bport, body = sys.argv[1], sys.argv[2], int(sys.argv[3]), json.loads(sys.argv[4])
host = p.split("//")[1].split(":")[0]
b = dict(body, bootstrap_host=host, bootstrap_port=bport, bootstrap_room=random.randrange(2 ** 63))
out = {}
def post(name, url):
    req = urllib.request.Request(url + "/generate", data=json.dumps(b).encode(), headers={"Content-Type": "application/json"})
    out[name] = json.loads(urllib.request.urlopen(req, timeout=60).read())
ts = [threading.Thread(target=post, args=(n, u)) for n, u in (("p", p), ("d", d))]
[t.start() for t in ts]
[t.join() for t in ts]
out["d"]["meta_info"]["input_token_logprobs"] = out["p"]["meta_info"]["input_token_logprobs"]
print(json.dumps(out["d"]))
"""

WHY_NOT = netns.available()


def read(path):
    with open(path) as f:
        return f.read().strip()


@requires(WHY_NOT is None, "network namespaces", str(WHY_NOT))
class PdAcrossHosts(unittest.TestCase):
    def test_prefill_and_decode_on_two_hosts_over_tcp(self):
        unified = engine()
        procs = []
        try:
            with netns.Hosts(2) as hosts:
                env = dict(os.environ, RLHOST_ADMIN_TOKEN=TOKEN, RLHOST_API_KEY="pd-hosts-" + os.urandom(8).hex())
                urls = []
                for i, (h, role) in enumerate(zip(hosts, ("prefill", "decode"))):
                    ready = "/tmp/rlhost-pd-hosts-%d-%d.url" % (os.getpid(), i)
                    extra = ["--disaggregation-bootstrap-port", "0"] if role == "prefill" else []
                    procs.append(h.popen([BIN, "engine", "--model", STORIES, "--host", h.addr, "--port", "0",
                                          "--threads", "1", "--block-size", str(BLOCK), "--ready-file", ready,
                                          "--disaggregation-mode", role, "--disaggregation-kv-checksum", *extra],
                                         env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
                    wait_for(lambda: os.path.exists(ready) and read(ready).startswith("http"),
                             timeout=120, what="the %s engine on %s" % (role, h.addr))
                    urls.append(read(ready))
                    os.remove(ready)
                info = hosts[0].run([sys.executable, "-c", "import sys, urllib.request; "
                                     "print(urllib.request.urlopen(sys.argv[1], timeout=30).read().decode())",
                                     urls[0] + "/get_server_info"], capture_output=True, text=True, timeout=60)
                bport = json.loads(info.stdout)["disaggregation_bootstrap_port"]
                body = {"input_ids": prompt(45, seed=21), "return_logprob": True, "logprob_start_len": 0,
                        "sampling_params": {"max_new_tokens": 16, "temperature": 0, "ignore_eos": True}}
                r = hosts[0].run([sys.executable, "-c", CLIENT, urls[0], urls[1], str(bport), json.dumps(body)],
                                 capture_output=True, text=True, timeout=120)
                self.assertEqual(r.returncode, 0, r.stderr[-3000:])
                d = json.loads(r.stdout)
                for p in procs:
                    p.terminate()
                for p in procs:
                    p.wait(30)
            u = unified.generate(body)
            self.assertEqual(u["output_ids"], d["output_ids"])
            for key in ("output_token_logprobs", "input_token_logprobs"):
                self.assertEqual(u["meta_info"][key], d["meta_info"][key], key)
            self.assertAlmostEqual(d["meta_info"]["pd_transfer_total_mb"], 45 * TOKEN_BYTES / 1e6, places=9)
            self.assertEqual(sorted({x.split("//")[1].split(":")[0] for x in urls}), ["198.18.0.1", "198.18.0.2"])
        finally:
            for p in procs:
                if p.poll() is None:
                    p.kill()
                    p.wait()
            unified.stop()


if __name__ == "__main__":
    main()
