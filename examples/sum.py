"""SEED.md example 1 with numpy arrays: summing a vector across two processes.

    asyncoll-run --nproc-per-node 2 examples/sum.py

Or without the launcher, rank 0 hosting the coordinator itself:

    MASTER_ADDR=127.0.0.1 MASTER_PORT=29500 WORLD_SIZE=2 RANK=0 python examples/sum.py &
    MASTER_ADDR=127.0.0.1 MASTER_PORT=29500 WORLD_SIZE=2 RANK=1 python examples/sum.py

Every rank prints the same lines as the torch form (examples/torch/sum.py).
"""

import numpy as np

import asyncoll as dist
from torch_format import tensor_str  # examples/torch_format.py


dist.init_process_group(backend="gloo", init_method="env://")
rank = dist.get_rank()
t = np.array([rank + 1, rank + 2], dtype=np.float32)
print(f"Process {rank} before all_reduce: {tensor_str(t)}")
dist.all_reduce(t, op=dist.ReduceOp.SUM)
print(f"Process {rank} after all_reduce: {tensor_str(t)}")
dist.destroy_process_group()
