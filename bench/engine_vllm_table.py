"""The table of bench/engine_vllm.sh from its raw lines (also runnable on a saved
output file, or several runs' files together):
    python3 bench/engine_vllm_table.py bench/out/engine_vllm-<time>.txt [more files]

Per model and concurrency: the median over rounds of tokens/s (and the range) for
the native engine, the native engine with RLHOST_BATCH_INVARIANT=0 and vLLM, and
of tokens per server CPU second (the servers' whole process groups: vLLM's API
server, EngineCore and worker; the native engine's one process). Ratios are native
over vLLM. On a machine shared with other work, tokens/s measure each server's share
of the CPU as much as its speed; tokens per CPU second do not depend on that share.
"""
import statistics
import sys

SIDES = ("rlhost", "rlhost_bi0", "vllm")


def load(paths):
    rows = {}
    for line in (line for path in paths for line in open(path)):
        if line.startswith("#") or "conc=" not in line:
            continue
        shape, side, *kv = line.split()
        kv = dict(x.split("=", 1) for x in kv)
        if int(kv["errors"]) > 0:  # a run with failed requests is not a throughput
            continue
        rows.setdefault((shape, int(kv["conc"]), side), []).append(kv)
    return rows


def tok_per_cpu(run):
    tokens = float(run["tok_s"]) * float(run["seconds"])
    return tokens / max(float(run["server_cpu_s"]), 1e-9)


def main():
    rows = load(sys.argv[1:])
    print("\nmedian of the rounds [min-max]; x = rlhost / vLLM; tok/cpu-s = tokens per server CPU second")
    print("%-8s %5s | %-19s %-19s %-19s %6s %6s | %-9s %-9s %-9s %6s %6s" % (
        "model", "conc", "rlhost tok/s", "BI=0 tok/s", "vLLM tok/s", "x", "BI=0 x",
        "rlhost", "BI=0", "vLLM", "x", "BI=0 x"))
    print("%-8s %5s | %-19s %-19s %-19s %6s %6s | %-9s %-9s %-9s %6s %6s" % (
        "", "", "", "", "", "", "", "tok/cpu-s", "tok/cpu-s", "tok/cpu-s", "", ""))
    for shape, conc in sorted({(s, c) for s, c, _ in rows}):
        runs = [rows.get((shape, conc, s), []) for s in SIDES]
        if not all(runs):
            continue
        tps = [statistics.median(float(r["tok_s"]) for r in rs) for rs in runs]
        rng = ["[%.0f-%.0f]" % (min(float(r["tok_s"]) for r in rs), max(float(r["tok_s"]) for r in rs)) for rs in runs]
        eff = [statistics.median(tok_per_cpu(r) for r in rs) for rs in runs]
        print("%-8s %5d | %7.1f %-11s %7.1f %-11s %7.1f %-11s %5.2fx %5.2fx | %9.0f %9.0f %9.0f %5.2fx %5.2fx" % (
            shape, conc, tps[0], rng[0], tps[1], rng[1], tps[2], rng[2], tps[0] / tps[2], tps[1] / tps[2],
            eff[0], eff[1], eff[2], eff[0] / eff[2], eff[1] / eff[2]))
    print("req/s (median): " + "; ".join(
        "%s@%d %s %.2f" % (s, c, side, statistics.median(float(r["req_s"]) for r in rs))
        for (s, c, side), rs in sorted(rows.items())))


main()
