"""A rank that all_reduces a large array in a loop until the job fails, then says how.

Usage: survivor.py COORDINATOR WORLD_SIZE RANK JOB ELEMENTS [linger]

Prints "READY" after its first all_reduce, then on failure one line
"FAILED <error class> rank=<rank named> at=<unix time> <message>" and exits
0. Exits 3 if no failure came within 60 s (the test kills or stops a peer).
With "linger", it leaves the job only once its stdin closes (the test has
read every survivor's line): otherwise a survivor leaving could be what a
slower one sees fail first.
"""

import sys
import time

import numpy as np

import asyncoll as dist

address, world_size, rank, job, elements = sys.argv[1:6]
dist.init_process_group(init_method=f"tcp://{address}", world_size=int(world_size),
                        rank=int(rank), job_id=job, timeout=60)
data = np.ones(int(elements), dtype=np.float32)
dist.all_reduce(data)
print("READY", flush=True)
deadline = time.monotonic() + 60
try:
    while time.monotonic() < deadline:
        data.fill(1)
        dist.all_reduce(data)
except dist.AsyncollError as exc:
    failed_at = time.time()
    error = exc.__cause__ if isinstance(exc, dist.GroupBrokenError) else exc
    named = getattr(error, "rank", -1)
    print(f"FAILED {type(error).__name__} rank={named} at={failed_at:.3f} {error}", flush=True)
    if sys.argv[6:7] == ["linger"]:
        sys.stdin.read()
    dist.destroy_process_group()
    sys.exit(0)
sys.exit(3)
