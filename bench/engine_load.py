"""Load generator for the engine server benchmarks: CONC concurrent clients send
N requests (greedy unless --temperature, ignore_eos, NEW new tokens, prompts of
PROMPT_LEN token ids) and report requests/s and generated tokens/s.

    python3 engine_load.py URL CONC N NEW [PROMPT_LEN=16] [--same-prompt] [--openai] [--vocab V]
                           [--temperature T]

Default: SGLang-style POST /generate ({"input_ids", "sampling_params"}), tokens
counted from output_ids. --openai: POST /v1/completions with the ids as the
prompt, max_tokens, the temperature, ignore_eos (vLLM and the native engine both
take it), tokens counted from usage.completion_tokens. --vocab: prompt ids stay
below V (default 32000). --temperature: sample at T (a GRPO rollout's 1.0) instead of
greedy decoding.
"""
import asyncio
import sys
import time

import aiohttp


def flag_value(name, default, kind=int):
    if name in sys.argv:
        return kind(sys.argv[sys.argv.index(name) + 1])
    return default


async def main():
    url, conc, n, new = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    plen = int(sys.argv[5]) if len(sys.argv) > 5 and not sys.argv[5].startswith("--") else 16
    same = "--same-prompt" in sys.argv
    openai = "--openai" in sys.argv
    span = flag_value("--vocab", 32000) - 3
    temperature = flag_value("--temperature", 0.0, float)
    if span < 1:
        sys.exit("engine_load.py: --vocab must be at least 4")
    queue = asyncio.Queue()
    for i in range(n):
        queue.put_nowait(i)
    tokens = 0
    errors = 0
    first_error = None

    async def client(session):
        nonlocal tokens, errors, first_error
        while True:
            try:
                i = queue.get_nowait()
            except asyncio.QueueEmpty:
                return
            salt = 0 if same else i
            ids = [1] + [3 + (salt * 7919 + j * 17) % span for j in range(plen - 1)]
            if openai:
                path = "/v1/completions"
                body = {"prompt": ids, "max_tokens": new, "temperature": temperature, "ignore_eos": True}
            else:
                path = "/generate"
                body = {"input_ids": ids, "sampling_params": {"max_new_tokens": new, "temperature": temperature,
                                                              "ignore_eos": True}}
            try:
                async with session.post(url + path, json=body) as r:
                    if r.status != 200:
                        errors += 1
                        first_error = first_error or "HTTP %d: %s" % (r.status, (await r.text())[:300])
                        continue
                    out = await r.json()
                    tokens += out["usage"]["completion_tokens"] if openai else len(out["output_ids"])
            except (aiohttp.ClientError, asyncio.TimeoutError) as e:  # a dropped connection counts as an error
                errors += 1
                first_error = first_error or "%s: %s" % (type(e).__name__, e)

    conn = aiohttp.TCPConnector(limit=conc)
    async with aiohttp.ClientSession(connector=conn, timeout=aiohttp.ClientTimeout(total=3600)) as s:
        t0 = time.perf_counter()
        await asyncio.gather(*(client(s) for _ in range(conc)))
        dt = time.perf_counter() - t0
    if first_error:
        print("first error: " + first_error, file=sys.stderr)
    print("RESULT conc=%d n=%d new=%d seconds=%.3f req_s=%.2f tok_s=%.1f errors=%d"
          % (conc, n, new, dt, n / dt, tokens / dt, errors), flush=True)


asyncio.run(main())
