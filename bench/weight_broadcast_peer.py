"""The peer of bench/weight_broadcast.lua: PyTorch's own c10d broadcast (Gloo) of the same
number of bytes as one flat float32 tensor, from rank 0 (host 0) to every engine's rank
(host 1), over the same link. Rank 0 prints the seconds of each round as JSON.
    python3 weight_broadcast_peer.py RANK WORLD MASTER_ADDR PORT BYTES ROUNDS"""
import json
import sys
import time
from datetime import timedelta

import torch
import torch.distributed as dist

rank, world, addr, port, nbytes, rounds = sys.argv[1:7]
rank, world, nbytes, rounds = int(rank), int(world), int(nbytes), int(rounds)
torch.set_num_threads(1)
dist.init_process_group("gloo", init_method="tcp://%s:%s" % (addr, port), rank=rank, world_size=world,
                        timeout=timedelta(seconds=300))
t = torch.ones(nbytes // 4, dtype=torch.float32) if rank == 0 else torch.empty(nbytes // 4, dtype=torch.float32)
dist.broadcast(t, 0)   # warm: the connections
times = []
for _ in range(rounds):
    dist.barrier()
    t0 = time.perf_counter()
    dist.broadcast(t, 0)
    dist.barrier()
    times.append(time.perf_counter() - t0)
if rank == 0:
    print(json.dumps({"raw": times}))
dist.destroy_process_group()
