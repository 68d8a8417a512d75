"""Load generator for the engine server benchmark: CONC concurrent clients send
N SGLang-style /generate requests (greedy, ignore_eos, max_new_tokens NEW) and
report requests/s and generated tokens/s.

    python3 engine_load.py URL CONC N NEW [PROMPT_LEN=16] [--same-prompt]
"""
import asyncio
import sys
import time

import aiohttp


async def main():
    url, conc, n, new = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    plen = int(sys.argv[5]) if len(sys.argv) > 5 and not sys.argv[5].startswith("--") else 16
    same = "--same-prompt" in sys.argv
    queue = asyncio.Queue()
    for i in range(n):
        queue.put_nowait(i)
    tokens = 0
    errors = 0

    async def client(session):
        nonlocal tokens, errors
        while True:
            try:
                i = queue.get_nowait()
            except asyncio.QueueEmpty:
                return
            salt = 0 if same else i
            ids = [1] + [3 + (salt * 7919 + j * 17) % 30000 for j in range(plen - 1)]
            body = {"input_ids": ids, "sampling_params": {"max_new_tokens": new, "temperature": 0,
                                                          "ignore_eos": True}}
            async with session.post(url + "/generate", json=body) as r:
                if r.status != 200:
                    errors += 1
                    continue
                out = await r.json()
                tokens += len(out["output_ids"])

    conn = aiohttp.TCPConnector(limit=conc)
    async with aiohttp.ClientSession(connector=conn, timeout=aiohttp.ClientTimeout(total=3600)) as s:
        t0 = time.perf_counter()
        await asyncio.gather(*(client(s) for _ in range(conc)))
        dt = time.perf_counter() - t0
    print("RESULT conc=%d n=%d new=%d seconds=%.3f req_s=%.2f tok_s=%.1f errors=%d"
          % (conc, n, new, dt, n / dt, tokens / dt, errors), flush=True)


asyncio.run(main())
