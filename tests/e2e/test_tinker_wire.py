#!/usr/bin/env python3
"""The Tinker API's protobuf bodies (issue 36), checked against the official `tinker` SDK's
own code: rl.tinker_wire (runtime/tinker/wire.cpp) must read what the SDK sends and write
what the SDK reads.

  * proto/tinker_public.proto compiles (protoc) to the very descriptor the SDK publishes
    (tinker/proto/tinker_public_pb2.py): package, messages, fields, numbers, enums.
  * Requests the SDK builds from its own types (tinker.types.Datum, ModelInput,
    TensorData, ...) and serializes with its own request_conv, as
    resources/training.py POSTs them to /api/v1/forward_backward, decode in rlhost
    to the same tokens, tensors (a sparse CSR one densified as the SDK's to_torch does),
    loss_fn, loss_fn_config and forward_only.
  * ForwardBackwardOutput and SampleResponse bytes rlhost encodes are read by the SDK's
    own response_conv deserializers (what api_future_impl does with an
    application/x-protobuf body) into the expected SDK objects.
  * Malformed bytes (truncated, garbage, JSON, zstd-compressed, image chunks) are clear
    errors naming the message and field, and the process does not crash; bad tables given
    to an encoder raise naming the field.

Needs the SDK in python3 (tinker==0.38.0; scripts/bootstrap.sh --test-deps installs it),
protoc, and an rlhost built with Protocol Buffers (libprotobuf-dev, protobuf-compiler);
without them the tests skip, and under CI=true they fail.

    RLHOST_BIN=build/rlhost python3 tests/e2e/test_tinker_wire.py
"""
import json
import os
import shutil
import subprocess
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from support import BIN, SOURCE_DIR, RlhostTestCase, missing  # noqa: E402
import support  # noqa: E402

try:
    import numpy as np
    from tinker import types as T
    from tinker.proto import tinker_public_pb2 as public_pb
    from tinker.proto.request_conv import forward_backward_request_to_proto
    from tinker.proto.response_conv import deserialize_forward_backward_output, deserialize_sample_response
    from tinker.lib.chunked_fwdbwd_helpers import combine_fwd_bwd_output_results
except ImportError:  # pragma: no cover - depends on the machine
    T = None

SDK_HINT = "pip install tinker==0.38.0, or scripts/bootstrap.sh --test-deps"
PROTO_HINT = "apt-get install libprotobuf-dev protobuf-compiler (scripts/bootstrap.sh does), reconfigure and rebuild"
MODULE = os.path.join(os.path.dirname(BIN), "librlhost_tinker.so")
SCHEMA = os.path.join(SOURCE_DIR, "proto", "tinker_public.proto")

# decode BYTES_FILE: prints the decoded request, or {error}.
# encode_fb|encode_sample SPEC_JSON OUT: writes the bytes, or prints {error}.
WIRE = r"""
local rl = require "rl"
local mode, a, b = arg[1], arg[2], arg[3]
local function slurp(p) local f = assert(io.open(p, "rb")); local s = f:read("*a"); f:close(); return s end
if mode == "decode" then
  local req, err = rl.tinker_wire.decode_forward_backward(slurp(a))
  print(rl.json.encode(req or { error = err }))
  return
end
local spec = rl.json.decode(slurp(a))
local fn = mode == "encode_fb" and rl.tinker_wire.encode_forward_backward_output or rl.tinker_wire.encode_sample_response
local ok, bytes = pcall(fn, spec)
if not ok then print(rl.json.encode { error = tostring(bytes) }) return end
local f = assert(io.open(b, "wb")); f:write(bytes); f:close()
print(rl.json.encode { bytes = #bytes })
"""


def sdk_datum(tokens_a, tokens_b, n_targets, seed):
    """A datum as a recipe builds it with the SDK's types: two text chunks, int64 targets,
    float32 weights and advantages, and a sparse CSR mask."""
    rng = np.random.default_rng(seed)
    n = n_targets
    return T.Datum(
        model_input=T.ModelInput(chunks=[T.EncodedTextChunk(tokens=tokens_a), T.EncodedTextChunk(tokens=tokens_b)]),
        loss_fn_inputs={
            "target_tokens": T.TensorData(data=rng.integers(0, 150000, n).tolist(), dtype="int64", shape=[n]),
            "weights": T.TensorData.from_numpy((rng.random(n) > 0.3).astype(np.float32)),
            "advantages": T.TensorData.from_numpy(rng.standard_normal(n).astype(np.float32)),
            "logprobs": T.TensorData.from_numpy(-rng.random(n).astype(np.float32) * 5),
            "mask": T.TensorData(data=[2.5, -5.0], dtype="float32", shape=[2, 3],
                                 sparse_crow_indices=[0, 1, 2], sparse_col_indices=[1, 2]),
        },
    )


@support.requires(T is not None, "the tinker SDK (python3)", SDK_HINT)
class TinkerWire(RlhostTestCase):
    def setUp(self):
        super().setUp()
        self.script = self.write("wire.lua", WIRE)

    def run_wire(self, *args):
        if not os.path.exists(MODULE):  # the schema test needs only protoc
            missing("librlhost_tinker.so (rlhost built with Protocol Buffers)", PROTO_HINT)
        r = subprocess.run([BIN, "--no-control", self.script, *args], capture_output=True, text=True,
                           timeout=60, env=self.env)
        self.assertEqual(r.returncode, 0, "rlhost failed (a crash?): " + r.stderr[-2000:])
        return json.loads(r.stdout)

    def decode(self, body):
        path = os.path.join(self.dir, "body.bin")
        with open(path, "wb") as f:
            f.write(body)
        return self.run_wire("decode", path)

    def encode(self, mode, spec):
        src, out = os.path.join(self.dir, "spec.json"), os.path.join(self.dir, "out.bin")
        with open(src, "w") as f:
            json.dump(spec, f)
        res = self.run_wire(mode, src, out)
        if "error" in res:
            return res
        with open(out, "rb") as f:
            return f.read()

    def sdk_request_bytes(self, data, loss_fn="importance_sampling", config=None, forward_only=False, seq_id=5):
        """The body the SDK's resources/training.py POSTs to /api/v1/forward_backward."""
        req = T.ForwardBackwardRequest(
            forward_backward_input=T.ForwardBackwardInput(data=data, loss_fn=loss_fn, loss_fn_config=config),
            model_id="tinker://run-1/model", seq_id=seq_id)
        msg = forward_backward_request_to_proto(req)
        msg.forward_only = forward_only
        return msg.SerializeToString()

    # ---- the schema ----------------------------------------------------------------

    def test_schema_is_the_sdks_published_descriptor(self):
        from google.protobuf import descriptor_pb2
        protoc = shutil.which("protoc")
        if not protoc:
            missing("protoc", PROTO_HINT)
        out = os.path.join(self.dir, "schema.pb")
        subprocess.run([protoc, "-I" + os.path.dirname(SCHEMA), "--descriptor_set_out=" + out, SCHEMA], check=True)
        with open(out, "rb") as f:
            ours = descriptor_pb2.FileDescriptorSet.FromString(f.read()).file[0]
        sdk = descriptor_pb2.FileDescriptorProto.FromString(public_pb.DESCRIPTOR.serialized_pb)

        def contract(fd):
            # protoc fills in json_name; the SDK's serialized descriptor leaves it out. Comments
            # and file options are not part of the wire.
            fd = descriptor_pb2.FileDescriptorProto.FromString(fd.SerializeToString())
            fd.ClearField("source_code_info")
            fd.ClearField("options")

            def strip(m):
                for f in m.field:
                    f.ClearField("json_name")
                for n in m.nested_type:
                    strip(n)
            for m in fd.message_type:
                strip(m)
            return fd
        a, b = contract(sdk), contract(ours)
        self.assertEqual(a.package, "tinker_public")
        self.assertEqual([m.name for m in a.message_type], [m.name for m in b.message_type])
        for ma, mb in zip(a.message_type, b.message_type):
            self.assertEqual(str(ma), str(mb), "message %s differs from the SDK's" % ma.name)
        self.assertEqual(a, b)

    # ---- what the SDK sends ------------------------------------------------------------

    def test_sdk_forward_backward_request_decodes(self):
        data = [sdk_datum([1, 2, 3], [4, 5], 5, seed=1), sdk_datum(list(range(100, 4100)), [7], 4001, seed=2)]
        body = self.sdk_request_bytes(data, config={"clip_low_threshold": 0.8, "mode": "seq"}, seq_id=9)
        got = self.decode(body)
        self.assertNotIn("error", got)
        self.assertEqual(got["model_id"], "tinker://run-1/model")
        self.assertEqual(got["seq_id"], 9)
        self.assertEqual(got["loss_fn"], "importance_sampling")
        self.assertFalse(got["forward_only"])
        self.assertEqual(got["loss_fn_config"], {"clip_low_threshold": 0.8, "mode": "seq"})
        self.assertEqual(len(got["data"]), 2)
        for d, g in zip(data, got["data"]):
            self.assertEqual(g["tokens"], d.model_input.to_ints())
            self.assertEqual(g["chunk_lengths"], [c.length for c in d.model_input.chunks])
            self.assertEqual(sorted(g["loss_fn_inputs"]), sorted(d.loss_fn_inputs))
            for name, td in d.loss_fn_inputs.items():
                t = g["loss_fn_inputs"][name]
                want = td.to_numpy()  # the SDK densifies the CSR mask itself
                self.assertEqual(t["dtype"], td.dtype, name)
                self.assertEqual(t["shape"], list(want.shape), name)
                got_arr = np.asarray(t["data"], dtype=np.float32 if td.dtype == "float32" else np.int64)
                np.testing.assert_array_equal(got_arr, want.reshape(-1), err_msg=name)

    def test_sdk_forward_request_and_legacy_config(self):
        # TrainingClient.forward(): the same endpoint with forward_only set.
        body = self.sdk_request_bytes([sdk_datum([9], [8, 7], 3, seed=3)], loss_fn="cross_entropy",
                                      config={"scale": 2.0}, forward_only=True)
        got = self.decode(body)
        self.assertTrue(got["forward_only"])
        self.assertEqual(got["loss_fn"], "cross_entropy")
        self.assertEqual(got["loss_fn_config"], {"scale": 2.0})
        # An older SDK sends the numbers in the legacy map only: they are read from there.
        msg = public_pb.ForwardBackwardRequest.FromString(body)
        msg.ClearField("loss_fn_config_v2")
        self.assertEqual(self.decode(msg.SerializeToString())["loss_fn_config"], {"scale": 2.0})

    # ---- what the SDK reads ------------------------------------------------------------

    def test_forward_backward_output_reads_in_the_sdk(self):
        rng = np.random.default_rng(4)
        lp = [(-rng.random(n) * 4).astype(np.float32) for n in (3, 1, 257)]
        spec = {
            "loss_fn_output_type": "ArrayRecord",
            "loss_fn_outputs": [
                {"logprobs": {"dtype": "float32", "shape": [len(x)], "data": [float(v) for v in x]},
                 "elementwise_loss": [float(v) for v in -x],  # a plain list: float32, 1-D
                 "token_ids": {"dtype": "int64", "shape": [len(x), 2], "data": list(range(2 * len(x)))}}
                for x in lp],
            "metrics": {"loss:sum": 12.5, "clip_frac:mean": 0.25},
        }
        out = deserialize_forward_backward_output(self.encode("encode_fb", spec))
        self.assertIsInstance(out, T.ForwardBackwardOutput)
        self.assertEqual(out.loss_fn_output_type, "ArrayRecord")
        self.assertEqual(out.metrics, {"loss:sum": 12.5, "clip_frac:mean": 0.25})
        self.assertEqual(len(out.loss_fn_outputs), 3)
        for x, o in zip(lp, out.loss_fn_outputs):
            self.assertEqual(o["logprobs"].dtype, "float32")
            self.assertEqual(o["logprobs"].shape, [len(x)])
            np.testing.assert_array_equal(o["logprobs"].to_numpy(), x)
            np.testing.assert_array_equal(o["elementwise_loss"].to_numpy(), -x)
            self.assertEqual(o["token_ids"].dtype, "int64")
            self.assertEqual(o["token_ids"].shape, [len(x), 2])
            self.assertEqual(o["token_ids"].tolist(), np.arange(2 * len(x)).reshape(len(x), 2).tolist())
        # The SDK combines a request's chunks (always, one chunk too) by the metrics' reductions.
        both = combine_fwd_bwd_output_results([out, out])
        self.assertEqual(both.metrics, {"loss:sum": 25.0, "clip_frac:mean": 0.25})
        self.assertEqual(len(both.loss_fn_outputs), 6)
        # No datums (a server filter stripped them): metrics only.
        empty = deserialize_forward_backward_output(self.encode("encode_fb", {"metrics": {"loss:sum": 0}}))
        self.assertEqual(empty.loss_fn_outputs, [])
        self.assertEqual(empty.metrics, {"loss:sum": 0.0})

    def test_sample_response_reads_in_the_sdk(self):
        spec = {
            "sequences": [
                {"tokens": [11, 12, 13], "logprobs": [-0.5, -0.25, -1.0], "stop_reason": "stop",
                 "topk": {"k": 2, "token_ids": [11, 3, 12, 3, 13, 3], "logprobs": [-0.5, -2, -0.25, -2, -1, -2]}},
                {"tokens": [14], "stop_reason": "length"},
            ],
            "prompt_logprobs": [None, -3.5, -0.125],
            "topk_prompt_logprobs": {"k": 1, "token_ids": [0, 5, 6], "logprobs": [0, -3.5, -0.125]},
            "prompt_cache_hit_tokens": 2,
        }
        r = deserialize_sample_response(self.encode("encode_sample", spec))
        self.assertIsInstance(r, T.SampleResponse)
        self.assertEqual(len(r.sequences), 2)
        a, b = r.sequences
        self.assertEqual((a.tokens, a.logprobs, a.stop_reason), ([11, 12, 13], [-0.5, -0.25, -1.0], "stop"))
        self.assertEqual(a.topk_logprobs_np.token_ids.tolist(), [[11, 3], [12, 3], [13, 3]])
        self.assertEqual((b.tokens, b.logprobs, b.stop_reason), ([14], None, "length"))
        self.assertIsNone(b.topk_logprobs_np)
        self.assertEqual(r.prompt_logprobs, [None, -3.5, -0.125])
        self.assertEqual(r.topk_prompt_logprobs_np.token_ids.tolist(), [[0], [5], [6]])
        self.assertEqual(r.prompt_cache_hit_tokens, 2)
        # Without prompt logprobs the SDK sees None, not an empty list.
        r = deserialize_sample_response(self.encode("encode_sample", {"sequences": [{"tokens": [1]}]}))
        self.assertIsNone(r.prompt_logprobs)
        self.assertEqual(r.sequences[0].stop_reason, "stop")

    # ---- bad bytes and bad tables -------------------------------------------------------

    def test_malformed_bytes_are_clear_errors(self):
        body = self.sdk_request_bytes([sdk_datum([1, 2], [3], 3, seed=5)])
        cases = {
            "truncated": (body[:-7], "ForwardBackwardRequest."),
            "garbage": (bytes(range(255, 0, -1)) * 3, "ForwardBackwardRequest"),
            "JSON": (json.dumps({"model_id": "x", "seq_id": 1}).encode(), "ForwardBackwardRequest"),
        }
        try:
            import zstandard
            cases["zstd"] = (zstandard.ZstdCompressor().compress(body), "ForwardBackwardRequest")
        except ImportError:
            pass
        for what, (bad, where) in cases.items():
            got = self.decode(bad)
            self.assertIn("error", got, what)
            self.assertIn(where, got["error"], what)
            self.assertIn("hint", got["error"], what)
        # A datum the public wire carries but rlhost does not serve: an image.
        img = T.Datum(model_input=T.ModelInput(chunks=[T.EncodedTextChunk(tokens=[1]),
                                                       T.ImageChunk(data=b"\x89PNG", format="png")]),
                      loss_fn_inputs={"weights": T.TensorData(data=[1.0, 1.0], dtype="float32", shape=[2])})
        got = self.decode(self.sdk_request_bytes([img]))
        self.assertIn("ForwardBackwardRequest.data[0].model_input[1]: an image chunk", got["error"])
        # An int64 a Lua number cannot hold exactly is refused, not rounded.
        msg = public_pb.ForwardBackwardRequest.FromString(body)
        msg.data[0].loss_fn_inputs["target_tokens"].dense = np.array([1, 2, 2**60], np.int64).tobytes()
        got = self.decode(msg.SerializeToString())
        self.assertIn("loss_fn_inputs['target_tokens']: value 1152921504606846976 at [2] is beyond 2^53", got["error"])
        # Bytes that do not fill their declared shape.
        msg = public_pb.ForwardBackwardRequest.FromString(body)
        msg.data[0].loss_fn_inputs["weights"].dense = b"\0\0\0\0"
        got = self.decode(msg.SerializeToString())
        self.assertIn("ForwardBackwardRequest.data[0].loss_fn_inputs['weights'].dense: 4 bytes for shape [3] float32",
                      got["error"])

    def test_bad_tables_raise_naming_the_field(self):
        got = self.encode("encode_sample", {"sequences": [{"tokens": [1, 2.5]}]})
        self.assertIn("response.sequences[1].tokens[2]", got["error"])
        got = self.encode("encode_sample", {"sequences": [{"tokens": [1, 2], "logprobs": [-1]}]})
        self.assertIn("sequences[0].logprobs: 1 for 2 tokens", got["error"])
        got = self.encode("encode_sample", {"sequences": [{"tokens": [1], "stop_reason": "eos"}]})
        self.assertIn("stop_reason", got["error"])
        got = self.encode("encode_fb", {"loss_fn_outputs": [{"logprobs": [1]}, {"loss": [1]}]})
        self.assertIn("loss_fn_outputs[1]: its fields differ", got["error"])
        got = self.encode("encode_fb", {"metrics": {"loss": 1.5}})  # the SDK would fail splitting it
        self.assertIn("ForwardBackwardOutput.metrics['loss']", got["error"])
        got = self.encode("encode_fb", {"loss_fn_outputs": [{"logprobs": {"dtype": "bfloat16", "data": [1]}}]})
        self.assertIn("output.loss_fn_outputs[1].logprobs.dtype", got["error"])


if __name__ == "__main__":
    support.main()
