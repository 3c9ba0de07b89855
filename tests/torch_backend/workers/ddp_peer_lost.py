"""DDP over asyncoll when a peer is lost: backward raises a RuntimeError, it must not crash.

Two ranks train 3 steps; rank 1 then exits without leaving (lost). Rank 0's
next backward all-reduces through DDP's reducer (C++), which reads the torch
future of the failed operation: it prints how backward failed.
"""

from __future__ import annotations

import os
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

import asyncoll  # noqa: F401 - registers the backend

dist.init_process_group("asyncoll", init_method="env://")
torch.manual_seed(0)
ddp = DistributedDataParallel(torch.nn.Linear(8, 1))
for _ in range(3):
    ddp(torch.ones(4, 8)).sum().backward()
dist.barrier()
if dist.get_rank() == 1:
    os._exit(0)  # no goodbye: the others see it lost
# The coordinator's notice that rank 1 is lost arrives first.
faults = dist.distributed_c10d._get_default_group()._get_backend(
    torch.device("cpu"))._group()._group._session.faults
deadline = time.monotonic() + 30
while 1 not in faults.gone():
    assert time.monotonic() < deadline, "rank 0 never heard that rank 1 is lost"
    time.sleep(0.01)
try:
    ddp(torch.ones(4, 8)).sum().backward()
    print("NO ERROR", flush=True)
except Exception as exc:  # noqa: BLE001 - the test looks at what was raised
    print("RAISED", type(exc).__name__, str(exc).replace("\n", " "), flush=True)
os._exit(0)  # the group is broken; leave without the goodbye that would wait
