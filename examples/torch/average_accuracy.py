"""SEED.md example 4, verbatim but for the import: average accuracy across processes.

    asyncoll-run --nproc-per-node 4 examples/torch/average_accuracy.py

(``torchrun --nproc-per-node 4`` runs it the same way with
``import torch.distributed as dist``.) It prints local accuracies 0.84, 0.95,
0.88 and 0.86 and a global average of 0.88, as real torch does; the reference
page's numbers are wrong (see SEED.md).
"""

import torch

import asyncoll as dist

dist.init_process_group(backend='gloo', init_method='env://')
rank = dist.get_rank()
world_size = dist.get_world_size()
torch.manual_seed(rank)
accuracy = torch.tensor([float(torch.randint(70, 100, (1,)).item()) / 100.0])
print(f"Process {rank} local accuracy: {accuracy.item():.2f}")
dist.all_reduce(accuracy, op=dist.ReduceOp.SUM)
avg_accuracy = accuracy / world_size
print(f"Process {rank} global average accuracy: {avg_accuracy.item():.2f}")
dist.destroy_process_group()
