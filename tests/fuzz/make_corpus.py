#!/usr/bin/env python3
"""Writes the seed corpora of tests/cpp/test_fuzz_readers.cpp into tests/fuzz/corpus/.

Small valid inputs of each reader (stdlib only; rerun after changing a seed):
    python3 tests/fuzz/make_corpus.py
"""
import json
import os
import pickle
import struct

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus")


def put(reader, name, data):
    os.makedirs(os.path.join(ROOT, reader), exist_ok=True)
    if isinstance(data, str):
        data = data.encode()
    with open(os.path.join(ROOT, reader, name), "wb") as f:
        f.write(data)


# ---- HTTP requests -------------------------------------------------------------------
put("http", "get", "GET /health?x=1&y=%20z HTTP/1.1\r\nHost: a\r\nUser-Agent: t\r\n\r\n")
put("http", "post_length", "POST /generate HTTP/1.1\r\nHost: a\r\nContent-Type: application/json\r\n"
    "Content-Length: 17\r\n\r\n{\"text\": \"hello\"}")
put("http", "chunked", "POST /v1/completions HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n"
    "5\r\n{\"a\":\r\n3;ext=1\r\n 1}\r\n0\r\nX-Trailer: t\r\n\r\n")
put("http", "pipelined", "GET /a HTTP/1.1\r\nHost: a\r\n\r\nPOST /b HTTP/1.0\r\nContent-Length: 2\r\n"
    "Connection: keep-alive\r\n\r\nhiGET /c HTTP/1.1\r\nConnection: close\r\n\r\n")
put("http", "expect", "PUT /x HTTP/1.1\r\nHost: a\r\nExpect: 100-continue\r\nContent-Length: 4\r\n\r\nbody")

# ---- JSON request bodies ---------------------------------------------------------------
put("json", "generate", json.dumps({"text": ["a", "b"], "input_ids": [[1, 2, 3]], "rid": "r1", "stream": False,
                                    "sampling_params": {"temperature": 0.5, "top_p": 0.9, "max_new_tokens": 8,
                                                        "stop": ["\n"], "stop_token_ids": [2], "n": 2}}))
put("json", "chat", json.dumps({"model": "m", "messages": [{"role": "user", "content": [{"type": "text", "text": "h\u00e9 \u2603"}]}],
                                "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}],
                                "max_tokens": 4, "logprobs": True, "stream_options": {"include_usage": True}}))
put("json", "scalars", '[null, true, false, 0, -1, 1.5e300, 18446744073709551615, -9223372036854775808, "\\u0000\\ud83d\\ude00\\n"]')
put("json", "nested", "{\"a\": [[[{\"b\": [[[]]]}]]], \"c\": {}}")

# ---- model config.json -------------------------------------------------------------------
put("config", "llama", json.dumps({
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 64, "intermediate_size": 172,
    "num_hidden_layers": 2, "num_attention_heads": 8, "num_key_value_heads": 4, "head_dim": 8, "vocab_size": 512,
    "max_position_embeddings": 512, "rms_norm_eps": 1e-05, "rope_theta": 10000.0, "rope_scaling": None,
    "hidden_act": "silu", "tie_word_embeddings": True, "bos_token_id": 1, "eos_token_id": [2, 3],
    "torch_dtype": "bfloat16"}))
put("config", "qwen2", json.dumps({
    "architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "hidden_size": 32, "intermediate_size": 64,
    "num_hidden_layers": 1, "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 100,
    "rope_scaling": {"rope_type": "linear", "factor": 2.0}, "tie_word_embeddings": False,
    "torch_dtype": "float32"}))

# ---- tokenizer.json ----------------------------------------------------------------------
vocab = {c: i for i, c in enumerate(["<s>", "</s>", "a", "b", "c", "\u0120", "ab", "abc", "\u0120a"])}
put("tokenizer", "bytelevel", json.dumps({
    "version": "1.0", "added_tokens": [{"id": 0, "content": "<s>", "special": True, "single_word": False,
                                        "lstrip": False, "rstrip": False, "normalized": False}],
    "normalizer": {"type": "NFC"},
    "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True},
    "post_processor": {"type": "TemplateProcessing", "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}},
                                                               {"Sequence": {"id": "A", "type_id": 0}}],
                       "pair": [], "special_tokens": {"<s>": {"id": "<s>", "ids": [0], "tokens": ["<s>"]}}},
    "decoder": {"type": "ByteLevel"},
    "model": {"type": "BPE", "vocab": vocab, "merges": ["a b", ["ab", "c"], "\u0120 a"], "byte_fallback": False}}))
put("tokenizer", "sentencepiece", json.dumps({
    "added_tokens": [], "normalizer": {"type": "Sequence", "normalizers": [
        {"type": "Prepend", "prepend": "\u2581"}, {"type": "Replace", "pattern": {"String": " "}, "content": "\u2581"}]},
    "pre_tokenizer": None, "decoder": {"type": "Sequence", "decoders": [
        {"type": "Replace", "pattern": {"String": "\u2581"}, "content": " "}, {"type": "ByteFallback"}, {"type": "Fuse"}]},
    "model": {"type": "BPE", "vocab": {"<unk>": 0, "<0x41>": 1, "\u2581": 2, "h": 3, "i": 4, "\u2581h": 5},
              "merges": ["\u2581 h"], "byte_fallback": True, "unk_token": "<unk>"}}))

# ---- safetensors -----------------------------------------------------------------------------
def safetensors(tensors, meta=None):
    header, data = {}, b""
    for name, (dtype, shape, raw) in tensors.items():
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    if meta:
        header["__metadata__"] = meta
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    return struct.pack("<Q", len(h)) + h + data


put("safetensors", "two", safetensors({"w": ("F32", [2, 2], struct.pack("<4f", 1, 2, 3, 4)),
                                       "b": ("BF16", [3], b"\x80\x3f\x00\x40\x40\x40")}, {"format": "pt"}))
put("safetensors", "empty_and_int", safetensors({"e": ("F16", [0, 4], b""), "i": ("I64", [1], struct.pack("<q", -5))}))

# ---- GGUF ----------------------------------------------------------------------------------------
def gstr(s):
    s = s.encode()
    return struct.pack("<Q", len(s)) + s


def gguf(kvs, tensors):
    out = b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(kvs))
    for k, typ, payload in kvs:
        out += gstr(k) + struct.pack("<I", typ) + payload
    off = 0
    for name, ne, typ, raw in tensors:
        out += gstr(name) + struct.pack("<I", len(ne)) + b"".join(struct.pack("<Q", d) for d in ne)
        out += struct.pack("<IQ", typ, off)
        off += (len(raw) + 31) // 32 * 32
    out += b"\0" * (-len(out) % 32)
    for _, _, _, raw in tensors:
        out += raw + b"\0" * (-len(raw) % 32)
    return out


kvs = [("general.architecture", 8, gstr("llama")), ("llama.block_count", 4, struct.pack("<I", 1)),
       ("llama.embedding_length", 4, struct.pack("<I", 4)), ("llama.feed_forward_length", 4, struct.pack("<I", 8)),
       ("llama.attention.head_count", 4, struct.pack("<I", 2)), ("llama.context_length", 4, struct.pack("<I", 16)),
       ("llama.rope.freq_base", 6, struct.pack("<f", 1e4)),
       ("tokenizer.ggml.tokens", 9, struct.pack("<IQ", 8, 2) + gstr("a") + gstr("b")),
       ("nested", 9, struct.pack("<IQ", 9, 1) + struct.pack("<IQ", 5, 2) + struct.pack("<2i", 1, -1)),
       ("flag", 7, b"\x01"), ("big", 10, struct.pack("<Q", 2 ** 40))]
def f32(*ne):
    n = 1
    for d in ne:
        n *= d
    return struct.pack("<%df" % n, *[i / 8 for i in range(n)])


# One llama layer: hidden 4, 2 heads, ffn 8, vocab 8 (`ne` innermost first).
layer = [("blk.0.attn_norm.weight", [4]), ("blk.0.attn_q.weight", [4, 4]), ("blk.0.attn_k.weight", [4, 4]),
         ("blk.0.attn_v.weight", [4, 4]), ("blk.0.attn_output.weight", [4, 4]), ("blk.0.ffn_norm.weight", [4]),
         ("blk.0.ffn_gate.weight", [4, 8]), ("blk.0.ffn_up.weight", [4, 8]), ("blk.0.ffn_down.weight", [8, 4])]
put("gguf", "llama", gguf(kvs, [("token_embd.weight", [4, 8], 0, f32(4, 8)),
                                ("output_norm.weight", [4], 1, b"\x00\x3c" * 4)] +
                          [(n, ne, 0, f32(*ne)) for n, ne in layer]))

# ---- pickles (protocols 2 and 4) ---------------------------------------------------------------------
value = {"a": [1, 2.5, "x", None, True, (1, 2), b"\x00\x01"], "b": {"c": -7, "d": 2 ** 70}, "e": [[], {}, ()]}
put("pickle", "p2", pickle.dumps(value, protocol=2))
put("pickle", "p4", pickle.dumps(value, protocol=4))
put("pickle", "memo_refs", pickle.dumps([value["a"], value["a"]], protocol=2))

# ---- --sglang-config files (YAML, JSON, Lua): tests/lua/config_spec.lua fuzzes rl._yaml and
# rl.recipe.engines.load_config from these -------------------------------------------------------
put("sglang_config", "groups.yaml", """# a policy and a frozen reference model
sglang:
  - name: actor
    server_groups:
      - worker_type: regular
        num_gpus: 2
        overrides: {max-running-requests: 8, kv_cache_tokens: 4096}
  - name: 'ref'
    model_path: "/models/ref/"   # a comment
    update_weights: false
    backend: vllm
    offload: false
    server_groups:
    - num_gpus: 1
      overrides:
        vllm_args: [--max-num-seqs, "4", {a: [1, 2.5, ~, true]}]
""")
put("sglang_config", "flow.yaml", "sglang: [{name: actor, server_groups: [{num_gpus: 1, overrides: {threads: 1}}]}, "
    "{name: judge, update_weights: false, model_path: /m, server_groups: [{num_gpus: 1}]}]\n")
put("sglang_config", "scalars.yaml", "---\nsglang:\n  - name: a-b_1\n    server_groups:\n      - num_gpus: 1\n"
    "        overrides:\n          s1: 'it''s'\n          s2: \"tab\\there \\\"q\\\"\"\n          n: -1.5e3\n"
    "          nul: null\n          yes: True\n          list:\n          - - 1\n            - 2\n          - x: y\n...\n")
put("sglang_config", "groups.json", json.dumps({"sglang": [
    {"name": "actor", "server_groups": [{"worker_type": "regular", "num_gpus": 2, "overrides": {"max_running_requests": 8}}]},
    {"name": "ref", "model_path": "/models/ref", "update_weights": False, "backend": "native",
     "server_groups": [{"num_gpus": 1, "overrides": {"vllm_args": ["--max-num-seqs", "4"]}}]}]}, indent=1))
put("sglang_config", "groups.lua", "return { sglang = { { name = 'actor', server_groups = { { num_gpus = 2, "
    "overrides = { ['max-running-requests'] = 8 } } } }, { name = 'ref', update_weights = false, "
    "model_path = '/models/ref', server_groups = { { num_gpus = 1 } } } } }\n")
