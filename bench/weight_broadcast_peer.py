"""The peer of bench/weight_broadcast.lua: PyTorch's own c10d broadcast (Gloo) of the same
number of bytes as one flat float32 tensor, from rank 0 (host 0) to every engine's rank
(host 1), over the same link, a round beside each of the driver's.
    python3 weight_broadcast_peer.py RANK WORLD MASTER_ADDR PORT [GO DONE]
Rank 0 takes GO and DONE, two FIFOs the driver (weight_broadcast.lua) opens: the first
line through GO is "bytes N" (what the driver's weights weigh), then a round runs for
each line "go", its seconds written as a line to DONE, until GO is closed; rank 0 then
prints every round's seconds as JSON. Ranks > 0 follow rank 0 (one broadcast says the
size, a one-value broadcast before each round whether there is one)."""
import json
import sys
import time
from datetime import timedelta

import torch
import torch.distributed as dist

rank, world, addr, port = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
rank = int(rank)
torch.set_num_threads(1)
dist.init_process_group("gloo", init_method="tcp://%s:%s" % (addr, port), rank=rank, world_size=world,
                        timeout=timedelta(seconds=600))
size = torch.zeros(1, dtype=torch.int64)
if rank == 0:
    # The driver opens GO, then DONE: the same order here, or both would wait for ever.
    go, done = open(sys.argv[5]), open(sys.argv[6], "w")
    head = go.readline().split()
    if len(head) != 2 or head[0] != "bytes":
        sys.exit("weight_broadcast_peer.py: the driver's first line is not 'bytes N': %r" % head)
    size.fill_(int(head[1]))
dist.broadcast(size, 0)
t = torch.ones(int(size.item()) // 4, dtype=torch.float32) if rank == 0 else \
    torch.empty(int(size.item()) // 4, dtype=torch.float32)
dist.broadcast(t, 0)   # warm: the connections
more = torch.zeros(1, dtype=torch.int32)


def one_round():
    dist.barrier()
    t0 = time.perf_counter()
    dist.broadcast(t, 0)
    dist.barrier()
    return time.perf_counter() - t0


if rank == 0:
    times = []
    for line in go:
        if line.strip() != "go":
            break
        more.fill_(1)
        dist.broadcast(more, 0)
        times.append(one_round())
        done.write("%.9f\n" % times[-1])
        done.flush()
    more.fill_(0)
    dist.broadcast(more, 0)
    go.close()
    done.close()
    print(json.dumps({"raw": times}))
else:
    while True:
        dist.broadcast(more, 0)
        if int(more.item()) == 0:
            break
        one_round()
dist.destroy_process_group()
