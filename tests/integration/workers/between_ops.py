"""A rank that runs one all_reduce, waits for "GO" on stdin, then runs another.

Usage: between_ops.py COORDINATOR WORLD_SIZE RANK JOB

Prints "READY" after the first all_reduce. The test kills a peer in between,
so the second call starts after the loss is known; the rank prints what it
raised, unchanged: "RAISED <class> peer_lost=<bool> rank=<rank> host=<host>".
"""

import sys

import numpy as np

import asyncoll as dist

address, world_size, rank, job = sys.argv[1:5]
dist.init_process_group(init_method=f"tcp://{address}", world_size=int(world_size),
                        rank=int(rank), job_id=job, timeout=30)
data = np.ones(1000, dtype=np.float32)
dist.all_reduce(data)
print("READY", flush=True)
if sys.stdin.readline().strip() != "GO":
    sys.exit(2)
try:
    dist.all_reduce(data)
except dist.AsyncollError as exc:
    print(f"RAISED {type(exc).__name__} peer_lost={isinstance(exc, dist.PeerLostError)} "
          f"rank={getattr(exc, 'rank', None)} host={getattr(exc, 'host', None)}", flush=True)
    dist.destroy_process_group()
    sys.exit(0)
sys.exit(3)
