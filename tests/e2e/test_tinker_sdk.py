"""`rlhost tinker` against the official `tinker` SDK (PyPI, pinned in scripts/bootstrap.sh):
a scripted session of a LoRA training client on the default model — forward_backward +
optim_step until the loss falls, save for a sampler, sample, check that the sampled
log-probs equal a forward of the same tokens bit for bit, save and load state — and the
errors the SDK shows for bad input, with the server serving on after each; the
RestClient's training runs and checkpoints (listed from disk, deleted for real), their TTLs
(an expired checkpoint's files deleted), publish / unpublish and copy_weights (a copy loads
and computes what the original does), kept across a restart; whoami from the JWT the SDK trades its key for; and a client killed with
SIGKILL, whose session expires once its heartbeats stop.

The SDK runs unmodified: it reaches the server through TINKER_BASE_URL / TINKER_API_KEY.
"""
import glob
import json
import os
import select
import signal
import subprocess
import sys
import tempfile
import time
import unittest
import urllib.error
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import support  # noqa: E402
from support import BIN  # noqa: E402
from tinker_server import Server, default_model  # noqa: E402

try:
    import numpy as np
    import tinker
    from tinker import types
    HAVE_TINKER = True
except ImportError:  # pragma: no cover - reported by support.requires
    HAVE_TINKER = False

HINT = support.PIP_HINT % "tinker==0.38.0"


def datum(prompt, answer):
    """Tinker's supervised datum: input = tokens[:-1], target = tokens[1:], weight on the answer."""
    tokens = prompt + answer
    weights = [0.0] * (len(prompt) - 1) + [1.0] * len(answer)
    return types.Datum(model_input=types.ModelInput.from_ints(tokens[:-1]),
                       loss_fn_inputs={"target_tokens": tokens[1:], "weights": weights})


def mean_nll(result, data):
    total, count = 0.0, 0.0
    for out, d in zip(result.loss_fn_outputs, data):
        lp = out["logprobs"].to_numpy()
        w = np.asarray(d.loss_fn_inputs["weights"].to_numpy())
        total += float(-(lp * w).sum())
        count += float(w.sum())
    return total / count


@support.requires(HAVE_TINKER, "the tinker SDK", HINT)
class TinkerSdkSession(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory(prefix="rlhost-tinker-")
        cls.server = Server(default_model(), cls.tmp.name)
        os.environ["TINKER_BASE_URL"] = cls.server.url
        os.environ["TINKER_API_KEY"] = cls.server.key

    @classmethod
    def tearDownClass(cls):
        cls.server.stop()
        cls.tmp.cleanup()

    def test_train_sample_save_load(self):
        sc = tinker.ServiceClient()
        caps = tinker.RestClient().get_server_capabilities().result() if hasattr(tinker, "RestClient") else None
        if caps is not None:
            self.assertIn(self.server.base, [m.model_name for m in caps.supported_models])
        tc = sc.create_lora_training_client(base_model=self.server.base, rank=8, seed=3).result()
        tok = tc.get_tokenizer()
        problems = [("What is 3 plus 4?", " 3 + 4 = 7. #### 7"), ("What is 10 minus 6?", " 10 - 6 = 4. #### 4"),
                    ("What is 2 times 5?", " 2 * 5 = 10. #### 10"), ("What is 9 plus 1?", " 9 + 1 = 10. #### 10")]
        data = [datum(tok.encode(q), tok.encode(a)) for q, a in problems]
        losses = []
        for _ in range(8):
            fb = tc.forward_backward(data, "cross_entropy")
            step = tc.optim_step(types.AdamParams(learning_rate=5e-3))
            losses.append(mean_nll(fb.result(), data))
            step.result()
        self.assertLess(losses[-1], losses[0] * 0.9, losses)

        # sample under the saved adapter; its log-probs equal a forward of the same tokens, bitwise
        sampler_path = tc.save_weights_for_sampler("after-8").result().path
        self.assertTrue(sampler_path.startswith("tinker://") and "/sampler_weights/after-8" in sampler_path, sampler_path)
        # train_unembed (the SDK's default): the unembedding is adapted too, and trained
        ckdir = glob.glob(os.path.join(self.server.ckpt, "**", "sampler_weights", "after-8"), recursive=True)
        self.assertEqual(len(ckdir), 1, ckdir)
        with open(os.path.join(ckdir[0], "adapter_config.json")) as f:
            self.assertIn("lm_head", json.load(f)["target_modules"])
        from safetensors.numpy import load_file
        head_b = load_file(os.path.join(ckdir[0], "adapter_model.safetensors"))["base_model.model.lm_head.lora_B.weight"]
        self.assertGreater(float(np.abs(head_b).max()), 0.0)
        sampler = sc.create_sampling_client(model_path=sampler_path)
        prompt = tok.encode(problems[0][0])
        res = sampler.sample(prompt=types.ModelInput.from_ints(prompt), num_samples=3,
                             sampling_params=types.SamplingParams(max_tokens=12, temperature=1.0, seed=7)).result()
        self.assertEqual(len(res.sequences), 3)
        check = []
        for seq in res.sequences:
            self.assertGreater(len(seq.tokens), 0)
            full = prompt + list(seq.tokens)
            check.append(types.Datum(model_input=types.ModelInput.from_ints(full[:-1]),
                                     loss_fn_inputs={"target_tokens": full[1:], "weights": [0.0] * (len(full) - 1)}))
        fwd = tc.forward(check, "cross_entropy").result()
        for seq, out in zip(res.sequences, fwd.loss_fn_outputs):
            lp = out["logprobs"].to_numpy()[len(prompt) - 1:]
            np.testing.assert_array_equal(np.asarray(seq.logprobs, dtype=np.float32), lp.astype(np.float32))

        # save_state / load_state: a later step is undone by loading the state back
        path = tc.save_state("ck-8").result().path
        self.assertTrue(path.startswith("tinker://"), path)
        before = tc.forward(data, "cross_entropy").result()
        tc.forward_backward(data, "cross_entropy").result()
        tc.optim_step(types.AdamParams(learning_rate=5e-2)).result()
        moved = tc.forward(data, "cross_entropy").result()
        self.assertNotEqual(mean_nll(moved, data), mean_nll(before, data))
        tc.load_state_with_optimizer(path).result()
        back = tc.forward(data, "cross_entropy").result()
        for a, b in zip(before.loss_fn_outputs, back.loss_fn_outputs):
            np.testing.assert_array_equal(a["logprobs"].to_numpy(), b["logprobs"].to_numpy())
        # a new training client from the same state: the same log-probs
        tc3 = sc.create_training_client_from_state_with_optimizer(path).result()
        again = tc3.forward(data, "cross_entropy").result()
        for a, b in zip(before.loss_fn_outputs, again.loss_fn_outputs):
            np.testing.assert_array_equal(a["logprobs"].to_numpy(), b["logprobs"].to_numpy())
        # an ephemeral sampler (no name) samples the current weights
        eph = tc.save_weights_and_get_sampling_client().result()
        self.assertEqual(len(eph.sample(prompt=types.ModelInput.from_ints(prompt), num_samples=1,
                                        sampling_params=types.SamplingParams(max_tokens=4)).result().sequences), 1)

        # a second client on the same base trains on its own adapter, untouched by the first
        tc2 = sc.create_lora_training_client(base_model=self.server.base, rank=4).result()
        fresh = tc2.forward(data, "cross_entropy").result()
        self.assertGreater(mean_nll(fresh, data), mean_nll(back, data))

    def test_compute_logprobs_and_custom_loss(self):
        sc = tinker.ServiceClient()
        tc = sc.create_lora_training_client(base_model=self.server.base, rank=4).result()
        tok = tc.get_tokenizer()
        tokens = tok.encode("What is 2 plus 2? 2 + 2 = 4. #### 4")
        sampler = sc.create_sampling_client(model_path=tc.save_weights_for_sampler("c0").result().path)
        lps = sampler.compute_logprobs(types.ModelInput.from_ints(tokens)).result()
        self.assertEqual(len(lps), len(tokens))
        self.assertIsNone(lps[0])
        fwd = tc.forward([types.Datum(model_input=types.ModelInput.from_ints(tokens[:-1]),
                                      loss_fn_inputs={"target_tokens": tokens[1:], "weights": [0.0] * (len(tokens) - 1)})],
                         "cross_entropy").result()
        np.testing.assert_array_equal(np.asarray(lps[1:], dtype=np.float32),
                                      fwd.loss_fn_outputs[0]["logprobs"].to_numpy().astype(np.float32))

        # forward_backward_custom: the SDK's client-side path (forward, then cross_entropy with the loss's gradients)
        import torch
        d = types.Datum(model_input=types.ModelInput.from_ints(tokens[:-1]),
                        loss_fn_inputs={"target_tokens": tokens[1:], "weights": [1.0] * (len(tokens) - 1)})

        def squared(data, logprobs):
            loss = sum((lp ** 2).sum() for lp in logprobs)
            return loss, {"squared:sum": float(loss.item())}

        out = tc.forward_backward_custom([d], squared).result()
        expect = float((fwd.loss_fn_outputs[0]["logprobs"].to_numpy().astype(np.float64) ** 2).sum())
        self.assertAlmostEqual(out.metrics["squared:sum"], expect, places=2)
        tc.optim_step(types.AdamParams(learning_rate=1e-2)).result()
        after = tc.forward([d], "cross_entropy").result().loss_fn_outputs[0]["logprobs"].to_numpy()
        self.assertLess(float((after.astype(np.float64) ** 2).sum()), expect)

        # saving again under the same name: the sampler on that path samples the new weights
        tc.save_weights_for_sampler("c0").result()
        lps2 = sampler.compute_logprobs(types.ModelInput.from_ints(tokens)).result()
        np.testing.assert_array_equal(np.asarray(lps2[1:], dtype=np.float32), after.astype(np.float32))

    def test_topk_and_last_n_logprobs(self):
        sc = tinker.ServiceClient()
        tc = sc.create_lora_training_client(base_model=self.server.base, rank=4).result()
        tok = tc.get_tokenizer()
        prompt = tok.encode("What is 6 plus 3? 6 + 3 =")
        sampler = sc.create_sampling_client(model_path=tc.save_weights_for_sampler("topk").result().path)
        res = sampler.sample(prompt=types.ModelInput.from_ints(prompt), num_samples=2,
                             sampling_params=types.SamplingParams(max_tokens=6, temperature=1.0, seed=5),
                             include_prompt_logprobs=True, topk_prompt_logprobs=3, topk_sample_logprobs=2).result()
        # the prompt's rows: position 0 has none; every other row is the 3 most likely next
        # tokens, best first, and where the prompt's own token is among them, its log-prob
        # is the prompt log-prob of that position, bit for bit
        rows = res.topk_prompt_logprobs
        self.assertEqual(len(rows), len(prompt))
        self.assertIsNone(rows[0])
        for j in range(1, len(prompt)):
            ids = [t for t, _ in rows[j]]
            lps = [lp for _, lp in rows[j]]
            self.assertEqual(len(ids), 3)
            self.assertEqual(len(set(ids)), 3)
            self.assertEqual(lps, sorted(lps, reverse=True))
            self.assertLessEqual(lps[0], 0.0)
            self.assertGreaterEqual(lps[0], res.prompt_logprobs[j])
            if prompt[j] in ids:
                self.assertEqual(np.float32(lps[ids.index(prompt[j])]), np.float32(res.prompt_logprobs[j]))
        # sampled rows: one per sampled token, 2 each; the best is at least the sampled token's
        for seq in res.sequences:
            self.assertEqual(len(seq.topk_logprobs), len(seq.tokens))
            for tok_id, lp, row in zip(seq.tokens, seq.logprobs, seq.topk_logprobs):
                self.assertEqual(len(row), 2)
                self.assertGreaterEqual(row[0][1], lp)
                if tok_id in [t for t, _ in row]:
                    self.assertEqual(np.float32(dict(row)[tok_id]), np.float32(lp))
        # the last 4 prompt positions only: the same values there, None before
        last = sampler.sample(prompt=types.ModelInput.from_ints(prompt), num_samples=1,
                              sampling_params=types.SamplingParams(max_tokens=1), include_prompt_logprobs=True,
                              topk_prompt_logprobs=3, prompt_logprobs_last_n=4).result()
        self.assertEqual(len(last.prompt_logprobs), len(prompt))
        self.assertTrue(all(v is None for v in last.prompt_logprobs[:-4]), last.prompt_logprobs)
        self.assertEqual(last.prompt_logprobs[-4:], res.prompt_logprobs[-4:])
        self.assertTrue(all(r is None for r in last.topk_prompt_logprobs[:-4]))
        self.assertEqual(last.topk_prompt_logprobs[-4:], rows[-4:])
        # a bad count is the user's error, named
        with self.assertRaises(tinker.RequestFailedError) as cm:
            sampler.sample(prompt=types.ModelInput.from_ints(prompt), num_samples=1,
                           sampling_params=types.SamplingParams(max_tokens=1), topk_prompt_logprobs=-2).result()
        self.assertIn("topk_prompt_logprobs", str(cm.exception))

    def test_policy_losses_return_per_token_logprobs(self):
        sc = tinker.ServiceClient()
        tc = sc.create_lora_training_client(base_model=self.server.base, rank=4).result()
        tok = tc.get_tokenizer()
        tokens = tok.encode("What is 1 plus 1? 1 + 1 = 2. #### 2")
        n = len(tokens) - 1
        for loss in ("importance_sampling", "ppo", "cispo", "dro"):
            d = types.Datum(model_input=types.ModelInput.from_ints(tokens[:-1]),
                            loss_fn_inputs={"target_tokens": tokens[1:], "logprobs": [-2.0] * n,
                                            "advantages": [0.5] * n})
            out = tc.forward_backward([d], loss).result()
            self.assertEqual(len(out.loss_fn_outputs[0]["logprobs"].to_numpy()), n)
            self.assertIn("loss:sum", out.metrics)
        tc.optim_step(types.AdamParams(learning_rate=1e-3)).result()


@support.requires(HAVE_TINKER, "the tinker SDK", HINT)
class TinkerSdkErrors(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory(prefix="rlhost-tinker-err-")
        cls.server = Server(default_model(), cls.tmp.name)

    @classmethod
    def tearDownClass(cls):
        cls.server.stop()
        cls.tmp.cleanup()

    def serves(self):
        status, body = self.server.post("/api/v1/healthz", b"")
        self.assertEqual(status, 200, body)

    def test_wrong_key(self):
        status, body = self.server.post("/api/v1/create_session", b"{}", key="tml-not-the-key")
        self.assertEqual(status, 401)
        self.assertIn("API key", json.loads(body)["error"])
        with self.assertRaises(tinker.AuthenticationError):
            tinker.ServiceClient(base_url=self.server.url, api_key="tml-wrongwrongwrong").create_lora_training_client(
                base_model=self.server.base, rank=4).result()
        self.serves()

    def test_unknown_base_model(self):
        sc = tinker.ServiceClient(base_url=self.server.url, api_key=self.server.key)
        with self.assertRaises(Exception) as cm:
            sc.create_lora_training_client(base_model="no/such-model", rank=4).result()
        self.assertIn("no/such-model", str(cm.exception))
        self.serves()

    def test_malformed_protobuf(self):
        status, body = self.server.post("/api/v1/forward_backward", b"\xff\xff\x00garbage",
                                        content_type="application/x-protobuf")
        self.assertEqual(status, 400, body)
        self.assertIn("ForwardBackwardRequest", json.loads(body)["error"])
        self.serves()

    def test_bad_datum_is_a_user_error(self):
        sc = tinker.ServiceClient(base_url=self.server.url, api_key=self.server.key)
        tc = sc.create_lora_training_client(base_model=self.server.base, rank=4).result()
        d = types.Datum(model_input=types.ModelInput.from_ints([1, 2, 3]),
                        loss_fn_inputs={"target_tokens": [2, 3], "weights": [1.0, 1.0]})
        with self.assertRaises(Exception) as cm:
            tc.forward_backward([d], "cross_entropy").result()
        self.assertIn("target_tokens", str(cm.exception))
        huge = types.Datum(model_input=types.ModelInput.from_ints([1] * 3),
                           loss_fn_inputs={"target_tokens": [10 ** 9] * 3, "weights": [1.0] * 3})
        with self.assertRaises(Exception) as cm:
            tc.forward_backward([huge], "cross_entropy").result()
        self.assertIn("vocabulary", str(cm.exception))
        self.serves()


def listed(rest, path):
    """The SDK's Checkpoint of `path` as list_user_checkpoints has it, or None."""
    for c in rest.list_user_checkpoints(limit=10000).result().checkpoints:
        if c.tinker_path == path:
            return c
    return None


def logprobs_of(result):
    return [out["logprobs"].to_numpy() for out in result.loss_fn_outputs]


@support.requires(HAVE_TINKER, "the tinker SDK", HINT)
class TinkerSdkCheckpointOps(unittest.TestCase):
    """The RestClient's checkpoint TTLs (expiry deletes the files), publish / unpublish and
    copy_weights through the SDK, the bad input of each, and a restart that keeps them."""

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory(prefix="rlhost-tinker-ops-")
        cls.server = Server(default_model(), cls.tmp.name, extra=("--min-checkpoint-ttl", "1"))
        cls.rest = tinker.RestClient(base_url=cls.server.url, api_key=cls.server.key)

    @classmethod
    def tearDownClass(cls):
        cls.server.stop()
        cls.tmp.cleanup()

    def serves(self):
        status, body = self.server.post("/api/v1/healthz", b"")
        self.assertEqual(status, 200, body)

    def trained_client(self, sc):
        tc = sc.create_lora_training_client(base_model=self.server.base, rank=4, seed=1).result()
        tok = tc.get_tokenizer()
        data = [datum(tok.encode("What is 3 plus 4?"), tok.encode(" 3 + 4 = 7. #### 7"))]
        tc.forward_backward(data, "cross_entropy").result()
        tc.optim_step(types.AdamParams(learning_rate=1e-2)).result()
        return tc, tok, data

    def test_ttl_publish_and_errors(self):
        sc = tinker.ServiceClient(base_url=self.server.url, api_key=self.server.key)
        tc, tok, data = self.trained_client(sc)
        state = tc.save_state("keep").result().path
        cdir = os.path.join(self.server.ckpt, tc.model_id, "weights", "keep")
        self.assertIsNone(listed(self.rest, state).expires_at)

        # a TTL: listed as expires_at (now + ttl), kept on disk beside the files; None removes it
        self.rest.set_checkpoint_ttl_from_tinker_path(state, 7200).result()
        c = listed(self.rest, state)
        self.assertLess(abs(c.expires_at.timestamp() - (time.time() + 7200)), 60, c.expires_at)
        with open(os.path.join(cdir, "tinker_meta.json")) as f:
            self.assertAlmostEqual(json.load(f)["expires_at"], c.expires_at.timestamp(), delta=1)
        run = self.rest.get_training_run(tc.model_id).result()
        self.assertEqual(run.last_checkpoint.expires_at, c.expires_at)
        self.rest.set_checkpoint_ttl_from_tinker_path(state, None).result()
        self.assertIsNone(listed(self.rest, state).expires_at)

        # bad TTLs and paths: the SDK's BadRequestError / NotFoundError, naming what is wrong
        for bad in (-5, 0, 1.5, 11 * 365 * 86400):
            with self.assertRaises(tinker.BadRequestError) as cm:
                self.rest.set_checkpoint_ttl_from_tinker_path(state, bad).result()
            self.assertIn("ttl_seconds", str(cm.exception))
        with self.assertRaises(tinker.NotFoundError):
            self.rest.set_checkpoint_ttl_from_tinker_path("tinker://%s/weights/never" % tc.model_id, 60).result()
        url = "/api/v1/training_runs/%s/checkpoints/weights/keep/ttl" % tc.model_id
        for body, ctype, want in ((b"{not json", "application/json", "not a JSON object"),
                                  (b"{}", "application/json", "needs ttl_seconds"),
                                  (b'{"ttl_seconds": "60"}', "application/json", "ttl_seconds")):
            status, got = self.server.post(url, body, content_type=ctype, method="PUT")
            self.assertEqual(status, 400, got)
            self.assertIn(want, json.loads(got)["error"])
        status, got = self.server.post("/api/v1/training_runs/..%2F..%2Fx/checkpoints/weights/keep/ttl",
                                       b'{"ttl_seconds": 60}', method="PUT")
        self.assertEqual(status, 400, got)
        status, _ = self.server.post(url, b'{"ttl_seconds": 60}', key="tml-not-the-key", method="PUT")
        self.assertEqual(status, 401)
        self.assertIsNone(listed(self.rest, state).expires_at)
        self.serves()

        # publish / unpublish: the public flag, listed and kept on disk; twice is the user's error
        self.rest.publish_checkpoint_from_tinker_path(state).result()
        self.assertTrue(listed(self.rest, state).public)
        self.assertTrue(self.rest.get_training_run(tc.model_id).result().last_checkpoint.public)
        with open(os.path.join(cdir, "tinker_meta.json")) as f:
            self.assertTrue(json.load(f)["public"])
        with self.assertRaises(tinker.BadRequestError) as cm:
            self.rest.publish_checkpoint_from_tinker_path(state).result()
        self.assertIn("already public", str(cm.exception))
        self.rest.unpublish_checkpoint_from_tinker_path(state).result()
        self.assertFalse(listed(self.rest, state).public)
        with self.assertRaises(tinker.BadRequestError) as cm:
            self.rest.unpublish_checkpoint_from_tinker_path(state).result()
        self.assertIn("already private", str(cm.exception))
        with self.assertRaises(tinker.NotFoundError):
            self.rest.publish_checkpoint_from_tinker_path("tinker://%s/sampler_weights/never" % tc.model_id).result()
        # the metadata counts in neither the checkpoint's size nor its time
        size = sum(os.path.getsize(os.path.join(cdir, f)) for f in os.listdir(cdir) if f != "tinker_meta.json")
        self.assertEqual(listed(self.rest, state).size_bytes, size)
        self.serves()

        # a short TTL: the sweep deletes the files with nobody asking; then it is a missing checkpoint
        sampler_path = tc.save_weights_for_sampler("brief").result().path
        sampler = sc.create_sampling_client(model_path=sampler_path)
        prompt = types.ModelInput.from_ints(tok.encode("What is 2 plus 2?"))
        sampler.compute_logprobs(prompt).result()
        sdir = os.path.join(self.server.ckpt, tc.model_id, "sampler_weights", "brief")
        self.rest.set_checkpoint_ttl_from_tinker_path(sampler_path, 2).result()
        self.assertTrue(os.path.isfile(os.path.join(sdir, "adapter_model.safetensors")))
        t0 = time.time()
        while os.path.exists(sdir):
            self.assertLess(time.time() - t0, 15, "the expired checkpoint's files are still there")
            time.sleep(0.1)
        gone = time.time() - t0
        self.assertGreaterEqual(gone, 0.9, gone)   # not before its time (whole seconds)
        print("\na 2 s TTL: files deleted %.1f s after it was set" % gone, file=sys.stderr)
        self.assertIsNone(listed(self.rest, sampler_path))
        with open(self.server.log.name) as f:
            self.assertIn("checkpoint %s expired" % sampler_path, f.read())
        never = "tinker://%s/sampler_weights/never-saved" % tc.model_id
        errors = []
        for path in (sampler_path, never):
            with self.assertRaises(Exception) as cm:
                sc.create_sampling_client(model_path=path).compute_logprobs(prompt).result()
            errors.append(cm.exception)
        self.assertEqual(type(errors[0]), type(errors[1]))
        self.assertIn("no checkpoint at " + sampler_path, str(errors[0]))
        with self.assertRaises(Exception) as cm:   # the live sampler on it is refused too
            sampler.compute_logprobs(prompt).result()
        self.assertIn("TTL", str(cm.exception))
        with self.assertRaises(tinker.NotFoundError):
            self.rest.set_checkpoint_ttl_from_tinker_path(sampler_path, 60).result()
        self.assertEqual([c.tinker_path for c in self.rest.list_checkpoints(tc.model_id).result().checkpoints], [state])
        self.serves()

    def test_copy_weights(self):
        sc = tinker.ServiceClient(base_url=self.server.url, api_key=self.server.key)
        tc, tok, data = self.trained_client(sc)
        state = tc.save_state("w1").result().path
        sampler_path = tc.save_weights_for_sampler("s1").result().path
        self.rest.publish_checkpoint_from_tinker_path(state).result()
        self.rest.set_checkpoint_ttl_from_tinker_path(state, 7200).result()

        # a training checkpoint: its files under a new run, private, with no expiry of its own
        copy = self.rest.copy_weights(state, "proj-archive").result()
        run_id, kind, name = copy[len("tinker://"):].split("/")
        self.assertNotEqual(run_id, tc.model_id)
        self.assertEqual((kind, name), ("weights", "w1"))
        src_dir = os.path.join(self.server.ckpt, tc.model_id, "weights", "w1")
        dst_dir = os.path.join(self.server.ckpt, run_id, "weights", "w1")
        files = sorted(f for f in os.listdir(src_dir) if f != "tinker_meta.json")
        self.assertEqual(sorted(os.listdir(dst_dir)), files)
        for f in files:
            with open(os.path.join(src_dir, f), "rb") as a, open(os.path.join(dst_dir, f), "rb") as b:
                self.assertEqual(a.read(), b.read(), f)
        c = listed(self.rest, copy)
        self.assertEqual((c.checkpoint_type, c.public, c.expires_at), ("training", False, None))
        self.assertEqual([x.tinker_path for x in self.rest.list_checkpoints(run_id).result().checkpoints], [copy])
        run = self.rest.get_training_run(run_id).result()
        self.assertEqual((run.base_model, run.lora_rank, run.last_checkpoint.tinker_path), (self.server.base, 4, copy))
        # loadable: a training client from the copy computes what the original's state does
        want = logprobs_of(tc.forward(data, "cross_entropy").result())
        from_copy = sc.create_training_client_from_state(copy).result()
        for a, b in zip(want, logprobs_of(from_copy.forward(data, "cross_entropy").result())):
            np.testing.assert_array_equal(a, b)

        # a sampler checkpoint, with a TTL on the copy: samples as the original does
        scopy = self.rest.copy_weights(sampler_path, "proj-archive", ttl_seconds=3600).result()
        self.assertTrue(scopy.endswith("/sampler_weights/s1"), scopy)
        c = listed(self.rest, scopy)
        self.assertEqual(c.checkpoint_type, "sampler")
        self.assertLess(abs(c.expires_at.timestamp() - (time.time() + 3600)), 60)
        prompt = types.ModelInput.from_ints(tok.encode("What is 3 plus 4? 3 + 4 = 7. #### 7"))
        a = sc.create_sampling_client(model_path=sampler_path).compute_logprobs(prompt).result()
        b = sc.create_sampling_client(model_path=scopy).compute_logprobs(prompt).result()
        self.assertEqual(a, b)
        base = sc.create_sampling_client(base_model=self.server.base).compute_logprobs(prompt).result()
        self.assertNotEqual(a, base)   # the adapter was trained: the check can tell them apart

        # into a session's model_seq_id slot; onto a path that exists it is refused, nothing changes
        session_id = tc.model_id.split(":train:")[0]
        body = {"source_path": sampler_path, "session_id": session_id, "model_seq_id": 77}
        status, got = self.server.post("/api/v1/copy_weights", json.dumps(body).encode())
        self.assertEqual(status, 200, got)
        slot = json.loads(got)["tinker_path"]
        self.assertEqual(slot, "tinker://%s:train:77/sampler_weights/s1" % session_id)
        status, got = self.server.post("/api/v1/copy_weights", json.dumps(body).encode())
        self.assertEqual(status, 400, got)
        self.assertIn("exists", json.loads(got)["error"])
        # the same idempotency key (an SDK retry) answers the first copy's path, copying nothing
        hdr_body = json.dumps({"source_path": state, "destination_project_id": "p"}).encode()
        paths = []
        for _ in range(2):
            req = urllib.request.Request(self.server.url + "/api/v1/copy_weights", data=hdr_body, method="POST",
                                         headers={"Content-Type": "application/json", "X-API-Key": self.server.key,
                                                  "X-Idempotency-Key": "copy-key-1"})
            with urllib.request.urlopen(req, timeout=30) as r:
                paths.append(json.loads(r.read())["tinker_path"])
        self.assertEqual(paths[0], paths[1])
        for bad, want in (({"source_path": state, "session_id": session_id,
                            "model_seq_id": int(tc.model_id.split(":train:")[1])}, "live training client"),
                          ({"source_path": state}, "destination_project_id"),
                          ({"source_path": 5, "destination_project_id": "p"}, "source_path"),
                          ({"source_path": "tinker://x", "destination_project_id": "p"}, "source_path"),
                          ({"source_path": state, "destination_project_id": "p", "ttl_seconds": -1}, "ttl_seconds"),
                          ({"source_path": state, "session_id": "session-nope", "model_seq_id": 1}, "session_id")):
            status, got = self.server.post("/api/v1/copy_weights", json.dumps(bad).encode())
            self.assertEqual(status, 400, (bad, got))
            self.assertIn(want, json.loads(got)["error"])
        status, got = self.server.post("/api/v1/copy_weights", b"[1, 2", content_type="application/json")
        self.assertEqual(status, 400, got)
        with self.assertRaises(tinker.NotFoundError):
            self.rest.copy_weights("tinker://%s/weights/never" % tc.model_id, "p").result()
        self.serves()

    def test_restart_keeps_ttl_and_public(self):
        """A second server on the same checkpoint directory: TTLs and flags stay; what
        expired while no server ran is deleted by its first sweep."""
        tmp = tempfile.TemporaryDirectory(prefix="rlhost-tinker-restart-")
        server = Server(default_model(), tmp.name, extra=("--min-checkpoint-ttl", "1"))
        try:
            rest = tinker.RestClient(base_url=server.url, api_key=server.key)
            sc = tinker.ServiceClient(base_url=server.url, api_key=server.key)
            tc = sc.create_lora_training_client(base_model=server.base, rank=4).result()
            long_path = tc.save_state("long").result().path
            short_path = tc.save_weights_for_sampler("short").result().path
            rest.set_checkpoint_ttl_from_tinker_path(long_path, 7200).result()
            rest.publish_checkpoint_from_tinker_path(long_path).result()
            rest.set_checkpoint_ttl_from_tinker_path(short_path, 3).result()
            before = listed(rest, long_path)
            sc.close("success").result()
        finally:
            server.stop()
        time.sleep(3.5)   # the short one expires while no server runs
        short_dir = os.path.join(server.ckpt, tc.model_id, "sampler_weights", "short")
        self.assertTrue(os.path.isdir(short_dir))
        os.remove(server.ready)
        server = Server(default_model(), tmp.name, extra=("--min-checkpoint-ttl", "1"))
        try:
            t0 = time.time()
            while os.path.exists(short_dir):   # the first sweep, about 1 s after the start
                self.assertLess(time.time() - t0, 15, "the checkpoint that expired meanwhile is still there")
                time.sleep(0.1)
            rest = tinker.RestClient(base_url=server.url, api_key=server.key)
            after = listed(rest, long_path)
            self.assertEqual((after.expires_at, after.public), (before.expires_at, True))
            self.assertIsNone(listed(rest, short_path))
        finally:
            server.stop()
            tmp.cleanup()


@support.requires(HAVE_TINKER, "the tinker SDK", HINT)
class TinkerSdkWhoami(unittest.TestCase):
    """JWT auth: the SDK trades its key for a token (/api/v1/auth/token) and reads whoami
    from it; a token that is not one the server issued is 401 invalid_token."""

    def test_whoami_and_tokens(self):
        tmp = tempfile.TemporaryDirectory(prefix="rlhost-tinker-jwt-")
        server = Server(default_model(), tmp.name)
        try:
            rest = tinker.RestClient(base_url=server.url, api_key=server.key)
            me = rest.whoami().result()
            self.assertEqual((me.user_urn, me.org_urn, me.email), ("tml:user:local", "tml:organization:local", None))
            self.assertIn(server.base, [m.model_name for m in rest.get_server_capabilities().result().supported_models])
            status, body = server.post("/api/v1/auth/token", b"{}")
            self.assertEqual(status, 200, body)
            jwt = json.loads(body)["jwt"]
            status, body = server.post("/api/v1/get_server_capabilities", b"{}", key=jwt)
            self.assertEqual(status, 200, body)
            status, _ = server.post("/api/v1/auth/token", b"{}", key=jwt)   # a token cannot prolong itself
            self.assertEqual(status, 401)
            forged = jwt[:-2] + ("AA" if not jwt.endswith("AA") else "BB")
            req = urllib.request.Request(server.url + "/api/v1/get_server_capabilities", data=b"{}", method="POST",
                                         headers={"Content-Type": "application/json", "X-API-Key": forged})
            with self.assertRaises(urllib.error.HTTPError) as cm:
                urllib.request.urlopen(req, timeout=30)
            self.assertEqual(cm.exception.code, 401)
            self.assertIn('error="invalid_token"', cm.exception.headers.get("WWW-Authenticate", ""))
            # billing and audit logs stay unserved, and say so
            with self.assertRaises(tinker.NotFoundError) as cm:
                tinker.AdminClient(base_url=server.url, api_key=server.key).get_audit_log().result()
            self.assertIn("not served by rlhost tinker", str(cm.exception))
        finally:
            server.stop()
        # --no-jwt-auth: the key itself on every call; whoami has nothing to read
        os.remove(server.ready)
        server = Server(default_model(), tmp.name, extra=("--no-jwt-auth",))
        try:
            rest = tinker.RestClient(base_url=server.url, api_key=server.key)
            self.assertEqual(rest.list_user_checkpoints().result().checkpoints, [])
            with self.assertRaises(RuntimeError) as cm:
                rest.whoami().result()
            self.assertIn("JWT auth", str(cm.exception))
            status, body = server.post("/api/v1/auth/token", b"{}")
            self.assertEqual(status, 404, body)
        finally:
            server.stop()
            tmp.cleanup()


# A client of its own process: a session with a training client and a sampler, then it
# prints its model_id and idles (its SDK heartbeating) until the test kills it.
DYING_CLIENT = """
import sys, time, tinker
sc = tinker.ServiceClient()
tc = sc.create_lora_training_client(base_model=sys.argv[1], rank=4).result()
sc.create_sampling_client(base_model=sys.argv[1]).result()
print(tc.model_id, flush=True)
time.sleep(600)
"""


@support.requires(HAVE_TINKER, "the tinker SDK", HINT)
class TinkerSdkRestAndExpiry(unittest.TestCase):
    """RestClient's runs and checkpoints, and sessions that expire (--session-timeout)."""
    TIMEOUT = 15   # the SDK beats every 10 s

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory(prefix="rlhost-tinker-rest-")
        cls.server = Server(default_model(), cls.tmp.name, extra=("--session-timeout", str(cls.TIMEOUT)))
        cls.rest = tinker.RestClient(base_url=cls.server.url, api_key=cls.server.key)

    @classmethod
    def tearDownClass(cls):
        cls.server.stop()
        cls.tmp.cleanup()

    def service(self):
        return tinker.ServiceClient(base_url=self.server.url, api_key=self.server.key)

    def test_checkpoints_listed_and_deleted(self):
        sc = self.service()
        tc = sc.create_lora_training_client(base_model=self.server.base, rank=4).result()
        state = tc.save_state("s1").result().path
        sampler = tc.save_weights_for_sampler("p1").result().path
        run_id = tc.model_id
        ckpts = self.rest.list_checkpoints(run_id).result().checkpoints
        self.assertEqual(sorted((c.checkpoint_id, c.checkpoint_type, c.tinker_path) for c in ckpts),
                         [("sampler_weights/p1", "sampler", sampler), ("weights/s1", "training", state)])
        for c in ckpts:
            self.assertGreater(c.size_bytes, 0)
            self.assertLess(abs(c.time.timestamp() - time.time()), 120, c.time)
        user = self.rest.list_user_checkpoints().result()
        self.assertTrue({state, sampler} <= {c.tinker_path for c in user.checkpoints})
        self.assertGreaterEqual(user.cursor.total_count, 2)
        one = self.rest.list_user_checkpoints(limit=1, offset=1).result()
        self.assertEqual((len(one.checkpoints), one.cursor.limit, one.cursor.offset), (1, 1, 1))

        run = self.rest.get_training_run(run_id).result()
        self.assertEqual((run.training_run_id, run.base_model, run.is_lora, run.lora_rank),
                         (run_id, self.server.base, True, 4))
        self.assertEqual(run.last_checkpoint.tinker_path, state)
        self.assertEqual(run.last_sampler_checkpoint.tinker_path, sampler)
        self.assertEqual(self.rest.get_training_run_by_tinker_path(sampler).result().training_run_id, run_id)
        self.assertIn(run_id, [r.training_run_id for r in self.rest.list_training_runs().result().training_runs])
        info = self.rest.get_weights_info_by_tinker_path(state).result()
        self.assertEqual((info.base_model, info.lora_rank, info.is_lora), (self.server.base, 4, True))
        session = self.rest.get_session(run_id.split(":train:")[0]).result()
        self.assertIn(run_id, session.training_run_ids)

        # deleting needs the key, and takes only checkpoint ids: nothing goes otherwise
        sampler_dir = os.path.join(self.server.ckpt, run_id, "sampler_weights", "p1")
        self.assertTrue(os.path.isfile(os.path.join(sampler_dir, "adapter_config.json")))
        status, _ = self.server.post("/api/v1/training_runs/%s/checkpoints/sampler_weights/p1" % run_id, None,
                                     key="tml-not-the-key", method="DELETE")
        self.assertEqual(status, 401)
        status, body = self.server.post("/api/v1/training_runs/..%2F..%2Fckpt/checkpoints/sampler_weights/p1", None,
                                        method="DELETE")
        self.assertEqual(status, 400, body)
        self.assertTrue(os.path.isdir(sampler_dir))

        self.rest.delete_checkpoint_from_tinker_path(sampler).result()
        self.assertFalse(os.path.exists(sampler_dir))
        self.assertEqual([c.tinker_path for c in self.rest.list_checkpoints(run_id).result().checkpoints], [state])
        with self.assertRaises(tinker.NotFoundError):
            self.rest.delete_checkpoint(run_id, "sampler_weights/p1").result()
        with self.assertRaises(Exception) as cm:   # a sampler of a deleted checkpoint is refused
            sc.create_sampling_client(model_path=sampler).result().sample(
                prompt=types.ModelInput.from_ints([1, 2]), num_samples=1,
                sampling_params=types.SamplingParams(max_tokens=2)).result()
        self.assertIn("p1", str(cm.exception))
        self.rest.delete_checkpoint(run_id, "weights/s1").result()
        self.assertEqual(self.rest.list_checkpoints(run_id).result().checkpoints, [])
        self.assertFalse(os.path.exists(os.path.join(self.server.ckpt, run_id)))
        with self.assertRaises(tinker.NotFoundError):
            self.rest.get_training_run("session-nope:train:0").result()

    def test_killed_client_session_expires(self):
        live = self.service()
        live_tc = live.create_lora_training_client(base_model=self.server.base, rank=4).result()
        live_session = live_tc.model_id.split(":train:")[0]
        born = time.time()
        env = dict(os.environ, TINKER_BASE_URL=self.server.url, TINKER_API_KEY=self.server.key)
        child = subprocess.Popen([sys.executable, "-c", DYING_CLIENT, self.server.base], env=env,
                                 stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        try:
            ready, _, _ = select.select([child.stdout], [], [], 120)
            self.assertTrue(ready, "the client process printed no model_id in 120 s")
            dead_model = child.stdout.readline().strip()
            self.assertIn(":train:", dead_model)
            dead_session = dead_model.split(":train:")[0]
            got = self.rest.get_session(dead_session).result()
            self.assertEqual((got.training_run_ids, len(got.sampler_ids)), ([dead_model], 1))
        finally:
            child.send_signal(signal.SIGKILL)
            child.wait()
        killed = time.time()
        # the RestClient's look does not count as a sign of life: poll until the session is gone
        while True:
            try:
                self.rest.get_session(dead_session).result()
            except tinker.NotFoundError as e:
                self.assertIn("expired", str(e))
                break
            self.assertLess(time.time() - killed, self.TIMEOUT * 2 + 10, "the dead client's session did not expire")
            time.sleep(0.25)
        gone_after = time.time() - killed
        # its last heartbeat came at most 10 s before the kill; sweeps run every TIMEOUT / 4
        self.assertLessEqual(gone_after, self.TIMEOUT + self.TIMEOUT / 4 + 2, gone_after)
        self.assertGreaterEqual(gone_after, self.TIMEOUT - 11, gone_after)
        print("\nthe killed client's session was released %.1f s after SIGKILL (timeout %d s)" % (gone_after, self.TIMEOUT),
              file=sys.stderr)
        with open(self.server.log.name) as f:
            log = f.read()
        line = [ln for ln in log.splitlines() if dead_session in ln and "expired" in ln]
        self.assertEqual(len(line), 1, log[-3000:])
        self.assertIn("released 1 training client(s), 1 sampler(s)", line[0])
        silent = float(line[0].split("no heartbeat for ")[1].split(" s")[0])
        self.assertGreaterEqual(silent, self.TIMEOUT)
        # its training client is gone; a heartbeat for it hears 410 (the SDK stops beating)
        status, body = self.server.post("/api/v1/get_info", json.dumps({"model_id": dead_model}).encode())
        self.assertEqual(status, 400)
        self.assertIn("unknown model_id", json.loads(body)["error"])
        status, body = self.server.post("/api/v1/session_heartbeat",
                                        json.dumps({"session_id": dead_session}).encode())
        self.assertEqual(status, 410, body)

        # the live client, older than the timeout by now, kept its session by heartbeating
        time.sleep(max(0.0, born + self.TIMEOUT + 3 - time.time()))
        self.assertEqual(live_tc.get_info().model_id, live_tc.model_id)
        self.assertIn(live_tc.model_id, self.rest.get_session(live_session).result().training_run_ids)
        live.close("success").result()
        with self.assertRaises(tinker.NotFoundError) as cm:
            self.rest.get_session(live_session).result()
        self.assertIn("finished (success)", str(cm.exception))


if __name__ == "__main__":
    # The Tinker SDK keeps its event-loop thread and connections to the end: once, in CI,
    # the interpreter aborted (SIGABRT, no message) while finalising after all 14 tests
    # had passed. The outcome is decided and printed before that point.
    support.main(hard_exit=True)
