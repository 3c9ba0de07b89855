"""SEED.md example 2, verbatim but for the import: the product across two processes.

    asyncoll-run --nproc-per-node 2 examples/torch/product.py

(``torchrun --nproc-per-node 2`` runs it the same way with
``import torch.distributed as dist``.)
"""

import torch

import asyncoll as dist

dist.init_process_group(backend='gloo', init_method='env://')
rank = dist.get_rank()
t = torch.tensor([rank + 1, rank + 2], dtype=torch.float32)
print(f"Process {rank} before all_reduce: {t}")
dist.all_reduce(t, op=dist.ReduceOp.PRODUCT)
print(f"Process {rank} after all_reduce: {t}")
dist.destroy_process_group()
