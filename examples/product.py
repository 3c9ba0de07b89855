"""SEED.md example 2 with numpy arrays: the element-wise product across two processes.

    asyncoll-run --nproc-per-node 2 examples/product.py

Every rank prints the same lines as the torch form (examples/torch/product.py).
"""

import numpy as np

import asyncoll as dist
from torch_format import tensor_str  # examples/torch_format.py


dist.init_process_group(backend="gloo", init_method="env://")
rank = dist.get_rank()
t = np.array([rank + 1, rank + 2], dtype=np.float32)
print(f"Process {rank} before all_reduce: {tensor_str(t)}")
dist.all_reduce(t, op=dist.ReduceOp.PRODUCT)
print(f"Process {rank} after all_reduce: {tensor_str(t)}")
dist.destroy_process_group()
