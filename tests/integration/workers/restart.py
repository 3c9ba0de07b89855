"""A rank that keeps all_reducing while its coordinator is restarted, or is gone.

Usage: restart.py COORDINATORS WORLD_SIZE JOB GO_FILE [NEW_GROUP_TIMEOUT]

COORDINATORS is ASYNCOLL_COORDINATOR's HOST:PORT[,HOST:PORT...]. Prints
"READY", all_reduces until GO_FILE exists (the test restarts or stops the
daemon before creating it), then 50 more, then calls new_group (with
NEW_GROUP_TIMEOUT, default 30 s) and monitored_barrier, printing "GROUP
created <seconds>" or "GROUP <error class> <seconds>: <message>", and
"DONE <operations>" at the end.
"""

import os
import sys
import time
from datetime import timedelta

import numpy as np

import asyncoll as dist

addresses, world_size, job, go_file = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
group_timeout = float(sys.argv[5]) if len(sys.argv) > 5 else 30.0
os.environ["ASYNCOLL_COORDINATOR"] = addresses
dist.init_process_group(init_method="env://", world_size=world_size, job_id=job, timeout=30)
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
began = time.monotonic()
try:
    group = dist.new_group(list(range(world_size)), timeout=timedelta(seconds=group_timeout))
    dist.monitored_barrier(group, timeout=timedelta(seconds=group_timeout))
    x = np.ones(10)
    dist.all_reduce(x, group=group)
    assert (x == world_size).all()
    print(f"GROUP created {time.monotonic() - began:.2f}", flush=True)
except dist.AsyncollError as exc:
    print(f"GROUP {type(exc).__name__} {time.monotonic() - began:.2f}: {exc}", flush=True)
dist.destroy_process_group()
print(f"DONE {done}", flush=True)
