"""A rank that all_reduces until STOP_FILE exists, then leaves.

Usage: reducing.py COORDINATOR WORLD_SIZE JOB STOP_FILE

Prints "READY" once it joined.
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
give_up = time.monotonic() + 60
while True:
    x = np.ones(4)
    dist.all_reduce(x)
    flag = np.array([os.path.exists(stop_file) or time.monotonic() > give_up], dtype=np.uint8)
    dist.all_reduce(flag, op=dist.ReduceOp.MAX)
    if flag[0]:
        break
    time.sleep(0.001)
dist.destroy_process_group()
