"""A rank of a job where one rank skips an all_reduce the others call.

Usage: skipper.py COORDINATOR WORLD_SIZE RANK JOB SKIPPER

Every rank runs three 4-byte all_reduces with a 5 s timeout; then every rank
but SKIPPER runs a fourth, which times out waiting for it, and prints
"RAISED <class>". SKIPPER calls nothing more: it waits (at most 30 s) for its
own flight recorder dump, which the others' failure makes it write, prints
"DUMPED" and leaves. With "signal" as a sixth argument the timeout is 60 s,
so that the test can send SIGUSR1 (or ask through the coordinator) while
the others wait, and SKIPPER leaves only once it reads "GO" on stdin.
"""

import os
import sys
import time

import numpy as np

import asyncoll as dist

address, world_size, rank, job, skipper = sys.argv[1:6]
waiting = len(sys.argv) > 6 and sys.argv[6] == "signal"
dist.init_process_group(init_method=f"tcp://{address}", world_size=int(world_size),
                        rank=int(rank), job_id=job, timeout=60 if waiting else 5)
data = np.ones(1, dtype=np.float32)
for _ in range(3):
    dist.all_reduce(data)
print("READY", flush=True)
if int(rank) != int(skipper):
    try:
        dist.all_reduce(data)
    except dist.AsyncollError as exc:
        print(f"RAISED {type(exc).__name__}", flush=True)
        dist.destroy_process_group()
        sys.exit(0)
    sys.exit(3)
dump = os.path.join(os.environ["ASYNCOLL_TRACE_DIR"], f"asyncoll_trace_rank_{rank}")
deadline = time.monotonic() + 30
while not os.path.exists(dump):
    if time.monotonic() > deadline:
        sys.exit(4)
    time.sleep(0.05)
print("DUMPED", flush=True)
if waiting and sys.stdin.readline().strip() != "GO":
    sys.exit(5)
dist.destroy_process_group()
