"""A rank that all_reduces and checks the result over and over, for a given time.

Usage: steady.py COORDINATOR WORLD_SIZE JOB STOP_FILE

Prints "READY" after joining, then "DONE <operations>" once STOP_FILE exists
(or after 120 s) if every result was right; a wrong result or an error exits
non-zero.
"""

import os
import sys
import time

import numpy as np

import asyncoll as dist

address, world_size, job, stop_file = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
dist.init_process_group(init_method=f"tcp://{address}", world_size=world_size, job_id=job,
                        timeout=30)
print("READY", flush=True)
done = 0
give_up = time.monotonic() + 120
while True:
    x = np.arange(1000, dtype=np.int64) + dist.get_rank()
    dist.all_reduce(x)
    expected = np.arange(1000) * world_size + sum(range(world_size))
    if not np.array_equal(x, expected):
        sys.exit(f"wrong all_reduce result after {done} operations")
    done += 1
    # Every rank decides to stop at the same operation: agree on it.
    flag = np.array([os.path.exists(stop_file) or time.monotonic() > give_up], dtype=np.uint8)
    dist.all_reduce(flag, op=dist.ReduceOp.MAX)
    if flag[0]:
        break
    time.sleep(0.005)
dist.destroy_process_group()
print(f"DONE {done}", flush=True)
