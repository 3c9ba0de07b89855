"""A rank that keeps all_reducing while its coordinator is restarted.

Usage: restart.py COORDINATOR WORLD_SIZE JOB GO_FILE

Prints "READY", all_reduces until GO_FILE exists (the test restarts the
daemon before creating it), then 50 more, then tries new_group and prints
"GROUP <error class>: <message>", and "DONE <operations>" at the end.
"""

import os
import sys
import time

import numpy as np

import asyncoll as dist

address, world_size, job, go_file = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
dist.init_process_group(init_method=f"tcp://{address}", world_size=world_size, job_id=job,
                        timeout=30)
print("READY", flush=True)


def check() -> None:
    x = np.ones(1000, dtype=np.float64) * (dist.get_rank() + 1)
    dist.all_reduce(x)
    assert (x == sum(range(1, world_size + 1))).all()


done = 0
give_up = time.monotonic() + 60
while True:
    check()
    done += 1
    flag = np.array([os.path.exists(go_file) or time.monotonic() > give_up], dtype=np.uint8)
    dist.all_reduce(flag, op=dist.ReduceOp.MAX)
    if flag[0]:
        break
    time.sleep(0.01)
for _ in range(50):
    check()
    done += 1
try:
    dist.new_group([0])
    print("GROUP created", flush=True)
except dist.AsyncollError as exc:
    print(f"GROUP {type(exc).__name__}: {exc}", flush=True)
dist.destroy_process_group()
print(f"DONE {done}", flush=True)
