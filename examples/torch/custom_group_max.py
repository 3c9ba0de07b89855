"""SEED.md example 3, verbatim but for the import: MAX within the group of ranks 0 and 2.

    asyncoll-run --nproc-per-node 3 examples/torch/custom_group_max.py

(``torchrun --nproc-per-node 3`` runs it the same way with
``import torch.distributed as dist``.) Rank 1 prints nothing.
"""

import torch

import asyncoll as dist

dist.init_process_group(backend='gloo', init_method='env://')
rank = dist.get_rank()
group = dist.new_group([0, 2])
if rank in [0, 2]:
    t = torch.tensor([rank + 1, rank + 2], dtype=torch.float32)
    print(f"Process {rank} before all_reduce: {t}")
    dist.all_reduce(t, op=dist.ReduceOp.MAX, group=group)
    print(f"Process {rank} after all_reduce: {t}")
dist.destroy_process_group()
