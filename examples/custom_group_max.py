"""SEED.md example 3 with numpy arrays: MAX within a custom group of ranks 0 and 2.

    asyncoll-run --nproc-per-node 3 examples/custom_group_max.py

Every rank creates the group, as new_group requires; only its members reduce,
so rank 1 prints nothing. The lines are those of the torch form
(examples/torch/custom_group_max.py).
"""

import numpy as np

import asyncoll as dist
from torch_format import tensor_str  # examples/torch_format.py


dist.init_process_group(backend="gloo", init_method="env://")
rank = dist.get_rank()
group = dist.new_group([0, 2])
if rank in [0, 2]:
    t = np.array([rank + 1, rank + 2], dtype=np.float32)
    print(f"Process {rank} before all_reduce: {tensor_str(t)}")
    dist.all_reduce(t, op=dist.ReduceOp.MAX, group=group)
    print(f"Process {rank} after all_reduce: {tensor_str(t)}")
dist.destroy_process_group()
