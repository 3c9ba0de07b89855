"""A worker for the IPv6 tests: join (env://), all_reduce, print what it was told.

Prints ``OK rank=R sum=[...] coordinator=... master=...``: the sum, and the
ASYNCOLL_COORDINATOR and MASTER_ADDR its launcher gave it.
"""

import os
import sys

import numpy as np

import asyncoll as dist

dist.init_process_group(timeout=60)
rank = dist.get_rank()
x = np.array([rank + 1, 10 * (rank + 1)], dtype=np.int64)
dist.all_reduce(x)
# One write, so that the workers' lines never interleave on the shared pipe.
sys.stdout.write(f"OK rank={rank} sum={x.tolist()} "
                 f"coordinator={os.environ.get('ASYNCOLL_COORDINATOR')} "
                 f"master={os.environ.get('MASTER_ADDR')}\n")
sys.stdout.flush()
dist.destroy_process_group()
