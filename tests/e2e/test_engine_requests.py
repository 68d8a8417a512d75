#!/usr/bin/env python3
"""`rlhost engine` against requests that ask for too much (issue 40): a response is
bounded by what its request may ask for (sequences x tokens x top log-probs, and the
top log-prob count) with a 400 naming the fields, and the memory of a large answer goes
back (also while a kept-alive connection stays open); stop strings and stop token ids are bounded; a prompt too long for the context
is refused before it is tokenized, and large bodies are parsed off the event loop (the
server keeps answering meanwhile); chat messages' content in any JSON shape is a 400
or accepted, never a 500; a temperature too small to divide by samples greedily with
finite log-probs; prompt log-probs (logprob_start_len) over HTTP, bad starts a 400.

Real `rlhost engine` processes on stories260K, real sockets. Waits are bounded by
timeouts; nothing asserts how long something took.

    RLHOST_BIN=build/rlhost python3 tests/e2e/test_engine_requests.py
"""
import json
import math
import os
import socket
import subprocess
import sys
import tempfile
import threading
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from support import BIN, clean_env, wait_for  # noqa: E402
from engine_support import STORIES, Engine, EngineTestCase, make_chat_model  # noqa: E402
from test_engine_hardening import read_response, rss_kib  # noqa: E402


def error_of(out):
    return out["error"]["message"] if isinstance(out, dict) and "error" in out else repr(out)


class ResponseBounds(EngineTestCase):
    """The default caps: 20 top log-probs, 4 Mi values in a response."""

    ENGINE_ARGS = ("--kv-cache-tokens", "16384")

    def test_top_logprobs_over_the_cap_is_400(self):
        status, out = self.eng.post("/generate", {"input_ids": [1, 2, 3], "top_logprobs_num": 21,
                                                  "sampling_params": {"max_new_tokens": 2}})
        self.assertEqual(status, 400, out)
        self.assertIn("top_logprobs_num: expected an integer in [0, 20]", error_of(out))
        self.assertIn("--max-top-logprobs", error_of(out))
        status, out = self.eng.post("/v1/completions", {"prompt": [1, 2, 3], "logprobs": 21, "max_tokens": 2})
        self.assertEqual(status, 400, out)
        self.assertIn("logprobs: expected an integer in [0, 20]", error_of(out))
        out = self.eng.generate({"input_ids": [1, 2, 3], "top_logprobs_num": 20,
                                 "sampling_params": {"max_new_tokens": 2, "ignore_eos": True}})
        self.assertEqual([len(row) for row in out["meta_info"]["output_top_logprobs"]], [20, 20])

    def test_prompt_logprobs_over_http_and_bad_starts_are_400(self):
        prompt = [1, 40, 47, 26, 50, 60]
        for k, message in ((6, "logprob_start_len: 6 is not a position of the 6-token prompt"),
                           (-3, "logprob_start_len: -3 is not a position of the 6-token prompt"),
                           (2.0, "logprob_start_len: expected an integer"),
                           ([0, 1], "logprob_start_len: expected an integer")):
            status, out = self.eng.post("/generate", {"input_ids": prompt, "return_logprob": True,
                                                      "logprob_start_len": k})
            self.assertEqual(status, 400, (k, out))
            self.assertIn(message, error_of(out))
        out = self.eng.generate({"input_ids": prompt, "return_logprob": True, "logprob_start_len": 2,
                                 "sampling_params": {"max_new_tokens": 0}})
        m = out["meta_info"]
        self.assertEqual(out["output_ids"], [])
        self.assertEqual(m["finish_reason"], {"type": "length", "length": 0})
        self.assertEqual([e[1] for e in m["input_token_logprobs"]], prompt[2:])
        self.assertIsNone(m["input_token_logprobs"][0][0])
        self.assertTrue(all(e[0] <= 0 for e in m["input_token_logprobs"][1:]))

    def test_a_response_bigger_than_the_cap_is_refused_before_anything_runs(self):
        # 4 prompts x n 1024 x up to 500 tokens x (id + log-prob + 20 top log-probs): 45 M values
        status, out = self.eng.post("/generate", {
            "text": ["Once upon a time"] * 4, "return_logprob": True, "top_logprobs_num": 20,
            "sampling_params": {"n": 1024, "max_new_tokens": 500}}, timeout=60)
        self.assertEqual(status, 400, out)
        msg = error_of(out)
        for part in ("the response could hold", "4096 sequence(s)", "max_response_entries = 4194304",
                     "--max-response-entries", "max_new_tokens", "top_logprobs_num"):
            self.assertIn(part, msg)
        # no max_new_tokens: what the context leaves counts (512 - the prompt)
        status, out = self.eng.post("/generate", {"input_ids": [[1, 2]] * 4096, "return_logprob": True,
                                                  "top_logprobs_num": 1, "sampling_params": {"max_new_tokens": None}},
                                    timeout=60)
        self.assertEqual(status, 400, out)
        self.assertIn("up to 510 tokens", error_of(out))
        status, out = self.eng.post("/v1/completions", {"prompt": [[1, 2]] * 64, "n": 64, "max_tokens": 500,
                                                        "logprobs": 20}, timeout=60)
        self.assertEqual(status, 400, out)
        self.assertIn("max_response_entries", error_of(out))
        self.assertEqual(self.eng.loads(), 0, "nothing was queued")
        _, text = self.eng.get("/metrics")
        counted = [line for line in text.splitlines()
                   if line.startswith("sglang:num_rejected_requests_total{") and 'cap="max_response_entries"' in line]
        self.assertEqual([float(line.rsplit(" ", 1)[1]) for line in counted], [3], counted)

    def test_memory_of_a_large_answer_goes_back(self):
        self.eng.generate({"input_ids": [1, 2, 3], "sampling_params": {"max_new_tokens": 4}})
        self.eng.wait_idle()
        idle = rss_kib(self.eng.proc.pid)
        # 200 sequences (under the 256 after which an idle server trims anyway) x 480 tokens x 22
        # values: ~2.1 M entries, a body of ~60 MB
        out = self.eng.generate({"input_ids": [[1, 2, 3]] * 200, "return_logprob": True, "top_logprobs_num": 20,
                                 "sampling_params": {"max_new_tokens": 480, "ignore_eos": True}})
        self.assertEqual(len(out), 200)
        self.assertEqual(len(out[0]["meta_info"]["output_top_logprobs"]), 480)
        del out
        self.eng.wait_idle()
        wait_for(lambda: rss_kib(self.eng.proc.pid) <= idle * 1.3 + 20 * 1024, timeout=30,
                 what="RSS back near idle after the answer (idle %d KiB, now %d KiB)"
                 % (idle, rss_kib(self.eng.proc.pid)))

    def test_a_kept_alive_connection_does_not_hold_a_large_answer(self):
        # a client that keeps its connection (a router's pool does) for the next request:
        # the server's output buffer for it must not keep the size of the largest answer
        import http.client
        self.eng.generate({"input_ids": [1, 2, 3], "sampling_params": {"max_new_tokens": 4}})
        self.eng.wait_idle()
        idle = rss_kib(self.eng.proc.pid)
        conn = http.client.HTTPConnection(self.eng.host, self.eng.port, timeout=120)
        self.addCleanup(conn.close)
        body = json.dumps({"input_ids": [[1, 2, 3]] * 200, "return_logprob": True, "top_logprobs_num": 20,
                           "sampling_params": {"max_new_tokens": 480, "ignore_eos": True}})
        conn.request("POST", "/generate", body=body, headers={"Content-Type": "application/json"})
        resp = conn.getresponse()
        self.assertEqual(resp.status, 200)
        self.assertGreater(len(resp.read()), 30 << 20)
        self.eng.wait_idle()
        wait_for(lambda: rss_kib(self.eng.proc.pid) <= idle * 1.3 + 20 * 1024, timeout=30,
                 what="RSS back near idle with the connection still open (idle %d KiB, now %d KiB)"
                 % (idle, rss_kib(self.eng.proc.pid)))
        conn.request("GET", "/health")   # the connection still serves
        resp = conn.getresponse()
        resp.read()
        self.assertEqual(resp.status, 200)


class StopAndPromptBounds(EngineTestCase):
    ENGINE_ARGS = ("--kv-cache-tokens", "4096")

    def test_stop_strings_and_ids_are_bounded(self):
        for sp, want in (({"stop": ["x%d" % i for i in range(65)]}, "sampling_params.stop: 65 stop strings, more than the 64"),
                         ({"stop": "y" * 300}, "sampling_params.stop: a stop string of 300 bytes, longer than the 256"),
                         ({"stop": [str(i) for i in range(1000000)]}, "sampling_params.stop: 1000000 stop strings"),
                         ({"stop_token_ids": list(range(1025))}, "sampling_params.stop_token_ids: 1025 stop token ids")):
            sp["max_new_tokens"] = 2
            status, out = self.eng.post("/generate", {"input_ids": [1, 2, 3], "sampling_params": sp}, timeout=60)
            self.assertEqual(status, 400, out)
            self.assertIn(want, error_of(out))
        status, out = self.eng.post("/v1/completions", {"prompt": "Once", "stop": ["s%d" % i for i in range(100)],
                                                        "max_tokens": 2})
        self.assertEqual(status, 400, out)
        self.assertIn("request.stop: 100 stop strings", error_of(out))
        # the most a request may give is served
        out = self.eng.generate({"text": "Once upon a time", "sampling_params": {
            "stop": ["%03d" % i + "z" * 252 for i in range(64)], "stop_token_ids": list(range(3, 1027)),
            "max_new_tokens": 4}})
        self.assertIn("meta_info", out)

    def test_a_prompt_longer_than_the_context_is_refused_before_tokenizing(self):
        # 8.5 MB: under the JSON reader's 16 MiB per string, far over what 512 tokens can hold
        status, out = self.eng.post("/generate", {"text": "Once upon a time " * 500000,
                                                  "sampling_params": {"max_new_tokens": 2}}, timeout=120)
        self.assertEqual(status, 400, out)
        self.assertIn("text: a text of 8500000 bytes cannot fit the model's context of 512 tokens (refused without "
                      "tokenizing it)", error_of(out))
        status, out = self.eng.post("/v1/completions", {"prompt": ["ok", "x" * 5000000], "max_tokens": 2}, timeout=120)
        self.assertEqual(status, 400, out)
        self.assertIn("prompt[1]: a text of 5000000 bytes cannot fit", error_of(out))
        self.eng.generate({"text": "Once upon a time", "sampling_params": {"max_new_tokens": 2}})

    def test_a_large_body_is_parsed_off_the_loop(self):
        """While a 60 MB body is parsed, /health on another connection is answered first."""
        body = json.dumps({"text": ["Once upon a time " * 1750000, "x"], "sampling_params": {"max_new_tokens": 2}})
        order, lock = [], threading.Lock()

        def big():
            s = socket.create_connection((self.eng.host, self.eng.port), timeout=120)
            try:
                data = body.encode()
                s.sendall(b"POST /generate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                          b"Content-Length: %d\r\n\r\n" % len(data) + data)
                sent.set()
                status, _, _, _ = read_response(s)
                with lock:
                    order.append(("generate", status))
            finally:
                s.close()

        sent = threading.Event()
        t = threading.Thread(target=big, daemon=True)
        t.start()
        self.assertTrue(sent.wait(60), "the big body was sent")
        status, _ = self.eng.get("/health", timeout=120)
        with lock:
            order.append(("health", status))
        t.join(120)
        self.assertEqual([o[0] for o in order], ["health", "generate"], order)
        self.assertEqual(dict(order), {"health": 200, "generate": 400})


class ChatAndTemperature(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory(prefix="rlhost-chat-")
        cls.eng = Engine(model=make_chat_model(os.path.join(cls.tmp.name, "chat"), STORIES),
                         args=["--kv-cache-tokens", "4096"])

    @classmethod
    def tearDownClass(cls):
        rc = cls.eng.stop()
        cls.tmp.cleanup()
        assert rc == 0, "rlhost engine exited %s on SIGTERM" % rc

    def chat(self, messages):
        return self.eng.post("/v1/chat/completions", {"messages": messages, "max_tokens": 2})

    def test_chat_content_of_any_shape_is_accepted_or_400(self):
        for content in ("hello", [{"type": "text", "text": "hel"}, {"type": "text", "text": "lo"}]):
            status, out = self.chat([{"role": "user", "content": content}])
            self.assertEqual(status, 200, (content, out))
        # null reaches the template as None (a tool-calling assistant turn); this model's template
        # concatenates it: the template's own error, as a 400 naming the messages (it was a 500)
        status, out = self.chat([{"role": "user", "content": None}])
        self.assertEqual(status, 400, out)
        self.assertIn("messages: the chat template failed: ", error_of(out))
        for content, want in ((7, "messages[0].content: expected a string, a list of text parts or null, got 7"),
                              (True, "messages[0].content: expected a string"),
                              ({"text": "x"}, "messages[0].content: expected a string"),
                              ([{"type": "image_url", "image_url": {"url": "x"}}],
                               "messages[0].content[0].type: 'image_url' parts are not supported"),
                              ([{"type": "text"}], "messages[0].content[0].text: expected a string"),
                              (["bare"], "messages[0].content[0]: expected a content part")):
            status, out = self.chat([{"role": "user", "content": content}])
            self.assertEqual(status, 400, (content, out))
            self.assertIn(want, error_of(out))
        status, out = self.chat([{"role": 3, "content": "x"}])
        self.assertEqual(status, 400, out)
        _, text = self.eng.get("/metrics")
        for line in text.splitlines():   # and not one answer was a 500
            if line.startswith("sglang:http_responses_total") and '"5xx"' in line:
                self.assertEqual(float(line.rsplit(" ", 1)[1]), 0, line)

    def test_a_tiny_temperature_samples_greedily_with_finite_logprobs(self):
        greedy = self.eng.generate({"input_ids": [1, 2, 3], "return_logprob": True,
                                    "sampling_params": {"temperature": 0, "max_new_tokens": 8, "ignore_eos": True}})
        for t in (1e-39, 1e-300, 5e-324, 1e-6):
            out = self.eng.generate({"input_ids": [1, 2, 3], "return_logprob": True,
                                     "sampling_params": {"temperature": t, "max_new_tokens": 8, "ignore_eos": True}})
            lps = [e[0] for e in out["meta_info"]["output_token_logprobs"]]
            self.assertEqual(len(lps), 8)
            self.assertTrue(all(isinstance(x, float) and math.isfinite(x) for x in lps), (t, lps))
            self.assertEqual(out["output_ids"], greedy["output_ids"], t)
            self.assertEqual(lps, [e[0] for e in greedy["meta_info"]["output_token_logprobs"]], t)


class EngineFlags(unittest.TestCase):
    def test_flags_out_of_range_are_usage_errors_naming_the_flag(self):
        # the ranges lua/rl/engine/options.lua declares, in its one message shape
        for flags, want in ((["--block-size", "0"], "--block-size must be at least 1 (got 0)"),
                            (["--kv-cache-bytes", "0"], "--kv-cache-bytes must be at least 1 (got 0)"),
                            (["--max-prefill-tokens", "0"], "--max-prefill-tokens must be at least 1 (got 0)"),
                            (["--kv-cache-tokens", "-5"], "--kv-cache-tokens must be 0 or more (got -5)"),
                            (["--max-top-logprobs", "-1"], "--max-top-logprobs must be 0 or more"),
                            (["--max-response-entries", "-1"], "--max-response-entries must be 0 or more")):
            r = subprocess.run([BIN, "engine", "--model", STORIES, "--port", "0", "--threads", "1", *flags],
                               capture_output=True, text=True, timeout=60, env=clean_env())
            self.assertEqual(r.returncode, 2, (flags, r.stderr))
            self.assertIn(want, r.stderr)
            self.assertIn("rlhost engine --help", r.stderr)
            self.assertNotIn("stack traceback", r.stderr)


if __name__ == "__main__":
    unittest.main()
