"""Hostile JSON against the real servers (the JSON input policy, docs/json_input.md).

JSON nested 80,000 levels deep (about 156 KB) once killed `rlhost engine` with
a stack overflow from any field of /generate, /v1/completions, /abort_request,
/update_weights_from_disk or /start_profile; through the router it killed every
engine (the router retried it on each); the TCP control channel died the same
way; invalid UTF-8 got an uncounted 500. Each probe here must get a 400 (or an
error reply) naming the field, and the server must keep serving.
"""
import json
import os
import re
import socket
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import support  # noqa: E402
from engine_support import Engine  # noqa: E402
from test_router import RouterCase, jget, request  # noqa: E402

DEPTH = 80000


def deep(n=DEPTH):
    return "[" * n + "]" * n


def body_with(path, value_text):
    """A JSON object text with `value_text` placed at `path` ("a.b": {"a": {"b": ...}})."""
    keys = path.split(".")
    return "".join('{"%s": ' % k for k in keys) + value_text + "}" * len(keys)


# Every endpoint and field of the original report, and a few more.
PROBES = [
    ("/generate", "text"),
    ("/generate", "input_ids"),
    ("/generate", "rid"),
    ("/generate", "sampling_params"),
    ("/generate", "sampling_params.stop"),
    ("/v1/completions", "prompt"),
    ("/v1/completions", "max_tokens"),
    ("/v1/chat/completions", "messages"),
    ("/abort_request", "rid"),
    ("/update_weights_from_disk", "model_path"),
    ("/start_profile", "output_dir"),
]


def responses(engine):
    status, text = engine.get("/metrics")
    assert status == 200, text
    out = {}
    for code in ("2xx", "4xx", "5xx"):
        m = re.search(r'sglang:http_responses_total\{[^}]*code="%s"\} (\d+)' % code, text)
        out[code] = int(m.group(1)) if m else 0
    return out


class EngineJsonTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.engine = Engine()

    @classmethod
    def tearDownClass(cls):
        cls.engine.stop()

    def assert_serving(self):
        self.assertIsNone(self.engine.proc.poll(), self.engine.output()[-3000:])
        st, out = self.engine.post("/generate", {"input_ids": [1, 403], "sampling_params": {"max_new_tokens": 2}})
        self.assertEqual(st, 200, out)

    def test_deep_nesting_in_each_field_is_400_naming_it(self):
        for endpoint, field in PROBES:
            with self.subTest(endpoint=endpoint, field=field):
                raw = body_with(field, deep())
                self.assertGreater(len(raw), 150000)
                st, out = self.engine.post(endpoint, raw=raw.encode())
                self.assertEqual(st, 400, out)
                msg = out["error"]["message"]
                self.assertIn("nested deeper than 128 levels", msg)
                self.assertIn("in field '%s[0]" % field, msg)
                self.assertLess(len(msg), 400, "the message never echoes the input")
                self.assert_serving()

    def test_deep_value_of_an_allowed_depth_gets_a_short_type_error(self):
        # 100 levels pass the parser; the field check names it and quotes it briefly.
        raw = '{"text": "x", "sampling_params": {"temperature": %s}}' % deep(100)
        st, out = self.engine.post("/generate", raw=raw.encode())
        self.assertEqual(st, 400, out)
        self.assertIn("temperature", out["error"]["message"])
        self.assertLess(len(out["error"]["message"]), 400)
        self.assert_serving()

    def test_invalid_utf8_is_a_counted_400(self):
        before = responses(self.engine)
        st, out = self.engine.post("/generate", raw=b'{"text": "caf\xc3 ' + b"x" * 100000 + b'", "rid": 1}')
        self.assertEqual(st, 400, out)
        msg = out["error"]["message"]
        self.assertIn("UTF-8", msg)
        self.assertIn("in field 'text'", msg)
        self.assertLess(len(msg), 500)
        # Also in a key, and in the unknown-path error (a path is client bytes too).
        st, out = self.engine.post("/v1/completions", raw=b'{"pr\xffompt": "x"}')
        self.assertEqual(st, 400, out)
        after = responses(self.engine)
        self.assertEqual(after["4xx"] - before["4xx"], 2, (before, after))
        self.assertEqual(after["5xx"], before["5xx"], (before, after))
        self.assert_serving()

    def test_huge_strings_are_quoted_briefly(self):
        big = "y" * 2_000_000
        st, out = self.engine.post("/generate", {"text": "x", "sampling_params": {"temperature": big}})
        self.assertEqual(st, 400, out)
        self.assertLess(len(out["error"]["message"]), 400)
        st, out = self.engine.post("/abort_request", {"rid": [big]})
        self.assertEqual(st, 400, out)
        self.assertLess(len(out["error"]["message"]), 400)


class EngineJsonLimitsTest(unittest.TestCase):
    def test_limits_come_from_the_environment(self):
        e = Engine(env={"RLHOST_JSON_MAX_DEPTH": "4", "RLHOST_JSON_MAX_STRING": "64"})
        try:
            st, out = e.post("/generate", raw=b'{"input_ids": [[[[[1]]]]]}')
            self.assertEqual(st, 400, out)
            self.assertIn("nested deeper than 4 levels in field 'input_ids[0][0][0]'", out["error"]["message"])
            st, out = e.post("/generate", {"text": "z" * 65})
            self.assertEqual(st, 400, out)
            self.assertIn("a string of 65 bytes, over the limit of 64 bytes in field 'text'", out["error"]["message"])
            st, out = e.post("/generate", {"input_ids": [[1, 403]], "sampling_params": {"max_new_tokens": 1}})
            self.assertEqual(st, 200, out)
        finally:
            e.stop()


class RouterJsonTest(RouterCase):
    tmp_prefix = "rlhost-json-router-"

    def test_deep_request_through_the_router_leaves_every_engine_alive(self):
        engines = [Engine(), Engine()]
        self.addCleanup(lambda: [e.stop() for e in engines])
        url = self.start_router([e.url for e in engines], "round_robin", "--health-interval", "0.3")
        for endpoint, field in PROBES[:6]:
            st, _, body = request(url + endpoint, "POST", body_with(field, deep()).encode(),
                                  headers={"Content-Type": "application/json"}, timeout=60)
            self.assertEqual(st, 400, body[:300])
            self.assertIn(b"nested deeper than", body)
        for e in engines:
            self.assertIsNone(e.proc.poll(), e.output()[-3000:])
            st, _ = jget(e.url + "/health")
            self.assertEqual(st, 200)
        st, j = jget(url + "/generate", method="POST",
                     body={"input_ids": [1, 403], "sampling_params": {"max_new_tokens": 2}}, timeout=60)
        self.assertEqual(st, 200, j)

    def test_router_that_routes_on_text_refuses_deep_bodies_itself(self):
        w = self.start_workers(2)
        url = self.start_router(w, "cache_aware")
        st, _, body = request(url + "/generate", "POST", body_with("text", deep()).encode(),
                              headers={"Content-Type": "application/json"})
        self.assertEqual(st, 400, body[:300])
        j = json.loads(body)
        self.assertIn("nested deeper than 128 levels in field 'text[0]", j["error"]["message"])
        seen = [jget(u + "/_stats")[1]["requests"] for u in w]
        self.assertEqual(seen, [0, 0], "refused before any worker saw it")
        st, _, body = request(url + "/generate", "POST", b'{"text": "\xff"}', headers={"Content-Type": "application/json"})
        self.assertEqual(st, 400, body[:300])
        self.assertIn(b"UTF-8", body)
        st, _, body = request(url + "/workers", "POST", body_with("url", deep()).encode(),
                              headers=dict(self.admin, **{"Content-Type": "application/json"}))
        self.assertEqual(st, 400, body[:300])
        self.assertIn(b"in field 'url[0]", body)
        self.assertEqual(sum(self.served_by(url, 2).values()), 2)


class ControlChannelJsonTest(support.RlhostTestCase):
    tmp_prefix = "rlhost-json-control-"

    def test_tcp_control_channel_survives_hostile_json(self):
        env = dict(self.env, RLHOST_CONTROL_TOKEN="json-test-token")
        proc, _ = self.start_counter(["--control-tcp", "0"], env=env)  # a free port, from the record
        self.wait_socket(proc, os.path.join(self.dir, "xdg", "rlhost", "%d.token" % proc.pid))
        record = os.path.join(self.dir, "xdg", "rlhost", "%d.json" % proc.pid)
        support.wait_for(lambda: os.path.exists(record), what="the record " + record)
        with open(record) as f:
            port = json.load(f)["tcp_port"]
        probes = [
            '{"id": %s, "op": "eval", "code": "return 1"}' % deep(),
            '{"id": 1, "op": %s}' % deep(),
            '{"id": 1, "token": %s}' % deep(),
            '{"id": 1, "op": "eval", "code": %s, "token": "json-test-token"}' % deep(),
        ]
        for line in probes:
            with socket.create_connection(("127.0.0.1", port), timeout=support.TIMEOUT) as c:
                c.sendall(line.encode() + b"\n")
                r = json.loads(c.makefile("rb").readline())
                self.assertFalse(r["ok"])
                self.assertIn("nested deeper than 128 levels", r["error"])
                self.assertLess(len(r["error"]), 400)
        with socket.create_connection(("127.0.0.1", port), timeout=support.TIMEOUT) as c:
            f = c.makefile("rb")
            c.sendall(b'{"id": 1, "token": "json-test-token", "op": "eval", "code": "return \\"\xff\\""}\n')
            r = json.loads(f.readline().decode("utf-8", "replace"))
            self.assertFalse(r["ok"])
            self.assertIn("UTF-8", r["error"])
            c.sendall(b'{"id": 2, "token": "json-test-token", "op": "eval", "code": "return counter > 0"}\n')
            r = json.loads(f.readline())
            self.assertTrue(r["ok"], r)
            c.sendall(b'{"id": 3, "op": "eval", "code": "stop = true"}\n')
            json.loads(f.readline())
        proc.communicate(timeout=support.TIMEOUT)
        self.assertEqual(proc.returncode, 0)


if __name__ == "__main__":
    support.main()
