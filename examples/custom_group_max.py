"""MAX within a custom group of ranks 0 and 2, a torch.distributed program on asyncoll.

    asyncoll-run --nproc-per-node 3 examples/custom_group_max.py            # numpy arrays
    asyncoll-run --nproc-per-node 3 examples/custom_group_max.py --torch    # torch tensors

Every rank creates the group, as new_group requires; only its members reduce,
so rank 1 prints nothing. Both forms print what the same program prints on
torch with gloo.
"""

import asyncoll as dist
from tensors import tensor, tensor_str  # examples/tensors.py

dist.init_process_group(init_method="env://")  # no backend=: asyncoll is its own
rank = dist.get_rank()
group = dist.new_group([0, 2])
if rank in [0, 2]:
    t = tensor([rank + 1, rank + 2])
    print(f"Process {rank} before all_reduce: {tensor_str(t)}")
    dist.all_reduce(t, op=dist.ReduceOp.MAX, group=group)
    print(f"Process {rank} after all_reduce: {tensor_str(t)}")
dist.destroy_process_group()
