"""Summing a vector across two processes, a torch.distributed program on asyncoll.

    asyncoll-run --nproc-per-node 2 examples/sum.py            # numpy arrays
    asyncoll-run --nproc-per-node 2 examples/sum.py --torch    # torch tensors

Or without the launcher, rank 0 hosting the coordinator itself:

    MASTER_ADDR=127.0.0.1 MASTER_PORT=29500 WORLD_SIZE=2 RANK=0 python examples/sum.py &
    MASTER_ADDR=127.0.0.1 MASTER_PORT=29500 WORLD_SIZE=2 RANK=1 python examples/sum.py

Both forms print what the same program prints on torch with gloo.
"""

import asyncoll as dist
from tensors import tensor, tensor_str  # examples/tensors.py

dist.init_process_group(init_method="env://")  # no backend=: asyncoll is its own
rank = dist.get_rank()
t = tensor([rank + 1, rank + 2])
print(f"Process {rank} before all_reduce: {tensor_str(t)}")
dist.all_reduce(t, op=dist.ReduceOp.SUM)
print(f"Process {rank} after all_reduce: {tensor_str(t)}")
dist.destroy_process_group()
