"""A worker that does three all_reduces, then holds its place in the job for a while.

Usage: busy.py INIT_METHOD WORLD_SIZE JOB SECONDS
"""

import sys
import time

import numpy as np

import asyncoll as dist

init, world_size, job, hold = sys.argv[1], int(sys.argv[2]), sys.argv[3], float(sys.argv[4])
dist.init_process_group(init_method=init, world_size=world_size, job_id=job, timeout=30)
for _ in range(3):
    dist.all_reduce(np.ones(10))
time.sleep(hold)
dist.destroy_process_group()
