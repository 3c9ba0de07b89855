"""The element-wise product across two processes, a torch.distributed program on asyncoll.

    asyncoll-run --nproc-per-node 2 examples/product.py            # numpy arrays
    asyncoll-run --nproc-per-node 2 examples/product.py --torch    # torch tensors

Both forms print what the same program prints on torch with gloo.
"""

import asyncoll as dist
from tensors import tensor, tensor_str  # examples/tensors.py

dist.init_process_group(init_method="env://")  # no backend=: asyncoll is its own
rank = dist.get_rank()
t = tensor([rank + 1, rank + 2])
print(f"Process {rank} before all_reduce: {tensor_str(t)}")
dist.all_reduce(t, op=dist.ReduceOp.PRODUCT)
print(f"Process {rank} after all_reduce: {tensor_str(t)}")
dist.destroy_process_group()
