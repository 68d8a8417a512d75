"""The table of bench/grpo_step_trl.sh from its output directory:
  python3 bench/grpo_step_trl_table.py bench/out/grpo_step_trl-<time> [--skip 2]

Per model and side: the medians over every round of each run's steps SKIP.. (whole step,
rollout, train, sync), the load averages the runs started under, the ratios TRL / rlhost
(> 1: rlhost faster), whether both sides tokenised the same prompts (id for id, step by
step), and the settings the two sides do not share."""
import argparse
import glob
import json
import os
import re
import statistics
import sys

UNMATCHED = [
    "rollout: rlhost's engine (continuous batching, paged KV cache, prefix reuse of each group's prompt) vs "
    "TRL's model.generate (one padded batch of the 128 sequences, DynamicCache)",
    "weight sync: rlhost hands the new weights to its engine after each rollout step (perf/update_weights_time, "
    "counted in its whole step); TRL generates with the model it trains",
    "old log-probs: TRL recomputes them (gradient_accumulation_steps % steps_per_generation != 0); rlhost (exact) "
    "takes the rollout's, bit for bit the policy's (checked per sample by the engine's weights digest), "
    "'recompute' runs the no-grad pass as TRL does",
    "group normalisation: rlhost (r - mean) / (std + 1e-6), TRL (r - mean) / (std + 1e-4); both unbiased std",
    "reward: rl.rewards.gsm8k (Lua) vs its Python port in bench/grpo_step_trl.py (same rules: last \\boxed{}, "
    "else '####', else the last number)",
    "attention: rlhost's batch-invariant kernel (exact) vs transformers' SDPA; lm_head: rlhost only over response "
    "positions, TRL over the completion positions (logits_to_keep)",
    "steps timed: rlhost's perf/total_step_time (rollout + train + sync); TRL from one optimiser step's end to "
    "the end of the one two steps later (includes its logging callbacks)",
]


def rlhost_steps(run):
    rows = []
    path = os.path.join(run, "metrics.jsonl")
    for line in open(path):
        d = json.loads(line)
        if "perf/total_step_time" in d and "rollout/step" in d:
            rows.append({"step": int(d["rollout/step"]), "whole": d["perf/total_step_time"],
                         "rollout": d.get("perf/rollout_time", 0.0), "train": d.get("perf/actor_train_time", 0.0),
                         "sync": d.get("perf/update_weights_time", 0.0),
                         "old_from_rollout": d.get("train/old_logprobs_from_rollout")})
    rows.sort(key=lambda r: r["step"])
    return rows


def rlhost_prompt_ids(run):
    try:
        import torch
    except ImportError:
        return None
    out = []
    for p in sorted(glob.glob(os.path.join(run, "rollout_*.pt")), key=lambda p: int(re.findall(r"(\d+)\.pt$", p)[0])):
        d = torch.load(p, weights_only=False)
        groups = {}
        for s in d["samples"]:
            groups.setdefault(s["group_index"], s["tokens"][: len(s["tokens"]) - s["response_length"]])
        out.append([groups[k] for k in sorted(groups)])
    return out


def med(xs):
    return statistics.median(xs) if xs else float("nan")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dir")
    ap.add_argument("--skip", type=int, default=2)
    a = ap.parse_args()
    loads = {}
    if os.path.exists(os.path.join(a.dir, "load.txt")):
        for line in open(os.path.join(a.dir, "load.txt")):
            m = re.match(r"\S+ (\S+) round (\d+) (\S+) load (\S+) (\S+) (\S+)$", line.strip())
            if m:
                loads.setdefault((m.group(1), m.group(3)), []).append(m.group(4))
    models = sorted({os.path.basename(p).split("-r")[0] for p in glob.glob(os.path.join(a.dir, "*-r*"))})
    print(f"medians over rounds of steps {a.skip}.. per run (seconds); ratio = TRL / rlhost (> 1: rlhost faster)")
    for model in models:
        sides = {}
        for run in sorted(glob.glob(os.path.join(a.dir, f"{model}-r*-rlhost-*"))):
            v = run.rsplit("-rlhost-", 1)[1]
            sides.setdefault("rlhost/" + v, []).extend(rlhost_steps(run)[a.skip:])
        trl_runs = sorted(glob.glob(os.path.join(a.dir, f"{model}-r*-trl.json")))
        versions = None
        trl_ids = None
        for p in trl_runs:
            d = json.load(open(p))
            versions, trl_ids = d["versions"], trl_ids or d["prompt_ids"]
            sides.setdefault("TRL", []).extend(d["steps"][a.skip:])
        if "TRL" not in sides:
            continue
        trl = {k: med([s[k] for s in sides["TRL"]]) for k in ("whole", "rollout", "train")}
        print(f"\n{model}: TRL {versions}")
        print("| side | steps | whole step | rollout | train | sync | whole: TRL / side | train: TRL / side | loads |")
        print("|---|---|---|---|---|---|---|---|---|")
        for side, rows in sides.items():
            m = {k: med([r.get(k, 0.0) or 0.0 for r in rows]) for k in ("whole", "rollout", "train", "sync")}
            key = (model, side.replace("TRL", "trl"))
            ld = ", ".join(loads.get(key, []))
            ratio = f"{trl['whole'] / m['whole']:.2f}x" if side != "TRL" else ""
            tratio = f"{trl['train'] / m['train']:.2f}x" if side != "TRL" else ""
            print(f"| {side} | {len(rows)} | {m['whole']:.3f} | {m['rollout']:.3f} | {m['train']:.3f} | "
                  f"{m['sync']:.3f} | {ratio} | {tratio} | {ld} |")
        first = sorted(glob.glob(os.path.join(a.dir, f"{model}-r*-rlhost-*")))
        ids = rlhost_prompt_ids(first[0]) if first else None
        if ids is None or trl_ids is None:
            print("prompt ids: not compared (torch not importable here)")
        else:
            n = min(len(ids), len(trl_ids))
            same = all(ids[k] == trl_ids[k] for k in range(n))
            print(f"prompt ids: {'identical' if same else 'DIFFERENT'} over {n} steps x {len(ids[0]) if ids else 0} prompts")
            if not same:
                for k in range(n):
                    if ids[k] != trl_ids[k]:
                        print(f"  step {k}: rlhost {ids[k][0][:24]}... TRL {trl_ids[k][0][:24]}...")
                        break
    print("\nsettings not shared:")
    for u in UNMATCHED:
        print(f"- {u}")


if __name__ == "__main__":
    sys.exit(main())
