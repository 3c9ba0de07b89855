"""Many small all_reduces; report resident memory, open files and tasks along the way.

Usage: soak.py COORDINATOR WORLD_SIZE JOB OPERATIONS WARMUP

Prints "SAMPLE <operations done> <RSS KiB> <open fds> <tasks>" after the
warm-up and at the end (every result is checked; a wrong one exits 1).
"""

import asyncio
import os
import sys

import numpy as np

import asyncoll as dist
from asyncoll._runtime.runtime import runtime

address, world_size, job = sys.argv[1], int(sys.argv[2]), sys.argv[3]
operations, warmup = int(sys.argv[4]), int(sys.argv[5])


def sample(done: int) -> None:
    with open("/proc/self/statm") as statm:
        rss_kib = int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") // 1024
    fds = len(os.listdir("/proc/self/fd"))
    tasks = runtime().submit(_count_tasks()).result()
    print(f"SAMPLE {done} {rss_kib} {fds} {tasks}", flush=True)


async def _count_tasks() -> int:
    return len(asyncio.all_tasks())


dist.init_process_group(init_method=f"tcp://{address}", world_size=world_size, job_id=job,
                        timeout=60)
x = np.empty(16, dtype=np.float32)
expected = np.full(16, sum(range(1, world_size + 1)), dtype=np.float32)
for done in range(1, operations + 1):
    x.fill(dist.get_rank() + 1)
    dist.all_reduce(x)
    if not np.array_equal(x, expected):
        sys.exit(f"wrong result at operation {done}")
    if done == warmup or done == operations:
        sample(done)
dist.destroy_process_group()
