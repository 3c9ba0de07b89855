"""The example worker: join, all_reduce, check the result, exit 0 if right.

The compose cluster (the root docker-compose.yml) runs it in every worker
container; it runs as well outside one (client/README.md). It reads
MASTER_ADDR, MASTER_PORT and WORLD_SIZE, and sets no RANK: the coordinator
assigns ranks as the workers join. Every worker learns whether all ranks got
the right answer (a MIN all_reduce of each one's verdict), so the first
worker to exit already speaks for all.
"""

import socket
import sys

import numpy as np

import asyncoll as dist

dist.init_process_group(init_method="env://", timeout=120)
rank, size = dist.get_rank(), dist.get_world_size()
values = np.full(1000, rank + 1, dtype=np.int64)
dist.all_reduce(values)
expected = size * (size + 1) // 2
verdict = np.array([int((values == expected).all())], dtype=np.int64)
dist.all_reduce(verdict, op=dist.ReduceOp.MIN)
print(f"worker rank {rank} of {size} on {socket.gethostname()}: sum {values[0]}, expected "
      f"{expected}; all ranks right: {bool(verdict[0])}", flush=True)
dist.destroy_process_group()
sys.exit(0 if verdict[0] else 1)
