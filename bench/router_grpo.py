#!/usr/bin/env python3
"""Makespan of a ragged GRPO batch through `rlhost router`: 32 prompts x 8
samples, heavy-tailed (Pareto) generation times, 4 workers each running at most
4 generations at once (the rest queue, like a batch-limited engine) and paying
a prefill cost for a prompt prefix it has not seen (a prefix-cache miss).
Same batch (fixed seed) for every policy; makespan = time until the last
sample returns. Ratios vs round_robin printed (goal <= 0.9).

Like slime's rollout (a semaphore of --sglang-server-concurrency x engines
around every generate call), the client keeps at most CONCURRENCY requests in
flight and sends the next as one returns; --concurrency 0 submits the whole
batch at once instead."""
import argparse
import asyncio
import random
import time

from router_benchlib import post, start_rlhost_router, start_worker

PROMPTS, GROUP, WORKERS, SLOTS, PREFILL = 32, 8, 4, 4, 0.05
CONCURRENCY = WORKERS * SLOTS


def batch(seed=1):
    rng = random.Random(seed)
    out = []
    for p in range(PROMPTS):
        prompt = ("Question %d: " % p) + "context " * 40
        for s in range(GROUP):
            # Pareto(alpha=1.5) scaled: most samples short, a few very long.
            out.append({"text": prompt, "delay": min(1.5, 0.02 * rng.paretovariate(1.5)),
                        "sampling_params": {"max_new_tokens": 8}})
    rng.shuffle(out)  # requests of a group arrive interleaved with others
    return out


async def run(port, reqs, concurrency):
    sem = asyncio.Semaphore(concurrency or len(reqs))

    async def one(r):
        async with sem:
            return await post("127.0.0.1", port, "/generate", r)

    t0 = time.time()
    res = await asyncio.gather(*[one(r) for r in reqs])
    assert all(st == 200 for st, _ in res)
    return time.time() - t0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rlhost", required=True)
    ap.add_argument("--concurrency", type=int, default=CONCURRENCY,
                    help="client requests in flight (slime's semaphore); 0 = whole batch at once")
    a = ap.parse_args()
    reqs = batch()
    print("%d requests, sum of generation times %.1f s, longest %.2f s; %d workers x %d slots, prefill %.2f s on a miss, "
          "client concurrency %s" % (len(reqs), sum(r["delay"] for r in reqs), max(r["delay"] for r in reqs), WORKERS, SLOTS,
                                      PREFILL, a.concurrency or "unbounded"))
    results = {}
    for policy in ("round_robin", "least_load", "cache_aware", "round_robin#2", "least_load#2", "cache_aware#2"):
        procs = []
        try:
            urls = []
            for i in range(WORKERS):  # fresh workers: empty prefix caches
                p, u = start_worker("g%d" % i, "--slots", str(SLOTS), "--prefill", str(PREFILL))
                procs.append(p)
                urls.append(u)
            rp, rurl = start_rlhost_router(a.rlhost, urls, policy.split("#")[0], "--balance-abs-threshold", "4")
            procs.append(rp)
            t = asyncio.run(run(int(rurl.rsplit(":", 1)[1]), reqs, a.concurrency))
            results.setdefault(policy.split("#")[0], []).append(t)
            print("%-12s makespan %.2f s" % (policy.split("#")[0], t))
        finally:
            for p in procs:
                p.kill()
                p.wait()
    rr = min(results["round_robin"])
    for pol in ("least_load", "cache_aware"):
        print("ratio: %s / round_robin makespan = %.2fx (best of 2 each; goal <= 0.9)" % (pol, min(results[pol]) / rr))


if __name__ == "__main__":
    main()
