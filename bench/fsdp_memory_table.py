#!/usr/bin/env python3
"""The table of bench/fsdp_memory.sh: reads its results.jsonl (one JSON object a line:
kind = result | failed | skip | cap) and prints, per configuration, the per-rank
memory (the largest rank's), the ratios to the replicated trainer, the step time and
where the sharded step's communication went.

    python3 bench/fsdp_memory_table.py results.jsonl
"""
import json
import sys

GIB = float(1 << 30)


def load(path):
    rows = []
    with open(path) as f:
        for line in f:
            line = line.strip()
            if line:
                rows.append(json.loads(line))
    return rows


def worst(ranks, key):
    vals = [r[key] for r in ranks if r.get(key) is not None]
    return max(vals) if vals else None


def fmt(x, spec="%.2f", none="-"):
    return none if x is None else spec % x


def ratio(a, b):
    return None if a is None or not b else a / b


def summary(row):
    res = row["result"]
    ranks = res["ranks"]
    step = worst(ranks, "step_time")
    gw, rs = worst(ranks, "gather_wait"), worst(ranks, "reduce_scatter")
    return {
        "label": row["label"], "backend": res["backend"], "world": res["world"], "threads": row.get("threads"),
        "hwm_load": worst(ranks, "hwm_after_load"), "hwm": worst(ranks, "hwm_after_train"),
        "rss_end": max(r["mem"]["after_train"]["VmRSS"] for r in ranks),
        "state": worst(ranks, "state_bytes"), "step": step,
        "gather_share": ratio(gw, step), "rs_share": ratio(rs, step),
        "gathered": worst(ranks, "gathered_bytes"), "samples": ranks[0]["samples"],
        "res": res, "elapsed": row.get("elapsed_s"), "other_cpu": other_cpu(res), "recompute": res.get("recompute"),
    }


def other_cpu(res):
    """The share of the machine's CPU that other processes took while this job trained:
    (all cores' busy seconds - every rank's own) / (cores x the training wall), from
    rank 0's window (the ranks start and end training at a barrier)."""
    r0 = res["ranks"][0]
    if r0.get("machine_busy_train_s") is None or not res.get("cores") or not r0.get("train_wall_s"):
        return None
    own = sum(r["cpu_train_s"] for r in res["ranks"])
    return max(0.0, r0["machine_busy_train_s"] - own) / (res["cores"] * r0["train_wall_s"])


def main():
    rows = load(sys.argv[1])
    done = [summary(r) for r in rows if r["kind"] == "result"]
    by = {(s["backend"], s["world"]): s for s in done if not s["recompute"]}
    # The reference: replicated over 2 ranks (the same per-rank batch as fsdp over 2),
    # else over 1 (a replicated rank's state is the same at any world size).
    ref = by.get(("replicated", 2)) or by.get(("replicated", 1))
    if done:
        r0 = done[0]["res"]
        print("Model: Qwen2.5-0.5B shape, %d layers, %.1fM parameters (float32); batch %d x (%d + %d) tokens, "
              "micro-batch %d; %d optimiser steps, medians of steps 2..%d" % (
                  r0["layers"], r0["model_params"] / 1e6, r0["samples"], r0["prompt_len"], r0["response_len"],
                  r0["micro_batch"], r0["steps"], r0["steps"]))
        if ref:
            print("Ratios are to %s (peak RSS, state, step time)." % ref["label"])
        print()
    hdr = ("config", "ranks x thr", "smp/rank", "peak RSS load", "peak RSS", "RSS end", "state", "RSS/rep",
           "state/rep", "step s", "step/rep", "gather wait", "reduce-scat", "other CPU")
    table = []
    for s in done:
        table.append((
            s["label"], "%d x %s" % (s["world"], s["threads"]), str(s["samples"]),
            fmt(s["hwm_load"] / GIB) + " GiB", fmt(s["hwm"] / GIB) + " GiB", fmt(s["rss_end"] / GIB) + " GiB",
            fmt(s["state"] / GIB) + " GiB",
            fmt(ratio(s["hwm"], ref and ref["hwm"])), fmt(ratio(s["state"], ref and ref["state"])),
            fmt(s["step"]), fmt(ratio(s["step"], ref and ref["step"])),
            fmt(s["gather_share"] and 100 * s["gather_share"], "%.1f%%"),
            fmt(s["rs_share"] and 100 * s["rs_share"], "%.1f%%"),
            fmt(s["other_cpu"] and 100 * s["other_cpu"], "%.0f%%"),
        ))
    for r in rows:
        if r["kind"] in ("skip", "failed") and not r["label"].startswith("cap-"):
            what = "skipped: " + r["reason"] if r["kind"] == "skip" else "failed: exit status %d" % r["rc"]
            table.append((r["label"], "%d" % r["world"], what) + ("",) * (len(hdr) - 3))
    measured = [t for t in table if not t[2].startswith(("skipped", "failed"))]
    widths = [max([len(hdr[i])] + [len(t[i]) for t in measured]) for i in range(len(hdr))]
    line = lambda cols: "  ".join(c.ljust(widths[i]) if i == 0 else c.rjust(widths[i])  # noqa: E731
                                  for i, c in enumerate(cols))
    print(line(hdr))
    print(line(["-" * w for w in widths]))
    for t in table:
        if t[2].startswith(("skipped", "failed")):
            print("%s  %s" % (t[0].ljust(widths[0]), t[2]))
        else:
            print(line(t))
    print()
    print("peak RSS load: VmHWM after rl.model.load (every rank loads the whole model before the trainer shards it);")
    print("peak RSS: VmHWM after training; RSS end: VmRSS after training; state: perf/trainer_state_bytes (this")
    print("rank's parameters + gradients + AdamW moments); step s: the median perf/step_time (slowest rank);")
    print("gather wait / reduce-scat: shares of the sharded step spent waiting for parameter all-gathers (not")
    print("hidden by prefetch) and in gradient reduce-scatters (not overlapped); other CPU: the share of the")
    print("machine's CPU that other processes took while the job trained (timings above a few % are disturbed).")
    print("The largest rank's figures. +recompute: activation recomputation (RECOMPUTE, e.g. uniform:1), its")
    print("ratios still to the replicated trainer that keeps its activations.")

    caps = [r for r in rows if r["kind"] == "cap"]
    if caps or any(r["kind"] == "skip" and r["label"].startswith("cap-") for r in rows):
        print()
        print("Memory cap (cgroup v1 memory.limit_in_bytes; fsdp: the whole 'rlhost --nproc N' tree in one cgroup "
              "of N x cap):")
        for r in rows:
            if r["kind"] == "skip" and r["label"].startswith("cap-"):
                print("  %s: skipped: %s" % (r["label"], r["reason"]))
        for c in caps:
            ok = c["rc"] == 0
            how = "finished" if ok else ("killed (signal %d)" % (c["rc"] - 128) if c["rc"] > 128 else "failed")
            after = " after %.0f s" % c["elapsed_s"] if c.get("elapsed_s") is not None else ""
            print("  %-16s cap %.2f GiB/rank (cgroup %.2f GiB): %s%s, exit status %d, oom kills %s, failcnt %s, "
                  "cgroup peak %.2f GiB" % (c["label"], c["cap_per_rank"] / GIB, c["cgroup_limit"] / GIB, how, after,
                                            c["rc"], c["oom_kills"], c["failcnt"], c["max_usage"] / GIB))


if __name__ == "__main__":
    main()
