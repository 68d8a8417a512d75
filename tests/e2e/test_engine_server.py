#!/usr/bin/env python3
"""`rlhost engine` driven like an SGLang server: plain /generate (single,
batched, n fan-out, streaming, logprobs), abort, bad inputs (400 and still
serving), weight updates, memory release/resume, prefix cache and flush,
profiling, metrics (promtool when installed), auth, SIGTERM.

The model is the real pretrained stories260K (tests/data); greedy ids
and log-probs are checked against its golden reference_outputs.json.

    RLHOST_BIN=build/rlhost python3 tests/e2e/test_engine_server.py
"""
import glob
import gzip
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from support import wait_for  # noqa: E402
import support  # noqa: E402
from engine_support import STORIES, Engine, EngineTestCase  # noqa: E402


# Near the 512-token context of stories260K: a second or more of decoding, long
# enough to be aborted mid-way.
LONG = 510


def log_softmax(row):
    m = max(row)
    s = sum(math.exp(x - m) for x in row)
    return [x - m - math.log(s) for x in row]


class EngineServerTest(EngineTestCase):
    ENGINE_ARGS = ("--served-model-name", "stories", "--kv-cache-tokens", "4096")

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        with open(os.path.join(STORIES, "reference_outputs.json")) as f:
            cls.ref = json.load(f)

    # ---- info ------------------------------------------------------------------------
    def test_info_endpoints(self):
        status, _ = self.eng.get("/health")
        self.assertEqual(status, 200)
        status, _ = self.eng.get("/health_generate")
        self.assertEqual(status, 200)
        status, info = self.eng.get("/get_model_info")
        self.assertEqual(status, 200)
        self.assertEqual(info["model_path"], STORIES)
        self.assertTrue(info["is_generation"])
        self.assertIn("weight_version", info)
        status, si = self.eng.get("/get_server_info")
        self.assertEqual(status, 200)
        self.assertEqual(si["served_model_name"], "stories")
        self.assertEqual(si["max_running_requests"], 64)
        self.assertIn("num_running_reqs", si["internal_states"][0])
        status, models = self.eng.get("/v1/models")
        self.assertEqual(models["data"][0]["id"], "stories")
        status, loads = self.eng.get("/v1/loads")
        self.assertEqual(loads["loads"][0]["num_total_reqs"], 0)
        status, body = self.eng.get("/no/such/endpoint")
        self.assertEqual(status, 404)
        self.assertIn("no endpoint", body["error"]["message"])

    # ---- generation ------------------------------------------------------------------
    def test_greedy_matches_reference_ids_and_logprobs(self):
        g = self.ref["greedy"]
        want = g["ids"][len(g["prompt_ids"]):]
        out = self.eng.generate({"input_ids": g["prompt_ids"], "return_logprob": True,
                                 "sampling_params": {"temperature": 0, "max_new_tokens": len(want), "ignore_eos": True}})
        self.assertEqual(out["output_ids"], want)
        mi = out["meta_info"]
        self.assertEqual(mi["finish_reason"], {"type": "length", "length": len(want)})
        self.assertEqual(mi["prompt_tokens"], 1)
        self.assertEqual(mi["completion_tokens"], len(want))
        for key in ("id", "cached_tokens", "queue_time", "prefill_time", "decode_time", "e2e_latency",
                    "decode_throughput", "weight_version"):
            self.assertIn(key, mi)
        self.assertGreaterEqual(mi["e2e_latency"], mi["queue_time"])
        lps = mi["output_token_logprobs"]
        self.assertEqual([e[1] for e in lps], want)
        self.assertTrue(all(e[2] is None for e in lps))
        # Greedy log-probs are log_softmax(logits) of the reference forward pass.
        logits = self.ref["logits"]["values"]
        ref_ids = self.ref["logits"]["input_ids"]
        for k in range(len(logits) - 1):
            self.assertAlmostEqual(lps[k][0], log_softmax(logits[k])[ref_ids[k + 1]], delta=1e-4)

    def test_text_prompt_and_top_logprobs(self):
        out = self.eng.generate({"text": "Once upon a time", "return_logprob": True, "top_logprobs_num": 3,
                                 "sampling_params": {"temperature": 0, "max_new_tokens": 8}})
        self.assertIsInstance(out["text"], str)
        self.assertGreater(len(out["text"]), 0)
        tops = out["meta_info"]["output_top_logprobs"]
        self.assertEqual(len(tops), len(out["output_ids"]))
        for pos, tok in zip(tops, out["output_ids"]):
            self.assertEqual(len(pos), 3)
            self.assertEqual(pos[0][1], tok)  # greedy picks the most likely token
            self.assertGreaterEqual(pos[0][0], pos[1][0])

    def test_batched_rids_and_fanout(self):
        outs = self.eng.generate({"text": ["Once upon a time", "The cat"], "rid": ["a", "b"],
                                  "sampling_params": [{"temperature": 0, "max_new_tokens": 4},
                                                      {"temperature": 0, "max_new_tokens": 6}]})
        self.assertEqual([o["meta_info"]["id"] for o in outs], ["a", "b"])
        self.assertEqual([o["meta_info"]["completion_tokens"] for o in outs], [4, 6])
        ids = self.eng.generate({"input_ids": [[1, 403], [1, 403, 407]],
                                 "sampling_params": {"temperature": 0, "max_new_tokens": 3}})
        self.assertEqual(len(ids), 2)
        self.assertEqual([o["meta_info"]["prompt_tokens"] for o in ids], [2, 3])
        fan = self.eng.generate({"input_ids": [1], "rid": "fan",
                                 "sampling_params": {"n": 3, "temperature": 1.0, "max_new_tokens": 12,
                                                     "sampling_seed": 7, "ignore_eos": True}})
        self.assertEqual(len(fan), 3)
        self.assertEqual([o["meta_info"]["id"] for o in fan], ["fan-0", "fan-1", "fan-2"])
        self.assertGreater(len({tuple(o["output_ids"]) for o in fan}), 1)  # samples differ
        again = self.eng.generate({"input_ids": [1], "sampling_params": {"n": 3, "temperature": 1.0,
                                   "max_new_tokens": 12, "sampling_seed": 7, "ignore_eos": True}})
        self.assertEqual([o["output_ids"] for o in again], [o["output_ids"] for o in fan])  # seeded

    def test_stop_reasons(self):
        g = self.ref["greedy"]["ids"]
        out = self.eng.generate({"input_ids": [1], "sampling_params": {"temperature": 0, "max_new_tokens": 30,
                                                                       "stop_token_ids": [g[3]]}})
        self.assertEqual(out["meta_info"]["finish_reason"], {"type": "stop", "matched": g[3]})

    def test_streaming_is_cumulative_and_ends_with_done(self):
        body = {"input_ids": [1], "stream": True, "return_logprob": True,
                "sampling_params": {"temperature": 0, "max_new_tokens": 20, "ignore_eos": True}}
        events = self.eng.stream("/generate", body)
        self.assertEqual(events[-1], "[DONE]")
        chunks = [json.loads(e) for e in events[:-1]]
        self.assertGreater(len(chunks), 1)
        for a, b in zip(chunks, chunks[1:]):
            self.assertEqual(b["output_ids"][:len(a["output_ids"])], a["output_ids"])
        self.assertIsNone(chunks[0]["meta_info"]["finish_reason"])
        last = chunks[-1]
        self.assertEqual(last["meta_info"]["finish_reason"]["type"], "length")
        self.assertEqual(last["output_ids"], self.ref["greedy"]["ids"][1:21])
        self.assertEqual(len(last["meta_info"]["output_token_logprobs"]), 20)

    def test_stream_disconnect_aborts(self):
        def aborted():
            return self.eng.get("/get_server_info")[1]["internal_states"][0]["requests_aborted"]
        before = aborted()
        body = {"input_ids": [1], "stream": True, "rid": "gone",
                "sampling_params": {"temperature": 0, "max_new_tokens": LONG, "ignore_eos": True}}
        events = self.eng.stream("/generate", body, max_events=2)
        self.assertEqual(len(events), 2)
        self.eng.wait_idle(timeout=30)
        self.assertEqual(aborted(), before + 1)  # dropped, not run to its end

    def test_abort_request(self):
        result = {}

        def run():
            result["out"] = self.eng.generate({"input_ids": [1], "rid": "long", "sampling_params": {
                "temperature": 0, "max_new_tokens": LONG, "ignore_eos": True}})
        t = threading.Thread(target=run)
        t.start()
        wait_for(lambda: self.eng.loads() == 1, what="the long request to run")
        status, body = self.eng.post("/abort_request", {"rid": "long"})
        self.assertEqual(status, 200, body)
        t.join(30)
        fr = result["out"]["meta_info"]["finish_reason"]
        self.assertEqual(fr["type"], "abort")
        # abort_all
        t = threading.Thread(target=run)
        t.start()
        wait_for(lambda: self.eng.loads() == 1, what="the long request to run")
        self.assertEqual(self.eng.post("/abort_request", {"abort_all": True})[0], 200)
        t.join(30)
        self.assertEqual(result["out"]["meta_info"]["finish_reason"]["type"], "abort")

    # ---- bad input -------------------------------------------------------------------
    def test_bad_inputs_are_400_naming_the_field(self):
        cases = [
            (None, b"{not json", "invalid JSON"),
            ({"input_ids": [1], "sampling_params": {"temprature": 0.5}}, None, "temprature"),
            ({"input_ids": [1], "sampling_params": {"temperature": -1}}, None, "temperature"),
            ({"input_ids": [1], "sampling_params": {"top_p": 1.5}}, None, "top_p"),
            ({"input_ids": []}, None, "input_ids"),
            ({"text": ""}, None, "text"),
            ({}, None, "input_ids"),
            ({"input_ids": [1], "text": "x"}, None, "input_ids"),
            ({"input_ids": [1, 99999]}, None, "99999"),
            ({"input_ids": [1] * 600}, None, "context"),
            ({"input_ids": [1], "bogus_field": 1}, None, "bogus_field"),
            ({"input_ids": [[1], [2]], "rid": ["only-one"]}, None, "rid"),
            ({"input_ids": ["a"]}, None, "input_ids[0]"),
            ({"input_ids": [1], "return_logprob": "yes"}, None, "return_logprob"),
        ]
        for body, raw, needle in cases:
            status, err = self.eng.post("/generate", body, raw=raw)
            self.assertEqual(status, 400, (body, err))
            self.assertEqual(err["error"]["code"], 400)
            self.assertEqual(err["error"]["type"], "BadRequest")
            self.assertIn(needle.lower(), err["error"]["message"].lower(), (body, err))
        status, _ = self.eng.get("/health")
        self.assertEqual(status, 200)
        out = self.eng.generate({"input_ids": [1], "sampling_params": {"temperature": 0, "max_new_tokens": 2}})
        self.assertEqual(out["meta_info"]["completion_tokens"], 2)

    # ---- control ---------------------------------------------------------------------
    def test_prefix_cache_and_flush(self):
        prompt = self.ref["greedy"]["ids"][:100]
        body = {"input_ids": prompt, "sampling_params": {"temperature": 0, "max_new_tokens": 1}}
        self.assertEqual(self.eng.post("/flush_cache")[0], 200)
        first = self.eng.generate(body)
        second = self.eng.generate(body)
        self.assertEqual(first["meta_info"]["cached_tokens"], 0)
        self.assertGreater(second["meta_info"]["cached_tokens"], 0)
        self.assertEqual(first["output_ids"], second["output_ids"])
        self.assertEqual(self.eng.post("/flush_cache")[0], 200)
        third = self.eng.generate(body)
        self.assertEqual(third["meta_info"]["cached_tokens"], 0)

    def test_update_weights_from_disk(self):
        status, r = self.eng.post("/update_weights_from_disk", {"model_path": STORIES, "weight_version": "v2"})
        self.assertEqual(status, 200, r)
        self.assertTrue(r["success"])
        out = self.eng.generate({"input_ids": [1], "sampling_params": {"temperature": 0, "max_new_tokens": 3,
                                                                       "ignore_eos": True}})
        self.assertEqual(out["meta_info"]["weight_version"], "v2")
        self.assertEqual(out["output_ids"], self.ref["greedy"]["ids"][1:4])  # same weights, same tokens
        status, r = self.eng.post("/update_weights_from_disk", {"model_path": "/nonexistent/dir"})
        self.assertEqual(status, 400)
        self.assertFalse(r["success"])
        self.assertIn("/nonexistent/dir", r["message"])
        status, r = self.eng.post("/update_weights_from_disk", {})
        self.assertEqual(status, 400)
        self.assertIn("model_path", r["error"]["message"])
        self.assertEqual(self.eng.get("/get_model_info")[1]["weight_version"], "v2")

    def test_release_and_resume_memory(self):
        self.assertEqual(self.eng.post("/release_memory_occupation", {"tags": ["kv_cache"]})[0], 200)
        result = {}

        def run():
            result["out"] = self.eng.generate({"input_ids": [1], "sampling_params": {
                "temperature": 0, "max_new_tokens": 3, "ignore_eos": True}})
        t = threading.Thread(target=run)
        t.start()
        time.sleep(0.5)
        self.assertNotIn("out", result)  # waits while the KV cache is released
        self.assertEqual(self.eng.post("/resume_memory_occupation", {"tags": ["kv_cache"]})[0], 200)
        t.join(30)
        self.assertEqual(result["out"]["output_ids"], self.ref["greedy"]["ids"][1:4])
        # both tags (weights are re-read from disk on resume)
        self.assertEqual(self.eng.post("/release_memory_occupation", {})[0], 200)
        self.assertEqual(self.eng.post("/resume_memory_occupation", {})[0], 200)
        out = self.eng.generate({"input_ids": [1], "sampling_params": {"temperature": 0, "max_new_tokens": 3,
                                                                       "ignore_eos": True}})
        self.assertEqual(out["output_ids"], self.ref["greedy"]["ids"][1:4])
        status, err = self.eng.post("/release_memory_occupation", {"tags": ["gpu"]})
        self.assertEqual(status, 400)
        self.assertIn("tags", err["error"]["message"])

    def test_profile_writes_chrome_trace(self):
        out_dir = tempfile.mkdtemp(prefix="rlhost-prof-")
        try:
            status, r = self.eng.post("/start_profile", {"output_dir": out_dir, "num_steps": 3,
                                                         "activities": ["CPU"], "record_shapes": True})
            self.assertEqual(status, 200, r)
            self.eng.generate({"input_ids": [1], "sampling_params": {"temperature": 0, "max_new_tokens": 8,
                                                                     "ignore_eos": True}})
            files = wait_for(lambda: glob.glob(os.path.join(out_dir, "*.trace.json.gz")), what="the trace file")
            with gzip.open(files[0], "rt") as f:
                trace = json.load(f)
            self.assertIsInstance(trace["traceEvents"], list)
            self.assertGreater(len(trace["traceEvents"]), 0)
            status, r = self.eng.post("/stop_profile")  # already stopped by num_steps
            self.assertEqual(status, 200, r)
            # explicit stop
            self.assertEqual(self.eng.post("/start_profile", {"output_dir": out_dir})[0], 200)
            self.eng.generate({"input_ids": [1], "sampling_params": {"max_new_tokens": 2}})
            status, r = self.eng.post("/stop_profile")
            self.assertEqual(status, 200, r)
            self.assertTrue(r["path"].endswith(".trace.json.gz"))
            with gzip.open(r["path"], "rt") as f:
                self.assertIn("traceEvents", json.load(f))
            status, err = self.eng.post("/start_profile", {"activities": ["TPU"]})
            self.assertEqual(status, 400)
            self.assertIn("TPU", err["error"]["message"])
        finally:
            shutil.rmtree(out_dir, ignore_errors=True)

    def test_metrics(self):
        self.eng.generate({"input_ids": [1], "sampling_params": {"temperature": 0, "max_new_tokens": 4}})
        status, text = self.eng.get("/metrics")
        self.assertEqual(status, 200)
        for name in ("sglang:num_running_reqs", "sglang:num_queue_reqs", "sglang:gen_throughput",
                     "sglang:token_usage", "sglang:cache_hit_rate", "sglang:prompt_tokens_total",
                     "sglang:generation_tokens_total", "sglang:time_to_first_token_seconds_bucket",
                     "sglang:inter_token_latency_seconds_bucket", "sglang:e2e_request_latency_seconds_count"):
            self.assertIn(name + "{", text)
        self.assertIn('model_name="stories"', text)
        promtool = shutil.which("promtool")
        if not promtool:  # the checks above passed; the linter's verdict is what is missing
            support.missing("promtool is not installed (`promtool check metrics` cannot run)",
                            "apt-get install prometheus (Debian; ships promtool), or scripts/bootstrap.sh --test-deps")
        p = subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True, text=True)
        # SGLang's names are `sglang:*`; promtool's linter flags every colon (exit 3,
        # "metric names should not contain ':'"). Anything else — a parse error (exit 1)
        # or another lint finding — fails.
        problems = [l for l in (p.stdout + p.stderr).splitlines()
                    if l.strip() and "should not contain ':'" not in l]
        self.assertIn(p.returncode, (0, 3), p.stdout + p.stderr)
        self.assertEqual(problems, [], p.stdout + p.stderr)


class EngineAuthTest(unittest.TestCase):
    def test_api_key_guards_control_endpoints(self):
        eng = Engine(args=["--api-key", "s3cret"])
        try:
            status, err = eng.post("/flush_cache", auth=False)
            self.assertEqual(status, 401)
            self.assertIn("Authorization", err["error"]["message"])
            self.assertEqual(eng.post("/abort_request", {"abort_all": True}, auth=False)[0], 401)
            self.assertEqual(eng.post("/flush_cache", headers={"Authorization": "Bearer wrong"})[0], 401)
            self.assertEqual(eng.post("/flush_cache", headers={"Authorization": "Bearer s3cret"})[0], 200)
            self.assertEqual(eng.post("/flush_cache")[0], 200)  # the run's admin token works too
            self.assertEqual(eng.get("/health")[0], 200)  # generation and info stay open
        finally:
            self.assertEqual(eng.stop(), 0)

    def test_remote_host_needs_api_key(self):
        eng = Engine(args=["--host", "0.0.0.0"], wait=False)
        rc = eng.proc.wait(timeout=60)
        out = eng.output()
        eng.stop()
        self.assertNotEqual(rc, 0)
        self.assertIn("--api-key", out)

    def test_bad_model_fails_fast(self):
        eng = Engine(model=tempfile.gettempdir(), wait=False)
        rc = eng.proc.wait(timeout=60)
        out = eng.output()
        eng.stop()
        self.assertNotEqual(rc, 0)
        self.assertIn(tempfile.gettempdir(), out)


if __name__ == "__main__":
    support.main()
