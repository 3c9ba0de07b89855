"""SEED.md example 4 with numpy arrays: the average accuracy of a model across ranks.

    asyncoll-run --nproc-per-node 4 examples/average_accuracy.py

Each rank draws its local accuracy exactly as torch.randint(70, 100, (1,))
does after torch.manual_seed(rank), so the output matches the torch form
(examples/torch/average_accuracy.py) line for line.
"""

import numpy as np

import asyncoll as dist


def torch_randint(seed: int, low: int, high: int, n: int) -> np.ndarray:
    """What torch.randint(low, high, (n,)) gives after torch.manual_seed(seed), in numpy."""
    draws = np.random.RandomState(seed).randint(0, 2**32, size=n, dtype=np.uint32)
    return low + draws.astype(np.uint64) % (high - low)


dist.init_process_group(backend="gloo", init_method="env://")
rank = dist.get_rank()
world_size = dist.get_world_size()
accuracy = np.array([float(torch_randint(rank, 70, 100, 1)[0]) / 100.0], dtype=np.float32)
print(f"Process {rank} local accuracy: {accuracy.item():.2f}")
dist.all_reduce(accuracy, op=dist.ReduceOp.SUM)
avg_accuracy = accuracy / world_size
print(f"Process {rank} global average accuracy: {avg_accuracy.item():.2f}")
dist.destroy_process_group()
