#!/usr/bin/env python3
"""Plots a GRPO run's metrics.jsonl (rl.metrics JSONL sink) as an SVG: the rollout
reward per step and the held-out accuracy per eval, against minutes of GRPO.
Prints the figures. Standard library only (no matplotlib on the bench machine).

    python3 bench/grpo_learning_plot.py runs/m/metrics.jsonl docs/grpo_learning.svg
"""
import json
import sys


def load(path):
    rows = [json.loads(line) for line in open(path) if line.strip()]
    t0 = rows[0]["time"]
    steps = [(r["time"] - t0, r["rollout/step"], r["rollout/raw_reward"]) for r in rows if "rollout/step" in r]
    evals = []
    for r in rows:
        if "eval/step" in r:
            name = next(k for k in r if k.startswith("eval/") and "/" not in k[5:] and "-" not in k and k != "eval/step")
            evals.append((r["time"] - t0, r["eval/step"], r[name], name[5:]))
    return steps, evals


def svg(steps, evals, path):
    W, H, L, R, T, B = 720, 400, 60, 20, 40, 50
    tmax = max([s[0] for s in steps] + [e[0] for e in evals] + [1]) / 60
    x = lambda t: L + (W - L - R) * (t / 60) / tmax
    y = lambda v: T + (H - T - B) * (1 - v)
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" font-family="sans-serif" font-size="12">',
           f'<rect width="{W}" height="{H}" fill="white"/>']
    for v in (0, 0.25, 0.5, 0.75, 1.0):
        out.append(f'<line x1="{L}" x2="{W - R}" y1="{y(v):.1f}" y2="{y(v):.1f}" stroke="#ddd"/>')
        out.append(f'<text x="{L - 8}" y="{y(v) + 4:.1f}" text-anchor="end">{v:.2f}</text>')
    m = 0
    while m <= tmax + 1e-9:
        out.append(f'<text x="{x(m * 60):.1f}" y="{H - B + 18}" text-anchor="middle">{m:g}</text>')
        m += 1 if tmax <= 12 else 5
    out.append(f'<text x="{(L + W - R) / 2}" y="{H - 10}" text-anchor="middle">minutes of GRPO (2 CPU cores)</text>')
    pts = " ".join(f"{x(t):.1f},{y(v):.1f}" for t, _, v in steps)
    out.append(f'<polyline points="{pts}" fill="none" stroke="#8fb3d9" stroke-width="1.5"/>')
    pts = " ".join(f"{x(t):.1f},{y(v):.1f}" for t, _, v, _ in evals)
    out.append(f'<polyline points="{pts}" fill="none" stroke="#c0392b" stroke-width="2.5"/>')
    for t, _, v, _ in evals:
        out.append(f'<circle cx="{x(t):.1f}" cy="{y(v):.1f}" r="3.5" fill="#c0392b"/>')
    name = evals[0][3] if evals else "held-out"
    out.append(f'<text x="{L + 10}" y="{T - 22}" fill="#4a78a8">— rollout reward (T=1, groups kept by the filter)</text>')
    out.append(f'<text x="{L + 10}" y="{T - 8}" fill="#c0392b">● {name} accuracy (pass@1, sampled at the eval temperature)</text>')
    out.append("</svg>")
    with open(path, "w") as f:
        f.write("\n".join(out) + "\n")


def main():
    steps, evals = load(sys.argv[1])
    if len(sys.argv) > 2:
        svg(steps, evals, sys.argv[2])
    for t, s, v, name in evals:
        print(f"eval after step {s:3d} at {t / 60:5.2f} min: {name} {v:.3f}")
    if evals:
        print(f"held-out accuracy {evals[0][2]:.3f} -> {evals[-1][2]:.3f} "
              f"({100 * (evals[-1][2] - evals[0][2]):+.1f} points) in {evals[-1][0] / 60:.1f} min, {len(steps)} steps")
    if steps:
        k = max(1, len(steps) // 10)
        first = sum(v for *_, v in steps[:k]) / k
        last = sum(v for *_, v in steps[-k:]) / k
        print(f"rollout reward, mean of first/last {k} steps: {first:.3f} -> {last:.3f}")


if __name__ == "__main__":
    main()
