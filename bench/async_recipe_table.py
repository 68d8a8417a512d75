#!/usr/bin/env python3
"""The table (and optionally an SVG) of bench/async_recipe.sh: per mode and round, the
summed step times, the median step, engine and trainer busy shares, held-out accuracy at
each eval against seconds since the run's first record, the seconds until the running mean
of 3 evals reaches the accuracy lock-step ends at (the mean of its last 3); then each mode's
ratios to lock-step. Standard library only.

    python3 bench/async_recipe_table.py results.txt [plot.svg]
"""
import json
import os
import statistics
import sys

COLORS = ["#333333", "#d62728", "#1f77b4", "#2ca02c", "#9467bd", "#ff7f0e"]


def eval_acc(row):
    keys = [k for k in sorted(row) if k.startswith("eval/") and k.count("/") == 1 and "-" not in k and k != "eval/step"]
    return row[keys[0]] if keys else None


def load(r):
    m = [json.loads(line) for line in open(os.path.join(r["dir"], "metrics.jsonl")) if line.strip()]
    t0 = m[0]["time"]
    steps = [x for x in m if "rollout/step" in x]
    curve = [(x["time"] - t0, eval_acc(x)) for x in m if "eval/step" in x and eval_acc(x) is not None]
    return steps, curve


def busy(steps, key):
    vals = [1 - x[key] for x in steps[1:] if key in x]
    return statistics.mean(vals) if vals else float("nan")


SMOOTH = 3   # evals in the running mean (one eval of 500 prompts at temperature 1 moves by ~2 points)


def smoothed(curve):
    """The running mean of the last SMOOTH evals, at each eval's time."""
    return [(t, sum(a for _, a in curve[max(0, i - SMOOTH + 1):i + 1]) / (i + 1 - max(0, i - SMOOTH + 1)))
            for i, (t, _) in enumerate(curve)]


def reach(curve, target):
    """Seconds until the smoothed accuracy first reaches target (None: never)."""
    return next((t for t, a in smoothed(curve) if a >= target - 1e-9), None)


def final(curve):
    return smoothed(curve)[-1][1] if curve else float("nan")


def svg(curves, path):
    W, H, L, R, T, B = 780, 400, 60, 230, 30, 50
    tmax = max([t for _, c in curves for t, _ in c] + [1])
    amax = max([a for _, c in curves for _, a in c] + [0.05])
    x = lambda t: L + (W - L - R) * t / tmax
    y = lambda a: T + (H - T - B) * (1 - a / amax)
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" font-family="sans-serif" font-size="12">',
           f'<rect width="{W}" height="{H}" fill="white"/>']
    for i in range(5):
        a = amax * i / 4
        out.append(f'<line x1="{L}" x2="{W - R}" y1="{y(a):.1f}" y2="{y(a):.1f}" stroke="#ddd"/>')
        out.append(f'<text x="{L - 8}" y="{y(a) + 4:.1f}" text-anchor="end">{a:.2f}</text>')
    for i in range(6):
        t = tmax * i / 5
        out.append(f'<text x="{x(t):.1f}" y="{H - B + 18}" text-anchor="middle">{t / 60:.1f}</text>')
    out.append(f'<text x="{(L + W - R) / 2}" y="{H - 10}" text-anchor="middle">minutes since the run started</text>')
    out.append(f'<text x="{L}" y="{T - 10}">held-out accuracy (temperature 1)</text>')
    for i, (name, c) in enumerate(curves):
        col = COLORS[i % len(COLORS)]
        pts = " ".join(f"{x(t):.1f},{y(a):.1f}" for t, a in c)
        out.append(f'<polyline points="{pts}" fill="none" stroke="{col}" stroke-width="2"/>')
        for t, a in c:
            out.append(f'<circle cx="{x(t):.1f}" cy="{y(a):.1f}" r="3" fill="{col}"/>')
        out.append(f'<text x="{W - R + 12}" y="{T + 16 + 18 * i}" fill="{col}">{name}</text>')
    out.append("</svg>")
    with open(path, "w") as f:
        f.write("\n".join(out) + "\n")


def main():
    rows = [dict(x.split("=", 1) for x in line.split()[1:]) for line in open(sys.argv[1]) if line.startswith("RESULT")]
    runs = []
    for r in rows:
        steps, curve = load(r)
        runs.append((r, steps, curve))
    # the target: lock-step's final accuracy, the mean of its last SMOOTH evals
    targets = [final(c) for r, _, c in runs if r["mode"] == "off" and c]
    target = statistics.median(targets) if targets else None
    by = {}
    for r, steps, curve in runs:
        mode = r["mode"]
        sums = {k: sum(x.get(k, 0) for x in steps) for k in
                ("perf/total_step_time", "perf/actor_train_time", "perf/rollout_time", "perf/rollout_wait_time")}
        med = statistics.median(x["perf/total_step_time"] for x in steps[1:]) if len(steps) > 1 else float("nan")
        stale = max((x.get("async/staleness_max", 0) for x in steps), default=0)
        t_reach = reach(curve, target) if target is not None else None
        eng, trn = busy(steps, "async/engine_idle_fraction"), busy(steps, "async/trainer_idle_fraction")
        print(f"{mode:>14} round {r['round']}: wall {float(r['wall_s']):.1f} s; steps {sums['perf/total_step_time']:.1f} s "
              f"(train {sums['perf/actor_train_time']:.1f}, rollout {sums['perf/rollout_time']:.1f}, waited "
              f"{sums['perf/rollout_wait_time']:.1f}); median step (1+) {med:.2f} s; staleness max {stale}; "
              f"busy engine {eng:.2f} trainer {trn:.2f}"
              + (f"; machine CPU busy {float(r['cpu_busy']):.2f}" if "cpu_busy" in r else ""))
        print(f"{mode:>14} round {r['round']}: held-out " + ", ".join(f"{a:.3f}@{t:.0f}s" for t, a in curve)
              + f"; final (mean of last {SMOOTH}) {final(curve):.3f}"
              + (f"; reaches {target:.3f} at {t_reach:.0f} s" if t_reach is not None else
                 (f"; never reaches {target:.3f}" if target is not None else "")))
        by.setdefault(mode, []).append((float(r["wall_s"]), med, t_reach, final(curve)))
    if "off" in by:
        w0 = statistics.median(x[0] for x in by["off"])
        s0 = statistics.median(x[1] for x in by["off"])
        r0 = statistics.median(x[2] for x in by["off"] if x[2] is not None) if target is not None else None
        for mode, xs in by.items():
            if mode == "off":
                continue
            w = statistics.median(x[0] for x in xs)
            s = statistics.median(x[1] for x in xs)
            reached = [x[2] for x in xs if x[2] is not None]
            rr = f"{statistics.median(reached) / r0:.2f}x" if reached and r0 else "not reached"
            acc = statistics.median(x[3] for x in xs) - statistics.median(x[3] for x in by["off"])
            print(f"== {mode} / lock-step: wall {w / w0:.2f}x, median step {s / s0:.2f}x, time to lock-step's "
                  f"final accuracy {rr}, final accuracy {acc * 100:+.1f} points")
    if len(sys.argv) > 2:
        svg([(f"{r['mode']} (round {r['round']})", c) for r, _, c in runs if c], sys.argv[2])
        print("plot:", sys.argv[2])


if __name__ == "__main__":
    main()
