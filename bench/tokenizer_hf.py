#!/usr/bin/env python3
"""HF `tokenizers` peer of bench_tokenizer: encode every GSM8K train question.

    python3 bench/tokenizer_hf.py TOKENIZER_JSON GSM8K_JSONL [--repeat N] [--ids-out FILE] [--check FILE]

Single-threaded, two ways: a Python loop of Tokenizer.encode (one question per
call, what a per-sample rollout does), and encode_batch with the Rayon pool
pinned to one thread (RAYON_NUM_THREADS=1, set by bench/tokenizer.sh). --check
compares our ids with another tool's ids file (one JSON array per line).
"""
import argparse
import json
import os
import sys
import time

from tokenizers import Tokenizer


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("tokenizer")
    ap.add_argument("gsm8k")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--ids-out")
    ap.add_argument("--check")
    a = ap.parse_args()
    questions = [json.loads(l)["question"] for l in open(a.gsm8k, encoding="utf-8") if l.strip()]

    t0 = time.perf_counter()
    tok = Tokenizer.from_file(a.tokenizer)
    load_s = time.perf_counter() - t0

    def loop_pass():
        start = time.perf_counter()
        out = [tok.encode(q, add_special_tokens=False).ids for q in questions]
        return time.perf_counter() - start, out

    def batch_pass():
        start = time.perf_counter()
        out = [e.ids for e in tok.encode_batch(questions, add_special_tokens=False)]
        return time.perf_counter() - start, out

    cold_s, ids = loop_pass()
    tokens = sum(len(x) for x in ids)
    loop_best = min(loop_pass()[0] for _ in range(a.repeat))
    batch_best = min(batch_pass()[0] for _ in range(a.repeat))
    threads = os.environ.get("RAYON_NUM_THREADS", "(default)")
    print(f"hf: {len(questions)} questions, {tokens} tokens; load {load_s:.3f} s; tokenizers "
          f"{__import__('tokenizers').__version__}, RAYON_NUM_THREADS={threads}")
    print(f"hf: encode loop: cold {cold_s:.4f} s ({tokens / cold_s:.0f} tokens/s), best of {a.repeat} "
          f"{loop_best:.4f} s ({tokens / loop_best:.0f} tokens/s)")
    print(f"hf: encode_batch: best of {a.repeat} {batch_best:.4f} s ({tokens / batch_best:.0f} tokens/s)")
    print(f"RESULT hf load_s={load_s:.4f} cold_tokens_per_s={tokens / cold_s:.0f} "
          f"loop_tokens_per_s={tokens / loop_best:.0f} batch_tokens_per_s={tokens / batch_best:.0f} tokens={tokens}")
    if a.ids_out:
        with open(a.ids_out, "w") as f:
            for x in ids:
                f.write(json.dumps(x, separators=(",", ":")) + "\n")
    if a.check:
        other = [json.loads(l) for l in open(a.check)]
        bad = [i for i, (x, y) in enumerate(zip(ids, other)) if x != y]
        if len(other) != len(ids):
            print(f"CHECK FAILED: {len(other)} rows vs {len(ids)} questions")
            return 1
        if bad:
            print(f"CHECK FAILED: {len(bad)} of {len(ids)} questions differ, first: #{bad[0]} {questions[bad[0]]!r}")
            return 1
        print(f"CHECK ok: ids identical on all {len(ids)} questions")
    return 0


if __name__ == "__main__":
    sys.exit(main())
