"""Python httpx.AsyncClient throughput, the peer of bench/http_client.lua.

`inflight` asyncio tasks each send GETs in a loop (closed loop) until
`requests` responses have arrived; the pool allows one connection per
in-flight request, like the rlhost side. Prints one RESULT line.

    python3 bench/http_httpx.py URL INFLIGHT REQUESTS [WARMUP]
"""
import asyncio
import sys
import time

import httpx


async def run(client: httpx.AsyncClient, url: str, inflight: int, total: int) -> tuple[int, int]:
    sent = 0
    bad = 0

    async def worker() -> None:
        nonlocal sent, bad
        while sent < total:
            sent += 1
            r = await client.get(url)
            if r.status_code != 200 or not r.content:
                bad += 1

    await asyncio.gather(*(worker() for _ in range(inflight)))
    return sent, bad


async def main() -> None:
    if len(sys.argv) < 4:
        sys.exit("usage: http_httpx.py URL INFLIGHT REQUESTS [WARMUP]")
    url, inflight, requests = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    warmup = int(sys.argv[4]) if len(sys.argv) > 4 else inflight * 4
    limits = httpx.Limits(max_connections=inflight, max_keepalive_connections=inflight)
    async with httpx.AsyncClient(limits=limits, timeout=60.0) as client:
        await run(client, url, inflight, warmup)
        t0, cpu0 = time.perf_counter(), time.process_time()
        n, bad = await run(client, url, inflight, requests)
        secs, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    if bad:
        sys.exit(f"{bad} bad responses")
    print(f"RESULT client=httpx inflight={inflight} requests={n} seconds={secs:.3f} "
          f"rps={n / secs:.0f} cpu_s={cpu:.3f} httpx={httpx.__version__}")


if __name__ == "__main__":
    asyncio.run(main())
