"""The router in front of real native engines: two `rlhost engine` processes
(stories260K) behind `rlhost router`, driven with SGLang-style /generate
(single, streaming, a GRPO group routed by X-SMG-Routing-Key), OpenAI
completions, merged /engine_metrics, and an engine killed with SIGKILL while
requests run: they are retried or fail cleanly, the router keeps serving on the
other engine, and the dead one is marked unhealthy.
"""
import json
import signal
import threading
import unittest

import support
from engine_support import Engine
from test_router import RouterCase, jget, request


class TestRouterOverEngines(RouterCase):
    tmp_prefix = "rlhost-engine-router-"

    def setUp(self):
        super().setUp()
        self.engines = [Engine(), Engine()]
        self.addCleanup(lambda: [e.stop() for e in self.engines])
        self.url = self.start_router([e.url for e in self.engines], "round_robin", "--health-interval", "0.3")

    def test_generate_stream_openai_metrics_and_a_killed_engine(self):
        body = {"input_ids": [1, 403, 407], "sampling_params": {"max_new_tokens": 8, "temperature": 0},
                "return_logprob": True}
        for _ in range(6):
            st, j = jget(self.url + "/generate", method="POST", body=body)
            self.assertEqual(st, 200, j)
            self.assertEqual(len(j["output_ids"]), 8)
            self.assertEqual(len(j["meta_info"]["output_token_logprobs"]), 8)
            self.assertEqual(j["meta_info"]["finish_reason"]["type"], "length")
        # Both engines served (round robin): each saw requests.
        for e in self.engines:
            st, info = jget(e.url + "/get_server_info")
            self.assertGreater(info["internal_states"][0]["requests_total"], 0, e.url)

        # A GRPO group with one routing key lands on one engine and shares its prefill.
        prompt = [1] + list(range(300, 340))
        for i in range(4):
            st, j = jget(self.url + "/generate", method="POST", headers={"X-SMG-Routing-Key": "group-7"},
                         body={"input_ids": prompt, "sampling_params": {"max_new_tokens": 4, "temperature": 1.0,
                                                                         "sampling_seed": i}})
            self.assertEqual(st, 200, j)

        # Streaming through the router: several SSE events, then [DONE].
        st, _, raw = request(self.url + "/generate", method="POST",
                          body={"text": "Once upon a time", "stream": True,
                                "sampling_params": {"max_new_tokens": 6, "temperature": 0}})
        self.assertEqual(st, 200)
        events = [l[6:] for l in raw.decode().split("\n") if l.startswith("data: ")]
        self.assertEqual(events[-1], "[DONE]")
        self.assertGreaterEqual(len(events), 3)
        self.assertEqual(json.loads(events[-2])["meta_info"]["finish_reason"]["type"], "length")

        # OpenAI completions through the router.
        st, j = jget(self.url + "/v1/completions", method="POST",
                     body={"model": "stories260K", "prompt": "Once", "max_tokens": 5, "temperature": 0})
        self.assertEqual(st, 200, j)
        self.assertEqual(j["object"], "text_completion")
        self.assertEqual(j["usage"]["completion_tokens"], 5)

        # Every engine's /metrics, merged and labelled by worker.
        st, _, text = request(self.url + "/engine_metrics")
        self.assertEqual(st, 200)
        text = text.decode()
        for e in self.engines:
            self.assertIn('worker="%s"' % e.url, text)
        self.assertIn("sglang:num_running_reqs", text)

        # Kill one engine while requests run: all finish (retried on the other
        # engine, or a clean error), the router keeps serving.
        results = []

        def client():
            for _ in range(6):
                st, _ = jget(self.url + "/generate", method="POST",
                             body={"input_ids": [1, 403], "sampling_params": {"max_new_tokens": 32, "temperature": 0,
                                                                              "ignore_eos": True}}, timeout=60)
                results.append(st)

        threads = [threading.Thread(target=client) for _ in range(4)]
        for t in threads:
            t.start()
        self.engines[0].proc.send_signal(signal.SIGKILL)
        for t in threads:
            t.join(120)
        self.assertEqual(len(results), 24)
        self.assertTrue(all(s in (200, 502, 503) for s in results), results)
        self.assertGreater(results.count(200), 12, results)

        def dead_marked():
            st, w = jget(self.url + "/workers")
            states = {x["url"]: x["is_healthy"] for x in w["workers"]}
            return states.get(self.engines[0].url) is False and states.get(self.engines[1].url) is True
        support.wait_for(dead_marked, timeout=20, what="killed engine marked unhealthy")
        for _ in range(4):
            st, j = jget(self.url + "/generate", method="POST", body=body)
            self.assertEqual(st, 200, j)


if __name__ == "__main__":
    support.main()
