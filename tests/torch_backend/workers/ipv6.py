"""torch.distributed on backend 'asyncoll' with MASTER_ADDR=::1: one all_reduce.

Prints ``OK rank=R sum=S advertised=HOST``: the sum, and the address that rank
0 hosts asyncoll's coordinator at for this store and environment.
"""

from __future__ import annotations

import os
import sys

import torch
import torch.distributed as dist

from asyncoll._torch_backend.world import advertised_host

dist.init_process_group("asyncoll")
rank = dist.get_rank()
tensor = torch.tensor([float(rank + 1)])
dist.all_reduce(tensor)
advertised = advertised_host(dist.distributed_c10d._get_default_store(), os.environ)
# One write, so that the ranks' lines never interleave.
sys.stdout.write(f"OK rank={rank} sum={tensor.item()} advertised={advertised}\n")
sys.stdout.flush()
dist.destroy_process_group()
