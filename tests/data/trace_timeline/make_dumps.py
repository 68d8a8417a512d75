#!/usr/bin/env python3
"""Writes the debug-rollout dumps (torch.save, as slime's save_debug_rollout_data does)
that tests/lua/trace_timeline_spec.lua compares against slime's viewer cache:

  sources.pt    source / status / label / reward / index shapes (source "" with
                metadata.source_name, keys holding "source", long and non-text values)
  rounding.pt   timestamps and attr floats where round(x, 6) and repr(x) are hard
                (ties k/128, half-microsecond neighbours, ints, 1e-07, 1e+16, -0.0, text ts)
  malformed.pt  orphan ends, events without ts, samples without a trace, duplicate and
                missing span ids, parent cycles, open spans of every clip kind, PD attrs
  untraced.pt   no sample has trace events (a cache with no rows)
  bare_list.pt  a bare list of samples instead of {'samples': [...]}
  slime_like.pt N samples shaped as slime's trace_utils carriers (random times)

    python3 tests/data/trace_timeline/make_dumps.py OUT_DIR [--samples 200] [--only slime_like]

The expected caches (*.cache.json) are slime's: make_expected.py runs slime's own
tools/trace_timeline_viewer.py (cache version 1) on these dumps.
"""
import argparse
import math
import os
import random

import torch


def ev(type_, name, ts, span_id=None, parent=None, attrs=None, **extra):
    e = {"type": type_, "name": name, "ts": ts, "attempt": 0}
    if span_id is not None:
        e["span_id"] = span_id
    if parent is not None:
        e["parent_span_id"] = parent
    if attrs is not None:
        e["attrs"] = attrs
    e.update(extra)
    return e


def carrier(events, trace_id="t" * 32, attempt=0, **extra):
    c = {"version": 1, "trace_id": trace_id, "sample_id": 0, "group_id": 0, "attempt": attempt, "events": events}
    c.update(extra)
    return c


def simple_trace(t0=100.0):
    return carrier([ev("span_start", "generate", t0, "g"), ev("event", "mark", t0 + 0.5, attrs={"k": 1}),
                    ev("span_end", "generate", t0 + 1.25, "g", attrs={"response_length": 7})])


def sources():
    long_text = "数据集-" * 30  # 120 code points, 360 bytes
    rows = [
        {"index": 0, "source": "", "metadata": {"source": "", "source_name": "gsm8k"}},
        {"index": 1, "metadata": {"source_name": "", "data_source": "math"}},
        {"index": 2, "source": None, "metadata": {"SOURCE_ID": 7}},
        {"index": 3, "source": "direct", "metadata": {"source": "meta"}},
        {"index": 4, "metadata": {"source": long_text}},
        {"index": 5, "metadata": "not a dict", "source": ""},
        {"index": 6, "metadata": {1: "int key", "other": "x"}},
        {"index": 7, "source": 0, "status": "completed", "label": "L" * 300, "reward": 1},
        {"index": 8, "status": "s" * 70, "label": long_text * 3, "reward": {"acc": 1.0, 3: [1, 2.5]}},
        {"status": None, "label": 42, "reward": [0.5, 1]},  # no index: row_id
        {"index": None, "group_index": None, "label": 1.0, "reward": 0.0},
        {"index": "ix", "group_index": 3, "label": ["a", None], "reward": None},
        {"index": 12, "label": b"bytes label", "reward": True, "metadata": {"src": b"raw", "resource": "r"}},
        {"index": 13, "label": "ü" * 256, "reward": -2.5e-7},
        {"index": 14, "label": "ü" * 257, "reward": 1e16},
    ]
    for i, r in enumerate(rows):
        r["trace"] = simple_trace(100.0 + i)
    return {"rollout_id": 0, "samples": rows}


def rounding():
    rng = random.Random(7)
    samples = []
    hard = [0.0078125, 0.0234375, 1700000000.0000005, 1700000000.0000015, 1700000123.4567895, 2.5e-07, 1.5e-06,
            1e-07, 123.0000005, 0.0000005, 3.0000004999999999, 1e16, 12345678901.2345675, -0.0000005, -1.0000015]
    for i in range(40):
        t0 = 1.7e9 + rng.random() * 1e4
        events = [ev("span_start", "outer", t0, "o"),
                  ev("span_start", "inner", t0 + rng.random(), "i"),
                  ev("event", "tick", t0 + rng.randint(0, 10**9) / 128 / 1e7),
                  ev("span_end", "inner", t0 + 1 + rng.random() * 1e-3, "i",
                     attrs={"f": rng.random() * 10 ** rng.randint(-9, 18), "z": 0.0, "nz": -0.0, "whole": 3.0}),
                  ev("span_end", "outer", t0 + 2 + (rng.randint(0, 10**6) + 0.5) / 1e6, "o")]
        samples.append({"index": i, "trace": carrier(events)})
    events = [ev("event", "hard%d" % k, x) for k, x in enumerate(hard)]
    events += [ev("event", "int ts", 10), ev("event", "text ts", " 12.5 "), ev("event", "text exp", "1e3"),
               ev("event", "underscore", "1_000.25"), ev("event", "bool ts", True), ev("event", "bad text", "abc"),
               ev("event", "floats", 5.0, attrs={"tiny": 1e-07, "huge": 1e16, "e22": 1e22, "small": 0.0001,
                                                  "smaller": 0.00001, "denorm": 5e-324, "big": 1.5e300,
                                                  "bigint": 2 ** 70, "neg": -2 ** 65, "third": 1 / 3})]
    samples.append({"index": 40, "trace": carrier(events)})
    return {"rollout_id": 0, "samples": samples}


def malformed():
    s = []
    # orphan ends (with and without an id), an end whose start comes later
    s.append(carrier([ev("span_end", "ghost", 1.0, "g"), ev("span_end", "no id", 1.5),
                      ev("span_start", "late", 2.0, "g"), ev("span_end", "late", 3.0, "g")]))
    # events without ts / with ts None / non-dict events / text ts that is not a number
    s.append(carrier([{"type": "event", "name": "no ts"}, ev("event", "none ts", None), "junk", 7,
                      ev("event", "kept", 4.0), ev("span_start", "bad", "x1", "b")]))
    # duplicate span_start ids (the later replaces the earlier, keeping its place among
    # the open ones), a start without an id, an end without an id. (Explicit parents:
    # a span inferred as its own parent would make slime's ancestor walk loop forever.)
    s.append(carrier([ev("span_start", "first", 1.0, "d", "top"), ev("span_start", "other", 1.5, "e", "top"),
                      ev("span_start", "second", 2.0, "d", "top"), ev("span_start", "no id", 2.5),
                      ev("span_start", "x", 3.0, "k", "top"), ev("span_start", "y", 3.2, "k", "top"),
                      ev("span_end", "k end", 3.4, "k"), ev("span_end", "", 4.0, "")]))
    # open spans: clipped by a later sibling, by a closed ancestor, by the row end, by itself
    s.append(carrier([ev("span_start", "root", 0.0, "r"), ev("span_start", "a", 1.0, "a", "r"),
                      ev("span_start", "b", 2.0, "b", "r"), ev("span_end", "b", 2.5, "b"),
                      ev("span_start", "deep", 2.6, "x", "a"), ev("span_end", "root", 3.0, "r"),
                      ev("span_start", "last", 9.0, "l"), ev("event", "tail", 8.0)]))
    # parent cycles and unknown explicit parents
    s.append(carrier([ev("span_start", "p", 1.0, "p", "q"), ev("span_start", "q", 1.1, "q", "p"),
                      ev("span_end", "q", 2.0, "q"), ev("span_end", "p", 2.1, "p"),
                      ev("span_start", "self", 3.0, "s", "s"), ev("span_end", "self", 3.5, "s"),
                      ev("event", "orphaned", 3.2, parent="nowhere"), ev("event", "child", 3.3, parent="q")]))
    # names that are not text, attrs that are not dicts on starts, attempts of every shape
    s.append(carrier([ev("span_start", None, 1.0, "n1", attrs=[1, "two"]), ev("span_end", None, 2.0, "n1"),
                      ev("span_start", 5, 1.0, "n2", attempt="3"), ev("span_end", 5, 2.5, "n2"),
                      ev("event", "att none", 1.5, attempt=None), ev("event", "att float", 1.6, attempt=2.9),
                      {"type": "event", "name": "carrier attempt", "ts": 1.7}], attempt=4))
    # numeric span ids: 1 and 1.0 are one key, as in Python
    s.append(carrier([ev("span_start", "int id", 1.0, 1), ev("span_end", "float id", 2.0, 1.0),
                      ev("span_start", "zero id", 2.5, 0), ev("event", "after", 3.0)]))
    # PD durations flat on spans (one role only, True counts, sglang_pd_* skipped), same-key ordering
    s.append(carrier([ev("span_start", "gen", 1.0, "g"), ev("span_start", "sglang_pd_prefill", 1.1, "pp", "g"),
                      ev("span_end", "sglang_pd_prefill", 1.2, "pp", attrs={"pd_prefill_forward_duration": 0.1}),
                      ev("span_end", "gen", 2.0, "g", attrs={"pd_prefill_forward_duration": 0.25,
                                                            "pd_decode_forward_duration": True,
                                                            "pd_decode_transfer_duration": 0,
                                                            "response_length": 12}),
                      ev("span_start", "gen2", 1.0, "g2"), ev("span_end", "gen2", 1.5, "g2",
                                                              attrs={"pd_decode_prealloc_duration": 0.01}),
                      ev("event", "same", 1.0, attrs={"start_attrs": {"response_length": 3}}),
                      ev("event", "same", 1.0, attrs={"response_length": 2.7})]))
    # an end earlier than its start; equal times; negative response lengths
    s.append(carrier([ev("span_start", "backwards", 5.0, "bw"), ev("span_end", "backwards", 4.0, "bw",
                                                                   attrs={"response_length": -4}),
                      ev("event", "b", 5.0), ev("event", "a", 5.0)]))
    samples = [{"index": i, "trace": c} for i, c in enumerate(s)]
    samples += [{"index": 100, "trace": None}, {"index": 101}, {"index": 102, "trace": "not a dict"},
                {"index": 103, "trace": carrier([])}, {"index": 104, "trace": carrier(None)},
                {"index": 105, "trace": carrier({"a": 1})}, {"index": 106, "trace": carrier([{"name": "no ts"}])},
                "not a sample", 42]
    return {"rollout_id": 3, "samples": samples}


def untraced():
    return {"rollout_id": 0, "samples": [{"index": 0, "prompt": "p"}, {"index": 1, "trace": None}]}


def bare_list():
    return [{"index": 0, "trace": simple_trace(5.0)}, {"index": 1, "trace": simple_trace(6.0)}]


def slime_like(n, seed=1):
    """Carriers as slime's trace_utils records them for a GRPO rollout: per group a
    generate_and_rm_group span, per sample generate_and_rm > sglang_generate (with engine
    attrs) and a reward span, instant events, retries as attempts."""
    rng = random.Random(seed)
    sources_ = ["gsm8k", "math", "", None]
    out = []
    base = 1.76e9 + rng.random() * 1e5
    for i in range(n):
        g = i // 8
        t = base + g * 0.37 + rng.random() * 2
        attempt = 1 if rng.random() < 0.05 else 0
        sid = lambda k: "%016x" % rng.getrandbits(64)
        grp, top, gen, rm = sid(0), sid(1), sid(2), sid(3)
        evs = [ev("span_start", "generate_and_rm_group", t, grp, attrs={"group_size": 8}),
               ev("span_start", "generate_and_rm", t + rng.random() * 1e-3, top, grp),
               ev("event", "request_enqueue", t + rng.random() * 1e-2, attrs={"queue": rng.randint(0, 40)})]
        t1 = t + 0.01 + rng.random() * 0.05
        evs.append(ev("span_start", "sglang_generate", t1, gen, top, attrs={"max_new_tokens": 1024}))
        dur = rng.random() * 30
        rl = rng.randint(1, 2048)
        end_attrs = {"prompt_tokens": rng.randint(20, 400), "completion_tokens": rl, "response_length": rl,
                     "e2e_latency": dur, "finish_reason": {"type": rng.choice(["stop", "length"])},
                     "cached_tokens": 0, "spec_accept_rate": rng.random()}
        if rng.random() < 0.3:
            end_attrs.update(pd_prefill_forward_duration=rng.random() * 0.2, pd_decode_forward_duration=dur * 0.9,
                             pd_prefill_bootstrap_duration=0.0, pd_transfer_speed_gb_s=rng.random() * 20)
        evs.append(ev("span_end", "sglang_generate", t1 + dur, gen, attrs=end_attrs))
        if rng.random() < 0.05:
            evs.append(ev("event", "abort", t1 + dur + 1e-4, attrs={"reason": "retry"}, attempt=attempt))
        t2 = t1 + dur + rng.random() * 0.01
        evs.append(ev("span_start", "reward_model", t2, rm, top))
        if rng.random() < 0.9:  # some rewards never finish: open spans
            evs.append(ev("span_end", "reward_model", t2 + rng.random() * 0.1, rm, attrs={"reward": rng.random()}))
        evs.append(ev("event", "sample_done", t2 + 0.2, attrs={"status": "completed"}))
        if rng.random() < 0.97:
            evs.append(ev("span_end", "generate_and_rm", t2 + 0.2 + rng.random() * 1e-3, top))
        if rng.random() < 0.02:
            evs.append(ev("span_end", "stray", t2 + 0.3, sid(4)))
        evs.append(ev("span_end", "generate_and_rm_group", t2 + 0.5, grp))
        meta = {"source": rng.choice(sources_), "source_name": rng.choice(["gsm8k", "aime"])}
        sample = {"group_index": g, "index": i, "prompt": "q%d" % i, "response": "r" * rng.randint(0, 20),
                  "response_length": rl, "label": str(rng.randint(0, 999)), "reward": rng.choice([0.0, 1.0, -1.0]),
                  "status": rng.choice(["completed", "truncated", "aborted"]), "metadata": meta,
                  "trace": carrier(evs, trace_id="%032x" % rng.getrandbits(128), attempt=attempt,
                                   sample_id=i, group_id=g)}
        if rng.random() < 0.01:
            sample["trace"] = None
        out.append(sample)
    return {"rollout_id": 0, "samples": out}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--samples", type=int, default=80)
    ap.add_argument("--only")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    dumps = {"sources": sources, "rounding": rounding, "malformed": malformed, "untraced": untraced,
             "bare_list": bare_list, "slime_like": lambda: slime_like(a.samples)}
    for name, make in dumps.items():
        if a.only and name != a.only:
            continue
        torch.save(make(), os.path.join(a.out, name + ".pt"))
        print(os.path.join(a.out, name + ".pt"))


if __name__ == "__main__":
    main()
