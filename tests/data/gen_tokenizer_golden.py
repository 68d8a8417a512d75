#!/usr/bin/env python3
"""Generates tests/data/tokenizer_variants.json: HF `tokenizers` outputs for
tokenizer.json component combinations the reference files do not cover
(Metaspace, Digits, WhitespaceSplit, Split behaviours, Strip, ByteLevel with
add_prefix_space/use_regex, the GPT-2 and Llama-3 regexes, ignore_merges, unk
handling, Roberta post-processing, normalized added tokens, no decoder).

    python3 tests/data/gen_tokenizer_golden.py > tests/data/tokenizer_variants.json

Also "splits": random strings over characters of every class the split regexes
distinguish, with the pieces HF's Oniguruma regex cuts them into (GPT-2, Qwen2/3,
Llama-3 patterns). Needs `pip install tokenizers` (the file records the version). Each variant is a
patch over a base tokenizer: "stories" (tests/data/models/stories260K/
tokenizer.json, SentencePiece-style) or "tiny" (the byte-level BPE that
test_tokenizer.cpp builds; its JSON is rebuilt here the same way).
"""
import copy
import json
import os
import random
import sys

import tokenizers
from tokenizers import Regex, Tokenizer, pre_tokenizers

HERE = os.path.dirname(os.path.abspath(__file__))
DATA = HERE  # tests/data: the plain files read here are not among the compressed ones

GPT2 = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"
QWEN = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
LLAMA3 = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"


def bytes_to_unicode():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs, n = bs[:], 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, [chr(c) for c in cs]))


def tiny():
    """Mirror of tiny_tokenizer_json() in tests/cpp/test_tokenizer.cpp."""
    b2u = bytes_to_unicode()
    vocab = {b2u[b]: b for b in range(256)}
    merges = [("h", "e"), ("l", "l"), ("he", "ll"), ("hell", "o"), ("Ġ", "w"), ("o", "r"), ("Ġw", "or"), ("l", "d"),
              ("Ġwor", "ld"), ("w", "or"), ("wor", "d")]
    for a, b in merges:
        vocab.setdefault(a + b, len(vocab))

    def at(i, c, special, lstrip, rstrip, single_word, normalized):
        return {"id": i, "content": c, "special": special, "lstrip": lstrip, "rstrip": rstrip,
                "single_word": single_word, "normalized": normalized}
    bl = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False}
    return {"version": "1.0",
            "added_tokens": [at(267, "<|end|>", True, False, False, False, False),
                             at(268, "<|end|>x", True, False, False, False, False),
                             at(269, "<L>", True, True, False, False, False), at(270, "<R>", True, False, True, False, False),
                             at(271, "hi", False, False, False, True, False), at(272, "<n>", False, False, False, False, True)],
            "normalizer": {"type": "NFC"},
            "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
                {"type": "Split", "pattern": {"Regex": QWEN}, "behavior": "Isolated", "invert": False}, bl]},
            "post_processor": bl, "decoder": bl,
            "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": "",
                      "end_of_word_suffix": "", "fuse_unk": False, "byte_fallback": False, "vocab": vocab,
                      "merges": [list(m) for m in merges]}}


def split(pattern, behavior, invert=False, regex=False):
    return {"type": "Split", "pattern": {"Regex" if regex else "String": pattern}, "behavior": behavior, "invert": invert}


BL = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False}
META_DEC = lambda scheme: {"type": "Metaspace", "replacement": "▁", "prepend_scheme": scheme, "split": True}

VARIANTS = [
    ("metaspace_always", "stories", {"normalizer": None, "pre_tokenizer": META_DEC("always"), "decoder": META_DEC("always")}),
    ("metaspace_first_nosplit", "stories", {
        "normalizer": None,
        "pre_tokenizer": {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "first", "split": False},
        "decoder": META_DEC("first")}),
    ("metaspace_never", "stories", {"normalizer": None, "pre_tokenizer": META_DEC("never"), "decoder": META_DEC("never")}),
    ("whitespace_digits_nodecoder", "stories", {
        "normalizer": None, "decoder": None, "post_processor": None,
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "WhitespaceSplit"}, {"type": "Digits", "individual_digits": False}]}}),
    ("digits_individual", "stories", {
        "pre_tokenizer": {"type": "Digits", "individual_digits": True}}),
    ("split_behaviours", "stories", {
        "normalizer": None, "decoder": None, "post_processor": None,
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            split(" ", "MergedWithPrevious"), split("e", "MergedWithNext"), split("a", "Contiguous"),
            split("o", "Removed"), split("t", "Isolated", invert=True)]}}),
    ("split_removed_inverted", "stories", {
        "normalizer": None, "decoder": None, "post_processor": None,
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [split("ll", "Removed", invert=True),
                                                                 split(" ", "Contiguous")]}}),
    ("strip_normalizer", "stories", {
        "normalizer": {"type": "Sequence", "normalizers": [
            {"type": "Strip", "strip_left": True, "strip_right": True},
            {"type": "Prepend", "prepend": "▁"}, {"type": "Replace", "pattern": {"String": " "}, "content": "▁"}]}}),
    ("unk_fused", "stories", {"model": {"byte_fallback": False, "fuse_unk": True}}),
    ("unk_unfused", "stories", {"model": {"byte_fallback": False, "fuse_unk": False}}),
    ("roberta_post", "stories", {"post_processor": {"type": "RobertaProcessing", "sep": ["</s>", 2], "cls": ["<s>", 1],
                                                    "trim_offsets": True, "add_prefix_space": False}}),
    ("normalized_added_token", "stories", {"added_tokens_extra": [
        {"id": 512, "content": "<x>", "special": False, "lstrip": False, "rstrip": False, "single_word": False,
         "normalized": True}]}),
    ("gpt2_bytelevel_prefix", "tiny", {
        "normalizer": None,
        "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True}}),
    ("gpt2_split", "tiny", {"pre_tokenizer": {"type": "Sequence", "pretokenizers": [
        split(GPT2, "Isolated", regex=True), BL]}}),
    ("llama3_split_ignore_merges", "tiny", {
        "model": {"ignore_merges": True},
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [split(LLAMA3, "Isolated", regex=True), BL]}}),
]

TEXTS = [
    "Once upon a time, there was a little girl.", "  two  spaces  ", "line one\nline two\r\n\r\nend", "tab\tsep",
    "Numbers 12345 and 3.14 and 1000000", "I'M sure they'RE fine, don'T you THINK? it's 'sup", "hello world hello",
    "ſtop 'ſ", "naïve café 你好 😀", "a <s> b </s> c", "<s>", "x<x>y <x> z", "   ", "", "hello<|end|>world <L> hi his",
    "\u00a0nbsp\u3000ideographic\u2003em", "$$$ !!! ..., ;;", "ending with space ", "\n\n\n", "allo hello tall",
    "teeth toot ate", "123abc456", "Ⅷ ² ٣", "HELLO World",
]


# Characters of every class the split regexes distinguish (letters, marks, numbers of
# all three kinds, White_Space and look-alikes that are not, ſ/K/İ for (?i), ...).
SPLIT_ALPHABET = list("aZé'sStTrRvVeEmMlLdD  \t\n\r0123456789.,!?-_()\"") + [
    "\u00a0", "\u3000", "\u2003", "ſ", "你", "😀", "\u0301", "\u094d", "ड", "²", "Ⅷ", "٣", "\u200b", "\ufeff",
    "\x00", "\x1c", "\x85", "\u2028", "K", "İ", "\x0b", "\x0c"]


def split_cases(per_pattern=150):
    rng = random.Random(5)
    out = []
    for name, pattern in (("gpt2", GPT2), ("qwen2", QWEN), ("llama3", LLAMA3)):
        split = pre_tokenizers.Split(Regex(pattern), "isolated")
        for _ in range(per_pattern):
            text = "".join(rng.choice(SPLIT_ALPHABET) for _ in range(rng.randint(0, 14)))
            out.append({"pattern": name, "text": text, "pieces": [p for p, _ in split.pre_tokenize_str(text)]})
    return out


def patched(base, patch):
    j = copy.deepcopy(base)
    for k, v in patch.items():
        if k == "model":
            j["model"].update(v)
        elif k == "added_tokens_extra":
            j["added_tokens"] = j["added_tokens"] + v
        else:
            j[k] = v
    return j


def main():
    stories = json.load(open(os.path.join(DATA, "models", "stories260K", "tokenizer.json"), encoding="utf-8"))
    bases = {"stories": stories, "tiny": tiny()}
    out = {"generator": "tests/data/gen_tokenizer_golden.py", "tokenizers_version": tokenizers.__version__,
           "variants": []}
    for name, base, patch in VARIANTS:
        tok = Tokenizer.from_str(json.dumps(patched(bases[base], patch)))
        cases = []
        for text in TEXTS:
            enc = tok.encode(text, add_special_tokens=True)
            cases.append({"text": text, "ids": enc.ids,
                          "ids_no_special": tok.encode(text, add_special_tokens=False).ids,
                          "decoded": tok.decode(enc.ids, skip_special_tokens=False),
                          "decoded_skip": tok.decode(enc.ids, skip_special_tokens=True)})
        out["variants"].append({"name": name, "base": base, "patch": patch, "cases": cases})
    out["split_patterns"] = {"gpt2": GPT2, "qwen2": QWEN, "llama3": LLAMA3}
    out["splits"] = split_cases()
    json.dump(out, sys.stdout, ensure_ascii=False, separators=(",", ":"))
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
