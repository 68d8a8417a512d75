"""The peer of bench/weight_broadcast.lua: PyTorch's own c10d broadcast (Gloo) of the same
number of bytes as one flat float32 tensor, from rank 0 (host 0) to every engine's rank
(host 1), over the same link.
    python3 weight_broadcast_peer.py RANK WORLD MASTER_ADDR PORT BYTES ROUNDS [GO DONE]
Alone (no GO), rank 0 runs ROUNDS rounds and prints their seconds as JSON. Paired, rank 0
runs a round each time a line "go" comes through the FIFO GO and writes its seconds as a
line to the FIFO DONE, until GO is closed: the driver (weight_broadcast.lua) puts a raw
round next to each of its own, so both see the same machine. Ranks > 0 follow rank 0
(a one-value broadcast before each round says whether there is one)."""
import json
import sys
import time
from datetime import timedelta

import torch
import torch.distributed as dist

rank, world, addr, port, nbytes, rounds = sys.argv[1:7]
rank, world, nbytes, rounds = int(rank), int(world), int(nbytes), int(rounds)
fifos = sys.argv[7:9]
torch.set_num_threads(1)
dist.init_process_group("gloo", init_method="tcp://%s:%s" % (addr, port), rank=rank, world_size=world,
                        timeout=timedelta(seconds=600))
t = torch.ones(nbytes // 4, dtype=torch.float32) if rank == 0 else torch.empty(nbytes // 4, dtype=torch.float32)
dist.broadcast(t, 0)   # warm: the connections
more = torch.zeros(1, dtype=torch.int32)


def one_round():
    dist.barrier()
    t0 = time.perf_counter()
    dist.broadcast(t, 0)
    dist.barrier()
    return time.perf_counter() - t0


def go_lines(go):   # rank 0: a round per "go" (paired), else ROUNDS of them
    if go is None:
        yield from range(rounds)
        return
    for line in go:
        if line.strip() != "go":
            return
        yield line


if rank == 0:
    # The driver opens GO, then DONE: the same order here, or both would wait for ever.
    go = open(fifos[0]) if fifos else None
    done = open(fifos[1], "w") if fifos else None
    times = []
    for _ in go_lines(go):
        more.fill_(1)
        dist.broadcast(more, 0)
        times.append(one_round())
        if done:
            done.write("%.9f\n" % times[-1])
            done.flush()
    more.fill_(0)
    dist.broadcast(more, 0)
    if done:
        done.close()
    print(json.dumps({"raw": times}))
else:
    while True:
        dist.broadcast(more, 0)
        if int(more.item()) == 0:
            break
        one_round()
dist.destroy_process_group()
