#!/usr/bin/env python3
"""`rlhost engine`'s OpenAI API driven by the official `openai` Python client:
/v1/models, /v1/completions (n, logprobs, streaming), /v1/chat/completions
(ChatML template, streaming chunks, usage with cached tokens, logprobs) and
bad requests surfacing as openai.BadRequestError.

The model is stories260K copied with a ChatML chat_template added to its
tokenizer_config.json (it ships none). Without the `openai` client it is skipped
(ctest: Skipped), and under CI=true it fails; either way naming how to install it.

    RLHOST_BIN=build/rlhost python3 tests/e2e/test_engine_openai.py
"""
import os
import shutil
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from engine_support import STORIES, Engine, make_chat_model  # noqa: E402
import support  # noqa: E402

try:
    import openai
except Exception as e:  # pragma: no cover - depends on the machine
    openai = None
    IMPORT_ERROR = repr(e)


def need_openai():
    if openai is None:
        support.missing("the Python package openai is not importable (%s)" % IMPORT_ERROR,
                        "pip install openai, or scripts/bootstrap.sh --test-deps")


class EngineOpenAITest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        need_openai()
        cls.tmp = tempfile.mkdtemp(prefix="rlhost-chat-model-")
        model = make_chat_model(os.path.join(cls.tmp, "stories-chat"))
        cls.eng = Engine(model=model)
        cls.client = openai.OpenAI(base_url=cls.eng.url + "/v1", api_key="unused", max_retries=0, timeout=60)

    @classmethod
    def tearDownClass(cls):
        cls.eng.stop()
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def test_models(self):
        models = self.client.models.list()
        self.assertEqual([m.id for m in models.data], ["stories-chat"])

    def test_completions(self):
        r = self.client.completions.create(model="stories-chat", prompt="Once upon a time", max_tokens=8,
                                           temperature=0, n=2, logprobs=2)
        self.assertEqual(r.object, "text_completion")
        self.assertEqual(len(r.choices), 2)
        self.assertEqual(r.choices[0].text, r.choices[1].text)  # greedy samples agree
        self.assertIn(r.choices[0].finish_reason, ("stop", "length"))
        lp = r.choices[0].logprobs
        self.assertEqual(len(lp.tokens), len(lp.token_logprobs))
        self.assertTrue(all(x <= 0 for x in lp.token_logprobs))
        self.assertEqual(len(lp.top_logprobs[0]), 2)
        self.assertEqual(r.usage.total_tokens, r.usage.prompt_tokens + r.usage.completion_tokens)
        # default max_tokens is OpenAI's 16
        r = self.client.completions.create(model="stories-chat", prompt=[1, 403], temperature=0,
                                           extra_body={"ignore_eos": True})
        self.assertEqual(r.usage.completion_tokens, 16)

    def test_completions_echo_returns_the_prompt_and_its_logprobs(self):
        prompt = [1, 403, 410, 420, 430]
        r = self.client.completions.create(model="x", prompt=prompt, max_tokens=3, temperature=0, logprobs=2,
                                           echo=True, extra_body={"ignore_eos": True})
        lp = r.choices[0].logprobs
        self.assertEqual(len(lp.tokens), len(prompt) + 3)
        self.assertIsNone(lp.token_logprobs[0])
        self.assertIsNone(lp.top_logprobs[0])
        self.assertTrue(all(x <= 0 for x in lp.token_logprobs[1:]))
        self.assertEqual(len(lp.top_logprobs[1]), 2)
        plain = self.client.completions.create(model="x", prompt=prompt, max_tokens=3, temperature=0, logprobs=2,
                                               extra_body={"ignore_eos": True}).choices[0]
        self.assertTrue(r.choices[0].text.endswith(plain.text))
        self.assertEqual(lp.token_logprobs[len(prompt):], plain.logprobs.token_logprobs)
        # max_tokens 0: the prompt scored, the same values
        s = self.client.completions.create(model="x", prompt=prompt, max_tokens=0, logprobs=0, echo=True)
        self.assertEqual(s.choices[0].logprobs.token_logprobs, lp.token_logprobs[:len(prompt)])
        self.assertEqual(s.usage.completion_tokens, 0)

    def test_completions_stream(self):
        full = self.client.completions.create(model="x", prompt="The cat", max_tokens=10, temperature=0)
        text, usage = "", None
        for chunk in self.client.completions.create(model="x", prompt="The cat", max_tokens=10, temperature=0,
                                                    stream=True, stream_options={"include_usage": True}):
            self.assertEqual(chunk.object, "text_completion")
            if chunk.usage:
                usage = chunk.usage
            if chunk.choices:
                text += chunk.choices[0].text
        self.assertEqual(text, full.choices[0].text)
        self.assertEqual(usage.completion_tokens, full.usage.completion_tokens)
        self.assertEqual(usage.prompt_tokens, full.usage.prompt_tokens)

    def test_chat(self):
        msgs = [{"role": "system", "content": "You tell stories."}, {"role": "user", "content": "Tell me one."}]
        r = self.client.chat.completions.create(model="stories-chat", messages=msgs, max_tokens=12, temperature=0,
                                                logprobs=True, top_logprobs=2)
        self.assertEqual(r.object, "chat.completion")
        c = r.choices[0]
        self.assertEqual(c.message.role, "assistant")
        self.assertIsInstance(c.message.content, str)
        self.assertEqual(len(c.logprobs.content), r.usage.completion_tokens)
        self.assertEqual(len(c.logprobs.content[0].top_logprobs), 2)
        self.assertGreater(r.usage.prompt_tokens, 10)
        # the same prompt again is served from the prefix cache
        r2 = self.client.chat.completions.create(model="stories-chat", messages=msgs, max_tokens=12, temperature=0)
        self.assertEqual(r2.choices[0].message.content, c.message.content)
        self.assertGreater(r2.usage.prompt_tokens_details.cached_tokens, 0)

    def test_chat_stream(self):
        msgs = [{"role": "user", "content": "Hello"}]
        full = self.client.chat.completions.create(model="x", messages=msgs, max_tokens=10, temperature=0)
        stream = self.client.chat.completions.create(model="x", messages=msgs, max_tokens=10, temperature=0,
                                                     stream=True, stream_options={"include_usage": True})
        text, roles, finish, usage = "", [], None, None
        for chunk in stream:
            self.assertEqual(chunk.object, "chat.completion.chunk")
            if chunk.usage:
                usage = chunk.usage
            for ch in chunk.choices:
                if ch.delta.role:
                    roles.append(ch.delta.role)
                text += ch.delta.content or ""
                finish = ch.finish_reason or finish
        self.assertEqual(roles, ["assistant"])
        self.assertEqual(text, full.choices[0].message.content)
        self.assertIn(finish, ("stop", "length"))
        self.assertEqual(usage.completion_tokens, full.usage.completion_tokens)

    def test_bad_requests(self):
        with self.assertRaises(openai.BadRequestError) as cm:
            self.client.chat.completions.create(model="x", messages=[{"role": "user", "content": "hi"}],
                                                temperature=-3)
        self.assertIn("temperature", str(cm.exception))
        with self.assertRaises(openai.BadRequestError) as cm:
            self.client.chat.completions.create(model="x", messages=[])
        self.assertIn("messages", str(cm.exception))
        with self.assertRaises(openai.BadRequestError) as cm:
            self.client.completions.create(model="x", prompt="hi", max_tokens=-1)
        self.assertIn("max_tokens", str(cm.exception))
        r = self.client.completions.create(model="x", prompt="hi", max_tokens=2)  # still serving
        self.assertEqual(len(r.choices), 1)


class EngineNoChatTemplateTest(unittest.TestCase):
    def test_chat_without_template_is_400(self):
        need_openai()
        eng = Engine(model=STORIES)
        try:
            client = openai.OpenAI(base_url=eng.url + "/v1", api_key="unused", max_retries=0, timeout=60)
            with self.assertRaises(openai.BadRequestError) as cm:
                client.chat.completions.create(model="x", messages=[{"role": "user", "content": "hi"}])
            self.assertIn("chat_template", str(cm.exception))
        finally:
            eng.stop()


if __name__ == "__main__":
    support.main()
