"""The average accuracy of a model across ranks, a torch.distributed program on asyncoll.

    asyncoll-run --nproc-per-node 4 examples/average_accuracy.py            # numpy arrays
    asyncoll-run --nproc-per-node 4 examples/average_accuracy.py --torch    # torch tensors

Each rank draws its local accuracy as torch.randint(70, 100, (1,)) does
after torch.manual_seed(rank) (in numpy without --torch), so both forms
print local accuracies 0.84, 0.95, 0.88 and 0.86 and a global average of
0.88, as the same program prints on torch with gloo.
"""

import numpy as np

import asyncoll as dist
from tensors import TORCH, tensor  # examples/tensors.py


def torch_randint(seed: int, low: int, high: int) -> int:
    """What torch.randint(low, high, (1,)) gives after torch.manual_seed(seed)."""
    if TORCH:
        import torch
        torch.manual_seed(seed)
        return int(torch.randint(low, high, (1,)).item())
    draw = np.random.RandomState(seed).randint(0, 2**32, dtype=np.uint32)
    return low + int(draw) % (high - low)


dist.init_process_group(init_method="env://")  # no backend=: asyncoll is its own
rank = dist.get_rank()
world_size = dist.get_world_size()
accuracy = tensor([torch_randint(rank, 70, 100) / 100.0])
print(f"Process {rank} local accuracy: {accuracy.item():.2f}")
dist.all_reduce(accuracy, op=dist.ReduceOp.SUM)
avg_accuracy = accuracy / world_size
print(f"Process {rank} global average accuracy: {avg_accuracy.item():.2f}")
dist.destroy_process_group()
